#!/usr/bin/env bash
# Runs every test of the project: the README's "run all tests" command.
# Installs the Debian tools the tests use (as root) instead of letting tests skip.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v tshark >/dev/null 2>&1; then
  echo "[test-all] installing tshark (used to check our captures decode as RoCEv2)"
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends tshark >/dev/null
fi
cargo test --workspace --locked
