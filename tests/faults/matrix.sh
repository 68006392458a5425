#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/faults/matrix.sh -- issue 14's fault-injection matrix over shm, loopback TCP and
# TCP between network namespaces (the ib cells run in the Soft-RoCE guest:
# tests/rdma/suite.sh, step faults). Each cell is described in tests/faults/cells.sh:
# 4 ranks, one killed (SIGKILL) during the rendezvous, the connection set-up, a
# reduce-scatter phase, an all-gather phase, a DDP backward pass (hoop-train under
# hooprun) or rank 0's checkpoint save; stopped (SIGSTOP) inside a collective; failing
# its start-up alive once its links are up (FAIL: the verdict must fail the others); or,
# across namespaces, its link taken down mid-transfer. Every survivor must fail on its own within
# HOOP_TIMEOUT (FAULTS_TIMEOUT, default 5 s) + 1 s naming the victim; hooprun must blame
# it; nothing may be left behind. Prints the matrix; exit 0 when every cell passed.
#
# Needs root for the network namespaces (all addresses in 10.91.0.0/24, only inside the
# namespaces made here, named hf<pid>*, removed on exit whatever happens). The shm and
# tcp cells run in a namespace of their own too (a private loopback: their sockets are
# easy to account for); without namespaces they run in this one and the netns cells
# skip (FAULTS_NETNS=0 does that as root too). FAULTS_CELLS (a regular expression)
# picks cells by name, e.g. 'kill@connect'; FAULTS_TIMEOUT sets HOOP_TIMEOUT.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/cells.sh"
build=${top_builddir:-.}
# Bad settings are refused (exit 2) before anything runs: FAULTS_TIMEOUT is whole
# seconds (the cells' waits are shell arithmetic: 0.5 used to abort the run half-way
# with "0 failed" and exit 0), and FAULTS_CELLS must be a regular expression that
# matches a cell's name (a typo used to run nothing and pass). The names: every
# "faults_want NAME" below.
usage() {
    echo "matrix.sh: $*" >&2
    exit 2
}
T_S=${FAULTS_TIMEOUT:-5}
case $T_S in '' | *[!0-9]*) usage "FAULTS_TIMEOUT='$T_S' is not a whole number of seconds (HOOP_TIMEOUT for the cells, default 5)" ;; esac
[ ${#T_S} -le 6 ] && [ $((10#$T_S)) -ge 1 ] ||
    usage "FAULTS_TIMEOUT=$T_S is out of range (1 to 999999 seconds)"
T_S=$((10#$T_S))
all_cells=$(sed -n 's/^ *faults_want \([a-z0-9@-]*\) && .*/\1/p' "$here/matrix.sh" | paste -s -d ' ')
if [ -n "${FAULTS_CELLS:-}" ]; then
    [[ "" =~ $FAULTS_CELLS ]]
    [ $? != 2 ] || usage "FAULTS_CELLS='$FAULTS_CELLS' is not a regular expression (bash's =~)"
    hit=0
    for c in $all_cells; do [[ $c =~ $FAULTS_CELLS ]] && hit=1; done
    [ $hit = 1 ] || usage "FAULTS_CELLS='$FAULTS_CELLS' matches no cell (cells: $all_cells)"
fi
FW=$build/tests/faults/fault_worker
HOOPRUN=$build/tools/hooprun
TRAIN=$build/tools/hoop-train
for p in "$FW" "$HOOPRUN" "$TRAIN"; do
    [ -x "$p" ] || { echo "FAIL: $p is not built"; exit 1; }
done
# Without its scratch folder the cells would write at the root (cell_dir=/shm.CELL).
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hoop-faults.XXXXXX") && [ -d "$WORK" ] ||
    { echo "FAIL: cannot make a scratch folder in ${TMPDIR:-/tmp} (TMPDIR)"; exit 1; }
ns=hf$$
netns=0
unset HOOP_TOKEN MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE \
    HOOP_TEST_FAULT HOOP_TRANSPORT HOOP_ALGO HOOP_TIMEOUT SLURM_JOB_NODELIST SLURM_NNODES \
    SLURM_NODEID SLURM_STEP_ID SLURM_PROCID

cleanup() {
    local n p
    # A run stopped in a cell (SIGTERM, ^C) ends that cell's processes: without
    # namespaces nothing else would, and a SIGSTOPped victim would stay forever.
    [ -z "${cell_sids:-}" ] || faults_reap
    for n in $(ip netns list 2> /dev/null | awk '{print $1}' | grep -E "^$ns(lo|hub|r[0-9])\$"); do
        for p in $(ip netns pids "$n" 2> /dev/null); do kill -KILL "$p" 2> /dev/null; done
        ip netns del "$n" 2> /dev/null
    done
    [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A small Fashion-MNIST cut for the training cells (none: they skip).
DATA=$WORK/data
faults_data "$DATA" 2048 256 || DATA=""

# ---------------------------------------------------------------- topologies

no_tw() { grep -v -e TIME-WAIT -e '^$' || true; }

if [ "${FAULTS_NETNS:-1}" != 0 ] && [ "$(id -u)" = 0 ] && command -v ip > /dev/null &&
    ip netns add "${ns}lo" 2> /dev/null; then
    netns=1
    ip -n "${ns}lo" link set lo up
fi

next_port=29500
lo_prefix() { [ $netns = 1 ] && echo "ip netns exec ${ns}lo"; }
faults_hooprun_prefix() { lo_prefix; }
lo_master() { echo 127.0.0.1; }
lo_port() {
    if [ $netns = 1 ]; then
        next_port=$((next_port + 1))
        echo $next_port
    else
        echo $((20000 + RANDOM % 12000))
    fi
}
lo_sockets() {
    if [ $netns = 1 ]; then
        { ip netns exec "${ns}lo" ss -Htan; ip netns exec "${ns}lo" ss -Hxa; } | no_tw
    else
        ss -Htan "( sport = :$port or dport = :$port )" | no_tw
    fi
}

# netns: rank i in ${ns}r<i> (10.91.0.<i+1>) behind a veth pair to a bridge in ${ns}hub.
netns_up() {
    local i
    ip netns add "${ns}hub" && ip -n "${ns}hub" link add hfbr0 type bridge &&
        ip -n "${ns}hub" link set hfbr0 up || return 1
    for i in 0 1 2 3; do
        ip netns add "${ns}r$i" && ip -n "${ns}r$i" link set lo up &&
            ip link add hfv0 netns "${ns}r$i" type veth peer name "hfp$i" netns "${ns}hub" &&
            ip -n "${ns}r$i" addr add "10.91.0.$((i + 1))/24" dev hfv0 &&
            ip -n "${ns}r$i" link set hfv0 up &&
            ip -n "${ns}hub" link set "hfp$i" master hfbr0 &&
            ip -n "${ns}hub" link set "hfp$i" up || return 1
    done
}
netns_prefix() { echo "ip netns exec ${ns}r$1"; }
netns_master() { echo 10.91.0.1; }
netns_port() {
    next_port=$((next_port + 1))
    echo $next_port
}
netns_sockets() {
    local i
    for i in 0 1 2 3; do
        { ip netns exec "${ns}r$i" ss -Htan; ip netns exec "${ns}r$i" ss -Hxa; } | no_tw
    done
}
# The cut: rank R's veth goes down; a rate limit on it first makes the call long enough
# to be cut in the middle (100 Mbit/s: a 16 MiB ring all-reduce moves 24 MiB per rank).
netns_slow() { ip netns exec "${ns}r$1" tc qdisc add dev hfv0 root tbf rate 100mbit burst 256kb latency 50ms; }
netns_cut() { ip -n "${ns}r$1" link set hfv0 down; }
netns_mend() {
    ip -n "${ns}r$1" link set hfv0 up
    ip netns exec "${ns}r$1" tc qdisc del dev hfv0 root 2> /dev/null
}

# ---------------------------------------------------------------- the cells

run_cells() {
    faults_want kill@rendezvous && faults_coll kill@rendezvous 2 2:rendezvous:0:KILL 4096 2
    faults_want kill@rendezvous-r0 && faults_coll kill@rendezvous-r0 0 0:rendezvous:0:KILL 4096 2
    faults_want kill@connect && faults_coll kill@connect 2 2:connect:0:KILL 4096 2
    faults_want fail@verdict && faults_coll fail@verdict 2 2:verdict:0:FAIL 4096 2
    faults_want kill@reduce-scatter && faults_coll kill@reduce-scatter 2 2:reduce_scatter:1:KILL 1000000 3
    faults_want kill@all-gather && faults_coll kill@all-gather 2 2:all_gather:1:KILL 1000000 3
    faults_want stop@collective && faults_coll stop@collective 2 2:reduce_scatter:1:STOP 1000000 3 stop
    faults_want kill@ddp-backward && faults_train kill@ddp-backward 2 2:backward:3:KILL
    faults_want kill@checkpoint && faults_train kill@checkpoint 0 0:checkpoint:1:KILL
    # A stopped worker under one hooprun: it must be named first (found stopped when the
    # first survivor failed). With one hooprun per rank (netns) the stopped rank's own
    # hooprun hears of no failure: on a real cluster the scheduler ends that job step.
    if [ "${HOOPRUN_PER_RANK:-0}" != 1 ]; then
        faults_want stop@ddp-backward && faults_train stop@ddp-backward 2 2:backward:3:STOP
    fi
    return 0
}

t0=$(date +%s)
echo "fault matrix: 4 ranks, HOOP_TIMEOUT=$T_S s${FAULTS_CELLS:+, only the cells matching FAULTS_CELLS='$FAULTS_CELLS'}; time to error from the fault, each survivor"
faults_prefix() { lo_prefix; }
faults_master() { lo_master; }
faults_port() { lo_port; }
faults_sockets_left() { lo_sockets; }
for LABEL in shm tcp; do
    TP=$LABEL
    run_cells
done

LABEL=netns
if [ $netns = 0 ]; then
    echo "netns  (all cells)              SKIP cannot make network namespaces (needs root and iproute2)"
elif ! netns_up; then
    echo "netns  (all cells)              SKIP cannot set up the namespaces' links (veth, bridge)"
else
    TP=tcp
    HOOPRUN_PER_RANK=1
    faults_prefix() { netns_prefix "$1"; }
    faults_master() { netns_master; }
    faults_port() { netns_port; }
    faults_sockets_left() { netns_sockets; }
    faults_link_slow() { netns_slow "$1"; }
    faults_link_cut() { netns_cut "$1"; }
    faults_link_mend() { netns_mend "$1"; }
    run_cells
    faults_want cut@link && faults_coll cut@link 2 "" 4000000 2 cut
fi
echo "fault matrix: $FAULTS_PASS passed, $FAULTS_FAIL failed in $(($(date +%s) - t0)) s${FAULTS_FAILED:+; failed:$FAULTS_FAILED}"
[ "$FAULTS_FAIL" = 0 ]
