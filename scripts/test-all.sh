#!/usr/bin/env bash
# Runs every test of the project: the README's "run all tests" command.
# Installs the Debian tools the tests use (as root), so tests need not install anything: one
# that lacks a tool fails naming it and this script.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v tshark >/dev/null 2>&1; then
  echo "[test-all] installing tshark (used to check our captures decode as RoCEv2)"
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends tshark >/dev/null
fi
rdma_missing=
for tool in ibv_devices ibv_devinfo ibv_rc_pingpong ib_write_bw rping ucmatose objdump gcc fi_pingpong ss; do
  command -v "$tool" >/dev/null 2>&1 || rdma_missing=1
done
[ -e /usr/include/infiniband/verbs.h ] || rdma_missing=1
[ -e /usr/include/rdma/rdma_cma.h ] || rdma_missing=1
if [ -n "$rdma_missing" ]; then
  echo "[test-all] installing rdma-core tools, headers (verbs.h, rdma_cma.h), perftest and libfabric's fi_pingpong (the drop-in libibverbs runs them; scripts/bench.sh compares with libfabric)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    libibverbs-dev librdmacm-dev ibverbs-utils rdmacm-utils perftest ibverbs-providers binutils gcc libc6-dev \
    libfabric-bin iproute2 >/dev/null
fi
if ! command -v ucx_perftest >/dev/null 2>&1; then
  echo "[test-all] installing ucx-utils (ucx_info, ucx_perftest run unmodified on the drop-in)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends ucx-utils >/dev/null
fi
if ! command -v qperf >/dev/null 2>&1; then
  echo "[test-all] installing qperf (its RC tests run unmodified on the drop-in over rdma_cm)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends qperf >/dev/null
fi
if ! command -v strace >/dev/null 2>&1; then
  echo "[test-all] installing strace (the librspreload test checks no TCP connect reaches the kernel)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends strace >/dev/null
fi
if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
  echo "[test-all] installing Open MPI (openmpi-bin, libopenmpi-dev: an MPI program over UCX on the drop-in)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev >/dev/null
fi
if ! /usr/bin/python3 -c 'import pyverbs.device' >/dev/null 2>&1; then
  echo "[test-all] installing python3-pyverbs (rdma-core's own tests run through the drop-in)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends python3-pyverbs >/dev/null
fi
if ! command -v valgrind >/dev/null 2>&1; then
  echo "[test-all] installing valgrind (scripts/instructions.sh counts the hot path's instructions with callgrind)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends valgrind >/dev/null
fi
# rdma-core's suite registers regions over 2 MiB huge pages when some are reserved (it
# skips those tests otherwise): reserve a few, as a host running RDMA software often has.
hugepages=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
if [ -w "$hugepages" ] && [ "$(cat "$hugepages")" -lt 16 ]; then
  echo "[test-all] reserving 16 huge pages of 2 MiB (rdma-core's huge-page tests)"
  echo 16 >"$hugepages" || echo "[test-all] could not reserve huge pages; those tests skip"
fi
# --all-features: the async (tokio) tests of softroce-verbs run too.
cargo test --workspace --all-features --locked
# Every example tells a story and checks it; they must keep working.
bash scripts/run-examples.sh
# The instruction counts of the core's hot path are taken (printed, never asserted: they
# are a measurement), so the counting harness keeps working.
bash scripts/instructions.sh --quick
# The crates package and build from their packages; cargo install gives a working softroce.
bash scripts/package-check.sh
