#!/usr/bin/env bash
# Live interoperability with Linux rdma_rxe: boots a Debian kernel with rdma_rxe under QEMU
# (TCG, no KVM) in the network namespace `rxelab` (VM 10.99.0.11, host side 10.99.0.1), and
# runs rdma-core's own ibv_{rc,uc,ud}_pingpong in the VM against `softroce pingpong` on the
# host, in both roles. Prints a matrix and writes it to scripts/rxe/cache/interop-summary-FLAVOR.txt.
# usage: interop.sh [FLAVOR=6.1]     (needs root; installs what it needs with apt)
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
FLAVOR="${1:-6.1}"
NS="${NS:-rxelab}"
V="$HERE/vmctl.py --timeout 90 $HERE/cache/run/vm1.ctl"
SUMMARY="$HERE/cache/interop-summary-$FLAVOR.txt"
ITERS="${ITERS:-200}"

cleanup() { "$HERE/stop.sh" >/dev/null 2>&1 || true; }
trap cleanup EXIT

echo "[interop] building softroce (release)"
(cd "$ROOT" && cargo build --release --locked -p softroce-cli) || exit 1
S="$ROOT/target/release/softroce"
"$HERE/build-image.sh" "$FLAVOR" || { echo "[interop] image build failed"; exit 1; }
cleanup
"$HERE/start-vms.sh" 1 "$FLAVOR" || { echo "[interop] VM boot failed"; exit 1; }
mkdir -p "$HERE/cache"
printf "%-10s %-7s %-22s %-6s %s\n" TRANSPORT SIZE DIRECTION RESULT NOTE | tee "$SUMMARY"
pass=0; fail=0
record() { # transport size direction rc note
  local res=PASS; [ "$4" = 0 ] || res=FAIL
  [ $res = PASS ] && pass=$((pass+1)) || fail=$((fail+1))
  printf "%-10s %-7s %-22s %-6s %s\n" "$1" "$2" "$3" "$res" "$5" | tee -a "$SUMMARY"
}

# transport:size cells; UD messages must fit one MTU (1024 on the VM's 1500-byte link).
for cell in rc:4096 rc:1 rc:1025 rc:65536 uc:4096 uc:1025 ud:1024 ud:1; do
  t="${cell%%:*}"; size="${cell##*:}"
  # rxe client -> softroce server
  ip netns exec "$NS" "$S" pingpong --type "$t" -s "$size" -n "$ITERS" --bind 10.99.0.1 --timeout 60 \
    > "$HERE/cache/$t-host-server.log" 2>&1 &
  hp=$!
  sleep 0.5
  $V "ibv_${t}_pingpong -g 1 -s $size -n $ITERS 10.99.0.1" > "$HERE/cache/$t-vm-client.log" 2>&1; vrc=$?
  wait $hp; hrc=$?
  rc=$(( vrc != 0 || hrc != 0 ))
  record "$t" "$size" "rxe -> softroce" "$rc" "vm=$vrc host=$hrc $(grep -h 'retransmission' "$HERE/cache/$t-host-server.log" | cut -c26-90)"
  [ $rc = 0 ] || { tail -n 5 "$HERE/cache/$t-vm-client.log" "$HERE/cache/$t-host-server.log"; }
  # softroce client -> rxe server
  $V "ibv_${t}_pingpong -g 1 -s $size -n $ITERS > /tmp/s.log 2>&1 & echo \$! > /tmp/s.pid" >/dev/null
  sleep 0.5
  ip netns exec "$NS" "$S" pingpong --type "$t" -s "$size" -n "$ITERS" --bind 10.99.0.1 --timeout 60 --check 10.99.0.11 \
    > "$HERE/cache/$t-host-client.log" 2>&1; hrc=$?
  $V 'wait $(cat /tmp/s.pid); r=$?; cat /tmp/s.log; (exit $r)' > "$HERE/cache/$t-vm-server.log" 2>&1; vrc=$?
  rc=$(( vrc != 0 || hrc != 0 ))
  record "$t" "$size" "softroce -> rxe" "$rc" "vm=$vrc host=$hrc"
  [ $rc = 0 ] || { tail -n 5 "$HERE/cache/$t-vm-server.log" "$HERE/cache/$t-host-client.log"; }
done
echo "[interop] rxe hw_counters after the run:"
$V 'cd /sys/class/infiniband/rxe0/ports/1/hw_counters && for f in *; do printf "%s=%s " $f $(cat $f); done; echo' | tee -a "$SUMMARY"
if [ $fail -ne 0 ]; then
  echo "[interop] VM console tail:"; tail -20 "$HERE/cache/run/vm1.console"
fi
echo "interop: $pass passed, $fail failed" | tee -a "$SUMMARY"
[ $fail -eq 0 ]
