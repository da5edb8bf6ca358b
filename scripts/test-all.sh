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
if ! command -v ib_write_bw >/dev/null 2>&1 || ! command -v ibv_rc_pingpong >/dev/null 2>&1 \
  || [ ! -e /usr/include/infiniband/verbs.h ] || ! command -v objdump >/dev/null 2>&1 || ! command -v gcc >/dev/null 2>&1; then
  echo "[test-all] installing rdma-core tools, headers and perftest (the drop-in libibverbs runs them)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    libibverbs-dev ibverbs-utils perftest ibverbs-providers binutils gcc libc6-dev >/dev/null
fi
cargo test --workspace --locked
