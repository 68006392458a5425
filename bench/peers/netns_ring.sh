#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# bench/peers/netns_ring.sh -- N "hosts" for bench/compare.sh: network namespaces on one
# bridge, each rank's sending side limited by a token bucket, as a switch port would be.
#
#   netns_ring.sh up N [RATE]    namespaces hb_r0..hb_r(N-1), each with veth hbv0 at
#                                10.88.0.(i+1)/24, its peer in namespace hb_hub on bridge
#                                hbbr0 (10.88.0.254); tbf RATE (default 1gbit; none: no
#                                limit) on each rank's hbv0 egress
#   netns_ring.sh down           removes every hb_* namespace (and so their links)
#   netns_ring.sh status         lists them with their addresses and queueing disciplines
#
# The addresses exist only inside the namespaces. tbf's bucket: 256 KiB up to 1 Gbit/s
# (about 2 ms at line rate, so messages above a few hundred KB cannot ride on it), 1 MiB
# above (a smaller bucket undershoots faster rates with veth segmentation offload);
# TBF_BURST and TBF_LATENCY (default 50ms) override. Needs root, ip and tc (iproute2).
set -euo pipefail

burst() {
    if [ -n "${TBF_BURST:-}" ]; then echo "$TBF_BURST"; return; fi
    case $1 in *kbit | *mbit | 1gbit) echo 256kb ;; *) echo 1mb ;; esac
}

limit() { # NAMESPACE DEV RATE
    [ "$3" = none ] && return 0
    ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" burst "$(burst "$3")" \
        latency "${TBF_LATENCY:-50ms}"
}

ours() { ip netns list | awk '{ print $1 }' | grep -E '^hb_(r[0-9]+|hub)$' || true; }

up() {
    local n=$1 rate=$2 i
    [ -z "$(ours)" ] || { echo "netns_ring.sh: hb_* namespaces exist already" >&2; exit 1; }
    ip netns add hb_hub
    ip -n hb_hub link set lo up
    ip -n hb_hub link add hbbr0 type bridge
    ip -n hb_hub addr add 10.88.0.254/24 dev hbbr0
    ip -n hb_hub link set hbbr0 up
    for ((i = 0; i < n; i++)); do
        ip netns add hb_r$i
        ip -n hb_r$i link set lo up
        ip link add hbv0 netns hb_r$i type veth peer name hbp$i netns hb_hub
        ip -n hb_r$i addr add 10.88.0.$((i + 1))/24 dev hbv0
        ip -n hb_r$i link set hbv0 up
        ip -n hb_hub link set hbp$i master hbbr0
        ip -n hb_hub link set hbp$i up
        limit hb_r$i hbv0 "$rate"
    done
}

case ${1:-} in
up)
    n=${2:-4}
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 200 ] ||
        { echo "netns_ring.sh: N must be 2..200, not '$n'" >&2; exit 2; }
    up "$n" "${3:-1gbit}"
    ;;
down) for ns in $(ours); do ip netns del "$ns"; done ;;
status)
    [ -n "$(ours)" ] || { echo "(no hb_* namespaces)"; exit 0; }
    for ns in $(ours); do
        echo "== $ns"
        ip -n "$ns" -br addr
        ip netns exec "$ns" tc qdisc show | grep -v noqueue || true
    done
    ;;
*)
    sed -n '4,10p' "$0" >&2
    exit 2
    ;;
esac
