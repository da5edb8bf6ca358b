#!/usr/bin/env bash
# Checks that the crates can be published and installed, without publishing anything:
# 1. `cargo package` of every publishable crate, each then built from its package against
#    the others' packages (a file left out, a path dependency without a version, metadata
#    crates.io refuses: each fails here);
# 2. `cargo install --path crates/softroce-cli` into a scratch root, and the installed
#    `softroce` alone (no library beside it) runs ibv_devices on its embedded drop-in.
# Offline: the dependencies are those Cargo.lock pins, already fetched by the builds and
# tests that run before this (scripts/test-all.sh calls it last; it installs ibv_devices).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}

echo "[package-check] cargo package (and build each package)"
# cargo verifies each package against the others' through a local overlay registry and
# extracts those into $CARGO_HOME/registry/src/-<hash>/<name>-<version>, which it never
# refreshes while the version is unchanged: a machine that packaged an older commit would
# build against that stale source. The overlay's directories are the ones named "-<hash>".
rm -rf -- "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/softroce-*
# A target dir of its own: the drop-in built from its package must not replace the
# workspace's target/<profile>/deps/libibverbs.so, whose name has no hash. The packages are
# built as crates.io users build them: no workspace profile, several codegen units (every
# module with exports carries the .symver directives, see crates/softroce-symver).
cargo package --workspace --exclude softroce-tests --locked --offline --allow-dirty --quiet \
  --target-dir "$target/package-check"

echo "[package-check] every package carries both license files"
for crate in "$target"/package-check/package/*.crate; do
  files=$(tar -tzf "$crate")
  for license in LICENSE-MIT LICENSE-APACHE; do
    if ! grep -q "/$license\$" <<<"$files"; then
      echo "[package-check] $(basename "$crate") lacks $license" >&2
      exit 1
    fi
  done
done

echo "[package-check] the drop-ins built from their packages bind every export to a version"
for lib in libibverbs.so librdmacm.so; do
  built=$(ls "$target"/package-check/debug/deps/$lib 2>/dev/null || true)
  if [ -z "$built" ]; then
    echo "[package-check] no $lib under $target/package-check/debug/deps" >&2
    exit 1
  fi
  # Defined dynamic symbols whose version is Base: exported without a version node.
  unversioned=$(objdump -T "$built" | awk '$0 !~ /\*UND\*/ && $2 ~ /g/ && $(NF-1) == "Base" {print $NF}')
  if [ -n "$unversioned" ]; then
    echo "[package-check] $lib exports without a version: $unversioned" >&2
    exit 1
  fi
done

echo "[package-check] cargo install --path crates/softroce-cli into a scratch root"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
# The workspace's target dir and dev profile: reuses what the tests built.
cargo install --path crates/softroce-cli --root "$root" --locked --offline --debug \
  --target-dir "$target" --quiet
ls "$root/bin"
if ls "$root/bin" | grep -q libibverbs; then
  echo "[package-check] unexpected: cargo install put a library in bin/" >&2
  exit 1
fi
out=$(env -u XDG_CACHE_HOME -u SOFTROCE_IBVERBS_LIB HOME="$root/home" timeout 60 \
  "$root/bin/softroce" exec --devices installcheck0=127.0.0.1 -- ibv_devices)
echo "$out"
if ! grep -q installcheck0 <<<"$out"; then
  echo "[package-check] the installed softroce did not show its device through ibv_devices" >&2
  exit 1
fi
echo "[package-check] ok"
