#!/usr/bin/env bash
# One table of what the datapath moves next to what loopback can move, all measured in one run
# (ratios survive a noisy shared machine; absolute figures do not):
#   raw UDP limits (`softroce perf --raw-udp`: latency, what one send or receive call costs,
#   bandwidth, 8 B datagram rate),
#   libfabric's tcp provider (`fi_pingpong`),
#   perftest on the drop-in between two processes (`softroce exec`), and `softroce perf`.
# Usage: scripts/bench.sh [--quick]   (--quick: few iterations, for the test that keeps it working)
# SOFTROCE_BIN names the softroce binary (default: builds and uses target/release/softroce);
# its libibverbs.so must be next to it or in SOFTROCE_IBVERBS_LIB. Missing tools make a row "n/a".
set -euo pipefail
cd "$(dirname "$0")/.."

quick=
[ "${1:-}" = --quick ] && quick=1
if [ -z "${SOFTROCE_BIN:-}" ]; then
  cargo build --release --locked -q -p softroce-cli -p softroce-ibverbs
  SOFTROCE_BIN=target/release/softroce
fi
bin=$SOFTROCE_BIN
if [ -n "$quick" ]; then
  lat_n=200 bw64_n=100 bw1m_n=20 rate_n=2000 fi_lat_n=200 fi_bw_n=20 udp_n=2000 perf_n=100
  rounds=2
else
  lat_n=20000 bw64_n=20000 bw1m_n=2000 rate_n=1000000 fi_lat_n=20000 fi_bw_n=500 udp_n=20000 perf_n=3000
  rounds=5
fi
# Addresses and ports no test uses, so a benchmark can run beside the test suite.
srv_ip=127.0.0.201 cli_ip=127.0.0.202 port=19100
limit=120
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

have() { command -v "$1" >/dev/null 2>&1; }

# Wait (bounded) until a server listens on TCP port $1.
wait_listen() {
  for _ in $(seq 200); do
    ss -ltnH "sport = :$1" 2>/dev/null | grep -q . && return 0
    sleep 0.05
  done
  return 1
}

# run_pair NAME PORT SERVER_CMD… :: CLIENT_CMD…: server in the background, then the client;
# the client's output lands in $tmp/NAME.out (the server's in $tmp/NAME.srv).
run_pair() {
  local name=$1 lport=$2
  shift 2
  local server=() client=()
  while [ "$1" != :: ]; do server+=("$1"); shift; done
  shift
  client=("$@")
  timeout "$limit" "${server[@]}" >"$tmp/$name.srv" 2>&1 &
  local spid=$!
  wait_listen "$lport" || true
  timeout "$limit" "${client[@]}" >"$tmp/$name.out" 2>&1 || echo "client failed" >>"$tmp/$name.out"
  wait "$spid" || echo "server failed" >>"$tmp/$name.srv"
}

# The numbers of the row under perftest's `#bytes` header, field $2 (1-based).
perftest_field() {
  awk -v f="$2" '/^ *#bytes/ {hdr=1; next} hdr && NF>0 && $1 ~ /^[0-9]+$/ {print $f; exit}' "$1"
}

# perftest NAME TOOL SIZE ITERS [ARGS...]: ib_* between two drop-in processes.
perftest() {
  local name=$1 tool=$2 size=$3 iters=$4
  shift 4
  port=$((port + 1))
  if ! have "$tool"; then return; fi
  local args=(-d softroce0 -x 0 -F -p "$port" -s "$size" -n "$iters" "$@")
  run_pair "$name" "$port" \
    env SOFTROCE_DEVICES="softroce0=$srv_ip" "$bin" exec -- "$tool" "${args[@]}" :: \
    env SOFTROCE_DEVICES="softroce0=$cli_ip" "$bin" exec -- "$tool" "${args[@]}" "$srv_ip"
}

# fi_pingpong NAME SIZE ITERS: libfabric's tcp provider, RDM endpoints.
fi_pp() {
  local name=$1 size=$2 iters=$3
  port=$((port + 1))
  if ! have fi_pingpong; then return; fi
  run_pair "$name" "$port" \
    fi_pingpong -p tcp -e rdm -B "$port" -S "$size" -I "$iters" :: \
    fi_pingpong -p tcp -e rdm -P "$port" -S "$size" -I "$iters" 127.0.0.1
}

# softroce perf MODE between two processes.
sr_perf() {
  local name=$1 mode=$2 size=$3 iters=$4
  port=$((port + 1))
  run_pair "$name" "$port" \
    "$bin" perf "$mode" --bind "$srv_ip" -p "$port" :: \
    "$bin" perf "$mode" --bind "$cli_ip" -p "$port" -s "$size" -n "$iters" "$srv_ip"
}

# --- measure -------------------------------------------------------------------------------
"$bin" perf --raw-udp --lat-iters "$udp_n" -s 65536 -n "$bw1m_n" >"$tmp/udp.out"
udp_lat=$(awk '$1 ~ /busy_pingpong/ {print $2}' "$tmp/udp.out")
udp_dgram=$(awk '$1 ~ /per_datagram/ {print $2}' "$tmp/udp.out")
udp_gso=$(awk '$1 ~ /gso_gro$/ {print $2}' "$tmp/udp.out")
udp_rate=$(awk '$1 ~ /gso_gro_rate/ {print $2}' "$tmp/udp.out")
# One call of each kind the datapath makes, in microseconds: the floor under the latency rows.
sc() { awk -v k="udp_syscall_$1" '$1 == k {printf "%.2f", $2 / 1000}' "$tmp/udp.out"; }
sc_send=$(sc send_one_40B) sc_gso=$(sc gso_send_two_40B) sc_empty=$(sc empty_recv)
sc_emptymsg=$(sc empty_recvmsg) sc_recvmsg=$(sc recvmsg_one_40B)

fi_pp fi8 8 "$fi_lat_n"
fi_pp fi64k 65536 "$fi_bw_n"
fi_pp fi1m 1048576 "$fi_bw_n"
# fi_pingpong: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec (xfer: one direction).
fi_field() { [ -f "$tmp/$1.out" ] && awk -v f="$2" '$1 ~ /^[0-9]+[kmg]?$/ && NF >= 8 {print $f; exit}' "$tmp/$1.out"; }
fi_lat=$(fi_field fi8 7 || true)
fi_64k=$(fi_field fi64k 6 || true)
fi_1m=$(fi_field fi1m 6 || true)

perftest send_lat ib_send_lat 8 "$lat_n"
perftest write_lat ib_write_lat 8 "$lat_n"
perftest bw64k ib_write_bw 65536 "$bw64_n"
perftest bw1m ib_write_bw 1048576 "$bw1m_n"
perftest rate8 ib_write_bw 8 "$rate_n"
# Per QP a multiple of perftest's CQ moderation (100): with several QPs and a remainder its
# own completion accounting can spin forever without polling (seen with -n 250 -q 8).
perftest rate8q8 ib_write_bw 8 "$(( (rate_n / 8 + 99) / 100 * 100 ))" -q 8
# Waiting on completion events (-e) with a short send queue (-t 16): each burst of posts is
# followed by a blocking ibv_get_cq_event, which must not leave the burst held (it once
# waited for the engine's 100 ms sleep: 658 msg/s).
perftest rate64ev ib_send_bw 64 "$(( rate_n / 50 ))" -e -t 16
perftest readbw1m ib_read_bw 1048576 "$bw1m_n"
perftest sendbw1m ib_send_bw 1048576 "$bw1m_n"
# 1 % of each side's datagrams lost (seeded), perftest's default ACK timeout (67 ms); the
# man pages' retransmission (resends on NAKs only), then adaptive (early resends too).
SOFTROCE_FAULTS="drop=0.01,seed=7" perftest bw1mloss ib_write_bw 1048576 "$bw1m_n"
SOFTROCE_FAULTS="drop=0.01,seed=7" SOFTROCE_ADAPTIVE_RETRANSMIT=1 \
  perftest bw1mlossar ib_write_bw 1048576 "$bw1m_n"
pt() { [ -f "$tmp/$1.out" ] && perftest_field "$tmp/$1.out" "$2"; }
# Latency: t_typical (perftest's lat tools report half a round trip). Bandwidth: BW average
# in perftest's MB (2^20 bytes), converted to 10^6 below; message rate in Mpps.
send_lat=$(pt send_lat 5 || true)
write_lat=$(pt write_lat 5 || true)
bw64k=$(pt bw64k 4 || true)
bw1m=$(pt bw1m 4 || true)
rate8=$(pt rate8 5 || true)
rate8q8=$(pt rate8q8 5 || true)
rate64ev=$(pt rate64ev 5 || true)
readbw1m=$(pt readbw1m 4 || true)
sendbw1m=$(pt sendbw1m 4 || true)
bw1mloss=$(pt bw1mloss 4 || true)
bw1mlossar=$(pt bw1mlossar 4 || true)

sr_perf perf64k write 65536 "$perf_n"
sr_perf perf1m write 1048576 "$((perf_n / 10 + 1))"
sr_perf perflat lat 8 "$lat_n"
perf64k=$(pt perf64k 4 || true)
perf1m=$(pt perf1m 4 || true)
perflat=$(pt perflat 5 || true)

# Paired rounds: libfabric tcp's 1 MiB and ours back to back, `rounds` times. A shared VM's
# speed changes from one minute to the next (both sides together, by up to a half), so one
# pair measured seconds apart is a fairer ratio than two figures from either end of the run.
for r in $(seq "$rounds"); do
  fi_pp "fi1m_r$r" 1048576 "$fi_bw_n"
  perftest "bw1m_r$r" ib_write_bw 1048576 "$bw1m_n"
  perftest "readbw1m_r$r" ib_read_bw 1048576 "$bw1m_n"
  perftest "sendbw1m_r$r" ib_send_bw 1048576 "$bw1m_n"
done
# paired NAME: each round's NAME (MB/s, perftest's 2^20) over tcp's that round, as
# "median min max" ("" when a round is missing).
paired() {
  local r fi ours ratios=()
  for r in $(seq "$rounds"); do
    fi=$(fi_field "fi1m_r$r" 6 || true)
    ours=$(pt "$1_r$r" 4 || true)
    if [ -z "$fi" ] || [ -z "$ours" ]; then return 0; fi
    ratios+=("$(awk -v o="$ours" -v f="$fi" 'BEGIN {if (f > 0) printf "%.3f", o * 1.048576 / f}')")
  done
  printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)], a[1], a[NR]}'
}

# --- report --------------------------------------------------------------------------------
# row LABEL VALUE UNIT BASE1 BASE2 TARGET: ratios value/base (n/a when missing).
row() {
  awk -v l="$1" -v v="$2" -v u="$3" -v b1="$4" -v b2="$5" -v t="$6" 'BEGIN {
    r1 = (v != "" && b1 != "" && b1 > 0) ? sprintf("%.3f", v / b1) : "-";
    r2 = (v != "" && b2 != "" && b2 > 0) ? sprintf("%.3f", v / b2) : "-";
    val = (v != "") ? sprintf("%.2f", v) : "n/a";
    printf "%-38s %12s %-8s %10s %10s  %s\n", l, val, u, r1, r2, t }'
}
mib() { [ -n "$1" ] && awk -v x="$1" 'BEGIN {printf "%.1f", x * 1.048576}' || true; }
echo "softroce bench $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)${quick:+ (quick)}"
printf "%-38s %12s %-8s %10s %10s  %s\n" "measure" "value" "unit" "/raw UDP" "/fi tcp" "target"
row "raw UDP busy-poll 8 B half RTT" "$udp_lat" us "" "" ""
row "raw UDP call: send 40 B" "$sc_send" us "" "" ""
row "raw UDP call: GSO send 2 x 40 B" "$sc_gso" us "" "" ""
row "raw UDP call: empty recv" "$sc_empty" us "" "" ""
row "raw UDP call: empty recvmsg" "$sc_emptymsg" us "" "" ""
row "raw UDP call: recvmsg of 40 B" "$sc_recvmsg" us "" "" ""
row "raw UDP 4 KiB datagram stream" "$udp_dgram" MB/s "" "" ""
row "raw UDP GSO/GRO stream" "$udp_gso" MB/s "" "" ""
row "raw UDP 8 B datagram rate, GSO/GRO" "$udp_rate" Mdgram/s "" "" ""
row "fi_pingpong tcp rdm 8 B half RTT" "$fi_lat" us "$udp_lat" "" ""
row "fi_pingpong tcp rdm 64 KiB" "$fi_64k" MB/s "$udp_gso" "" ""
row "fi_pingpong tcp rdm 1 MiB" "$fi_1m" MB/s "$udp_gso" "" ""
row "ib_send_lat 8 B half RTT" "$send_lat" us "$udp_lat" "$fi_lat" "<=2 UDP, <=0.5 tcp"
row "ib_write_lat 8 B half RTT" "$write_lat" us "$udp_lat" "$fi_lat" "<=2 UDP, <=0.5 tcp"
row "ib_write_bw 64 KiB" "$(mib "$bw64k")" MB/s "$udp_gso" "$fi_64k" ">=0.5 UDP"
row "ib_write_bw 1 MiB" "$(mib "$bw1m")" MB/s "$udp_gso" "$fi_1m" ">=0.5 UDP, >=1.5 tcp"
row "ib_read_bw 1 MiB" "$(mib "$readbw1m")" MB/s "$udp_gso" "$fi_1m" ">=0.5 UDP, >=1.5 tcp"
row "ib_send_bw 1 MiB" "$(mib "$sendbw1m")" MB/s "$udp_gso" "$fi_1m" ">=0.5 UDP, >=1.5 tcp"
row "ib_write_bw 8 B message rate" "$rate8" Mmsg/s "$udp_rate" "" ">=2 Mmsg/s"
row "ib_write_bw 8 B message rate, 8 QPs" "$rate8q8" Mmsg/s "$udp_rate" "" ">=5 Mmsg/s"
row "ib_send_bw 64 B rate, completion events" "$rate64ev" Mmsg/s "$rate8" "" "(1st ratio: x the polled 8 B rate)"
row "softroce perf write 64 KiB (2 procs)" "$perf64k" MB/s "$udp_gso" "$fi_64k" ">=0.5 UDP"
row "softroce perf write 1 MiB (2 procs)" "$perf1m" MB/s "$udp_gso" "$fi_1m" ">=0.5 UDP, >=1.5 tcp"
row "softroce perf lat 8 B half RTT" "$perflat" us "$udp_lat" "$fi_lat" "<=2 UDP, <=0.5 tcp"
# Loss: its first ratio is against the same run's loss-free figure, not raw UDP.
row "ib_write_bw 1 MiB, 1 % loss" "$(mib "$bw1mloss")" MB/s "$(mib "$bw1m")" "" ">=0.5 x loss-free (1st ratio)"
row "ib_write_bw 1 MiB, 1 % loss, adaptive" "$(mib "$bw1mlossar")" MB/s "$(mib "$bw1m")" "" ">=0.5 x loss-free (1st ratio)"
# prow LABEL NAME: a paired ratio's median and range over the rounds.
prow() {
  local m
  m=$(paired "$2")
  if [ -z "$m" ]; then
    printf "%-38s %12s %-8s %10s %10s  %s\n" "$1" n/a "" - - ">=1.5 tcp"
    return
  fi
  read -r med lo hi <<<"$m"
  printf "%-38s %12s %-8s %10s %10s  %s\n" "$1" "$med" "x tcp" - "$lo-$hi" ">=1.5 tcp (median of $rounds pairs; range)"
}
prow "paired 1 MiB ib_write_bw / tcp" bw1m
prow "paired 1 MiB ib_read_bw / tcp" readbw1m
prow "paired 1 MiB ib_send_bw / tcp" sendbw1m
if [ -n "${BENCH_KEEP:-}" ]; then cp -r "$tmp" "$BENCH_KEEP"; fi
