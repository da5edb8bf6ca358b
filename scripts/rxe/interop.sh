#!/usr/bin/env bash
# Live interoperability with Linux rdma_rxe. Boots one Debian kernel with rdma_rxe under QEMU
# (TCG, no KVM) in the network namespace `rxelab` (VM 10.99.0.11, host side 10.99.0.1; br0,
# tap1 and the VM's eth0 at MTU 9000 so rxe0's active_mtu is 4096) and runs a matrix of cells
# against that one VM. Each cell runs in both roles:
#   rxe -> softroce   the program in the VM is the client, softroce on the host serves
#   softroce -> rxe   softroce on the host is the client, the VM program serves
# After each clean cell the VM's rxe hw_counters must show no retry, sequence-error,
# duplicate or RNR activity (netem cells print them instead: there they are expected). One
# exception: rxe arms its retransmit timer only when none is pending and does not restart it
# per message ("some timeouts are spurious", rxe_comp.c), so a busy QP (16 SRQ QPs under TCG)
# may retry a message sent a few ms earlier: completer_retry_err alone passes when the host
# pcap shows softroce answered every ack-requesting packet of the VM within ACK_PROMPT_MS.
# Output: a matrix (printed, and in cache/interop-matrix-FLAVOR.txt), one detailed line per
# cell in cache/interop-summary-FLAVOR.txt, logs (and the host side's pcap of failed cells)
# in cache/cells-FLAVOR/.
#
# What is checked: exit status and completion of both programs. rdma-core's pingpongs do not
# verify data, so `softroce pingpong --check` (a pattern per message) only works between two
# softroce processes (crates/softroce-cli/tests/pingpong.rs). Against the real tools the
# softroce side uses --check-echo instead (rc/uc/ud): ibv_{rc,uc,ud}_pingpong send from the
# buffer they receive into, so every message they send back must be the one softroce sent
# before (or their initial 0x7b fill) -- so corrupted, lost or duplicated data fails the cell,
# with netem too. ibv_srq_pingpong shares one buffer among its QPs, so SRQ cells check
# completion and exit status only.
#
# usage: interop.sh [FLAVOR=6.1]     (needs root; installs what it needs with apt)
# Env: ITERS (200, messages per small cell), CELLS (extended regex: run only matching cell
#      rows, e.g. 'srq|netem'), NETEM (netem arguments, default below).
# A row tagged kernel>=X needs rxe of Linux X or later: on an older kernel it is not run and
# shows "-" (not applicable; neither passed nor failed).
#
# Adding a cell kind: write `cell_KIND ROLE NAME ARGS...` (see cell_pingpong) that runs one
# role through `two_sided` and returns its status, then add "KIND ARGS..." rows to CELL_ROWS.
# `two_sided` takes any VM command line and any host command, so e.g. a softroce program on
# the VM's rxe0 (put into the image with SOFTROCE_VM_BINS, it lands in /usr/local/bin)
# against a softroce program on the host is a few lines.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
FLAVOR="${1:-6.1}"
NS="${NS:-rxelab}"
CACHE="$HERE/cache"
CTL="$CACHE/run/vm1.ctl"
LOGS="$CACHE/cells-$FLAVOR"
SUMMARY="$CACHE/interop-summary-$FLAVOR.txt"
MATRIX="$CACHE/interop-matrix-$FLAVOR.txt"
RESULTS="$LOGS/results.tsv"
ITERS="${ITERS:-200}"
CELLS="${CELLS:-.}"
NETEM="${NETEM:-loss 5% delay 1ms reorder 25% 50%}"
HOST_IP=10.99.0.1
VM_IP=10.99.0.11
# Rows tagged ipv6 run over these (unique local, added to br0 and the VM's eth0 when first
# needed): RoCEv2 over IPv6, the VM's rxe0 on the GID of VM_IP6.
HOST_IP6=fd99::1
VM_IP6=fd99::11
VM_GID6=""
# What a cell's programs use: the IPv4 addresses (GID 1 on rxe0), or the IPv6 ones.
CELL_HOST_IP=$HOST_IP CELL_VM_IP=$VM_IP CELL_VM_GID=1
MCAST_GROUP=239.99.0.1
MCAST_GROUP_HEX=010063EF # as /proc/net/igmp lists it (little-endian hex)
SIDE_PORT=18515           # the pingpong side channel (TCP)
CELL_TIMEOUT=90           # seconds one program of a cell may take
ACK_PROMPT_MS=20          # well below rxe's 67 ms local ACK timeout (timeout 14 in the tools)
export LAB_MTU=9000       # start-vms.sh: br0, tap1 and eth0; rxe0 active_mtu becomes 4096
HW_COUNTERS=/sys/class/infiniband/rxe0/ports/1/hw_counters
# rxe counters that stay 0 on a clean link between two correct peers
ANOMALY_COUNTERS="retry_exceeded_err retry_rnr_exceeded_err completer_retry_err rcvd_seq_err
 duplicate_request out_of_seq_request rcvd_rnr_err send_rnr_err send_err link_downed"

# One row per cell: KIND ARGS... (pingpong: TRANSPORT SIZE PATH_MTU [netem]).
# Not in the matrix: size 0. ibv_rc/uc_pingpong (v44) accept -s 0 but rxe refuses the
# zero-length ibv_reg_mr ("Couldn't register MR"), ibv_srq_pingpong refuses sizes below 1.
# UD messages must fit one MTU and ud_pingpong has no -m: UD runs at the default sizes only.
CELL_ROWS=(
  "pingpong rc 4096 1024"
  "pingpong rc 1 1024"
  "pingpong rc 1025 1024"
  "pingpong rc 65536 1024"
  "pingpong uc 4096 1024"
  "pingpong uc 1025 1024"
  "pingpong ud 1024 1024"
  "pingpong ud 1 1024"
  "pingpong srq 4096 1024"
  "pingpong srq 1 1024"
  "pingpong rc 1 4096"
  "pingpong rc 4096 4096"
  "pingpong rc 4097 4096"
  "pingpong rc 65536 4096"
  "pingpong rc 1048576 4096"
  "pingpong uc 1 4096"
  "pingpong uc 4096 4096"
  "pingpong uc 4097 4096"
  "pingpong uc 65536 4096"
  "pingpong rc 4096 1024 netem"
  "pingpong rc 65536 4096 netem"
  # softroce's own verbs program on rxe0 through the libibverbs backend, every size class
  "ops rc-send 0..1M 1024"
  "ops rc-send-imm 0..1M 1024"
  "ops rc-write 0..1M 1024"
  "ops rc-write-imm 0..1M 1024"
  "ops rc-read 0..1M 1024"
  "ops rc-cmp-swap 8 1024"
  "ops rc-fetch-add 8 1024"
  # RDMA ATOMIC WRITE (rxe since Linux 6.2; posted with ibv_wr_atomic_write on rxe0)
  "ops rc-atomic-write 8 1024 kernel>=6.2"
  "ops rc-atomic-write 8 4096 kernel>=6.2"
  # WRITE/READ through a type 2 memory window the responder binds on its RC QP
  "ops rc-mw-write 1..64K 1024"
  "ops rc-mw-read 1..64K 1024"
  # ... and refused (IBV_WC_REM_ACCESS_ERR at the requester, the responder's memory around
  # and in the window unchanged), each cell on a QP pair of its own since the error ends
  # both QPs: a READ through a window bound for REMOTE_WRITE only, and a WRITE outside the
  # window's bounds but inside the region under it. rxe as responder lets that WRITE land:
  # check_rkey (rxe_resp.c) checks a window's range against its MR (mr_check_range on
  # mw->mr), not the window (seen on 6.1.0-56 and 6.12.117: WRITEs before and across the
  # window completed IBV_WC_SUCCESS), so that row runs with softroce responding only.
  "ops rc-mw-read-no-rights 1,MTU+1 1024"
  "ops rc-mw-write-outside 1,MTU+1 1024 rxe-client-only"
  "ops uc-send 0..1M 1024"
  "ops uc-write 0..1M 1024"
  "ops ud-send 0..MTU 1024"
  "ops srq-send 0..1M 1024"
  # RoCEv2 over IPv6: rxe0's GID of fd99::11 against a softroce device on fd99::1 (ICRC over
  # the IPv6 pseudo-header; the UD receiver's GRH area holds an IPv6 header)
  "pingpong rc 4096 1024 ipv6"
  "pingpong ud 1024 1024 ipv6"
  "ops rc-send 0..1M 1024 ipv6"
  "ops rc-read 0..1M 4096 ipv6"
  "ops ud-send 0..MTU 1024 ipv6"
  "ops rc-send 0..1M 4096"
  "ops rc-write-imm 0..1M 4096"
  "ops rc-read 0..1M 4096"
  "ops uc-write 0..1M 4096"
  "ops ud-send 0..MTU 4096"
  # unmodified perftest on both sides: rxe0 in the VM, the drop-in libibverbs on the host
  "perftest ib_write_bw 65536 1024"
  "perftest ib_read_bw 65536 1024"
  "perftest ib_send_bw 65536 1024"
  # 1 MiB messages at MTU 4096: 256 packets each, a requester's whole window in flight
  "perftest ib_write_bw 1048576 4096"
  "perftest ib_read_bw 1048576 4096"
  "perftest ib_send_bw 1048576 4096"
  "perftest ib_atomic_bw 8 1024"
  "perftest ib_send_lat 2 1024"
  # connection management: rdma-core's rdma_server/rdma_client (the kernel's rdma_cm and IB
  # CM on rxe0) against softroce rdma-server/rdma-client: REQ/REP/RTU/DREQ/DREP on QP1, then
  # 16 bytes each way on the RC QPs the CMs brought up
  "rdmacm rdma_server-client 16 4096"
  # the same exchange with softroce's Rust connection manager on the VM's rxe0 (`softroce
  # rdma-server/rdma-client --backend ibverbs`: the VM's librdmacm, the kernel's rdma_cm)
  # against the emulated softroce rdma-client/rdma-server on the host
  "rustcm rdma-server-client-ibverbs 16 4096"
  # rdma-core's rdma_cm programs unmodified on both sides: the kernel's rdma_cm on rxe0 in the
  # VM, the drop-in librdmacm.so.1 + libibverbs.so.1 on the host (softroce exec). rping: RC,
  # RDMA READ/WRITE of the peer's buffer, validated (-V); ucmatose: 4 RC connections at once;
  # udaddy: UD through SIDR_REQ/SIDR_REP; perftest -R: perftest connected by rdma_cm.
  "cmtool rping 64 4096"
  "cmtool ucmatose 100 4096"
  "cmtool udaddy 100 4096"
  # rsockets (rsocket(7)): rdma-core's rstream, every byte checked (-T v), rdma-core's
  # rsockets over the kernel's rdma_cm on one side and softroce's drop-in on the other:
  # small transfers sent inline, large ones through both ring halves and credit updates
  "cmtool rstream 64 4096"
  "cmtool rstream 300000 4096"
  # rsockets' direct placement: rdma-core's riostream (-T v), each side riomaps its buffer
  # into the peer's iomap table and the peer riowrites into it with plain RDMA WRITEs
  "cmtool riostream 64 4096"
  "cmtool riostream 300000 4096"
  # datagram rsockets (SOCK_DGRAM): rdma-core's udpong echo runs (-T e: the server returns
  # every datagram, the client must see all of them back), through rsockets' UDP address
  # exchange first and UD queue pairs after; 1536 bytes is udpong's largest default size.
  # rdma-core's datagram rsockets do not run on rxe by themselves, not even rxe to rxe:
  # ds_add_qp_dest makes the address handle to the socket's own QP without a GRH, which the
  # kernel refuses on RoCE (rconnect fails ENOENT; ibv_ud_pingpong without -g fails the same
  # way), so udpong in the VM runs with GRHFIX (below) preloaded. Only 20 echoes: udpong's
  # client resends a datagram not back within 1 ms, and a TCG rxe server answers slower,
  # so every message is sent hundreds of times and the answers queue up (30 take 1.4 s).
  "cmtool udpong 64 4096"
  "cmtool udpong 1536 4096"
  # UD multicast: rdma_join_multicast on both sides (the kernel's IGMP join on the VM, an IP
  # multicast membership on the host), RoCEv2 datagrams to the group's IPv4 multicast address
  "cmtool mckey 100 4096"
  # perftest -R only with softroce serving: after its side-channel handshake perftest's
  # client connects at once while the server is still binding and listening; a TCG rxe server
  # loses that race (REJ reason 8, no listener), and perftest's retry then reuses the ids it
  # has just destroyed (rdma_cm_client_connection frees the nodes and tries again with them).
  "cmtool ib_send_bw-R 65536 4096 rxe-client-only"
  "cmtool ib_write_bw-R 65536 4096 rxe-client-only"
  "cmtool ib_send_lat-R 2 4096 rxe-client-only"
)
ROLES=(vm-client vm-server)
role_label() { case $1 in vm-client) echo "rxe -> softroce";; vm-server) echo "softroce -> rxe";; esac; }

cleanup() { "$HERE/stop.sh" >/dev/null 2>&1 || true; }

# ---- VM and host helpers ----------------------------------------------------------------
vm() { # [--timeout S] CMD: run CMD in the VM's persistent shell; its output, its status
  local t=60
  if [ "$1" = --timeout ]; then t=$2; shift 2; fi
  "$HERE/vmctl.py" --timeout "$t" "$CTL" "$1"
}
in_ns() { ip netns exec "$NS" "$@"; }
wait_host_listening() { # PORT: until something in the netns listens on TCP PORT (<= 10 s)
  local _
  for _ in $(seq 100); do
    [ -n "$(in_ns ss -Hltn "sport = :$1" 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  return 1
}
read_counters() { vm "cd $HW_COUNTERS && for f in *; do echo \$f \$(cat \$f); done"; }
counter_delta() { # BEFORE AFTER: "name+N ..." for the counters that moved
  awk 'NR==FNR { a[$1] = $2; next } { d = $2 - a[$1]; if (d) printf "%s+%d ", $1, d }' "$1" "$2"
}
anomalies_in() { # DELTA: the anomaly counters among it
  local c out=""
  for c in $ANOMALY_COUNTERS; do
    case " $1" in *" $c+"*) out="$out $(echo " $1" | grep -o " $c+[0-9]*" | tr -d ' ')";; esac
  done
  echo "${out# }"
}
# ack_latency PCAP: how fast softroce answered the VM's ack-requesting RC packets (from the
# host's own capture, in softroce's time). Prints a summary; status 0 when every one was
# answered within ACK_PROMPT_MS.
ack_latency() {
  # decode's own verdict (e.g. a capture cut short when the cell ended) must not decide this.
  # An ACK, or the first response of a READ, answers every outstanding request up to its PSN
  # (ACKs may be coalesced, and a duplicate is answered with the latest PSN), PSNs compared
  # in their 24-bit window.
  { "$S" decode "$1" 2>/dev/null || true; } | awk -v vm="$CELL_VM_IP" -v limit="$ACK_PROMPT_MS" '
    function psn(s) { sub("psn=", "", s); return s + 0 }
    function covers(ack, p) { return (ack - p + 16777216) % 16777216 < 8388608 }
    # the source address without its port: 10.99.0.11:4791 or [fd99::11]:4791
    { src[1] = $2; sub(/:[0-9]+$/, "", src[1]); gsub(/[][]/, "", src[1]) }
    src[1] == vm && / ackreq / { p = psn($7); if (!(p in req)) { req[p] = $1; n++ } }
    src[1] != vm && ($5 == "RC_ACKNOWLEDGE" || $5 ~ /^RC_RDMA_READ_RESPONSE_(FIRST|ONLY)$/) {
      a = psn($7)
      for (p in req) if (covers(a, p)) {
        l = ($1 - req[p]) * 1000; if (l > max) max = l; delete req[p]; answered++ } }
    END { left = 0; for (p in req) left++
          printf "softroce answered %d of %d ack requests, slowest %.1f ms", answered, n, max
          exit !(n > 0 && left == 0 && max < limit) }'
}
# netem inside the VM (this host's kernel has no sch_netem): RoCE (UDP 4791) only, so the
# TCP side channel stays clean. Egress: prio band 3 with netem; ingress: redirected through
# ifb0, which carries netem too. So packets in both directions are lost and reordered.
netem_on() {
  vm "T=/usr/sbin/tc; N='$NETEM'; \$T qdisc add dev eth0 root handle 1: prio &&
    \$T qdisc add dev eth0 parent 1:3 handle 30: netem \$N &&
    \$T filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dport 4791 0xffff flowid 1:3 &&
    /usr/sbin/ip link set ifb0 up && \$T qdisc add dev ifb0 root netem \$N &&
    \$T qdisc add dev eth0 handle ffff: ingress &&
    \$T filter add dev eth0 parent ffff: protocol ip prio 1 u32 match ip dport 4791 0xffff action mirred egress redirect dev ifb0"
}
netem_off() {
  vm "T=/usr/sbin/tc; \$T qdisc del dev eth0 root; \$T qdisc del dev eth0 ingress; \$T qdisc del dev ifb0 root; true" >/dev/null
}
netem_stats() { vm "/usr/sbin/tc -s qdisc show dev eth0 parent 1:3; /usr/sbin/tc -s qdisc show dev ifb0" | awk '/dropped/ { printf "%s pkts, %s dropped; ", $4, $7 }' | tr -d ,; }

# two_sided ROLE NAME VM_CMD HOST_CMD...: one role of a cell.
#   vm-client: HOST_CMD starts first and serves (the VM command starts once something
#              listens on SIDE_PORT in the netns), then VM_CMD runs in the VM as the client;
#   vm-server: VM_CMD starts in the VM in the background, then HOST_CMD runs (it must retry
#              connecting until the VM listens, as softroce does).
# Each side is bounded by CELL_TIMEOUT; when one side fails the other is stopped. The host
# side writes its datagrams to $LOGS/NAME.pcap (SOFTROCE_PCAP). Logs: $LOGS/NAME.{vm,host}.log.
# Sets VM_RC and HOST_RC; returns 0 when both are 0.
two_sided() {
  local role=$1 name=$2 vmcmd=$3; shift 3
  local vlog="$LOGS/$name.vm.log" hlog="$LOGS/$name.host.log" pcap="$LOGS/$name.pcap" hp
  case $role in
    vm-client)
      in_ns env SOFTROCE_PCAP="$pcap" "$@" >"$hlog" 2>&1 &
      hp=$!
      if wait_host_listening "$SIDE_PORT"; then
        vm --timeout $((CELL_TIMEOUT + 30)) "timeout $CELL_TIMEOUT $vmcmd" >"$vlog" 2>&1
        VM_RC=$?
      else
        echo "nothing listens on $CELL_HOST_IP:$SIDE_PORT" >"$vlog"; VM_RC=99
      fi
      [ "$VM_RC" = 0 ] || kill "$hp" 2>/dev/null
      wait "$hp"; HOST_RC=$?
      ;;
    vm-server)
      vm "timeout $CELL_TIMEOUT $vmcmd >/tmp/cell.log 2>&1 & echo \$! >/tmp/cell.pid" >/dev/null
      in_ns env SOFTROCE_PCAP="$pcap" "$@" >"$hlog" 2>&1
      HOST_RC=$?
      [ "$HOST_RC" = 0 ] || vm 'kill $(cat /tmp/cell.pid) 2>/dev/null' >/dev/null
      vm --timeout $((CELL_TIMEOUT + 30)) 'wait $(cat /tmp/cell.pid); r=$?; cat /tmp/cell.log; (exit $r)' >"$vlog" 2>&1
      VM_RC=$?
      ;;
  esac
  [ "$VM_RC" = 0 ] && [ "$HOST_RC" = 0 ]
}

# ---- cell kinds -------------------------------------------------------------------------
pingpong_iters() { # SIZE [netem]
  local n=$ITERS
  [ "$1" -ge 65536 ] && n=100
  [ "$1" -ge 1048576 ] && n=10
  [ "${2:-}" = netem ] && { n=100; [ "$1" -ge 65536 ] && n=20; }
  echo "$n"
}
# cell_pingpong ROLE NAME TRANSPORT SIZE MTU [netem]: ibv_TRANSPORT_pingpong <-> softroce pingpong
cell_pingpong() {
  local role=$1 name=$2 t=$3 size=$4 mtu=$5 netem=${6:-}
  local n; n=$(pingpong_iters "$size" "$netem")
  local vmcmd="ibv_${t}_pingpong -g $CELL_VM_GID -s $size -n $n" host=(
    "$S" pingpong --type "$t" -s "$size" -n "$n" -m "$mtu" --bind "$CELL_HOST_IP" --timeout "$CELL_TIMEOUT"
    # A 268 ms ACK timeout: rxe under TCG can take longer than rdma-core's 67 ms to answer a
    # 64-packet message when the host is busy, and a needless retransmission shows up in
    # rxe's duplicate_request counter.
    --qp-timeout 16)
  [ "$t" = ud ] || vmcmd="$vmcmd -m $mtu"
  [ "$t" = srq ] || host+=(--check-echo)
  # The side channel to an rdma-core pingpong server goes to its IPv4 address (it listens on
  # the first address getaddrinfo gives, 0.0.0.0); the RDMA traffic uses the GIDs exchanged.
  [ "$role" = vm-client ] && vmcmd="$vmcmd $CELL_HOST_IP" || host+=("$VM_IP")
  CELL_ITERS=$n
  two_sided "$role" "$name" "$vmcmd" "${host[@]}"
  local rc=$?
  CELL_NOTE="vm=$VM_RC host=$HOST_RC $(grep -ho 'retransmitted_pkts=[0-9]* completer_retry_err=[0-9]*' "$LOGS/$name.host.log")"
  return $rc
}

# cell_ops ROLE NAME OP SIZES MTU: `softroce ops --backend ibverbs` on the VM's rxe0 (the
# softroce binary is in the image through SOFTROCE_VM_BINS) against `softroce ops` on the
# emulator; the client is the requester of every size class of OP, both sides check the data.
cell_ops() {
  local role=$1 name=$2 op=$3 mtu=$5
  local vmcmd="/usr/local/bin/softroce ops --backend ibverbs --device rxe0 -g $CELL_VM_GID -p $SIDE_PORT --only $op"
  local host=("$S" ops --bind "$CELL_HOST_IP" -p "$SIDE_PORT" --only "$op")
  if [ "$role" = vm-client ]; then vmcmd="$vmcmd -m $mtu $CELL_HOST_IP"; else host+=(-m "$mtu" "$CELL_VM_IP"); fi
  CELL_ITERS=1
  two_sided "$role" "$name" "$vmcmd" "${host[@]}"
  local rc=$?
  local client_log="$LOGS/$name.host.log"
  [ "$role" = vm-client ] && client_log="$LOGS/$name.vm.log"
  CELL_NOTE="vm=$VM_RC host=$HOST_RC sizes passed: $(grep -h '^PASS' "$client_log" | awk '{print $3}' | tr '\n' ' ')"
  grep -q '^FAIL' "$client_log" && rc=1
  return $rc
}

# cell_perftest ROLE NAME TEST SIZE MTU: unmodified perftest TEST (e.g. ib_write_bw) on rxe0 in
# the VM against the same binary on the host running on softroce's drop-in libibverbs.
cell_perftest() {
  local role=$1 name=$2 t=$3 size=$4 mtu=$5
  # -u 16: a 268 ms ACK timeout on both sides, as the pingpong cells use (see there): under
  # TCG on a busy host rxe can take longer than perftest's default 67 ms to ACK a 64 KiB
  # message, and the needless retransmission would show as rxe duplicate_request.
  local opts="-F -m $mtu -p $SIDE_PORT -n 100 -u 16"
  case $t in ib_atomic_*) ;; *) opts="$opts -s $size";; esac
  # The RoCEv2 GID of the IPv4 address: index 1 on rxe (after its link-local GID), index 0
  # on softroce (which lists only GIDs that carry traffic).
  local vmcmd="/usr/local/bin/$t -d rxe0 -x 1 $opts"
  local host=("$S" exec --devices "softroce0=$HOST_IP" -- "$t" -d softroce0 -x 0 $opts)
  if [ "$role" = vm-client ]; then
    vmcmd="$vmcmd $HOST_IP"
  else
    # perftest's client does not retry: start it once the VM's server listens (a probe
    # connection would be taken for the client, so look at /proc/net/tcp instead).
    local listen; listen=$(printf ':%04X 00000000:0000 0A' "$SIDE_PORT")
    host=(sh -c "for i in \$(seq 150); do $HERE/vmctl.py --timeout 10 $CTL \"grep -q '$listen' /proc/net/tcp\" >/dev/null && exec \"\$0\" \"\$@\"; sleep 0.2; done; echo 'the VM server never listened'; exit 1" "${host[@]}" "$VM_IP")
  fi
  CELL_ITERS=100
  two_sided "$role" "$name" "$vmcmd" "${host[@]}"
  local rc=$?
  local client_log="$LOGS/$name.host.log"
  [ "$role" = vm-client ] && client_log="$LOGS/$name.vm.log"
  CELL_NOTE="vm=$VM_RC host=$HOST_RC $(grep -A1 '#bytes' "$client_log" | tail -1 | tr -s ' ')"
  return $rc
}

# cell_rdmacm ROLE NAME ...: rdma_server/rdma_client in the VM against softroce's
# rdma-server/rdma-client on the host; the connection is made by the two CMs (no side
# channel), so readiness is the server's listening line (host) or retried REJs (VM).
cell_rdmacm() {
  local role=$1 name=$2
  local vlog="$LOGS/$name.vm.log" hlog="$LOGS/$name.host.log" pcap="$LOGS/$name.pcap" hp i
  CELL_ITERS=1
  if [ "$role" = vm-client ]; then
    in_ns env SOFTROCE_PCAP="$pcap" "$S" rdma-server --bind "$HOST_IP" --timeout "$CELL_TIMEOUT" --counters >"$hlog" 2>&1 &
    hp=$!
    for i in $(seq 100); do grep -q '^listening on' "$hlog" && break; sleep 0.1; done
    vm --timeout $((CELL_TIMEOUT + 30)) "timeout $CELL_TIMEOUT rdma_client -s $HOST_IP" >"$vlog" 2>&1
    VM_RC=$?
    [ "$VM_RC" = 0 ] || kill "$hp" 2>/dev/null
    wait "$hp"; HOST_RC=$?
  else
    vm "timeout $CELL_TIMEOUT rdma_server >/tmp/cell.log 2>&1 & echo \$! >/tmp/cell.pid" >/dev/null
    # Until the VM's rdma_server listens, its CM answers with REJ reason 8: try again then.
    : >"$hlog"
    HOST_RC=1
    for i in $(seq 50); do
      in_ns env SOFTROCE_PCAP="$pcap" "$S" rdma-client --bind "$HOST_IP" -s "$VM_IP" --timeout "$CELL_TIMEOUT" --counters >>"$hlog" 2>&1
      HOST_RC=$?
      [ "$HOST_RC" = 0 ] && break
      tail -n 3 "$hlog" | grep -q 'rejected with reason 8' || break
      sleep 0.2
    done
    [ "$HOST_RC" = 0 ] || vm 'kill $(cat /tmp/cell.pid) 2>/dev/null' >/dev/null
    vm --timeout $((CELL_TIMEOUT + 30)) 'wait $(cat /tmp/cell.pid); r=$?; cat /tmp/cell.log; (exit $r)' >"$vlog" 2>&1
    VM_RC=$?
  fi
  CELL_NOTE="vm=$VM_RC host=$HOST_RC $(grep -ho 'mad_sent=[0-9]* mad_rx_overflow=[0-9]*' "$hlog" | tail -1) $(grep -h 'end' "$vlog" | tr '\n' ' ')"
  # rdma_server/rdma_client print "end 0" and exit 0 only when every step succeeded.
  [ "$VM_RC" = 0 ] && [ "$HOST_RC" = 0 ] && grep -q 'end 0' "$vlog"
}

# cell_rustcm ROLE NAME ...: `softroce rdma-server`/`rdma-client --backend ibverbs` in the VM
# (the verbs API's connection manager over the VM's librdmacm, QPs moved by
# rdma_init_qp_attr) against the emulated `softroce rdma-client`/`rdma-server` on the host;
# readiness as in cell_rdmacm.
cell_rustcm() {
  local role=$1 name=$2
  local vlog="$LOGS/$name.vm.log" hlog="$LOGS/$name.host.log" pcap="$LOGS/$name.pcap" hp i
  local vmcmd="/usr/local/bin/softroce"
  local vmargs="--backend ibverbs --device rxe0 -g 1 --timeout $CELL_TIMEOUT"
  CELL_ITERS=1
  if [ "$role" = vm-client ]; then
    in_ns env SOFTROCE_PCAP="$pcap" "$S" rdma-server --bind "$HOST_IP" --timeout "$CELL_TIMEOUT" --counters >"$hlog" 2>&1 &
    hp=$!
    for i in $(seq 100); do grep -q '^listening on' "$hlog" && break; sleep 0.1; done
    vm --timeout $((CELL_TIMEOUT + 30)) "timeout $CELL_TIMEOUT $vmcmd rdma-client $vmargs -s $HOST_IP" >"$vlog" 2>&1
    VM_RC=$?
    [ "$VM_RC" = 0 ] || kill "$hp" 2>/dev/null
    wait "$hp"; HOST_RC=$?
  else
    vm "timeout $CELL_TIMEOUT $vmcmd rdma-server $vmargs >/tmp/cell.log 2>&1 & echo \$! >/tmp/cell.pid" >/dev/null
    : >"$hlog"
    HOST_RC=1
    for i in $(seq 50); do
      in_ns env SOFTROCE_PCAP="$pcap" "$S" rdma-client --bind "$HOST_IP" -s "$VM_IP" --timeout "$CELL_TIMEOUT" --counters >>"$hlog" 2>&1
      HOST_RC=$?
      [ "$HOST_RC" = 0 ] && break
      tail -n 3 "$hlog" | grep -q 'rejected with reason 8' || break
      sleep 0.2
    done
    [ "$HOST_RC" = 0 ] || vm 'kill $(cat /tmp/cell.pid) 2>/dev/null' >/dev/null
    vm --timeout $((CELL_TIMEOUT + 30)) 'wait $(cat /tmp/cell.pid); r=$?; cat /tmp/cell.log; (exit $r)' >"$vlog" 2>&1
    VM_RC=$?
  fi
  CELL_NOTE="vm=$VM_RC host=$HOST_RC $(grep -ho 'mad_sent=[0-9]* mad_rx_overflow=[0-9]*' "$hlog" | tail -1) $(grep -h 'end' "$vlog" | tr '\n' ' ')"
  [ "$VM_RC" = 0 ] && [ "$HOST_RC" = 0 ] && grep -q 'end 0' "$vlog"
}

# cmtool_args TOOL SIDE ADDR SIZE: the arguments of one side (server: ADDR is its own address;
# client: ADDR is the server's) of an rdma_cm program; DEV is its device's name.
own_addr() { case $1 in rxe0) echo "$VM_IP" ;; *) echo "$HOST_IP" ;; esac; }
cmtool_args() {
  local tool=$1 side=$2 addr=$3 size=$4 dev=$5
  case $tool:$side in
    rping:server) echo "rping -s -V -C 10 -S $size -a $addr" ;;
    rping:client) echo "rping -c -V -C 10 -S $size -a $addr" ;;
    ucmatose:server) echo "ucmatose -b $addr -c 4 -C 10 -S $size" ;;
    ucmatose:client) echo "ucmatose -s $addr -c 4 -C 10 -S $size" ;;
    udaddy:server) echo "udaddy -b $addr -C 10 -S $size" ;;
    rstream:server) echo "rstream -b $addr -p $SIDE_PORT -T v -S $size -C $([ "$size" -gt 65536 ] && echo 20 || echo 200)" ;;
    rstream:client) echo "rstream -s $addr -p $SIDE_PORT -T v -S $size -C $([ "$size" -gt 65536 ] && echo 20 || echo 200)" ;;
    udaddy:client) echo "udaddy -s $addr -C 10 -S $size" ;;
    riostream:server) echo "riostream -b $addr -p $SIDE_PORT -T v -S $size -C $([ "$size" -gt 65536 ] && echo 20 || echo 200)" ;;
    riostream:client) echo "riostream -s $addr -p $SIDE_PORT -T v -S $size -C $([ "$size" -gt 65536 ] && echo 20 || echo 200)" ;;
    # udpong's server runs until killed (cell_cmtool checks it is still up, then kills it)
    udpong:server) echo "$(udpong_env "$dev")udpong -b $addr -p $SIDE_PORT" ;;
    udpong:client) echo "$(udpong_env "$dev")udpong -s $addr -p $SIDE_PORT -T e -S $size -C 20" ;;
    # mckey: the "server" joins MCAST_GROUP and receives 10 datagrams, the "client" joins it
    # and sends them (from its own address: the device's, not the server's)
    # mckey's sender posts its sends unsignaled and leaves the group at once: a TCG rxe
    # (6.12) gets one datagram out before the QP goes (tcpdump: 1 of 10), so softroce
    # receiving from rxe waits for the first datagram only; rxe receiving waits for all 10.
    mckey:server) echo "mckey -m $MCAST_GROUP -b $addr -C $([ "$dev" = rxe0 ] && echo 10 || echo 1) -S $size" ;;
    mckey:client) echo "mckey -m $MCAST_GROUP -b $(own_addr "$dev") -s -C 10 -S $size" ;;
    ib_*-R:server) echo "${tool%-R} -R -d $dev -F -n 100 -u 16 -s $size -p $SIDE_PORT" ;;
    ib_*-R:client) echo "${tool%-R} -R -d $dev -F -n 100 -u 16 -s $size -p $SIDE_PORT $addr" ;;
  esac
}
# rdma-core's udpong on rxe0 runs with the GRH fix preloaded (see CELL_ROWS); on the host
# `env` is the command softroce exec runs.
udpong_env() { case $1 in rxe0) echo "env LD_PRELOAD=/usr/local/bin/libgrhfix.so " ;; *) echo "env " ;; esac; }
# cell_cmtool ROLE NAME TOOL SIZE MTU: the same rdma_cm program on both sides; no side channel,
# the two CMs connect them. Readiness: the VM server's cm_id in state LISTEN (`rdma res show
# cm_id`); the host server's RoCE socket bound, then a moment for its rdma_listen.
cell_cmtool() {
  local role=$1 name=$2 tool=$3 size=$4
  local vlog="$LOGS/$name.vm.log" hlog="$LOGS/$name.host.log" pcap="$LOGS/$name.pcap" hp i
  local host=(in_ns env SOFTROCE_PCAP="$pcap" timeout "$CELL_TIMEOUT" "$S" exec --devices "softroce0=$HOST_IP" --)
  CELL_ITERS=10
  case $tool in ib_*) CELL_ITERS=100 ;; udpong) CELL_ITERS=20 ;; esac
  if [ "$role" = vm-client ]; then
    # shellcheck disable=SC2046 # the arguments are words by construction
    "${host[@]}" $(cmtool_args "$tool" server "$HOST_IP" "$size" softroce0) >"$hlog" 2>&1 &
    hp=$!
    for i in $(seq 100); do
      [ -n "$(in_ns ss -Hlun 'sport = :4791' 2>/dev/null)" ] && break
      sleep 0.1
    done
    if [ "$tool" = mckey ]; then # until the receiver has joined the group on br0
      for i in $(seq 100); do in_ns ip maddr show dev br0 | grep -q "$MCAST_GROUP" && break; sleep 0.1; done
    fi
    sleep 1
    vm --timeout $((CELL_TIMEOUT + 30)) "timeout $CELL_TIMEOUT $(cmtool_args "$tool" client "$HOST_IP" "$size" rxe0)" >"$vlog" 2>&1
    VM_RC=$?
    if [ "$tool" = udpong ]; then # a server that never ends: still up is its success
      if kill -0 "$hp" 2>/dev/null; then HOST_RC=0; else HOST_RC=1; fi
      # $hp may be the subshell above the program: end its children too, then wait until
      # the port is free for the next cell (at most 5 s)
      pkill -TERM -P "$hp" 2>/dev/null; kill "$hp" 2>/dev/null; wait "$hp"
      for i in $(seq 50); do
        [ -z "$(in_ns ss -Hlun "sport = :$SIDE_PORT" 2>/dev/null)" ] && break
        sleep 0.1
      done
    else
      [ "$VM_RC" = 0 ] || kill "$hp" 2>/dev/null
      wait "$hp"; HOST_RC=$?
    fi
  else
    vm "timeout $CELL_TIMEOUT $(cmtool_args "$tool" server "$VM_IP" "$size" rxe0) >/tmp/cell.log 2>&1 & echo \$! >/tmp/cell.pid" >/dev/null
    for i in $(seq 100); do
      # mckey's output is block-buffered in a file: the join shows in /proc/net/igmp
      if [ "$tool" = mckey ]; then vm "grep -qi '$MCAST_GROUP_HEX' /proc/net/igmp" && break
      # udpong's server: its UDP socket bound (rsockets makes no cm_id until a datagram)
      elif [ "$tool" = udpong ]; then vm "grep -qi ':$(printf %04X "$SIDE_PORT") ' /proc/net/udp" && break
      else vm "/usr/bin/rdma res show cm_id" 2>/dev/null | grep -q LISTEN && break; fi
      sleep 0.2
    done
    # shellcheck disable=SC2046
    "${host[@]}" $(cmtool_args "$tool" client "$VM_IP" "$size" softroce0) >"$hlog" 2>&1
    HOST_RC=$?
    if [ "$tool" = udpong ]; then # a server that never ends: still up is its success
      vm --timeout 30 'p=$(cat /tmp/cell.pid); if kill -0 $p 2>/dev/null; then kill $p; wait $p; r=0; else wait $p; r=1; fi; cat /tmp/cell.log; (exit $r)' >"$vlog" 2>&1
    else
      [ "$HOST_RC" = 0 ] || vm 'kill $(cat /tmp/cell.pid) 2>/dev/null' >/dev/null
      vm --timeout $((CELL_TIMEOUT + 30)) 'wait $(cat /tmp/cell.pid); r=$?; cat /tmp/cell.log; (exit $r)' >"$vlog" 2>&1
    fi
    VM_RC=$?
  fi
  local client_log=$hlog
  [ "$role" = vm-client ] && client_log=$vlog
  if [ "$tool" = udpong ]; then
    # udpong's client ends 0 even when a run fails: its result line is the proof, with
    # every one of the 20 datagrams echoed (xfers 40: name bytes xfers total time ...)
    CELL_NOTE="vm=$VM_RC host=$HOST_RC $(grep -h '^custom' "$client_log" | tr -s ' ' ' ')"
    [ "$VM_RC" = 0 ] && [ "$HOST_RC" = 0 ] && grep -qE '^custom +[^ ]+ +40 ' "$client_log"
    return
  fi
  CELL_NOTE="vm=$VM_RC host=$HOST_RC $(grep -hE 'completed|#bytes' -A1 "$client_log" | tail -2 | tr -s ' \n' '  ')"
  [ "$VM_RC" = 0 ] && [ "$HOST_RC" = 0 ]
}

# ---- bookkeeping ------------------------------------------------------------------------
pass=0; fail=0
record() { # ROW ROLE RESULT SECONDS NOTE
  [ "$3" = pass ] && pass=$((pass + 1)) || fail=$((fail + 1))
  printf "%s\t%s\t%s\t%s\t%s\t%s\n" "$1" "$2" "$3" "$CELL_ITERS" "$4" "$5" >>"$RESULTS"
  printf "%-32s %-16s %-5s %6ss  %s\n" "$1" "$(role_label "$2")" "$3" "$4" "$5" | tee -a "$SUMMARY"
}
record_na() { # ROW ROLE NOTE: a cell this kernel cannot run
  printf "%s\t%s\t-\t-\t-\t%s\n" "$1" "$2" "$3" >>"$RESULTS"
  printf "%-32s %-16s %-5s %6s   %s\n" "$1" "$(role_label "$2")" "-" "" "$3" | tee -a "$SUMMARY"
}
needs_newer_kernel() { # ROW: status 0 when the row's kernel>=X is newer than the VM's KVER
  local want
  want=$(grep -o 'kernel>=[0-9.]*' <<<"$1") || return 1
  want=${want#kernel>=}
  [ "$(printf '%s\n%s\n' "$want" "$KVER" | sort -V | head -1)" != "$want" ]
}
show_failure() { # NAME DELTA
  echo "---- $1 failed: VM side ($LOGS/$1.vm.log)"; tail -n 8 "$LOGS/$1.vm.log"
  echo "---- host side ($LOGS/$1.host.log)"; tail -n 8 "$LOGS/$1.host.log"
  echo "---- rxe hw_counters that moved: ${2:-none}"
  # Drops between the host and QEMU show here (tap TX is the host-to-VM direction).
  echo "---- tap1: $(ip -n "$NS" -s link show tap1 2>/dev/null | awk '/TX:/ { getline; print "tx packets " $2 " dropped " $4 }')"
  echo "---- host-side pcap: $LOGS/$1.pcap"
  echo "---- VM console tail ($CACHE/run/vm1.console):"; tail -n 15 "$CACHE/run/vm1.console" | tr -d '\r'
}
# ipv6_on: give br0 and the VM's eth0 their IPv6 addresses (once) and find the index of the
# RoCEv2 GID rxe0 makes of VM_IP6 (the kernel adds it when the address appears).
ipv6_on() {
  [ -n "$VM_GID6" ] && return 0
  ip -n "$NS" -6 addr add "$HOST_IP6/64" dev br0 nodad 2>/dev/null
  # busybox ip has no nodad: switch duplicate address detection off for the link instead
  vm "sysctl -w net.ipv6.conf.eth0.accept_dad=0 >/dev/null; ip -6 addr add $VM_IP6/64 dev eth0 2>/dev/null; true" >/dev/null
  # Neighbour discovery both ways now, so no cell's first packet waits for it (rxe would
  # count the late ACK as a retry).
  in_ns ping -6 -c 1 -W 2 "$VM_IP6" >/dev/null 2>&1
  vm "ping -6 -c 1 -W 2 $HOST_IP6 >/dev/null 2>&1; true" >/dev/null
  local want="fd99:0000:0000:0000:0000:0000:0000:0011" i idx
  for i in $(seq 50); do
    idx=$(vm "grep -l '^$want\$' /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null | head -1")
    idx=$(basename "${idx:-none}" | tr -dc '0-9')
    [ -n "$idx" ] && { VM_GID6=$idx; return 0; }
    sleep 0.1
  done
  return 1
}

# restart_vm: a new VM in the same netns (the TCG VM has wedged mid-run: its rxe answered
# nothing more, in this cell or any after it). State learned from the old VM goes.
restart_vm() {
  KEEP_NS=1 "$HERE/stop.sh" >/dev/null 2>&1
  VM_GID6=""
  "$HERE/start-vms.sh" 1 "$FLAVOR" >"$LOGS/vm-restart-$RESTARTS_USED.log" 2>&1 || return 1
  read_counters >"$LOGS/.counters.before"
}
# A failed cell is tried once more in a new VM, at most VM_RESTARTS times a run: a cell
# passing on its second try is recorded as passed and says so in its note and in the
# run's last line, its first failure shown in full above it.
VM_RESTARTS="${VM_RESTARTS:-2}"
RESTARTS_USED=0
RETRIED_CELLS=""

run_cell() { # ROW ROLE [second-try]
  local second_try=${3:-}
  local row=$1 role=$2 kind name netem="" t0 secs rc delta bad note
  local -a args
  read -r -a args <<<"$row"
  kind=${args[0]}
  name=$(echo "$row $role" | tr ' ' '-')
  case " $row " in *" netem "*) netem=1;; esac
  CELL_NOTE=""; CELL_ITERS=""
  CELL_HOST_IP=$HOST_IP CELL_VM_IP=$VM_IP CELL_VM_GID=1
  case " $row " in
    *" ipv6 "*)
      if ! ipv6_on; then
        record "$row" "$role" FAIL 0 "no IPv6 GID for $VM_IP6 on rxe0"
        return
      fi
      CELL_HOST_IP=$HOST_IP6 CELL_VM_IP=$VM_IP6 CELL_VM_GID=$VM_GID6;;
  esac
  [ -n "$netem" ] && netem_on >/dev/null
  t0=$(date +%s.%N)
  "cell_$kind" "$role" "$name" "${args[@]:1}"; rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  note=$CELL_NOTE
  [ -n "$netem" ] && { note="$note netem: $(netem_stats)"; netem_off; }
  read_counters >"$LOGS/.counters.now" || echo "reading rxe counters failed" >&2
  delta=$(counter_delta "$LOGS/.counters.before" "$LOGS/.counters.now")
  mv "$LOGS/.counters.now" "$LOGS/.counters.before"
  bad=$(anomalies_in "$delta")
  if [ -n "$netem" ]; then
    note="$note rxe: ${bad:-no retries}"
  elif [ -n "$bad" ] && [ $rc = 0 ]; then
    local retries others prompt
    retries=$(echo "$bad" | grep -o 'completer_retry_err+[0-9]*')
    others=$(echo "$bad" | sed 's/completer_retry_err+[0-9]*//; s/^ *//; s/ *$//')
    if [ -n "$retries" ] && [ -z "$others" ] && prompt=$(ack_latency "$LOGS/$name.pcap"); then
      note="$note rxe spurious retry timer: $retries ($prompt)"
    else
      rc=1; note="$note rxe anomalies: $bad ${prompt:-}"
    fi
  fi
  [ -n "$second_try" ] && note="$note (passed on a second try in a new VM; the first failed: see above)"
  if [ $rc = 0 ]; then
    rm -f "$LOGS/$name.pcap"
    record "$row" "$role" pass "$secs" "$note"
    [ -n "$second_try" ] && RETRIED_CELLS="$RETRIED_CELLS [$row, $(role_label "$role")]"
  elif [ -z "$second_try" ] && [ "$RESTARTS_USED" -lt "$VM_RESTARTS" ]; then
    echo "---- $name failed (${secs}s: $note); shown below, then tried once more in a new VM"
    show_failure "$name" "$delta"
    RESTARTS_USED=$((RESTARTS_USED + 1))
    if restart_vm; then
      run_cell "$row" "$role" second-try
    else
      record "$row" "$role" FAIL "$secs" "$note; restarting the VM failed ($LOGS/vm-restart-$RESTARTS_USED.log)"
    fi
  else
    record "$row" "$role" FAIL "$secs" "$note"
    show_failure "$name" "$delta"
  fi
}

# ---- the matrix -------------------------------------------------------------------------
print_matrix() { # RESULTS_TSV KVER
  echo "rxe interop matrix: kernel $2 (flavor $FLAVOR), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "rxe -> softroce: the rdma-core program in the VM is the client; softroce -> rxe: softroce is"
  printf "%-22s %-6s %-5s %8s %6s  %-16s %-16s\n" OP LINK MTU SIZE ITERS "rxe -> softroce" "softroce -> rxe"
  awk -F'\t' '
    { split($1, f, " "); key = $1; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
      res[key, $2] = ($3 == "-" ? "-" : ($3 == "pass" ? "pass" : "FAIL") " " $5 "s"); iters[key] = $4 }
    END { for (i = 1; i <= n; i++) { k = order[i]; split(k, f, " ")
            op = f[1] == "pingpong" ? f[2] : f[1] " " f[2]
            printf "%-22s %-6s %-5s %8s %6s  %-16s %-16s\n", op, (f[5] == "netem" || f[5] == "ipv6" ? f[5] : "clean"),
              f[4], f[3], iters[k], res[k, "vm-client"], ((k, "vm-server") in res ? res[k, "vm-server"] : "-") } }' "$1"
  echo "sizes in bytes; MTU = path MTU (-m; rxe0 active_mtu 4096 on a 9000-byte link); netem: $NETEM"
  echo "(RoCE packets only, both directions, inside the VM). Size 0 is impossible for the pingpongs:"
  echo "rxe refuses a zero-length MR in ibv_rc/uc_pingpong, ibv_srq_pingpong refuses it; the ops rows"
  echo "cover it. pingpong rows: exit status and completion of both sides, echoed data verified by"
  echo "softroce (rc/uc/ud). ops rows: softroce's verbs program on rxe0 through its libibverbs"
  echo "backend against the emulator, sizes 0, 1, MTU, MTU+1, 64 KiB, 1 MiB (UD: up to the MTU),"
  echo "data, immediates, atomics' values and the UD GRH area checked by both sides. perftest rows:"
  echo "unmodified perftest on rxe0 against perftest on softroce's drop-in libibverbs. After every"
  echo "clean cell rxe's hw_counters show no retries/sequence errors/duplicates/RNR. cmtool rows:"
  echo "rdma-core's rdma_cm programs and perftest -R unmodified on both sides, connected by the"
  echo "kernel's rdma_cm on rxe0 and softroce's drop-in librdmacm (\"-\": not run, see the script)."
  echo "ops rc-atomic-write: RDMA ATOMIC WRITE, in rxe since Linux 6.2 (\"-\" on older kernels)."
  echo "ops rc-mw-*: WRITE/READ with the key of a type 2 window the responder bound on its RC QP;"
  echo "-no-rights and -outside must be refused (REM_ACCESS_ERR, memory unchanged); rxe accepts a"
  echo "WRITE outside a window (it checks the region's bounds), so -outside runs rxe -> softroce only."
  echo "LINK ipv6: RoCEv2 over IPv6, rxe0's GID of fd99::11 and a softroce device on fd99::1."
  echo "cmtool mckey: UD multicast joined through rdma_cm on both sides, 10 datagrams to 239.99.0.1."
  echo "cmtool udpong: datagram rsockets, 20 datagrams each echoed back (udpong -T e), all must return;"
  echo "rdma-core's udpong on rxe0 with a GRH for its own-QP address handle preloaded (see the rows)."
}

# ---- main -------------------------------------------------------------------------------
echo "[interop] building softroce (release)"
(cd "$ROOT" && cargo build --release --locked -p softroce-cli -p softroce-ibverbs) || exit 1
S="$ROOT/target/release/softroce"
# The VM gets softroce (its libibverbs backend drives rxe0) and perftest.
PERFTEST="ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_send_lat"
for t in $PERFTEST; do command -v "$t" >/dev/null || { echo "[interop] $t missing (perftest)"; exit 1; }; done
# GRHFIX: an address handle without a GRH on a RoCE port gets one to the port's first
# IPv4-mapped GID. rdma-core's datagram rsockets need it on rxe (see CELL_ROWS, udpong).
GRHFIX="$CACHE/libgrhfix.so"
mkdir -p "$CACHE" && gcc -O2 -shared -fPIC -Wall -Werror -o "$GRHFIX" "$HERE/grhfix.c" -ldl -libverbs ||
  { echo "[interop] building $GRHFIX failed"; exit 1; }
export SOFTROCE_VM_BINS="$S $GRHFIX $(for t in $PERFTEST; do command -v "$t"; done | tr '\n' ' ')"
"$HERE/build-image.sh" "$FLAVOR" || { echo "[interop] image build failed"; exit 1; }
# One lab at a time on this machine (the netns name is global): stop our own leftovers, then
# wait for anyone else's run to end. A netns without any QEMU for 10 s is a leftover too.
cleanup
lonely=0
for _ in $(seq 120); do
  if pgrep -f qemu-system >/dev/null; then lonely=0
  elif ip netns list | grep -qw "$NS"; then lonely=$((lonely + 1))
  else break; fi
  if [ $lonely -ge 2 ]; then echo "[interop] removing the leftover netns $NS"; ip netns del "$NS"; break; fi
  echo "[interop] another QEMU or the netns $NS is in use; waiting (up to 10 min)"; sleep 5
done
if pgrep -f qemu-system >/dev/null || ip netns list | grep -qw "$NS"; then
  echo "[interop] the lab is still in use after 10 minutes"; exit 1
fi
trap cleanup EXIT
"$HERE/start-vms.sh" 1 "$FLAVOR" || { echo "[interop] VM boot failed"; exit 1; }
KVER=$(cat "$CACHE/$FLAVOR/kver" 2>/dev/null || echo "$FLAVOR")
if ! vm "ibv_devinfo -v -d rxe0" | grep -q 'active_mtu:.*4096'; then
  echo "[interop] rxe0 active_mtu is not 4096 on the $LAB_MTU-byte link:"; vm "ibv_devinfo -v -d rxe0 | grep mtu"; exit 1
fi
rm -rf "$LOGS"; mkdir -p "$LOGS"; : >"$RESULTS"
read_counters >"$LOGS/.counters.before"
printf "%-32s %-16s %-5s %7s  %s\n" CELL DIRECTION RESULT TIME NOTE | tee "$SUMMARY"
t_start=$(date +%s)
for row in "${CELL_ROWS[@]}"; do
  [[ $row =~ $CELLS ]] || continue
  for role in "${ROLES[@]}"; do
    [[ $row == *rxe-client-only* && $role != vm-client ]] && continue
    if needs_newer_kernel "$row"; then
      record_na "$row" "$role" "not applicable: rxe of kernel $KVER lacks it"
      continue
    fi
    run_cell "$row" "$role"
  done
done
echo "[interop] rxe hw_counters after the run:"
tr '\n' ' ' <"$LOGS/.counters.before" | tee -a "$SUMMARY"; echo | tee -a "$SUMMARY"
echo | tee -a "$SUMMARY"
print_matrix "$RESULTS" "$KVER" | tee "$MATRIX"
# Repeat what failed and why below the matrix, so a log's tail (all CI keeps) says it.
awk -F'\t' '$3 == "FAIL" { print "FAILED: " $1 " (" $2 "): " $6 }' "$RESULTS"
[ -n "$RETRIED_CELLS" ] &&
  echo "interop $FLAVOR: passed only on a second try in a new VM:$RETRIED_CELLS" | tee -a "$SUMMARY" "$MATRIX"
echo "interop $FLAVOR: $pass passed, $fail failed in $(( $(date +%s) - t_start )) s" | tee -a "$SUMMARY" "$MATRIX"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
