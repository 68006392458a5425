#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# bench/compare.sh -- hoop vs Gloo (PyTorch 1.13) vs Open MPI (TCP BTL), f32 sum all-reduce,
# side by side in one run on this machine. Not run by make check (several minutes, root).
#
#   bench/compare.sh [BUILD_DIR]        (default BUILD_DIR: the repository itself, as the
#                                        README's Quick start builds in place)
#   bench/compare.sh --help             (this text)
#
# The peers are in the tree: bench/peers/gloo_allreduce.py (Gloo through Debian's
# PyTorch 1.13), bench/peers/mpi_allreduce.c (Open MPI, built here with mpicc),
# bench/peers/tcpbw (the link rate, built by make) and bench/peers/netns_ring.sh (the
# namespaces). A peer that is not installed is skipped with a line saying so, and its
# columns read "-": apt-get install python3-torch (Gloo), openmpi-bin libopenmpi-dev (MPI).
# The namespace experiment needs root, ip and tc; without them it is skipped the same way.
#
# Experiments (each round runs hoop, gloo, mpi back to back, so noise hits all alike):
#   1. 2 workers over loopback: 8 B latency, and busbw at 64, 128, 256 MiB.
#      Link: one loopback TCP stream (tcpbw).
#   2. 4 workers, one per network namespace hb_r0..hb_r3 (10.88.0.1-4) on a bridge, every
#      rank's egress limited to 1 Gbit/s by tc tbf (bench/peers/netns_ring.sh up 4 1gbit).
#      Link first: 4 concurrent ring streams r_i -> r_i+1; then busbw at 512 KiB, 2, 8 and
#      32 MiB. hoop runs as one hooprun per namespace (--nnodes 4 --node-rank i).
# Only loopback and the 10.88.0.0/24 addresses inside the namespaces are used; the
# namespaces are removed on exit. Raw outputs go to OUT (default: a temporary directory,
# printed); the markdown tables go to stdout (bench/compare_table.py).
#
# env: ROUNDS=2  ALGO=auto (hoop-bench's --algo)  OUT=dir  SKIP_LO=1  SKIP_NETNS=1
#      LO_TRANSPORT=tcp|shm (loopback: hoop over TCP vs MPI's TCP BTL, the default; or hoop
#      over shared memory vs MPI's vader BTL, Gloo staying on TCP)
#      PYTHON=/usr/bin/python3 (the one with torch)  MPICC=mpicc  MPIRUN=mpirun  LINK_SECS=5
#      HOOP_CHUNK_BYTES / HOOP_TCP_NSOCKS pass through to hoop.
# A bad value of these, or a BUILD_DIR that is not a directory, exits 2 naming it before
# anything runs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)

# refuse MESSAGE: bad arguments or environment: one line, exit 2, before anything runs.
refuse() {
    echo "compare.sh: $1" >&2
    exit 2
}
case ${1:-} in
-h | --help)
    echo "Usage: $0 [BUILD_DIR]"
    sed -n '3,/^set -euo pipefail$/{/^#/s/^# \{0,1\}//p}' "$0"
    exit 0
    ;;
-*) refuse "unknown option '$1' (the one argument is BUILD_DIR; see --help)" ;;
esac
[ $# -le 1 ] || refuse "unexpected argument '$2' (the one argument is BUILD_DIR; see --help)"
PYTHON=${PYTHON:-/usr/bin/python3}
ROUNDS=${ROUNDS:-2}
ALGO=${ALGO:-auto}
LINK_SECS=${LINK_SECS:-5}
[[ $ROUNDS =~ ^[1-9][0-9]{0,3}$ ]] || refuse "ROUNDS='$ROUNDS' is not a number of rounds (1 to 9999)"
[[ $LINK_SECS =~ ^[0-9]{1,4}(\.[0-9]+)?$ ]] && [[ ! $LINK_SECS =~ ^0+(\.0*)?$ ]] ||
    refuse "LINK_SECS='$LINK_SECS' is not a number of seconds above 0 (e.g. 5 or 0.5)"
case $ALGO in
auto | ring | rd | rhd) ;;
*) refuse "ALGO='$ALGO' is not one of auto ring rd rhd (direct needs shared buffers, -R 1,\
 which compare.sh does not ask for)" ;;
esac
case ${LO_TRANSPORT:-tcp} in
tcp | shm) ;;
*) refuse "LO_TRANSPORT='$LO_TRANSPORT' is not tcp or shm" ;;
esac
for v in SKIP_LO SKIP_NETNS; do
    case ${!v:-0} in
    0 | 1) ;;
    *) refuse "$v='${!v}' is not 0 or 1" ;;
    esac
done
command -v "$PYTHON" > /dev/null || refuse "PYTHON='$PYTHON' is not a program (it runs the tables)"
[ -d "${1:-$top}" ] || refuse "BUILD_DIR '$1' is not a directory"
BUILD=$(cd "${1:-$top}" && pwd)
HOOPRUN=$BUILD/tools/hooprun
BENCH=$BUILD/bench/hoop-bench
TCPBW=$BUILD/bench/peers/tcpbw
RING=$here/peers/netns_ring.sh
[ -x "$HOOPRUN" ] && [ -x "$BENCH" ] && [ -x "$TCPBW" ] ||
    { echo "compare.sh: build hoop first (make in $BUILD)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/hoop-compare.XXXXXX)
OUT=${OUT:-$WORK/raw}
if ! mkdir -p "$OUT" 2> /dev/null || [ ! -w "$OUT" ]; then
    rmdir "$WORK"
    refuse "OUT='$OUT' cannot be made a writable directory"
fi
KINDS=hoop
if "$PYTHON" -c 'import torch.distributed' 2> /dev/null; then
    KINDS="$KINDS gloo"
else
    echo "compare.sh: $PYTHON has no torch (apt-get install python3-torch): Gloo is not run" >&2
fi
MPI_BIN=$WORK/mpi_allreduce
MPICC=${MPICC:-mpicc}
MPIRUN=${MPIRUN:-mpirun}
if ! command -v "$MPICC" > /dev/null || ! command -v "$MPIRUN" > /dev/null; then
    echo "compare.sh: no Open MPI ($MPICC, $MPIRUN; apt-get install openmpi-bin libopenmpi-dev):" \
        "MPI is not run" >&2
elif "$MPICC" -O2 -o "$MPI_BIN" "$here/peers/mpi_allreduce.c" > "$OUT/build.log" 2>&1; then
    KINDS="$KINDS mpi"
else
    cat "$OUT/build.log" >&2
    echo "compare.sh: mpicc failed (above): MPI is not run" >&2
fi
if [ "${SKIP_NETNS:-0}" != 1 ] && { [ "$(id -u)" != 0 ] || ! command -v ip > /dev/null ||
    ! command -v tc > /dev/null; }; then
    echo "compare.sh: the namespace experiment needs root, ip and tc: skipped" >&2
    SKIP_NETNS=1
fi
NETNS_UP=0
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2> /dev/null || true; done
    [ "$NETNS_UP" = 1 ] && "$RING" down || true
    rm -f "$MPI_BIN" # the raw outputs stay in OUT
    rmdir "$WORK" 2> /dev/null || true # (empty when OUT was given elsewhere)
}
trap cleanup EXIT
trap 'exit 130' INT TERM

meta() { # NAME: a header for one raw file
    echo "# $1  date $(date -u +%FT%TZ)  loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
}
# Loopback compares TCP with TCP: hoop's two workers would otherwise meet over shared
# memory (HOOP_TRANSPORT=auto); LO_TRANSPORT=shm measures that instead.
LO_TRANSPORT=${LO_TRANSPORT:-tcp}
MPI_LO="--allow-run-as-root --oversubscribe --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo"
if [ "$LO_TRANSPORT" = shm ]; then # then MPI uses its shared-memory BTL too (Gloo has none)
    MPI_LO="--allow-run-as-root --oversubscribe --mca pml ob1 --mca btl vader,self"
fi

{
    echo "date: $(date -u +%FT%TZ)"
    echo "host: $(hostname), $(nproc) CPUs, kernel $(uname -r)"
    echo "loadavg_start: $(cat /proc/loadavg)"
    # the build that runs (BUILD_DIR), which need not be this script's tree
    echo "hoop: $(git -C "$BUILD" describe --always --dirty 2> /dev/null ||
        echo "unknown (BUILD_DIR $BUILD is not a git checkout)"), algo $ALGO"
    # compare_table.py reads this line: section 1's transports
    if [ "$LO_TRANSPORT" = shm ]; then
        echo "lo_transport: shm (hoop over shared memory, MPI over vader; Gloo, which has no shared-memory path, over loopback TCP)"
    else
        echo "lo_transport: tcp (hoop, Gloo and MPI over loopback TCP)"
    fi
    echo "torch: $("$PYTHON" -c 'import torch; print(torch.__version__)' 2> /dev/null || echo "not installed: Gloo not run")"
    if [[ " $KINDS " == *" mpi "* ]]; then
        echo "mpi: $("$MPIRUN" --version 2> /dev/null | head -1)"
    else
        echo "mpi: not installed (or not built): MPI not run"
    fi
    echo "run: $KINDS"
} > "$OUT/meta.txt"

# hoop-bench's method beside the peers': each call waited for (-z 2), the max over ranks
# (-a 3), the algorithm named in a last column (--show-algo).
HOOP_METHOD="--algo $ALGO -z 2 -a 3 --show-algo"
GLOO="$here/peers/gloo_allreduce.py"

# lo_run KIND ROUND NAME HOOP_ARGS PEER_ARGS: one 2-worker run over loopback.
lo_run() {
    local f="$OUT/lo_$1_$3_r$2.txt"
    meta "$1 $3 round $2" > "$f"
    case $1 in
    hoop) HOOP_TRANSPORT=$LO_TRANSPORT timeout 600 "$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce \
        $HOOP_METHOD $4 >> "$f" 2>&1 ;;
    gloo) GLOO_SOCKET_IFNAME=lo MASTER_ADDR=127.0.0.1 OMP_NUM_THREADS=1 timeout 600 \
        "$PYTHON" "$GLOO" --launch 2 $5 -l gloo-lo >> "$f" 2>&1 ;;
    mpi) timeout 600 "$MPIRUN" $MPI_LO -np 2 "$MPI_BIN" $5 -l mpi-tcp >> "$f" 2>&1 ;;
    esac || echo "!!! $1 $3 round $2 failed (rc $?), see $f" >&2
}

if [ "${SKIP_LO:-0}" != 1 ]; then
    echo "== loopback link (tcpbw, 1 stream, ${LINK_SECS}s)" >&2
    "$TCPBW" -s -p 5391 -B 127.0.0.1 > "$OUT/lo_link.txt" &
    PIDS+=($!)
    "$TCPBW" -c 127.0.0.1 -p 5391 -P 1 -t "$LINK_SECS" > /dev/null
    wait "${PIDS[-1]}" || true
    for r in $(seq 1 "$ROUNDS"); do
        echo "== loopback round $r: latency (8 B) then 64-256 MiB; $KINDS" >&2
        for k in $KINDS; do
            lo_run $k $r lat "-b 8 -e 8 -n 5000 -w 500 -c 1" "-b 8 -e 8 -r 7 -w 2 -T 20"
        done
        for k in $KINDS; do
            lo_run $k $r bw "-b 64M -e 256M -f 2 -n 10 -w 2 -c 1" "-b 64M -e 256M -f 2 -r 5 -w 2 -T 20"
        done
    done
fi

NS_ARGS="-b 512K -e 32M -f 4"
# ns_hoop ROUND: hoop-bench as 4 single-worker hooprun nodes, one per namespace.
ns_hoop() {
    local f="$OUT/ns_hoop_r$1.txt" port=$((29000 + RANDOM % 900)) pids=() rc=0
    local token
    token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
    meta "hoop netns round $1" > "$f"
    for i in 0 1 2 3; do
        ip netns exec hb_r$i env HOOP_TOKEN="$token" HOOP_SOCKET_IFNAME=hbv0 timeout 600 \
            "$HOOPRUN" --nnodes 4 --node-rank $i --nproc-per-node 1 --master-addr 10.88.0.1 \
            --master-port $port "$BENCH" allreduce $HOOP_METHOD $NS_ARGS -n 8 -w 2 -c 1 \
            > "$OUT/ns_hoop_r$1.node$i" 2>&1 &
        pids+=($!)
        PIDS+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    cat "$OUT/ns_hoop_r$1.node0" >> "$f"
    [ $rc = 0 ] || { echo "!!! hoop netns round $1 failed (rc $rc)" >&2; tail -3 "$OUT"/ns_hoop_r$1.node* >&2; }
}

ns_gloo() {
    local f="$OUT/ns_gloo_r$1.txt" port=$((29600 + RANDOM % 300)) pids=() rc=0
    meta "gloo netns round $1" > "$f"
    for i in 0 1 2 3; do
        ip netns exec hb_r$i env RANK=$i WORLD_SIZE=4 MASTER_ADDR=10.88.0.1 MASTER_PORT=$port \
            GLOO_SOCKET_IFNAME=hbv0 OMP_NUM_THREADS=1 timeout 600 \
            "$PYTHON" "$GLOO" $NS_ARGS -r 5 -w 2 -T 20 -l netns-gloo > "$OUT/ns_gloo_r$1.node$i" 2>&1 &
        pids+=($!)
        PIDS+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    cat "$OUT/ns_gloo_r$1.node0" >> "$f"
    [ $rc = 0 ] || echo "!!! gloo netns round $1 failed (rc $rc)" >&2
}

# ns_mpi ROUND: mpirun in the hub namespace starts one rank per rank namespace (an app
# context each, through ip netns exec); ranks talk over hbv0, the launcher over hbbr0.
ns_mpi() {
    local f="$OUT/ns_mpi_r$1.txt" app="" i
    for i in 0 1 2 3; do
        app="$app${app:+ : }-np 1 ip netns exec hb_r$i $MPI_BIN $NS_ARGS -r 5 -w 2 -T 20 -l netns-mpi-tcp"
    done
    meta "mpi netns round $1" > "$f"
    timeout 600 ip netns exec hb_hub env PMIX_MCA_ptl_tcp_if_include=hbbr0 "$MPIRUN" \
        --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include hbv0 --mca oob_tcp_if_include hbbr0 $app >> "$f" 2>&1 ||
        echo "!!! mpi netns round $1 failed, see $f" >&2
}

# ns_link: 4 concurrent ring streams r_i -> r_i+1 (what a ring all-reduce can use per link).
ns_link() {
    local i j sp=() cp=()
    meta "link: 4 concurrent ring streams, tcpbw, ${LINK_SECS}s" > "$OUT/ns_link.txt"
    for i in 0 1 2 3; do
        j=$(((i + 1) % 4))
        ip netns exec hb_r$j "$TCPBW" -s -p $((5410 + i)) -B 10.88.0.$((j + 1)) > "$OUT/ns_link.$i" &
        sp+=($!)
        PIDS+=($!)
    done
    for i in 0 1 2 3; do
        j=$(((i + 1) % 4))
        ip netns exec hb_r$i "$TCPBW" -c 10.88.0.$((j + 1)) -p $((5410 + i)) -P 1 \
            -t "$LINK_SECS" > /dev/null &
        cp+=($!)
        PIDS+=($!)
    done
    for p in "${cp[@]}" "${sp[@]}"; do wait "$p" || true; done
    for i in 0 1 2 3; do echo "ring r$i->r$(((i + 1) % 4)): $(cat "$OUT/ns_link.$i")"; done >> "$OUT/ns_link.txt"
}

if [ "${SKIP_NETNS:-0}" != 1 ]; then
    if ip netns list | grep -qE '^hb_'; then
        echo "compare.sh: hb_* namespaces exist already (someone else's run?); not touching them" >&2
        exit 1
    fi
    NETNS_UP=1
    "$RING" up 4 1gbit
    echo "== netns: link alone" >&2
    ns_link
    for r in $(seq 1 "$ROUNDS"); do
        echo "== netns round $r: $KINDS" >&2
        for k in $KINDS; do ns_$k $r; done
    done
    "$RING" down
    NETNS_UP=0
fi
echo "loadavg_end: $(cat /proc/loadavg)" >> "$OUT/meta.txt"
echo "raw outputs: $OUT" >&2
"$PYTHON" "$here/compare_table.py" "$OUT"
