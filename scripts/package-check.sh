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
for stale in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/softroce-*; do
  [[ -e $stale ]] && rm -rf -- "$stale"
done
# A target dir of its own: packages carry no workspace profile, so the drop-in built from
# its package (several codegen units: unversioned exports) must not replace the
# workspace's target/<profile>/deps/libibverbs.so, whose name has no hash.
# One codegen unit, as the workspace profile gives the drop-ins: their .symver directives
# bind only symbols of the object they sit in (a package carries no profile; building the
# drop-ins right from crates.io is still open, see #17).
CARGO_PROFILE_DEV_CODEGEN_UNITS=1 \
  cargo package --workspace --exclude softroce-tests --locked --offline --allow-dirty --quiet \
  --target-dir "$target/package-check"

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
