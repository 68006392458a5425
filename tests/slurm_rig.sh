#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/slurm_rig.sh -- slurm/rig.sh brings up a real 2-node Slurm cluster on this
# machine; a 2-node batch job sees the right SLURM_NODEID, SLURM_JOB_NODELIST and
# `scontrol show hostnames` on each node; and, when hooprun is built, slurm/hoop.sbatch
# starts 2 nodes x 2 workers with ranks 0..3, WORLD_SIZE 4 and MASTER_ADDR node1, and a
# job whose rank 3 fails ends at once with a non-zero status; and `srun -N2
# --ntasks-per-node=2 tools/hoop-train` trains without hooprun (srun-native start).
#
# Skips (77) unless run as root with munged, slurmctld, slurmd and the Slurm clients
# installed and network namespaces usable. The rig uses its own names (hsrt-*), its own
# /24 (10.77.1.0/24) and its own state directory, so it does not disturb a rig started
# by hand, and it is always taken down on exit. Runs take about 15-20 s.

top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
srcdir=$(cd "$top_srcdir" && pwd)
builddir=$(cd "$top_builddir" && pwd)
RIG_SH="$srcdir/slurm/rig.sh"

skip() {
	echo "SKIP: $*"
	exit 77
}

# Part 0, without Slurm: hoop.sbatch with a stand-in srun (prints its command) and an
# scontrol that cannot reach a cluster. It adds the counts of several GPU types
# ("a100:2,v100:1": 3; it took the last, 1), refuses a SLURM_JOB_ID that is no number
# (bash's "unbound variable" before), and a failing scontrol, asked for the log only, no
# longer ends the script silently before srun.
fake=$(mktemp -d)
printf '#!/bin/sh\necho "srun $*"\n' >"$fake/srun"
printf '#!/bin/sh\necho "fatal: no configuration" >&2\nexit 1\n' >"$fake/scontrol"
chmod +x "$fake/srun" "$fake/scontrol"
out=$(SLURM_GPUS_PER_NODE='gpu:a100:2,gpu:v100:1' SLURM_JOB_ID=7 PATH="$fake:$PATH" \
	bash "$srcdir/slurm/hoop.sbatch" ./prog 2>&1)
case $out in
*"srun --ntasks-per-node=1 --kill-on-bad-exit=1 hooprun --prefix --nproc-per-node 3 --master-port 20014 ./prog"*) ;;
*)
	rm -rf "$fake"
	echo "FAIL: hoop.sbatch with two GPU types and no cluster: $out"
	exit 1
	;;
esac
out=$(SLURM_JOB_ID=abc PATH="$fake:$PATH" bash "$srcdir/slurm/hoop.sbatch" ./prog 2>&1)
rc=$?
rm -rf "$fake"
case $rc:$out in
2:*"SLURM_JOB_ID must be a job number, got 'abc'"*) echo "ok: hoop.sbatch without a cluster" ;;
*)
	echo "FAIL: hoop.sbatch SLURM_JOB_ID=abc: exit $rc: $out"
	exit 1
	;;
esac

[ "$(id -u)" = 0 ] || skip "needs root (network namespaces and Slurm daemons)"
for c in bash munged slurmctld slurmd scontrol sbatch sinfo srun nsenter unshare ip flock timeout; do
	command -v "$c" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin command -v "$c" >/dev/null 2>&1 ||
		skip "$c is not installed (Debian: munge slurmctld slurmd slurm-client)"
done
PATH=$PATH:/usr/sbin:/sbin
# What the rig needs of the kernel: namespaces, bridge + veth, a fresh sysfs mount.
probe=hsrt-probe$$
ip netns add "$probe" 2>/dev/null || skip "cannot create network namespaces here"
why=
ip -n "$probe" link add hsrtpb type bridge 2>/dev/null || why="no bridge links"
ip -n "$probe" link add hsrtpa type veth peer name hsrtpv 2>/dev/null || why="no veth links"
nsenter --net="/run/netns/$probe" unshare --mount --propagation slave \
	mount -t sysfs sysfs /sys 2>/dev/null || why="cannot mount sysfs in a namespace"
ip netns del "$probe"
[ -z "$why" ] || skip "$why"

HOOPRIG_NAME=hsrt
HOOPRIG_NET=10.77.1
HOOPRIG_DIR=/tmp/hoop-slurm-rig-test
export HOOPRIG_NAME HOOPRIG_NET HOOPRIG_DIR
export SLURM_CONF="$HOOPRIG_DIR/etc/slurm.conf"

# One test rig at a time on this machine (two build trees may run make check at once).
mkdir -p /run/lock
exec 9>/run/lock/hoop-slurm-rig-test.lock
flock -w 15 9 || skip "another slurm_rig test held the rig lock for 15 s"

# Everything below shares one 240 s budget (a loaded machine needs 40 s), so a stuck step
# cannot hold make check.
deadline=$(($(date +%s) + 240))
left() {
	l=$((deadline - $(date +%s)))
	[ $l -gt 1 ] && echo $l || echo 1
}

fail=0
ok() { echo "ok: $*"; }
bad() {
	echo "FAIL: $*"
	fail=1
}

work=$(mktemp -d /tmp/hoop-slurm-test.XXXXXX)
cleanup() {
	rc=$?
	if [ $fail -ne 0 ] || [ $rc -ne 0 ]; then
		for f in "$HOOPRIG_DIR"/log/*; do
			[ -f "$f" ] && echo "--- $f (last lines)" && tail -n 15 "$f"
		done
	fi
	bash "$RIG_SH" down
	nleft=$(ip netns list | grep -c '^hsrt-')
	[ "$nleft" = 0 ] || echo "FAIL: $nleft rig namespaces left behind"
	rm -rf "$work" "$HOOPRIG_DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

t0=$(date +%s%N)
HOOPRIG_UP_TIMEOUT=60 bash "$RIG_SH" up 2 || {
	echo "FAIL: rig.sh up"
	exit 1
}
t1=$(date +%s%N)

# Part 1: what a 2-node batch job and its tasks see.
cat >"$work/job.sh" <<'EOF'
#!/bin/sh
#SBATCH --ntasks-per-node=1
echo "batch host=$(hostname) hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | tr '\n' ,)"
srun sh -c 'echo "task nodeid=$SLURM_NODEID nnodes=$SLURM_NNODES host=$(hostname) list=$SLURM_JOB_NODELIST hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | tr "\n" ,) node1=$(getent hosts node1 | cut -d" " -f1)"'
EOF
(cd "$work" && timeout "$(left)" sbatch -N 2 --wait -o "$work/job.out" "$work/job.sh") ||
	bad "sbatch -N 2 --wait returned $?"
t2=$(date +%s%N)
echo "--- job output"
cat "$work/job.out"
want() { # FILE LINE: LINE must appear exactly once, as a whole line
	n=$(grep -cxF -- "$2" "$1")
	if [ "$n" = 1 ]; then ok "$2"; else bad "expected once, seen $n times: $2"; fi
}
want "$work/job.out" "batch host=node1 hosts=node1,node2,"
# node1= is what MASTER_ADDR=node1 resolves to on each node (the rig's private hosts).
want "$work/job.out" "task nodeid=0 nnodes=2 host=node1 list=node[1-2] hosts=node1,node2, node1=10.77.1.11"
want "$work/job.out" "task nodeid=1 nnodes=2 host=node2 list=node[1-2] hosts=node1,node2, node1=10.77.1.11"
[ "$(grep -c '^task ' "$work/job.out")" = 2 ] || bad "expected exactly 2 task lines"

# Part 2: hoop.sbatch -> srun -> hooprun -> 2 workers per node.
hooprun=${TEST_HOOPRUN:-$builddir/tools/hooprun}
if [ -x "$hooprun" ]; then
	(cd "$work" && GPUS_PER_NODE=2 HOOPRUN=$hooprun timeout "$(left)" sbatch -N 2 --wait \
		-o "$work/hoop.out" "$srcdir/slurm/hoop.sbatch" sh -c \
		'echo "rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE master=$MASTER_ADDR host=$(hostname) port=$MASTER_PORT tok=$(printf %s "$HOOP_TOKEN" | cksum | cut -d" " -f1)"') ||
		bad "sbatch hoop.sbatch returned $?"
	echo "--- hoop.sbatch output"
	cat "$work/hoop.out"
	# hooprun may prefix each line with its rank; compare from "rank=" on.
	sed -n 's/.*\(rank=[0-9]* local=.*\)/\1/p' "$work/hoop.out" >"$work/ranks"
	for r in 0 1 2 3; do
		pat="rank=$r local=$((r % 2)) world=4 master=node1 host=node$((r / 2 + 1))"
		n=$(grep -c "^$pat port=" "$work/ranks")
		if [ "$n" = 1 ]; then ok "$pat"; else bad "expected once, seen $n times: $pat"; fi
	done
	[ "$(wc -l <"$work/ranks")" = 4 ] || bad "expected exactly 4 worker lines"
	[ "$(sed 's/.* port=//' "$work/ranks" | sort -u | wc -l)" = 1 ] ||
		bad "workers disagree on MASTER_PORT or HOOP_TOKEN"
	grep -q "tok=$(printf '' | cksum | cut -d' ' -f1)\$" "$work/ranks" && bad "HOOP_TOKEN is empty"

	# Part 3: rank 3 (on node2) fails; the job must end at once, non-zero, instead of
	# waiting for the other ranks' 30 s sleep.
	f0=$(date +%s)
	(cd "$work" && GPUS_PER_NODE=2 HOOPRUN=$hooprun timeout "$(left)" sbatch -N 2 --wait \
		-o "$work/fail.out" "$srcdir/slurm/hoop.sbatch" sh -c \
		'if [ "$RANK" = 3 ]; then echo "rank 3 fails"; exit 3; fi; sleep 30')
	frc=$? fs=$(($(date +%s) - f0))
	echo "--- hoop.sbatch with a failing rank (sbatch exit $frc after $fs s)"
	cat "$work/fail.out"
	[ $frc -ne 0 ] && [ $frc -ne 124 ] && ok "failing job exits non-zero ($frc)" ||
		bad "failing job: sbatch exit $frc"
	[ $fs -lt 20 ] && ok "failing job ended in $fs s" || bad "failing job took $fs s"
	grep -q "rank 3 fails" "$work/fail.out" || bad "the failing rank's output is missing"
else
	echo "hoop.sbatch part skipped: $hooprun is not built"
fi

# Part 4: srun-native start, no hooprun: `srun -N2 --ntasks-per-node=2 hoop-train` trains
# with 4 workers; each task finds its rank, world and master in Slurm's variables (the
# ENV log lines show what each derived, with its host).
train=$builddir/tools/hoop-train
data=/usr/share/datasets/fashion-mnist
if [ -x "$train" ] && [ -e "$data/train-images-idx3-ubyte.gz" ]; then
	(cd "$work" && env -u HOOP_TOKEN -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE \
		HOOP_DEBUG=INFO HOOP_DEBUG_SUBSYS=ENV HOOP_TIMEOUT=30 \
		timeout "$(left)" srun -N2 --ntasks-per-node=2 "$train" --data "$data" \
		--train-limit 1024 --epochs 1 --progress plain >"$work/srun.out" 2>"$work/srun.err")
	src=$?
	echo "--- srun -N2 --ntasks-per-node=2 hoop-train (exit $src)"
	cat "$work/srun.out" "$work/srun.err"
	[ $src -eq 0 ] && ok "srun-native hoop-train exits 0" || bad "srun-native hoop-train: exit $src"
	grep -q '^hoop-train: mlp, [0-9]* parameters, 1024 train / 10000 test samples, 4 worker(s) x batch 128' \
		"$work/srun.out" && ok "rank 0 trains with 4 workers" || bad "no 4-worker banner from rank 0"
	n=$(grep -c '^epoch 1/1 loss [0-9.]* test_loss [0-9.]* test_acc [0-9.]*% ' "$work/srun.out")
	[ "$n" = 1 ] && ok "one epoch line, from rank 0 alone" || bad "$n epoch lines"
	# The same 4-worker run under hooprun on this machine must learn the same numbers.
	if [ -x "$hooprun" ]; then
		ref=$(env -u HOOP_TOKEN -u MASTER_ADDR -u MASTER_PORT -u SLURM_STEP_ID -u SLURM_PROCID \
			timeout "$(left)" "$hooprun" --no-prefix --nproc-per-node 4 "$train" --data "$data" \
			--train-limit 1024 --epochs 1 --progress plain 2>/dev/null | grep '^epoch 1/1 ' |
			sed 's/ [0-9]* samples.*//')
		got=$(grep '^epoch 1/1 ' "$work/srun.out" | sed 's/ [0-9]* samples.*//')
		[ -n "$ref" ] && [ "$got" = "$ref" ] && ok "same loss and accuracy as hooprun: $got" ||
			bad "srun-native '$got' differs from hooprun's '$ref'"
	fi
	for r in 0 1 2 3; do
		pat="^node$((r / 2 + 1)):[0-9]*:[0-9]* \\[$r\\] hoop INFO ENV: srun step: rank $r of 4 (local $((r % 2)) of 2), master node1:1[0-9]* (SLURM_STEP_NODELIST), token derived"
		n=$(grep -c "$pat" "$work/srun.err")
		[ "$n" -ge 1 ] && ok "rank $r on node$((r / 2 + 1)) found its place in Slurm's variables" ||
			bad "rank $r: no srun-step line matching: $pat"
	done
else
	echo "srun-native part skipped: $train is not built or $data is missing"
fi
t3=$(date +%s%N)

bash "$RIG_SH" down
t4=$(date +%s%N)
ms() { echo $((($2 - $1) / 1000000)); }
echo "times: up $(ms "$t0" "$t1") ms, node job $(ms "$t1" "$t2") ms," \
	"hoop.sbatch and srun jobs $(ms "$t2" "$t3") ms, down $(ms "$t3" "$t4") ms"
[ "$(ip netns list | grep -c '^hsrt-')" = 0 ] || bad "namespaces left after down"
# The daemons name the rig directory on their command lines (looked at, never killed).
if pgrep -af "$HOOPRIG_DIR/"; then bad "rig processes still running after down"; fi
exit $fail
