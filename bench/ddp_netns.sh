#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# bench/ddp_netns.sh -- DDP training across 4 "hosts": network namespaces on a bridge,
# each link limited to RATE (default 1gbit) with tc tbf. One hooprun per namespace
# (--nnodes 4, one worker each) runs hoop-train's benchmark mode on the MLP, batch 128
# per worker; rank 0 reports samples/s, all-reduce ms per step and the share of
# all-reduce time hidden behind backward, and writes a Chrome trace (TRACE, default
# ddp_netns_trace.json). TRAIN_ARGS adds hoop-train flags (e.g. --first-bucket-kb 512);
# SSAI=0 turns off TCP slow start after idle in the namespaces. Run as root from the
# build directory. Addresses: 10.89.0.0/24,
# only inside the namespaces made here (hd_*), removed on exit.
set -euo pipefail
N=4
RATE=${RATE:-1gbit}
STEPS=${STEPS:-100}
TRACE=${TRACE:-$PWD/ddp_netns_trace.json}
cleanup() {
    for ns in $(ip netns list | awk '{print $1}' | grep -E '^hd_(r[0-9]+|hub)$' || true); do
        ip netns pids "$ns" | xargs -r kill -9 2>/dev/null || true
        ip netns del "$ns"
    done
}
trap cleanup EXIT
cleanup
ip netns add hd_hub
ip -n hd_hub link add hdbr0 type bridge
ip -n hd_hub link set hdbr0 up
for ((i = 0; i < N; i++)); do
    ip netns add hd_r$i
    ip -n hd_r$i link set lo up
    ip link add hdv0 netns hd_r$i type veth peer name hdp$i netns hd_hub
    ip -n hd_r$i addr add 10.89.0.$((i + 1))/24 dev hdv0
    ip -n hd_r$i link set hdv0 up
    ip -n hd_hub link set hdp$i master hdbr0
    ip -n hd_hub link set hdp$i up
    [ "${SSAI:-1}" = 0 ] && ip netns exec hd_r$i sysctl -qw net.ipv4.tcp_slow_start_after_idle=0
    if [ "$RATE" != none ]; then
        ip netns exec hd_r$i tc qdisc add dev hdv0 root tbf rate "$RATE" burst 256kb latency 50ms
    fi
done
HOOP_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
export HOOP_TOKEN OPENBLAS_NUM_THREADS=1
pids=()
for ((i = N - 1; i >= 0; i--)); do
    extra=()
    [ $i = 0 ] && extra=(env HOOP_TRACE_FILE="$TRACE")
    ip netns exec hd_r$i "${extra[@]}" tools/hooprun --nnodes $N --node-rank $i \
        --nproc-per-node 1 --master-addr 10.89.0.1 --master-port 29650 \
        tools/hoop-train --bench-steps "$STEPS" --bench-warmup 10 --threads 1 ${TRAIN_ARGS:-} \
        >"/tmp/hd_r$i.out" 2>&1 &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
cat /tmp/hd_r0.out
[ $rc = 0 ] || { tail -5 /tmp/hd_r*.out; exit 1; }
echo "trace: $TRACE (open in chrome://tracing or ui.perfetto.dev)"
