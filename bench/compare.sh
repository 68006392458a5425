#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# bench/compare.sh -- hoop vs Gloo (PyTorch 1.13) vs Open MPI (TCP BTL), f32 sum all-reduce,
# side by side in one run on this machine. Not run by make check (several minutes, root).
#
#   bench/compare.sh [BUILD_DIR]        (default BUILD_DIR: build/ next to this script's repo)
#
# Needs root, ip/tc, and: apt-get install openmpi-bin libopenmpi-dev python3-torch iperf3
# The peers come from bench-peers (PEERS, default ../shared/bench-peers beside the repo),
# copied to a temporary directory (it may be read-only) and built there.
#
# Experiments (each round runs hoop, gloo, mpi back to back, so noise hits all alike):
#   1. 2 workers over loopback: 8 B latency, and busbw at 64, 128, 256 MiB.
#      Link: one loopback TCP stream (the peers' tcpbw).
#   2. 4 workers, one per network namespace ba_r0..ba_r3 (10.88.0.1-4) on a bridge, every
#      rank's egress limited to 1 Gbit/s by tc tbf (bench-peers/netns_topo.sh ring-up 4
#      1gbit). Link first: 4 concurrent ring streams r_i -> r_i+1; then busbw at 512 KiB,
#      2, 8 and 32 MiB. hoop runs as one hooprun per namespace (--nnodes 4 --node-rank i).
# Only loopback and the 10.88.0.0/24 addresses inside the namespaces are used; the
# namespaces are removed on exit. Raw outputs go to OUT (default: a temporary directory,
# printed); the markdown tables go to stdout (bench/compare_table.py).
#
# env: ROUNDS=2  ALGO=auto (hoop-bench's --algo)  PEERS=dir  OUT=dir  SKIP_LO=1  SKIP_NETNS=1
#      LO_TRANSPORT=tcp|shm (loopback: hoop over TCP vs MPI's TCP BTL, the default; or hoop
#      over shared memory vs MPI's vader BTL, Gloo staying on TCP)
#      LINK_SECS=5  HOOP_CHUNK_BYTES / HOOP_TCP_NSOCKS pass through to hoop.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
BUILD=$(cd "${1:-$top/build}" && pwd)
HOOPRUN=$BUILD/tools/hooprun
BENCH=$BUILD/bench/hoop-bench
ROUNDS=${ROUNDS:-2}
ALGO=${ALGO:-auto}
LINK_SECS=${LINK_SECS:-5}
for p in "${PEERS:-}" "$top/../shared/bench-peers" "$top/../../shared/bench-peers"; do
    [ -n "$p" ] && [ -f "$p/netns_topo.sh" ] && { PEERS=$(cd "$p" && pwd); break; }
done
[ -f "${PEERS:-}/netns_topo.sh" ] || { echo "compare.sh: bench-peers not found; set PEERS" >&2; exit 2; }
[ -x "$HOOPRUN" ] && [ -x "$BENCH" ] || { echo "compare.sh: build hoop first ($BUILD)" >&2; exit 2; }
for cmd in mpirun mpicc /usr/bin/python3 ip tc; do
    command -v "$cmd" > /dev/null || { echo "compare.sh: $cmd is missing" >&2; exit 2; }
done
/usr/bin/python3 -c 'import torch.distributed' 2> /dev/null ||
    { echo "compare.sh: /usr/bin/python3 lacks torch (apt-get install python3-torch)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/hoop-compare.XXXXXX)
OUT=${OUT:-$WORK/raw}
mkdir -p "$OUT"
cp -r "$PEERS" "$WORK/peers"
chmod -R u+w "$WORK/peers"
P=$WORK/peers
NETNS_UP=0
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2> /dev/null || true; done
    [ "$NETNS_UP" = 1 ] && "$P/netns_topo.sh" ring-down || true
    rm -rf "$P" # the copy of the peers; the raw outputs stay in OUT
}
trap cleanup EXIT
trap 'exit 130' INT TERM
(cd "$P" && ./build.sh > "$OUT/build.log" 2>&1) || { cat "$OUT/build.log"; exit 1; }

meta() { # NAME: a header for one raw file
    echo "# $1  date $(date -u +%FT%TZ)  loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
}
{
    echo "date: $(date -u +%FT%TZ)"
    echo "host: $(hostname), $(nproc) CPUs, kernel $(uname -r)"
    echo "loadavg_start: $(cat /proc/loadavg)"
    echo "hoop: $(cd "$top" && git describe --always --dirty 2> /dev/null || echo unknown), algo $ALGO"
    echo "torch: $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
    echo "mpi: $(mpirun --version 2> /dev/null | head -1)"
} > "$OUT/meta.txt"

# hoop-bench's method beside the peers': each call waited for (-z 2), the max over ranks
# (-a 3), the algorithm named in a last column (--show-algo).
HOOP_METHOD="--algo $ALGO -z 2 -a 3 --show-algo"

# Loopback compares TCP with TCP: hoop's two workers would otherwise meet over shared
# memory (HOOP_TRANSPORT=auto); LO_TRANSPORT=shm measures that instead.
LO_TRANSPORT=${LO_TRANSPORT:-tcp}
MPI_LO="--allow-run-as-root --oversubscribe --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo"
if [ "$LO_TRANSPORT" = shm ]; then # then MPI uses its shared-memory BTL too (Gloo has none)
    MPI_LO="--allow-run-as-root --oversubscribe --mca pml ob1 --mca btl vader,self"
fi
export MPI_KIND=$([ "$LO_TRANSPORT" = shm ] && echo "MPI vader" || echo "MPI TCP")

# lo_run KIND ROUND NAME HOOP_ARGS PEER_ARGS: one 2-worker run over loopback.
lo_run() {
    local f="$OUT/lo_$1_$3_r$2.txt"
    meta "$1 $3 round $2" > "$f"
    case $1 in
    hoop) HOOP_TRANSPORT=$LO_TRANSPORT timeout 600 "$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce \
        $HOOP_METHOD $4 >> "$f" 2>&1 ;;
    gloo) (cd "$P" && GLOO_SOCKET_IFNAME=lo MASTER_ADDR=127.0.0.1 OMP_NUM_THREADS=1 timeout 600 \
        /usr/bin/python3 gloo_allreduce_bench.py --launch 2 $5 -l gloo-lo) >> "$f" 2>&1 ;;
    mpi) timeout 600 mpirun $MPI_LO -np 2 "$P/build/mpi_allreduce_bench" $5 -l mpi-tcp >> "$f" 2>&1 ;;
    esac || echo "!!! $1 $3 round $2 failed (rc $?), see $f" >&2
}

if [ "${SKIP_LO:-0}" != 1 ]; then
    echo "== loopback link (tcpbw, 1 stream, ${LINK_SECS}s)" >&2
    "$P/build/tcpbw" -s -p 5391 -B 127.0.0.1 > "$OUT/lo_link.txt" &
    PIDS+=($!)
    sleep 0.3
    "$P/build/tcpbw" -c 127.0.0.1 -p 5391 -P 1 -t "$LINK_SECS" > /dev/null
    wait "${PIDS[-1]}" || true
    for r in $(seq 1 "$ROUNDS"); do
        echo "== loopback round $r: latency (8 B) then 64-256 MiB; hoop, gloo, mpi" >&2
        for k in hoop gloo mpi; do
            lo_run $k $r lat "-b 8 -e 8 -n 5000 -w 500 -c 1" "-b 8 -e 8 -r 7 -w 2 -T 20"
        done
        for k in hoop gloo mpi; do
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
        ip netns exec ba_r$i env HOOP_TOKEN="$token" HOOP_SOCKET_IFNAME=bav0 timeout 600 \
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
        (cd "$P" && ip netns exec ba_r$i env RANK=$i WORLD_SIZE=4 MASTER_ADDR=10.88.0.1 \
            MASTER_PORT=$port GLOO_SOCKET_IFNAME=bav0 OMP_NUM_THREADS=1 timeout 600 \
            /usr/bin/python3 gloo_allreduce_bench.py $NS_ARGS -r 5 -w 2 -T 20 -l netns-gloo) \
            > "$OUT/ns_gloo_r$1.node$i" 2>&1 &
        pids+=($!)
        PIDS+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    cat "$OUT/ns_gloo_r$1.node0" >> "$f"
    [ $rc = 0 ] || echo "!!! gloo netns round $1 failed (rc $rc)" >&2
}

ns_mpi() {
    local f="$OUT/ns_mpi_r$1.txt" app="" i
    for i in 0 1 2 3; do
        app="$app${app:+ : }-np 1 ip netns exec ba_r$i $P/build/mpi_allreduce_bench $NS_ARGS -r 5 -w 2 -T 20 -l netns-mpi-tcp"
    done
    meta "mpi netns round $1" > "$f"
    timeout 600 ip netns exec ba_hub env PMIX_MCA_ptl_tcp_if_include=babr0 mpirun \
        --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include bav0 --mca oob_tcp_if_include babr0 $app >> "$f" 2>&1 ||
        echo "!!! mpi netns round $1 failed, see $f" >&2
}

# ns_link: 4 concurrent ring streams r_i -> r_i+1 (what a ring all-reduce can use per link).
ns_link() {
    local i j sp=() cp=()
    meta "link: 4 concurrent ring streams, tcpbw, ${LINK_SECS}s" > "$OUT/ns_link.txt"
    for i in 0 1 2 3; do
        j=$(((i + 1) % 4))
        ip netns exec ba_r$j "$P/build/tcpbw" -s -p $((5410 + i)) -B 10.88.0.$((j + 1)) \
            > "$OUT/ns_link.$i" &
        sp+=($!)
        PIDS+=($!)
    done
    sleep 0.3
    for i in 0 1 2 3; do
        j=$(((i + 1) % 4))
        ip netns exec ba_r$i "$P/build/tcpbw" -c 10.88.0.$((j + 1)) -p $((5410 + i)) -P 1 \
            -t "$LINK_SECS" > /dev/null &
        cp+=($!)
        PIDS+=($!)
    done
    for p in "${cp[@]}" "${sp[@]}"; do wait "$p" || true; done
    for i in 0 1 2 3; do echo "ring r$i->r$(((i + 1) % 4)): $(cat "$OUT/ns_link.$i")"; done >> "$OUT/ns_link.txt"
}

if [ "${SKIP_NETNS:-0}" != 1 ]; then
    if ip netns list | grep -qE '^ba_'; then
        echo "compare.sh: ba_* namespaces exist already (someone else's run?); not touching them" >&2
        exit 1
    fi
    NETNS_UP=1
    "$P/netns_topo.sh" ring-up 4 1gbit
    echo "== netns: link alone" >&2
    ns_link
    for r in $(seq 1 "$ROUNDS"); do
        echo "== netns round $r: hoop, gloo, mpi" >&2
        ns_hoop $r
        ns_gloo $r
        ns_mpi $r
    done
    "$P/netns_topo.sh" ring-down
    NETNS_UP=0
fi
echo "loadavg_end: $(cat /proc/loadavg)" >> "$OUT/meta.txt"
echo "raw outputs: $OUT" >&2
/usr/bin/python3 "$here/compare_table.py" "$OUT"
