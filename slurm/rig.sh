#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# rig.sh -- a real Slurm cluster on one Linux machine, for testing hoop's sbatch scripts.
#
# Usage: rig.sh up [N] | down | status | run CMD [ARGS...]
#
#   up [N]   Start munged, slurmctld and N slurmd "nodes" (default 2), then wait until
#            every node is idle. Does nothing if a rig with N nodes is already healthy;
#            tears a broken or differently sized rig down first.
#   down     Stop every process the rig started and delete its namespaces and bridge.
#            Safe to run when nothing is up, and safe to run twice.
#   status   Print the daemons, namespaces and `sinfo`; exit 0 when the rig is healthy.
#   run      Run CMD with SLURM_CONF pointing at the rig, e.g. `rig.sh run sbatch -N 2 x`.
#            Clients need SLURM_CONF: without it they look the controller up in DNS.
#
# How it works. Each Slurm node is a Linux network namespace with its own address and
# hostname; nodes share the file system, PIDs, CPUs and memory. Layout (defaults):
#
#   root namespace: bridge hsrbr0 10.77.0.1/24, munged (own key and socket), clients
#   namespace hsr-ctl:    10.77.0.2       hostname ctl    slurmctld
#   namespace hsr-nodeI:  10.77.0.(10+I)  hostname nodeI  slurmd -N nodeI (port 6818)
#
# The namespaces have no default route, so they reach only that /24, and nothing else on
# the machine is touched. Daemons are started with `nsenter --net` plus `unshare --uts
# --mount`, not `ip netns exec`: the latter remounts /sys and hides /sys/fs/cgroup, and
# slurmd 22.05 then dies in its cgroup plugin. Instead we mount a fresh sysfs (so /sys
# shows the namespace's own network devices), move the cgroup tree back under it, set
# the hostname and bind a private /etc/hosts that names every node.
#
# All state (config, keys, logs, spool, pid files) lives in $HOOPRIG_DIR.
#
# Environment (not HOOP_*: hoop warns about HOOP_ variables it does not know):
#   HOOPRIG_DIR         state directory [/tmp/hoop-slurm-rig]
#   HOOPRIG_NET         first three octets of the private /24 [10.77.0]
#   HOOPRIG_NAME        prefix of namespaces, bridge and veths [hsr]; two rigs with
#                       different NAME, NET and DIR can run side by side
#   HOOPRIG_NODES       node count when `up` gets no N [2]
#   HOOPRIG_CPUS        CPUs declared per node [nproc]
#   HOOPRIG_UP_TIMEOUT  seconds `up` waits for the nodes to be idle [30]
#
# Needs root, iproute2 (ip netns, bridge, veth), util-linux (nsenter, unshare), munge,
# slurmctld, slurmd and slurm-client. Debian 12 (Slurm 22.05) is what it was tested on.

set -u

RIG=${HOOPRIG_DIR:-/tmp/hoop-slurm-rig}
case "$RIG" in /?*) ;; *) echo "rig.sh: HOOPRIG_DIR must be an absolute path, got '$RIG'" >&2 && exit 2 ;; esac
# munged's socket path must fit in sockaddr_un (108 bytes).
[ ${#RIG} -le 80 ] || { echo "rig.sh: HOOPRIG_DIR is longer than 80 characters" >&2 && exit 2; }
NET=${HOOPRIG_NET:-10.77.0}
NAME=${HOOPRIG_NAME:-hsr}
case "$NAME" in *[!a-z0-9]* | '' | ?????????*) echo "rig.sh: HOOPRIG_NAME must be 1-8 of [a-z0-9]" >&2 && exit 2 ;; esac
NS_PREFIX=$NAME-
BRIDGE=${NAME}br0
if ! [[ $NET =~ ^(10\.[0-9]{1,3}|172\.(1[6-9]|2[0-9]|3[01])|192\.168)\.[0-9]{1,3}$ ]]; then
	echo "rig.sh: HOOPRIG_NET must be a private /24 (10.a.b, 172.16-31.b, 192.168.b), got '$NET'" >&2
	exit 2
fi
CTL_NS=${NS_PREFIX}ctl
CTL_HOST=ctl
CTL_ADDR=$NET.2
CONF=$RIG/etc/slurm.conf
MUNGE_SOCK=$RIG/munge/munge.socket
MUNGE_PID=$RIG/munge/munged.pid

die() {
	echo "rig.sh: $*" >&2
	exit 1
}
say() { echo "rig.sh: $*"; }
elapsed_ms() { echo $((($(date +%s%N) - $1) / 1000000)); }

# node_addr I -- the address of node I.
node_addr() { echo "$NET.$((10 + $1))"; }

# rig_namespaces -- the namespaces this rig created (by our prefix only).
rig_namespaces() {
	ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NS_PREFIX}(ctl|node[0-9]+)$"
}

# rig_pids -- every process in one of the rig's namespaces.
rig_pids() {
	local ns
	for ns in $(rig_namespaces); do
		ip netns pids "$ns" 2>/dev/null
	done
}

# munged_pid -- the pid of OUR munged (checked against its socket path), or nothing.
munged_pid() {
	local pid
	[ -r "$MUNGE_PID" ] || return 0
	pid=$(cat "$MUNGE_PID" 2>/dev/null)
	case "$pid" in '' | *[!0-9]*) return 0 ;; esac
	if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--socket=$MUNGE_SOCK"; then
		echo "$pid"
	fi
}

write_config() {
	local n=$1 cpus=$2 i
	mkdir -p "$RIG/etc" "$RIG/log" "$RIG/run" "$RIG/spool" "$RIG/state" "$RIG/mnt"
	{
		echo "127.0.0.1 localhost"
		echo "$CTL_ADDR $CTL_HOST"
		for i in $(seq 1 "$n"); do echo "$(node_addr "$i") node$i"; done
	} >"$RIG/etc/hosts"
	cat >"$CONF" <<EOF
# slurm.conf for the one-machine hoop rig (written by slurm/rig.sh; do not edit).
ClusterName=hooprig
SlurmctldHost=$CTL_HOST($CTL_ADDR)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCK
StateSaveLocation=$RIG/state
SlurmdSpoolDir=$RIG/spool/%n
SlurmctldPidFile=$RIG/run/slurmctld.pid
SlurmdPidFile=$RIG/run/slurmd-%n.pid
SlurmctldLogFile=$RIG/log/slurmctld.log
SlurmdLogFile=$RIG/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups, no accounting: the nodes share one kernel, and jobs only need to start.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Nodes are declared here, not probed (they all see the same hardware).
SlurmdParameters=config_overrides
ReturnToService=2
# Finished jobs leave quickly; this also makes 'sbatch --wait' poll every 2 s.
MinJobAge=2
KillWait=2
SlurmdTimeout=30
SlurmctldTimeout=30
EOF
	for i in $(seq 1 "$n"); do
		echo "NodeName=node$i NodeHostname=node$i NodeAddr=$(node_addr "$i") CPUs=$cpus State=UNKNOWN"
	done >>"$CONF"
	echo "PartitionName=rig Nodes=node[1-$n] Default=YES MaxTime=INFINITE State=UP" >>"$CONF"
}

start_munged() {
	mkdir -p "$RIG/munge"
	chmod 0755 "$RIG" "$RIG/munge" # munged refuses a socket dir others cannot traverse
	if [ ! -s "$RIG/munge/munge.key" ]; then
		(umask 077 && head -c 1024 /dev/urandom >"$RIG/munge/munge.key") || return 1
	fi
	chmod 0400 "$RIG/munge/munge.key"
	munged --force --socket="$MUNGE_SOCK" --key-file="$RIG/munge/munge.key" \
		--pid-file="$MUNGE_PID" --log-file="$RIG/log/munged.log" \
		--seed-file="$RIG/munge/munged.seed" || return 1
}

make_network() {
	local n=$1 i ns addr
	# Our bridge is gone by now, so anything else on this /24 belongs to someone else.
	if [ -n "$(ip -4 route show "$NET.0/24")" ] || ip -4 -o addr show | grep -qF " $NET."; then
		echo "rig.sh: $NET.0/24 is already in use on this machine; pick another HOOPRIG_NET" >&2
		return 1
	fi
	ip link add "$BRIDGE" type bridge || return 1
	ip addr add "$NET.1/24" dev "$BRIDGE" || return 1
	ip link set "$BRIDGE" up || return 1
	for i in ctl $(seq 1 "$n"); do
		if [ "$i" = ctl ]; then ns=$CTL_NS addr=$CTL_ADDR; else ns=${NS_PREFIX}node$i addr=$(node_addr "$i"); fi
		ip netns add "$ns" || return 1
		ip link add "${NAME}v-$i" type veth peer name eth0 netns "$ns" || return 1
		ip link set "${NAME}v-$i" master "$BRIDGE" up || return 1
		ip -n "$ns" addr add "$addr/24" dev eth0 || return 1
		ip -n "$ns" link set eth0 up || return 1
		ip -n "$ns" link set lo up || return 1
	done
}

# in_ns NS HOST CMD... -- run CMD (it daemonizes) in namespace NS with hostname HOST, a
# private /etc/hosts, a fresh /sys and the cgroup tree moved back under it.
in_ns() {
	local ns=$1 host=$2
	shift 2
	mkdir -p "$RIG/mnt/$ns"
	nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation slave \
		/bin/sh -c 'set -e
		hostname "$1"
		mount --bind "$2" /etc/hosts
		mount --move /sys/fs/cgroup "$3"
		mount -t sysfs sysfs /sys
		mount --move "$3" /sys/fs/cgroup
		shift 3
		exec "$@"' in_ns "$host" "$RIG/etc/hosts" "$RIG/mnt/$ns" "$@"
}

start_daemons() {
	local n=$1 i
	in_ns "$CTL_NS" "$CTL_HOST" slurmctld -c -f "$CONF" || return 1
	for i in $(seq 1 "$n"); do
		in_ns "${NS_PREFIX}node$i" "node$i" slurmd -f "$CONF" -N "node$i" || return 1
	done
}

# wait_idle N SECONDS -- wait until N nodes report idle.
wait_idle() {
	local n=$1 deadline=$(($(date +%s) + $2)) idle
	while [ "$(date +%s)" -lt "$deadline" ]; do
		idle=$(SLURM_CONF=$CONF timeout 5 sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle$')
		[ "$idle" = "$n" ] && return 0
		sleep 0.1
	done
	return 1
}

# healthy N -- true when munged, slurmctld and N slurmd answer and N nodes are idle.
healthy() {
	local n=$1
	[ -n "$(munged_pid)" ] || return 1
	[ -f "$CONF" ] && [ "$(grep -c '^NodeName=' "$CONF")" = "$n" ] || return 1
	[ "$(rig_namespaces | wc -l)" = "$((n + 1))" ] || return 1
	[ "$(SLURM_CONF=$CONF timeout 5 sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle$')" = "$n" ]
}

cmd_up() {
	local n=${1:-${HOOPRIG_NODES:-2}} cpus=${HOOPRIG_CPUS:-$(nproc)} up_s=${HOOPRIG_UP_TIMEOUT:-30} t0
	case "$n" in '' | *[!0-9]* | 0) die "node count must be a positive integer, got '$n'" ;; esac
	case "$cpus" in '' | *[!0-9]* | 0) die "HOOPRIG_CPUS must be a positive integer, got '$cpus'" ;; esac
	case "$up_s" in '' | *[!0-9]* | 0) die "HOOPRIG_UP_TIMEOUT must be positive seconds, got '$up_s'" ;; esac
	[ "$n" -le 200 ] || die "at most 200 nodes (addresses $NET.11-$NET.210)"
	[ "$(id -u)" = 0 ] || die "must run as root"
	t0=$(date +%s%N)
	if healthy "$n"; then
		say "already up with $n nodes"
		return 0
	fi
	cmd_down >/dev/null
	rm -f "$RIG"/log/*.log # each rig starts with fresh logs
	write_config "$n" "$cpus"
	start_munged || { cmd_down; die "munged failed; see $RIG/log/munged.log"; }
	make_network "$n" || { cmd_down; die "could not create the namespaces or bridge"; }
	start_daemons "$n" || { cmd_down; die "a Slurm daemon failed to start; see $RIG/log/"; }
	if ! wait_idle "$n" "$up_s"; then
		SLURM_CONF=$CONF timeout 5 sinfo -N >&2
		cmd_down
		die "nodes did not become idle in $up_s s; see $RIG/log/"
	fi
	say "up: $n nodes in $(elapsed_ms "$t0") ms; export SLURM_CONF=$CONF"
}

# alive PID -- true while PID runs (a zombie waiting for init to reap it does not count).
alive() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[ "${stat%% *}" != Z ]
}

# stop_pids PIDS... -- TERM, wait up to 3 s, then KILL what is left.
stop_pids() {
	local pids="$*" left p
	[ -n "$pids" ] || return 0
	kill -TERM $pids 2>/dev/null
	for _ in $(seq 30); do
		left=
		for p in $pids; do alive "$p" && left="$left $p"; done
		[ -z "$left" ] && return 0
		sleep 0.1
	done
	echo "rig.sh: still running 3 s after SIGTERM, killing:$left" >&2
	kill -KILL $left 2>/dev/null
	return 0
}

cmd_down() {
	local t0 pids ns p
	t0=$(date +%s%N)
	[ "$(id -u)" = 0 ] || die "must run as root"
	# TERM slurmctld, slurmd (found by pid file, used only if the pid is in one of OUR
	# namespaces) and munged; slurmstepd ignores TERM, so whatever is still left in the
	# rig's namespaces after that gets KILL.
	pids=
	for f in "$RIG"/run/slurmctld.pid "$RIG"/run/slurmd-*.pid; do
		[ -r "$f" ] || continue
		p=$(cat "$f" 2>/dev/null)
		case "$p" in '' | *[!0-9]*) continue ;; esac
		rig_pids | grep -qx "$p" && pids="$pids $p"
	done
	# munged goes at the same time: each daemon takes ~2 s to exit on TERM.
	# shellcheck disable=SC2046,SC2086 # pid lists are meant to split
	stop_pids $pids $(munged_pid)
	pids=$(rig_pids | sort -u)
	if [ -n "$pids" ]; then
		kill -KILL $pids 2>/dev/null
		for _ in $(seq 50); do
			[ -z "$(rig_pids)" ] && break
			sleep 0.1
		done
	fi
	for ns in $(rig_namespaces); do ip netns del "$ns" || echo "rig.sh: could not delete $ns" >&2; done
	ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
	# shellcheck disable=SC2046 # normally gone already
	stop_pids $(munged_pid)
	rm -f "$RIG"/run/*.pid "$MUNGE_PID" "$MUNGE_SOCK" "$MUNGE_SOCK.lock"
	rm -rf "${RIG:?}/state" "${RIG:?}/spool"
	# Mount points once; rmdir (not rm -r) never descends into anything mounted there.
	[ -d "$RIG/mnt" ] && rmdir "$RIG"/mnt/* "$RIG/mnt" 2>/dev/null
	say "down in $(elapsed_ms "$t0") ms"
}

cmd_status() {
	local n rc=0 ns
	n=$(grep -c '^NodeName=' "$CONF" 2>/dev/null || echo 0)
	echo "rig dir:    $RIG"
	echo "munged:     $(munged_pid || true)"
	for ns in $(rig_namespaces); do
		echo "namespace $ns: pids $(ip netns pids "$ns" | tr '\n' ' ')"
	done
	if [ "$n" -gt 0 ] && healthy "$n"; then
		SLURM_CONF=$CONF timeout 5 sinfo -N
		echo "status:     up ($n nodes)"
	else
		echo "status:     down"
		rc=1
	fi
	return $rc
}

cmd_run() {
	[ $# -gt 0 ] || die "run needs a command"
	[ -f "$CONF" ] || die "no rig config at $CONF; run 'rig.sh up' first"
	SLURM_CONF=$CONF exec "$@"
}

case "${1:-}" in
up) shift && cmd_up "$@" ;;
down) cmd_down ;;
status) cmd_status ;;
run) shift && cmd_run "$@" ;;
*)
	sed -n '2,12s/^# \{0,1\}//p' "$0" >&2
	exit 2
	;;
esac
