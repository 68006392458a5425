#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/launcher_cli.sh -- bad flags and bad environment: one line naming the culprit and
# what is allowed, exit 2; --help and --help-env exit 0; an unrunnable PROG gives 127.
. "${top_srcdir:-.}/tests/launcher_lib.sh"

expect_bad "--nproc-per-node=0 is out of range [1, 4096]" --nproc-per-node 0 true
expect_bad "--nproc-per-node='abc' is not an integer; allowed: an integer in 1..4096" \
    --nproc-per-node abc true
expect_bad "--nproc-per-node is required" true
expect_bad "--nproc-per-node needs a value" --nproc-per-node
expect_bad "--node-rank 3 is not in [0, 1] (--nnodes 2)" --nnodes 2 --node-rank 3 \
    --nproc-per-node 1 --master-addr 127.0.0.1 true
expect_bad "--nnodes=0 is out of range" --nnodes 0 --nproc-per-node 1 true
expect_bad "--master-port=70000 is out of range [1, 65535]" --master-port 70000 \
    --nproc-per-node 1 true
expect_bad "missing PROG" --nproc-per-node 2
expect_bad "unknown flag '--bogus'" --bogus --nproc-per-node 2 true
# One dash: named as typed (the message named hooprun itself, or the flag before it).
expect_bad "unknown flag '-nproc-per-node' (long flags take two dashes: '--nproc-per-node')" \
    -nproc-per-node 1 true
expect_bad "unknown flag '-x'" --nproc-per-node 1 -x true
expect_bad "PROG is an empty string" --nproc-per-node 1 ''
HOOP_TOKEN=x SLURM_JOB_NODELIST='-bad,x' SLURM_NNODES=2 SLURM_NODEID=0 expect_bad \
    "SLURM_JOB_NODELIST's first host '-bad' is not a host name or address" --nproc-per-node 1 true
# A --log-dir no file can be made in, though access() says yes to root: exit 2 at start (it
# started, then failed to open rank 0's log, exit 1).
expect_bad "--log-dir /proc" --nproc-per-node 1 --log-dir /proc true
# ... and a directory where a rank's log goes (rank 1 could not start: exit 1).
mkdir -p "$TMP/ld/rank_1.log"
expect_bad "$TMP/ld/rank_1.log, rank 1's log, is a directory" --nproc-per-node 2 --log-dir \
    "$TMP/ld" true
# ... a FIFO (hooprun's open blocked, for good: SIGTERM did not end it), a link to nowhere,
# a later attempt's log (exit 1 when that restart came). HOOPRUN under timeout: a hang
# fails the test rather than stall it.
mkdir -p "$TMP/lf" "$TMP/ll" "$TMP/lr/rank_0.restart_1.log"
mkfifo "$TMP/lf/rank_0.log"
ln -s /nonexistent/y "$TMP/ll/rank_1.log"
HOOPRUN_WAS=$HOOPRUN
printf '#!/bin/sh\nexec timeout -s KILL 30 "%s" "$@"\n' "$HOOPRUN_WAS" > "$TMP/hooprun30"
chmod +x "$TMP/hooprun30"
HOOPRUN=$TMP/hooprun30
expect_bad "$TMP/lf/rank_0.log, rank 0's log, is a FIFO" --nproc-per-node 2 --log-dir \
    "$TMP/lf" true
expect_bad "cannot create $TMP/ll/rank_1.log, rank 1's log: No such file" --nproc-per-node 2 \
    --log-dir "$TMP/ll" true
expect_bad "$TMP/lr/rank_0.restart_1.log, rank 0's log, is a directory" --nproc-per-node 1 \
    --max-restarts 1 --log-dir "$TMP/lr" true
HOOPRUN=$HOOPRUN_WAS
"$HOOPRUN" -h > "$TMP/h" 2>&1 || fail "hooprun -h exited $?"
assert_contains "$TMP/h" "Usage: hooprun"
expect_bad "--grace='soon' is not a number of seconds" --grace soon --nproc-per-node 1 true
expect_bad "--master-addr (or MASTER_ADDR) is required with --nnodes 2" --nnodes 2 \
    --nproc-per-node 1 true
HOOP_TOKEN= expect_bad "HOOP_TOKEN must be exported with --nnodes 2" --nnodes 2 \
    --master-addr 127.0.0.1 --nproc-per-node 1 true
HOOP_TOKEN=$(printf 'x%.0s' $(seq 200)) expect_bad "HOOP_TOKEN is longer than 63" \
    --nproc-per-node 1 true
# 64 characters: what the workers refuse, refused by hooprun (it started them, and every
# one exited 2).
HOOP_TOKEN=$(printf 'x%.0s' $(seq 64)) expect_bad "HOOP_TOKEN is longer than 63 characters" \
    --nproc-per-node 1 true
# Node 0 of several whose master's name resolves to loopback here (/etc/hosts' 127.0.1.1
# for the host's own name): warned at once; an address typed as such is not.
HOOP_TOKEN=t "$HOOPRUN" --dry-run --nnodes 2 --node-rank 0 --master-addr localhost \
    --nproc-per-node 1 true > "$TMP/lo" 2>&1 || fail "the dry run failed: $(cat "$TMP/lo")"
assert_contains "$TMP/lo" "hooprun: warning: the master 'localhost' resolves here to "
assert_contains "$TMP/lo" ", a loopback address (/etc/hosts?)"
HOOP_TOKEN=t "$HOOPRUN" --dry-run --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 \
    --nproc-per-node 1 true > "$TMP/lo" 2>&1
grep -q "warning" "$TMP/lo" && fail "127.0.0.1 typed as such was warned about: $(cat "$TMP/lo")"
MASTER_PORT=abc expect_bad "MASTER_PORT='abc' is not an integer" --nproc-per-node 1 true
MASTER_PORT=70000 expect_bad "MASTER_PORT=70000 is out of range" --nproc-per-node 1 true
HOOP_TIMEOUT=abc expect_bad "HOOP_TIMEOUT='abc' is not a number of seconds" \
    --nproc-per-node 1 true
HOOP_TRANSPORT=carrier-pigeon expect_bad "HOOP_TRANSPORT='carrier-pigeon' is not one of" \
    --nproc-per-node 1 true
# One rule for white space around a number, in flags and settings alike: refused.
expect_bad "--grace=' 1' is not a number of seconds" --grace ' 1' --nproc-per-node 1 true
expect_bad "--nproc-per-node='2 ' is not an integer" --nproc-per-node '2 ' true
HOOP_TIMEOUT=' 5' expect_bad "HOOP_TIMEOUT=' 5' is not a number of seconds" \
    --nproc-per-node 1 true
HOOP_TIMEOUT='5 ' expect_bad "HOOP_TIMEOUT='5 ' is not a number of seconds" \
    --nproc-per-node 1 true
# A duration has no sign; a leading point is a fraction (libhoop alone reads HOOP_TIMEOUT:
# the CUDA backend takes its value, so no rule keeps two readers in step).
HOOP_TIMEOUT=+5 expect_bad "HOOP_TIMEOUT='+5' is not a number of seconds (e.g. 30, 0.5)" \
    --nproc-per-node 1 true
HOOP_TIMEOUT=.5 "$HOOPRUN" --nproc-per-node 1 true 2> "$TMP/err" ||
    fail "HOOP_TIMEOUT=.5 was refused: $(cat "$TMP/err")"
# HOOP_CUDA_DEVICE is checked once by hooprun, not by each worker at its first GPU call.
HOOP_CUDA_DEVICE=abc expect_bad "HOOP_CUDA_DEVICE='abc' is not a device index" --nproc-per-node 1 true
HOOP_CUDA_DEVICE=+1 expect_bad "HOOP_CUDA_DEVICE='+1' is not a device index" --nproc-per-node 1 true
HOOP_CUDA_DEVICE='1 ' expect_bad "HOOP_CUDA_DEVICE='1 ' is not an integer" --nproc-per-node 1 true
# The log's timestamp format is checked too: what it takes is said.
HOOP_DEBUG_TIMESTAMP_FORMAT='[%T] %Q' expect_bad \
    "HOOP_DEBUG_TIMESTAMP_FORMAT='[%T] %Q': '%Q' is not a conversion it takes; it takes text" \
    --nproc-per-node 1 true
HOOP_SHM_BYTES='4M ' expect_bad "HOOP_SHM_BYTES='4M ' is not a size in bytes" \
    --nproc-per-node 1 true
# A MASTER_ADDR too long to be a host name is refused, not replaced by 127.0.0.1.
MASTER_ADDR=$(printf 'h%.0s' $(seq 300)) expect_bad \
    "(300 characters) is not a host name or address: it is longer than 253 characters" \
    --nproc-per-node 1 true
# What cannot be a host name or address is refused by its form (no lookup), naming the
# flag or variable and the value; what can is taken as given.
nohost="is not a host name or address"
expect_bad "--master-addr '' $nohost: it is empty" --master-addr '' --nproc-per-node 1 true
expect_bad "--master-addr 'a b' $nohost: ' ' is not allowed in a host name" \
    --master-addr 'a b' --nproc-per-node 1 true
expect_bad "--master-addr 'h;x' $nohost: ';' is not allowed" --master-addr 'h;x' \
    --nproc-per-node 1 true
expect_bad "--master-addr 'x..y' $nohost: it has an empty label" --master-addr x..y \
    --nproc-per-node 1 true
expect_bad "--master-addr '-n' $nohost: a label starts or ends with '-'" --master-addr -n \
    --nproc-per-node 1 true
expect_bad "--master-addr '999.1.1.1' $nohost: it is no IPv4 address" --master-addr 999.1.1.1 \
    --nproc-per-node 1 true
expect_bad "--master-addr '::1::2' $nohost: it has ':' but is no IPv6 address" \
    --master-addr ::1::2 --nproc-per-node 1 true
expect_bad "--master-addr '[::1]' $nohost: write an IPv6 address without brackets" \
    --master-addr '[::1]' --nproc-per-node 1 true
# A link-local address without its zone cannot be dialled (connect: EINVAL): refused at
# once rather than retried until HOOP_TIMEOUT.
expect_bad "--master-addr 'fe80::1' $nohost: a link-local address needs its zone" \
    --master-addr fe80::1 --nproc-per-node 1 true
expect_bad "--rdzv-endpoint's host 'fe80::1' $nohost: a link-local address needs its zone" \
    --rdzv-endpoint '[fe80::1]:29400' --nproc-per-node 1 true
expect_bad "a label has 64 characters, over 63" --nproc-per-node 1 \
    --master-addr "$(printf 'a%.0s' $(seq 64)).example" true
expect_bad "--rdzv-endpoint's host 'a*b' $nohost: '*' is not allowed" \
    --rdzv-endpoint 'a*b:29400' --nproc-per-node 1 true
MASTER_ADDR='node 1' expect_bad "MASTER_ADDR 'node 1' $nohost" --nproc-per-node 1 true
for addr in gpu-node-07.cluster.local. web_1 10.0.0.2 127.1 ::1 fe80::1%eth0; do
    "$HOOPRUN" --dry-run --master-addr "$addr" --nproc-per-node 1 true > "$TMP/o" 2>&1 ||
        fail "--master-addr $addr was refused: $(cat "$TMP/o")"
    assert_contains "$TMP/o" "MASTER_ADDR=$addr MASTER_PORT="
done
# The range is said once.
expect_bad "--rdzv-endpoint's port is empty; expected an integer in [1, 65535]" \
    --rdzv-endpoint host: --nproc-per-node 1 true
grep -q "allowed" "$TMP/err" && fail "the range was said twice: $(cat "$TMP/err")"
expect_bad "--nproc-per-node gpu: hooprun does not count GPUs yet" --nproc-per-node gpu true

# Flags after PROG belong to PROG.
"$HOOPRUN" --no-prefix --nproc-per-node 1 echo --nproc-per-node 9 > "$TMP/a" ||
    fail "flags after PROG were not passed through"
[ "$(cat "$TMP/a")" = "--nproc-per-node 9" ] || fail "PROG got '$(cat "$TMP/a")'"

# One worker is one worker, not "1 workers".
"$HOOPRUN" --dry-run --nproc-per-node 1 true > "$TMP/o" || fail "--dry-run failed"
assert_contains "$TMP/o" "hooprun: dry run: 1 worker on node 0 of 1; command: true"
"$HOOPRUN" --nproc-per-node 1 --max-restarts 1 false 2> "$TMP/e"
assert_contains "$TMP/e" "hooprun: restart 1 of 1: starting the 1 worker again"
assert_contains "$TMP/e" "hooprun: summary of node 0 (1 worker; local time"
grep -q "1 workers" "$TMP/o" "$TMP/e" && fail "'1 workers': $(cat "$TMP/o" "$TMP/e")"
# A switch given a value is refused, named as a switch (not as an unknown flag).
expect_bad "--help takes no value ('--help=x')" --help=x
expect_bad "--help-env takes no value ('--help-env=')" --help-env=
expect_bad "--dry-run takes no value ('--dry-run=yes')" --dry-run=yes --nproc-per-node 1 true
expect_bad "unknown flag '--bogus=1'" --bogus=1 --nproc-per-node 1 true
"$HOOPRUN" --help > "$TMP/help" || fail "--help did not exit 0"
assert_contains "$TMP/help" "Usage: hooprun"
assert_contains "$TMP/help" "HOOP_TOKEN"
"$HOOPRUN" --help-env > "$TMP/env" || fail "--help-env did not exit 0"
assert_contains "$TMP/env" "HOOP_TIMEOUT"
assert_contains "$TMP/env" "HOOP_CHUNK_BYTES"
for v in HOOP_IB_HCA HOOP_IB_GID_INDEX HOOP_IB_ADDR_RANGE HOOP_IB_TIMEOUT HOOP_IB_RETRY_CNT \
    HOOP_IB_TC HOOP_IB_SL HOOP_IB_REG_CACHE; do
    grep -q "^$v " "$TMP/env" || fail "--help-env does not list $v"
done
grep -q "not built yet" "$TMP/env" && fail "--help-env still says 'not built yet'"
# Every description ends as a sentence would, not on a dangling word or path (the test
# hook's ended "...stay alive; tests/faults/").
grep -E '[/;,:(]$' "$TMP/env" && fail "--help-env has a description that ends dangling"
assert_contains "$TMP/env" "used by tests/faults/matrix.sh, the fault-injection matrix"

"$HOOPRUN" --nproc-per-node 1 "$TMP/no-such-program" > "$TMP/o" 2> "$TMP/e"
rc=$?
[ "$rc" = 127 ] || fail "an unrunnable PROG gave $rc, not 127"
assert_contains "$TMP/e" "hooprun: cannot run '$TMP/no-such-program': No such file or directory"
[ "$(wc -l < "$TMP/e")" = 1 ] || fail "an unrunnable PROG took more than one line: $(cat "$TMP/e")"
# A directory, a file that is not executable, a name not on PATH: one line each, 127.
echo "not a program" > "$TMP/plain.txt"
chmod 644 "$TMP/plain.txt"
for prog in "$TMP" "$TMP/plain.txt" no-such-program-anywhere; do
    "$HOOPRUN" --nproc-per-node 2 "$prog" > "$TMP/o" 2> "$TMP/e"
    rc=$?
    [ "$rc" = 127 ] && [ "$(wc -l < "$TMP/e")" = 1 ] && grep -q "cannot run '$prog'" "$TMP/e" ||
        fail "PROG $prog: exit $rc: $(cat "$TMP/e")"
done
# A script whose #! interpreter is missing is not called missing itself: the interpreter
# is named, once (not by each worker), exit 127; one whose interpreter is there runs.
printf '#!/no/such/dir/bash -e\necho hi\n' > "$TMP/orphan.sh"
chmod +x "$TMP/orphan.sh"
"$HOOPRUN" --nproc-per-node 2 "$TMP/orphan.sh" > "$TMP/o" 2> "$TMP/e"
rc=$?
[ "$rc" = 127 ] || fail "a script with a missing interpreter gave $rc, not 127"
assert_contains "$TMP/e" "hooprun: cannot run '$TMP/orphan.sh': its interpreter '/no/such/dir/bash' (from its #! line) does not exist"
[ "$(wc -l < "$TMP/e")" = 1 ] || fail "a missing interpreter took more than one line: $(cat "$TMP/e")"
PATH="$TMP:$PATH" "$HOOPRUN" --nproc-per-node 1 orphan.sh > "$TMP/o" 2> "$TMP/e"
assert_contains "$TMP/e" "hooprun: cannot run 'orphan.sh': its interpreter '/no/such/dir/bash'"
printf '#!%s\necho hi\n' "$TMP" > "$TMP/dir.sh"
chmod +x "$TMP/dir.sh"
"$HOOPRUN" --nproc-per-node 1 "$TMP/dir.sh" > "$TMP/o" 2> "$TMP/e"
rc=$?
[ "$rc" = 127 ] || fail "a script whose #! names a directory gave $rc, not 127"
assert_contains "$TMP/e" "hooprun: cannot run '$TMP/dir.sh': its interpreter '$TMP' (from its #! line) is a directory"
printf '#! /bin/sh\necho "ran $RANK"\n' > "$TMP/fine.sh"
chmod +x "$TMP/fine.sh"
"$HOOPRUN" --nproc-per-node 1 "$TMP/fine.sh" > "$TMP/o" 2> "$TMP/e" || fail "#! /bin/sh: $(cat "$TMP/e")"
assert_contains "$TMP/o" "ran 0"
# hooprun cannot start every worker (out of fds): it stops the started ones and exits 1.
(ulimit -n 64 && exec "$HOOPRUN" --nproc-per-node 64 sleep 30) > "$TMP/o" 2> "$TMP/e"
rc=$?
[ "$rc" = 1 ] || fail "a failed start gave $rc, not 1"
assert_contains "$TMP/e" "stopping the"
grep -q "killed by signal" "$TMP/e" && fail "a failed start blamed a worker"

# --max-restarts on several nodes: the dry run names the nodes' rendezvous (MASTER_PORT + 1,
# tests/launcher_nodes.sh runs it); one node has none.
HOOP_TOKEN=t "$HOOPRUN" --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port 29999 \
    --max-restarts 1 --nproc-per-node 1 --dry-run true > "$TMP/o" 2> "$TMP/e" ||
    fail "dry run with --max-restarts on 2 nodes: $(cat "$TMP/e")"
assert_contains "$TMP/o" "hooprun: dry run: the nodes' hoopruns meet at 127.0.0.1:30000 (MASTER_PORT + 1, served by node 0's) before each attempt"
"$HOOPRUN" --max-restarts 1 --nproc-per-node 1 --dry-run true > "$TMP/o" 2> "$TMP/e" ||
    fail "dry run with --max-restarts on 1 node: $(cat "$TMP/e")"
grep -q "meet at" "$TMP/o" && fail "--max-restarts on one node has a nodes' rendezvous: $(cat "$TMP/o")"
echo "PASS"
