#!/usr/bin/env bash
# Runs every example of softroce-verbs (verbs-api/examples/*.rs), each bounded by a timeout:
# each checks what it does and exits non-zero when something is off, so a broken example
# fails CI. scripts/test-all.sh calls this after the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# Built once, with every feature (async_echo needs `tokio`).
cargo build --locked --all-features -p softroce-verbs --examples
for file in verbs-api/examples/*.rs; do
  name=$(basename "$file" .rs)
  echo "[examples] $name"
  if ! timeout 120 cargo run --quiet --locked --all-features -p softroce-verbs --example "$name"; then
    echo "[examples] $name failed (or ran past 120 s)" >&2
    exit 1
  fi
done
