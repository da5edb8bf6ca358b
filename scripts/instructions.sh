#!/usr/bin/env bash
# Instructions per 8 B RDMA WRITE on the core's hot path (emu-device/core/examples/hot_path.rs),
# counted by valgrind's callgrind: exact and repeatable where timings on a shared VM swing by
# a quarter, so a change to the per-packet path shows its cost in one run. Three stages: the
# requester posting and building a packet, the responder taking it in and acknowledging (one
# held ACK per 16 WRITEs, as the UDP driver's devices hold them), the requester taking the
# ACK. The machine's own figures (calls into libc included) from an optimised build.
#
# Usage: scripts/instructions.sh [--quick]   (--quick: 1 600 messages instead of 16 000)
set -euo pipefail
cd "$(dirname "$0")/.."

messages=16000
case "${1:-}" in
  "") ;;
  --quick) messages=1600 ;;
  *) echo "usage: scripts/instructions.sh [--quick]" >&2; exit 2 ;;
esac
if ! command -v valgrind >/dev/null; then
  echo "scripts/instructions.sh: valgrind is missing (apt-get install valgrind; scripts/test-all.sh installs it)" >&2
  exit 1
fi
cargo build --release --locked -q -p softroce-emu-core --example hot_path
bin=target/release/examples/hot_path
"$bin" "$messages" >/dev/null

printf '%-52s %12s\n' "stage (8 B RDMA WRITE, $messages messages)" "instr/msg"
total=0
for stage in requester_posts responder_receives requester_takes_acks; do
  if ! log=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    --toggle-collect="hot_path::$stage" "$bin" "$messages" 2>&1); then
    echo "scripts/instructions.sh: hot_path failed under callgrind (stage $stage):" >&2
    echo "$log" >&2
    exit 1
  fi
  collected=$(sed -n 's/.*Collected : \([0-9][0-9]*\).*/\1/p' <<<"$log")
  if [ -z "$collected" ] || [ "$collected" -eq 0 ]; then
    echo "scripts/instructions.sh: callgrind counted nothing in hot_path::$stage:" >&2
    echo "$log" >&2
    exit 1
  fi
  total=$((total + collected))
  printf '%-52s %12d\n' "$stage" $((collected / messages))
done
printf '%-52s %12d\n' "total" $((total / messages))
