#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/hoop_bench.sh -- hoop-bench under hooprun with nccl-tests' flags: every collective
# on 2 and 3 ranks with the exact-reference check (0 wrong, exit 0), only rank 0 prints,
# the arithmetic of the columns (count from size, algbw = size / time, busbw = algbw x
# nccl-tests' factor) in the text and, to 6 decimals, in the -J JSON; -d / -o (all
# included), -z 0/1/2, -m, -N, -i, -c 0, -a, --algo, --csv, -J's no-overwrite rule, shared
# buffers (-R 1: the direct all-reduce), device buffers (--device cuda, on the host
# execution layer's CUDA backend; with -R 1 the device direct all-reduce) and CUDA-graph
# launches of them (-G), bad flags (one line naming the flag, exit 2), ranks given
# different sweeps (exit 2 at start, naming the flag), and an unknown HOOP_* variable
# warned of once under hooprun.
# tests/hoop_bench_nccl.sh is the nccl-tests parser's test. Works whether or not hooprun
# prefixes worker lines with "[rank N] " (strip removes it).
. "${top_srcdir:-.}/tests/launcher_lib.sh"
BENCH=${top_builddir:-.}/bench/hoop-bench
[ -x "$BENCH" ] || fail "$BENCH is not built"
command -v python3 > /dev/null || { echo "SKIP: no python3 (the JSON checks need it)"; exit 77; }

strip() { sed 's/^\[rank [0-9]*\] //' "$1"; }

# check_rows FILE COLL N ELT: every data row obeys nccl-tests' arithmetic (to the printed
# precision: 2 decimals for time, algbw and busbw).
check_rows() {
    awk -v coll="$2" -v n="$3" -v elt="$4" '
    function abs(x) { return x < 0 ? -x : x }
    /^#/ || NF == 0 { next }
    {
        rows++
        size = $1; count = $2
        f = coll == "allreduce" ? 2 * (n - 1) / n : \
            (coll == "allgather" || coll == "reducescatter") ? (n - 1) / n : 1
        want = (coll == "allgather" || coll == "reducescatter") ? count * n * elt : count * elt
        if (size != want) { print "size " size " != " want " for count " count; bad = 1 }
        for (p = 0; p < 2; p++) {
            t = $(6 + 4 * p); a = $(7 + 4 * p); b = $(8 + 4 * p); w = $(9 + 4 * p)
            if (w != "0") { print "size " size ": #wrong " w; bad = 1 }
            if (t <= 0) { print "size " size ": time " t; bad = 1 }
            if (abs(a - size / (t * 1e3)) > 0.0051 + a * (0.0051 / t + 1e-4)) {
                print "size " size ": algbw " a " != size/time " size / (t * 1e3); bad = 1 }
            if (abs(b - a * f) > 0.0051 * (1 + f)) {
                print "size " size ": busbw " b " != algbw " a " x " f; bad = 1 }
        }
    }
    END { if (rows < 3) { print "only " rows " rows"; bad = 1 }; exit bad }' "$1"
}

# once FILE TEXT: TEXT is on exactly one line (a rank other than 0 printing doubles it).
once() {
    [ "$(grep -cF -- "$2" "$1")" = 1 ] || { cat "$1"; fail "'$2' not exactly once in $1"; }
}

t0=$(now_ms)
for n in 2 3; do
    for coll in allreduce broadcast reduce allgather reducescatter; do
        "$HOOPRUN" --nproc-per-node $n "$BENCH" $coll -b 8 -e 256K -f 8 -n 3 -w 1 -c 1 \
            -r $((n - 1)) -J "$TMP/$coll.$n.json" > "$TMP/out" 2> "$TMP/err"
        rc=$?
        [ "$rc" = 0 ] || { cat "$TMP/out" "$TMP/err"; fail "$coll on $n ranks exited $rc"; }
        strip "$TMP/out" > "$TMP/rows"
        once "$TMP/rows" "# Collective test starting: "
        once "$TMP/rows" "# hoop: world_size $n "
        assert_contains "$TMP/rows" "HOOP_CHUNK_BYTES="
        assert_contains "$TMP/rows" "# Out of bounds values : 0 OK"
        assert_contains "$TMP/rows" "# Avg bus bandwidth    : "
        [ "$(grep -c '^#  Rank ' "$TMP/rows")" = $n ] || { cat "$TMP/rows"; fail "rank table"; }
        check_rows "$TMP/rows" $coll $n 4 || { cat "$TMP/rows"; fail "$coll on $n ranks: columns"; }
    done
    echo "$n ranks: 5 collectives checked ($(($(now_ms) - t0)) ms)"
done
# The same runs' JSON, to 6 decimals: size from count, algbw = size / time, busbw factor.
python3 - "$TMP" <<'EOF' || fail "JSON arithmetic"
import glob, json, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.[23].json"))):
    coll, n = os.path.basename(path).split(".")[:2]
    n = int(n)
    d = json.load(open(path))
    assert d["version"] == 1 and d["hoop"]["world_size"] == n, path
    assert len(d["config"]["devices"]) == n and d["out_of_bounds"]["count"] == 0, path
    f = {"allreduce": 2 * (n - 1) / n, "allgather": (n - 1) / n,
         "reducescatter": (n - 1) / n}.get(coll, 1.0)
    blocks = n if coll in ("allgather", "reducescatter") else 1
    sizes = [r["size"] for r in d["results"]]
    assert sizes == [s - s % (4 * blocks) for s in (8, 64, 512, 4096, 32768, 262144)], sizes
    for r in d["results"]:
        assert r["size"] == r["count"] * 4 * blocks, (path, r)
        assert int(r["root"]) == (n - 1 if coll in ("broadcast", "reduce") else -1), r
        for p in ("out_of_place", "in_place"):
            x = r[p]
            assert x["nwrong"] == 0 and x["time"] > 0, (path, r)
            assert abs(x["alg_bw"] - r["size"] / (x["time"] * 1e3)) < 2e-6, (path, r)
            assert abs(x["bus_bw"] - x["alg_bw"] * f) < 2e-6, (path, r)
EOF

# An unknown HOOP_* variable (a typo) is warned of once, by hooprun, not once more by
# every worker (hooprun tells them so, HOOP_ENV_WARNED); one rank alone warns itself, and
# a HOOP_ENV_WARNED of the user's is cleared by hooprun.
HOOP_TIMOUT=9 "$HOOPRUN" --nproc-per-node 3 "$BENCH" allreduce -b 8 -e 8 -n 1 -w 0 \
    > "$TMP/typo" 2>&1 || { cat "$TMP/typo"; fail "HOOP_TIMOUT set: exit $?"; }
once "$TMP/typo" "HOOP_TIMOUT is not a hoop setting (did you mean HOOP_TIMEOUT?"
HOOP_TIMOUT=9 "$BENCH" allreduce -b 8 -e 8 -n 1 -w 0 > "$TMP/typo" 2>&1 ||
    { cat "$TMP/typo"; fail "one rank, HOOP_TIMOUT set: exit $?"; }
once "$TMP/typo" "HOOP_TIMOUT is not a hoop setting (did you mean HOOP_TIMEOUT?"
HOOP_ENV_WARNED=1 HOOP_TIMOUT=9 "$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce -b 8 -e 8 -n 1 \
    -w 0 > "$TMP/typo" 2>&1 || { cat "$TMP/typo"; fail "HOOP_ENV_WARNED=1: exit $?"; }
once "$TMP/typo" "HOOP_TIMOUT is not a hoop setting (did you mean HOOP_TIMEOUT?"

# Other types, ops and algorithms, with JSON and CSV.
"$HOOPRUN" --nproc-per-node 3 "$BENCH" allreduce -b 2 -e 64K -f 16 -n 2 -w 1 -d bfloat16 \
    -o prod --algo rhd --json "$TMP/r.json" --csv "$TMP/r.csv" > "$TMP/out" 2>&1 ||
    { cat "$TMP/out"; fail "bf16 prod rhd"; }
strip "$TMP/out" > "$TMP/rows"
assert_contains "$TMP/rows" "algorithm rhd"
# HOOP_ALGO in capitals is the algorithm the library runs (it reads any case): the header
# names it as the library does (it printed "DIRECT" and the rows did not mark direct).
HOOP_ALGO=DIRECT "$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce -b 64K -e 64K -n 2 -w 1 -R 1 \
    > "$TMP/out" 2>&1 || { cat "$TMP/out"; fail "HOOP_ALGO=DIRECT -R 1"; }
assert_contains "$TMP/out" "algorithm direct "
check_rows "$TMP/rows" allreduce 3 2 || fail "bf16 columns"
python3 - "$TMP/r.json" "$TMP/r.csv" <<'EOF' || fail "JSON / CSV content"
import csv, json, sys
d = json.load(open(sys.argv[1]))
assert d["hoop"]["algorithm"] == "rhd" and d["out_of_bounds"] == {"count": 0, "okay": "true"}, d
rows = d["results"]
assert [r["size"] for r in rows] == [2, 32, 512, 8192] and rows[1]["type"] == "bfloat16", rows
assert all(r["redop"] == "prod" for r in rows), rows
c = list(csv.DictReader(open(sys.argv[2])))
assert [r["size"] for r in c] == ["2", "32", "512", "8192"] and c[0]["type"] == "bfloat16", c
assert all(r["oop_wrong"] == "0" and r["ip_wrong"] == "0" for r in c), c
EOF
for args in "-d int32 -o max" "-d half -o avg --algo ring" "-d uint8 -o sum --algo rd" \
    "-d double -o min -z 1" "-d int64 -o prod -a 0 -a 2" "-d float -z 2 -m 3 -a 3"; do
    "$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce -b 1 -e 4K -f 4 -n 2 -w 0 $args \
        > "$TMP/out" 2>&1 || { cat "$TMP/out"; fail "allreduce $args"; }
    assert_contains "$TMP/out" "# Out of bounds values : 0 OK"
done
assert_contains "$TMP/out" "agg iters: 3"

# -d all -o all: every type x op (int x avg skipped): 7 x 5 - 3 = 32 rows, nccl-tests' order;
# -N 2 runs the sweep twice; -i steps; -c 0 reports N/A (JSON null); -z 1 says so.
"$HOOPRUN" --nproc-per-node 2 "$BENCH" reduce -b 64 -e 64 -n 1 -w 0 -d all -o all \
    -J "$TMP/all.json" > "$TMP/out" 2>&1 || { cat "$TMP/out"; fail "-d all -o all"; }
strip "$TMP/out" | awk '!/^#/ && NF { print $3, $4 }' > "$TMP/pairs"
[ "$(wc -l < "$TMP/pairs")" = 32 ] || { cat "$TMP/out"; fail "-d all -o all: not 32 rows"; }
[ "$(head -1 "$TMP/pairs")" = "uint8 sum" ] && [ "$(tail -1 "$TMP/pairs")" = "bfloat16 avg" ] ||
    { cat "$TMP/pairs"; fail "-d all -o all: order"; }
grep -q "int32 avg" "$TMP/pairs" && fail "-o all ran avg on int32"
"$HOOPRUN" --nproc-per-node 2 "$BENCH" allgather -b 1K -e 3K -i 1K -N 2 -n 1 -w 0 -c 0 -z 1 \
    -J "$TMP/n2.json" --csv "$TMP/n2.csv" > "$TMP/out" 2>&1 || { cat "$TMP/out"; fail "-N 2 -i 1K -c 0"; }
strip "$TMP/out" > "$TMP/rows"
[ "$(awk '!/^#/ && NF { print $1 }' "$TMP/rows" | tr '\n' ' ')" = "1024 2048 3072 1024 2048 3072 " ] ||
    { cat "$TMP/rows"; fail "-N 2 -i 1K: sizes"; }
[ "$(awk '!/^#/ && NF && $9 == "N/A" && $13 == "N/A"' "$TMP/rows" | wc -l)" = 6 ] ||
    fail "-c 0: #wrong is not N/A"
assert_contains "$TMP/rows" "# Blocking Enabled: wait for completion and barrier after each"
assert_contains "$TMP/rows" "step: 1024(bytes)"
# (-c 0's #wrong in the CSV: an empty field, CSV's null; it was -1)
python3 - "$TMP/all.json" "$TMP/n2.json" "$TMP/n2.csv" <<'EOF' || fail "-d all / -c 0 JSON, CSV"
import csv, json, sys
a = json.load(open(sys.argv[1]))
assert len(a["results"]) == 32 and a["results"][0]["type"] == "uint8", a["results"][0]
b = json.load(open(sys.argv[2]))
assert b["config"]["step_bytes"] == 1024 and b["config"]["blocking_collectives"] == "true", b
assert all(r[p]["nwrong"] is None for r in b["results"] for p in ("out_of_place", "in_place"))
c = list(csv.DictReader(open(sys.argv[3])))
assert len(c) == 6 and all(r["oop_wrong"] == "" and r["ip_wrong"] == "" for r in c), c
assert all(float(r["oop_time_us"]) > 0 and r["algo"] for r in c), c
EOF

# -r all (nccl-tests'): the sweep once per root, each row naming its root, every call
# checked; in the JSON too.
for coll in broadcast reduce; do
    "$HOOPRUN" --nproc-per-node 3 "$BENCH" $coll -b 8 -e 64 -f 8 -n 1 -w 0 -r all \
        -J "$TMP/roots.$coll.json" > "$TMP/out" 2>&1 || { cat "$TMP/out"; fail "$coll -r all"; }
    strip "$TMP/out" | awk '!/^#/ && NF { print $1, $5, $9, $13 }' | tr '\n' ' ' > "$TMP/roots"
    [ "$(cat "$TMP/roots")" = "8 0 0 0 64 0 0 0 8 1 0 0 64 1 0 0 8 2 0 0 64 2 0 0 " ] ||
        { cat "$TMP/out"; fail "$coll -r all: rows (size root #wrong #wrong) $(cat "$TMP/roots")"; }
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert [int(r["root"]) for r in d["results"]] == [0, 0, 1, 1, 2, 2], d["results"]' \
        "$TMP/roots.$coll.json" || fail "$coll -r all: JSON roots"
done
# -T S (nccl-tests' timeout) is HOOP_TIMEOUT for the run, over the environment's: rank 0 of
# 2 whose rank 1 never comes gives up after 1 s, not HOOP_TIMEOUT's 300 (it was refused as
# an unknown option).
port=$((20000 + RANDOM % 12000))
t0=$(now_ms)
HOOP_TIMEOUT=300 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=0 WORLD_SIZE=2 HOOP_TOKEN=t \
    timeout 60 "$BENCH" allreduce -b 8 -e 8 -n 1 -T 1 > "$TMP/out" 2>&1
rc=$?
ms=$(($(now_ms) - t0))
# (the wait it names is measured: 999 ms under a sanitizer's slower clock reads)
[ $rc = 1 ] && [ $ms -lt 20000 ] &&
    grep -qE "rank 1 of 2 never arrived \(waited (99[0-9]|1[0-9]{3}) ms" "$TMP/out" ||
    { cat "$TMP/out"; fail "-T 1: exit $rc after $ms ms"; }
# Ranks started by hand, rank 1 alone with a bad flag: rank 1 exits 2 at once and
# tells rank 0's store, so rank 0 exits 2 within moments naming rank 1 and the flag, not
# after HOOP_TIMEOUT's 300 s (rank 1 used to exit silently and leave rank 0 waiting).
port=$((20000 + RANDOM % 12000))
t0=$(now_ms)
( HOOP_TIMEOUT=300 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=0 WORLD_SIZE=2 HOOP_TOKEN=t \
    exec timeout 60 "$BENCH" allreduce -b 8 -e 8 -n 1 > "$TMP/r0" 2>&1 ) &
r0=$!
sleep 0.3
HOOP_TIMEOUT=300 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=1 WORLD_SIZE=2 HOOP_TOKEN=t \
    timeout 60 "$BENCH" allreduce -b 8 -e 8 -n 1 -q > "$TMP/r1" 2>&1
rc1=$?
wait $r0
rc0=$?
ms=$(($(now_ms) - t0))
[ $rc1 = 2 ] && [ $rc0 = 2 ] && [ $ms -lt 20000 ] ||
    { cat "$TMP/r0" "$TMP/r1"; fail "rank 1's bad flag: exits $rc0 / $rc1 after $ms ms"; }
grep -q "heard from rank 1 (127.0.0.1:[0-9]*) that it cannot start: hoop-bench: .*-q" "$TMP/r0" ||
    { cat "$TMP/r0"; fail "rank 1's bad flag: rank 0 does not name it"; }
# Ranks started by hand with different sweeps (-c 1 / -c 0, HOOP_ALGO ring / rd, -d): both
# exit 2 at once, naming the flag and both values, and rank 0's -J file is removed (they
# failed with exit 1 at the first call that differed, naming a barrier against an
# all-reduce).
for case in "-c|1|0|-c 1|-c 0|" "--algo/HOOP_ALGO|ring|rd||| HOOP_ALGO=" \
    "-d|uint8,int32,int64,half,float,double,bfloat16|float|-d all|-d float|"; do
    IFS='|' read -r flag v0 v1 a0 a1 env <<< "$case"
    port=$((20000 + RANDOM % 12000))
    [ -z "$env" ] || export HOOP_ALGO=$v0
    # shellcheck disable=SC2086
    ( HOOP_TIMEOUT=60 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=0 WORLD_SIZE=2 HOOP_TOKEN=t \
        exec timeout 60 "$BENCH" allreduce -b 1K -e 64K -n 1 -w 0 $a0 \
        -J "$TMP/dis.json" > "$TMP/r0" 2>&1 ) &
    r0=$!
    [ -z "$env" ] || export HOOP_ALGO=$v1
    # shellcheck disable=SC2086
    HOOP_TIMEOUT=60 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=1 WORLD_SIZE=2 HOOP_TOKEN=t \
        timeout 60 "$BENCH" allreduce -b 1K -e 64K -n 1 -w 0 $a1 > "$TMP/r1" 2>&1
    rc1=$?
    wait $r0
    rc0=$?
    unset HOOP_ALGO
    want="ranks disagree on $flag: rank 0 has $v0, rank 1 has $v1 (every rank must be given the same sweep)"
    [ $rc0$rc1 = 22 ] || { cat "$TMP/r0" "$TMP/r1"; fail "$flag $v0 / $v1: exits $rc0 / $rc1"; }
    assert_contains "$TMP/r0" "hoop-bench: rank 0: $want"
    assert_contains "$TMP/r1" "hoop-bench: rank 1: $want"
    [ ! -e "$TMP/dis.json" ] || fail "$flag $v0 / $v1: rank 0 left $TMP/dis.json"
done
# ... but one sweep spelled two ways runs: --algo ring against HOOP_ALGO=ring, --algo auto
# against the default, -b 1K against -b 1024, -d f32 against float (--algo auto was
# refused against no --algo).
for case in "--algo ring -b 1K -d f32|HOOP_ALGO=ring|-b 1024 -d float" "--algo auto -b 8||-b 8"; do
    IFS='|' read -r a0 e1 a1 <<< "$case"
    port=$((20000 + RANDOM % 12000))
    # shellcheck disable=SC2086
    ( HOOP_TIMEOUT=60 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=0 WORLD_SIZE=2 HOOP_TOKEN=t \
        exec timeout 60 "$BENCH" allreduce -e 1K -n 1 -w 0 $a0 > "$TMP/r0" 2>&1 ) &
    r0=$!
    # shellcheck disable=SC2086
    env $e1 HOOP_TIMEOUT=60 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=1 WORLD_SIZE=2 \
        HOOP_TOKEN=t timeout 60 "$BENCH" allreduce -e 1K -n 1 -w 0 $a1 > "$TMP/r1" 2>&1
    rc1=$?
    wait $r0
    rc0=$?
    [ $rc0$rc1 = 00 ] || { cat "$TMP/r0" "$TMP/r1"; fail "'$a0' against '$e1 $a1': exits $rc0 / $rc1"; }
done
# -J never overwrites (nccl-tests): an existing file stays, FILE.0 is written and named.
echo keep > "$TMP/k.json"
"$BENCH" allreduce -b 64 -e 64 -n 1 -J "$TMP/k.json" > "$TMP/out1" || fail "-J probing"
[ "$(cat "$TMP/k.json")" = keep ] || fail "-J overwrote an existing file"
assert_contains "$TMP/out1" "# Writing JSON output to $TMP/k.json.0"
# Its "args" are the command line as given (getopt's permutation put "allreduce" last).
python3 -c 'import json, sys
a = json.load(open(sys.argv[1]))["args"]
assert a[1:] == ["allreduce", "-b", "64", "-e", "64", "-n", "1", "-J", sys.argv[2]], a' \
    "$TMP/k.json.0" "$TMP/k.json" || fail "k.json.0's args"
# An output file that cannot be created at start is a bad flag: exit 2 naming it (as
# --help says; it said 1), before any collective runs.
for f in "-J $TMP/none/x.json" "--csv $TMP/none/x.csv"; do
    # shellcheck disable=SC2086
    "$BENCH" allreduce -b 8 -e 8 -n 1 $f > "$TMP/out" 2>&1
    rc=$?
    [ $rc = 2 ] && grep -q "hoop-bench: ${f%% *}: cannot create '$TMP/none/x\.[a-z]*': No such file or directory" "$TMP/out" ||
        { cat "$TMP/out"; fail "$f: exit $rc, not 2"; }
    grep -q "^#" "$TMP/out" && fail "$f: the run started: $(cat "$TMP/out")"
done
# ... and a file it created before refusing is removed (-J was left empty, and a rerun
# wrote FILE.0), but not one that was there before.
"$BENCH" allreduce -b 8 -e 8 -n 1 -J "$TMP/made.json" --csv "$TMP/none/x.csv" > "$TMP/out" 2>&1
rc=$?
[ $rc = 2 ] && [ ! -e "$TMP/made.json" ] || { cat "$TMP/out"; fail "-J made.json left by a refused start (exit $rc)"; }
# A bad flag on every rank under hooprun: said by rank 0 (and quoted in hooprun's
# report), all exit 2; rank 0's store no longer WARNs of it first ("its owner gave up").
# (A rank whose word reaches rank 0's store before rank 0's own refusal is noted is the
# one the job heard, and says it too: at most twice.)
"$HOOPRUN" --nproc-per-node 3 "$BENCH" allreduce --algo strr > "$TMP/out" 2>&1
rc=$?
[ $rc = 2 ] || { cat "$TMP/out"; fail "--algo strr on 3 ranks: exit $rc"; }
n=$(grep -c "^hoop-bench: --algo: unknown algorithm 'strr'" "$TMP/out")
[ "$n" -ge 1 ] && [ "$n" -le 2 ] || { cat "$TMP/out"; fail "--algo strr: said $n times"; }
once "$TMP/out" "rank 0's message: hoop-bench: --algo: unknown algorithm 'strr'"
grep -q "its owner gave up" "$TMP/out" && { cat "$TMP/out"; fail "--algo strr: rank 0's store warned too"; }
# A --csv FIFO that nobody reads is refused (rank 0 blocked in its open until the others
# timed out waiting for it).
mkfifo "$TMP/csv.fifo"
timeout -s KILL 60 "$BENCH" allreduce -b 8 -e 8 -n 1 --csv "$TMP/csv.fifo" > "$TMP/out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "is a FIFO that no process reads" "$TMP/out" ||
    { cat "$TMP/out"; fail "--csv FIFO: exit $rc, not 2"; }
# ... and on 2 ranks every rank exits 2 with rank 0 (rank 1 found rank 0 gone in its first
# call and exited 1, saying "the peer closed its end").
"$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce -b 8 -e 8 -n 1 -J "$TMP/none/x.json" \
    > "$TMP/out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "hoop-bench: -J: cannot create" "$TMP/out" &&
    grep -qE "^hooprun: +1 +[^ ]+ +[0-9]+ +2 " "$TMP/out" && ! grep -q "closed its end" "$TMP/out" ||
    { cat "$TMP/out"; fail "-J not creatable on 2 ranks: exit $rc"; }
# Buffers for -e that do not fit in memory: -e named, exit 2 (it exited 1, the code of a
# failed collective, saying only "cannot allocate"; under overcommit the allocation
# succeeded and the OOM killer's SIGKILL came at the first touch, with no word). Every
# rank's room is held against the buffers of all the ranks on its host, before any is
# allocated. (not on a machine of 1 TiB)
kb=$(awk '/^(MemTotal|SwapTotal):/ { t += $2 } END { print t }' /proc/meminfo)
echo keep > "$TMP/kept.csv"
if [ "$kb" -lt $((512 << 20)) ]; then
    timeout -s KILL 60 "$BENCH" allreduce -b 1T -e 1T -n 1 -J "$TMP/made1t.json" \
        --csv "$TMP/kept.csv" > "$TMP/out" 2>&1
    rc=$?
    [ $rc = 2 ] && grep -q "the buffers for -e 1099511627776 bytes do not fit in memory on host $(hostname): 1 rank(s) there need 1 x 2199023255680 bytes" "$TMP/out" &&
        grep -q "MiB are left (MemAvailable + SwapFree, or the cgroup's memory limit less its usage): give a smaller -e" "$TMP/out" ||
        { cat "$TMP/out"; fail "-e 1T: exit $rc, not 2"; }
    # (the -J file it made is removed; the --csv file that was there is not)
    [ ! -e "$TMP/made1t.json" ] && [ -e "$TMP/kept.csv" ] || fail "-e 1T: -J left, or --csv removed"
fi
# Two ranks whose buffers fit one at a time but not together (each needs 0.8 x what is
# left): refused, rank 0 saying it once, nothing allocated.
avail=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
e=$((avail * 1024 * 2 / 5))
timeout -s KILL 60 "$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce -b "$e" -e "$e" -n 1 \
    > "$TMP/out" 2>&1
rc=$?
[ $rc = 2 ] && [ "$(grep -c "^hoop-bench: rank 0: the buffers for -e $e bytes do not fit in memory on host $(hostname): 2 rank(s) there need 2 x" "$TMP/out")" = 1 ] &&
    ! grep -q "^hoop-bench: rank 1" "$TMP/out" ||
    { cat "$TMP/out"; fail "-e $e on 2 ranks: exit $rc, not 2 said once"; }
# ... and a memory cgroup's limit (a Slurm job's, a container's) counts, v1 or v2, also
# one set on a parent cgroup (a job's above its step's): in a child of a 256 MiB cgroup,
# where MemAvailable alone let -e 200M through to the OOM killer. File cache the kernel
# can reclaim is room: after 200 MiB written there, -e 40M (80 MiB of buffers) still
# runs (it was refused, the cache counted as used). (Needs root and a writable cgroup
# hierarchy.)
cg=""
if [ -w /sys/fs/cgroup/memory ]; then
    cg=/sys/fs/cgroup/memory/hoop-bench-test-$$
    mkdir "$cg" "$cg/c" 2>/dev/null && echo $((256 << 20)) > "$cg/memory.limit_in_bytes" || cg=""
elif [ -w /sys/fs/cgroup/cgroup.procs ] && grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
    cg=/sys/fs/cgroup/hoop-bench-test-$$
    mkdir "$cg" "$cg/c" 2>/dev/null && echo $((256 << 20)) > "$cg/memory.max" || cg=""
fi
if [ -n "$cg" ]; then
    in_cg() { timeout -s KILL 60 sh -c 'echo $$ > "$1/c/cgroup.procs" && shift && exec "$@"' sh "$cg" "$@"; }
    in_cg "$BENCH" allreduce -b 200M -e 200M -n 1 > "$TMP/out" 2>&1
    rc=$?
    grep -q "do not fit in memory on host" "$TMP/out" || rc="$rc (no message)"
    in_cg dd if=/dev/zero of="$TMP/cache.bin" bs=1M count=200 status=none
    in_cg "$BENCH" allreduce -b 40M -e 40M -n 1 -w 0 > "$TMP/out2" 2>&1
    rc2=$?
    rm -f "$TMP/cache.bin"
    sleep 0.2
    rmdir "$cg/c" "$cg" # (before any fail, which exits)
    [ "$rc" = 2 ] || { cat "$TMP/out"; fail "-e 200M in a child of a 256 MiB cgroup: exit $rc, not 2"; }
    [ $rc2 = 0 ] || { cat "$TMP/out2"; fail "-e 40M beside 200 MiB of file cache in 256 MiB: exit $rc2"; }
else
    echo "note: no writable memory cgroup: the cgroup limit's check skipped"
fi
# -J's strings are JSON's: quotes, backslashes and control characters escaped, and a
# byte that is not UTF-8 (a value in another encoding) written as U+FFFD, so that the
# file parses (a raw 0xff made it unreadable to python3's json); valid UTF-8 kept.
HOOP_DEBUG_TIMESTAMP_FORMAT="$(printf '"\\\t\001\377\303\251\355\240\200')" \
    "$BENCH" allreduce -b 1K -e 1K -n 1 -w 0 -J "$TMP/u8.json" > "$TMP/out" 2>&1 ||
    { cat "$TMP/out"; fail "-J with odd bytes in the environment"; }
python3 - "$TMP/u8.json" <<'PY' || fail "-J: odd bytes in the environment not escaped"
import json, sys
env = json.load(open(sys.argv[1], encoding="utf-8"))["env"]
want = 'HOOP_DEBUG_TIMESTAMP_FORMAT="\\\t\x01\ufffd\u00e9\ufffd\ufffd\ufffd'
assert want in env, env
PY
# An output that cannot be written (/dev/full): exit 1 naming it (it exited 1 silently).
if [ -w /dev/full ]; then
    "$BENCH" allreduce -b 8 -e 8 -n 1 --csv /dev/full > "$TMP/out" 2>&1
    [ $? = 1 ] && grep -q "hoop-bench: --csv: writing '/dev/full' failed: No space left on device" "$TMP/out" ||
        { cat "$TMP/out"; fail "--csv /dev/full"; }
fi
# A run that fails midway (rank 1 killed in the ring's all-gather of its call #40, in the
# second cycle's first size; ranks told -N 2 and -N 1 are refused at start now) fails,
# and its JSON still parses: the rows of the first cycle and the failure in "errors"
# (the file ended inside "results").
HOOP_TEST_FAULT=1:all_gather:40:KILL "$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce -b 8 \
    -e 64 -f 2 -n 1 -w 0 -N 2 --algo ring -J "$TMP/fail.json" > "$TMP/out" 2>&1 &&
    fail "rank 1 killed in cycle 2: the run succeeded"
python3 - "$TMP/fail.json" << 'EOF' || { cat "$TMP/out" "$TMP/fail.json"; fail "the failed run's JSON"; }
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["results"]) == 4, d["results"]
assert len(d["errors"]) == 1 and "rank 0: " in d["errors"][0] and "failed" in d["errors"][0], d
EOF

# Shared buffers (-R 1): in-place all-reduces from 8 KiB run direct on 2 ranks (the algo
# column says so), checked against the exact reference like every other call; on 3 ranks
# from 64 KiB; and every other collective still works on shared memory.
for n in 2 3; do
    "$HOOPRUN" --nproc-per-node $n "$BENCH" allreduce -b 1K -e 256K -f 8 -n 3 -w 1 -R 1 \
        -d double -o avg --show-algo > "$TMP/out" 2>&1 || { cat "$TMP/out"; fail "-R 1 on $n ranks"; }
    strip "$TMP/out" > "$TMP/rows"
    assert_contains "$TMP/rows" "buffers (-R 1): shared"
    assert_contains "$TMP/rows" "# Out of bounds values : 0 OK"
    check_rows "$TMP/rows" allreduce $n 8 || { cat "$TMP/rows"; fail "-R 1 columns"; }
    min=$([ $n = 2 ] && echo 8192 || echo 65536)
    awk -v min=$min '!/^#/ && NF { d = $NF ~ /\|direct$/; if (d != ($1 >= min)) bad = 1 }
        END { exit bad }' "$TMP/rows" || { cat "$TMP/rows"; fail "-R 1: direct not from $min B"; }
done
"$HOOPRUN" --nproc-per-node 2 "$BENCH" allgather -b 64 -e 64K -f 32 -n 2 -w 0 -R 2 --algo direct \
    > "$TMP/out" 2>&1 || { cat "$TMP/out"; fail "allgather -R 2 --algo direct"; }
assert_contains "$TMP/out" "# Out of bounds values : 0 OK"
# (its header said "direct (all-reduce only)", though direct ran the all-gathers in place)
assert_contains "$TMP/out" "algorithm direct (all-reduce's; in-place calls on shared buffers may run direct)"
# The algo column names what ran: broadcast and reduce chain along the ring, and an
# all-gather on plain buffers runs the ring, whatever --algo says (it said "rhd").
for coll in broadcast reduce allgather; do
    "$HOOPRUN" --nproc-per-node 2 "$BENCH" $coll -b 1K -e 4K -f 4 -n 1 -w 0 --algo rhd --show-algo \
        > "$TMP/out" 2>&1 || { cat "$TMP/out"; fail "$coll --algo rhd --show-algo"; }
    strip "$TMP/out" | awk '!/^#/ && NF { n++; if ($NF != "ring") bad = 1 } END { exit bad || n != 2 }' ||
        { cat "$TMP/out"; fail "$coll --algo rhd: the algo column is not 'ring'"; }
done

# Device buffers (--device cuda) on the CUDA backend built on the host execution layer
# (src/cuda/hx.h; the same .cu sources, run on the CPU): every collective on 2 ranks,
# checked against the exact reference after the result is copied back, the rank table
# naming the GPU, and the two copy-rate columns (positive GB/s, also in JSON and CSV).
if [ -r "${TEST_CUDA_HX_BACKEND:-}" ]; then
    for coll in allreduce broadcast reduce allgather reducescatter; do
        HOOP_CUDA_BACKEND=$TEST_CUDA_HX_BACKEND "$HOOPRUN" --nproc-per-node 2 "$BENCH" $coll \
            --device cuda -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 -r 1 -d half -o sum \
            -J "$TMP/dev.$coll.json" --csv "$TMP/dev.$coll.csv" > "$TMP/out" 2>&1 ||
            { cat "$TMP/out"; fail "--device cuda $coll"; }
        strip "$TMP/out" > "$TMP/rows"
        assert_contains "$TMP/rows" "# Out of bounds values : 0 OK"
        assert_contains "$TMP/rows" "device memory (--device cuda)"
        [ "$(grep -c '^#  Rank .* device  [0-9] \[cuda\] cuda:' "$TMP/rows")" = 2 ] ||
            { cat "$TMP/rows"; fail "--device cuda: rank table"; }
        check_rows "$TMP/rows" $coll 2 2 || { cat "$TMP/rows"; fail "--device cuda $coll columns"; }
        # (2 decimals: a small copy on a loaded machine or under a sanitizer may print
        # 0.00 at any of these sizes; the JSON below holds them exact and checks them > 0)
        awk '!/^#/ && NF { rows++; if (NF != 15 || $14 !~ /^[0-9]+\.[0-9][0-9]$/ ||
                $15 !~ /^[0-9]+\.[0-9][0-9]$/) bad = 1 }
            END { exit bad || rows != 5 }' "$TMP/rows" ||
            { cat "$TMP/rows"; fail "--device cuda: the h2d / d2h columns"; }
    done
    python3 - "$TMP" <<'EOF' || fail "--device cuda JSON / CSV"
import csv, glob, json, os, sys
for path in glob.glob(os.path.join(sys.argv[1], "dev.*.json")):
    d = json.load(open(path))
    assert all(x["device"] >= 0 and x["device_hex"] == "cuda" for x in d["config"]["devices"]), d
    assert all(r["h2d_bw"] > 0 and r["d2h_bw"] > 0 for r in d["results"]), path
    c = list(csv.DictReader(open(path[:-4] + "csv")))
    assert len(c) == 5 and all(float(r["h2d_bw"]) > 0 for r in c), c
EOF
    # -R 1 with device buffers: memory the ranks map (hoop_comm_alloc_shared_cuda, CUDA
    # IPC on the host layer between the two processes), so the in-place all-reduces run
    # direct on the device from 8 KiB up, checked against the exact reference.
    HOOP_CUDA_BACKEND=$TEST_CUDA_HX_BACKEND "$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce \
        --device cuda -R 1 -b 1K -e 256K -f 4 -n 2 -w 1 -c 1 -d float -o sum --show-algo \
        > "$TMP/out" 2>&1 || { cat "$TMP/out"; fail "--device cuda -R 1"; }
    strip "$TMP/out" > "$TMP/rows"
    assert_contains "$TMP/rows" "# Out of bounds values : 0 OK"
    awk '!/^#/ && NF { d = $NF ~ /\|direct$/; if (d != ($1 >= 8192)) bad = 1 }
        END { exit bad }' "$TMP/rows" || { cat "$TMP/rows"; fail "--device cuda -R 1: direct"; }
    # -G (nccl-tests' CUDA-graph launches): each size's timed calls captured, in their
    # stream form, into a graph launched twice; each of the 3 checks is a replay of a
    # captured call on fresh data (a replay that did not run leaves zeros or the input:
    # #wrong > 0, exit 1). Every collective on 2 ranks, the all-reduce on 3.
    for run in "2 allreduce" "2 broadcast" "2 reduce" "2 allgather" "2 reducescatter" \
        "3 allreduce"; do
        set -- $run
        HOOP_CUDA_BACKEND=$TEST_CUDA_HX_BACKEND "$HOOPRUN" --nproc-per-node $1 "$BENCH" $2 \
            --device cuda -G 2 -b 8 -e 64K -f 8 -n 2 -m 2 -w 1 -c 3 -r 1 -d int32 -o sum \
            -J "$TMP/graph.$2.$1.json" > "$TMP/out" 2>&1 || { cat "$TMP/out"; fail "-G 2: $run"; }
        strip "$TMP/out" > "$TMP/rows"
        assert_contains "$TMP/rows" "# Out of bounds values : 0 OK"
        assert_contains "$TMP/rows" " validation: 3 graph: 2"
        check_rows "$TMP/rows" $2 $1 4 || { cat "$TMP/rows"; fail "-G 2: $run columns"; }
    done
    python3 - "$TMP" <<'EOF' || fail "-G JSON"
import glob, json, os, sys
paths = glob.glob(os.path.join(sys.argv[1], "graph.*.json"))
assert len(paths) == 6, paths
for path in paths:
    d = json.load(open(path))
    assert d["config"]["graph"] == 2 and d["out_of_bounds"]["count"] == 0, path
    assert all(r[p]["nwrong"] == 0 for r in d["results"] for p in ("out_of_place", "in_place"))
EOF
    # No backend to be had: one line naming the reason, exit 2.
    HOOP_CUDA_BACKEND=/nonexistent/libhoop-cuda.so "$BENCH" allreduce --device cuda -b 64 -e 64 \
        > "$TMP/o" 2> "$TMP/e"
    rc=$?
    [ "$rc" = 2 ] || { cat "$TMP/o" "$TMP/e"; fail "--device cuda without a backend exited $rc"; }
    assert_contains "$TMP/e" "/nonexistent/libhoop-cuda.so"
else
    echo "SKIP (part): --device cuda: TEST_CUDA_HX_BACKEND is not built (make check sets it)"
fi

# wait_rows FILE SIZE N: waits (at most 20 s) until FILE holds N rows of SIZE bytes.
wait_rows() {
    for _ in $(seq 400); do
        [ "$(grep -c "^ *$2 " "$1")" -ge "$3" ] && return
        sleep 0.05
    done
}

# SIGINT to hooprun during an endless sweep (-N 0): every rank stops after the same row,
# rank 0 ends the report with "# hoop: stopped by SIGINT after N rows" and the footer,
# the JSON parses with its N rows and the stop in "errors", the CSV holds N rows, exit 130.
"$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce -b 64K -e 256K -f 2 -n 2 -N 0 \
    -J "$TMP/int.json" --csv "$TMP/int.csv" > "$TMP/out" 2>&1 &
pid=$!
wait_rows "$TMP/out" 262144 2
kill -INT $pid
wait $pid
rc=$?
[ "$rc" = 130 ] || { cat "$TMP/out"; fail "SIGINT during -N 0: exit $rc, not 130"; }
strip "$TMP/out" > "$TMP/rows"
# (rank 0 says at once that it stops after the row, and how to stop now; it said nothing
# while a row went on, or hung on a stopped peer)
once "$TMP/rows" "hoop-bench: stopping after this row (SIGINT); send it again to stop now"
rows=$(grep -c '^ *[0-9]' "$TMP/rows")
assert_contains "$TMP/rows" "# hoop: stopped by SIGINT after $rows rows"
assert_contains "$TMP/rows" "# Out of bounds values : 0 OK"
python3 - "$TMP" "$rows" <<'EOF' || { cat "$TMP/rows"; fail "SIGINT: -J / --csv"; }
import csv, json, os, sys
d = json.load(open(os.path.join(sys.argv[1], "int.json")))
n = int(sys.argv[2])
assert len(d["results"]) == n and d["errors"] == ["stopped by SIGINT after %d rows" % n], d
assert len(list(csv.DictReader(open(os.path.join(sys.argv[1], "int.csv"))))) == n
EOF

# SIGTERM sent twice within moments (timeout(1) signals hooprun and then its group, and
# Slurm every process of the step besides hooprun's forwarding): one request, the same
# orderly stop, not the "stop now" of a later second signal (the report was cut short,
# the JSON left unparseable). Here to one rank alone, 50 ms apart, within a row (a row
# of 16 MiB copies takes about a second).
"$BENCH" allreduce -b 16M -e 16M -n 100 -w 0 -N 0 -J "$TMP/term.json" > "$TMP/out" 2>&1 &
pid=$!
wait_rows "$TMP/out" 16777216 1
kill -TERM $pid
sleep 0.05
kill -TERM $pid
wait $pid
rc=$?
[ "$rc" = 143 ] || { cat "$TMP/out"; fail "SIGTERM twice during -N 0: exit $rc, not 143"; }
assert_contains "$TMP/out" "# hoop: stopped by SIGTERM after "
once "$TMP/out" "hoop-bench: stopping after this row (SIGTERM); send it again to stop now"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$TMP/term.json" ||
    { cat "$TMP/out"; fail "SIGTERM twice: -J is not JSON"; }

# A collective that returns wrong data is caught: the test hook flips the piece rank 1
# receives in the all-gather phase of call #4, the out-of-place check of the one size
# (#0 is the rank table's all-gather, then per placement the untimed call, the barrier,
# the timed call and the check). Half of rank 1's elements are wrong (8192 of 16384),
# the in-place check is clean, the footer fails, exit 1.
HOOP_TEST_FAULT=1:all_gather:4:CORRUPT "$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce \
    -b 64K -e 64K -w 0 -n 1 -c 1 > "$TMP/out" 2>&1
rc=$?
[ "$rc" = 1 ] || { cat "$TMP/out"; fail "a corrupted check call: exit $rc, not 1"; }
strip "$TMP/out" > "$TMP/rows"
awk '/^ *[0-9]/ { rows++; if ($9 != 8192 || $13 != 0) bad = 1 } END { exit bad || rows != 1 }' \
    "$TMP/rows" || { cat "$TMP/rows"; fail "a corrupted check call: #wrong is not 8192 and 0"; }
assert_contains "$TMP/rows" "# Out of bounds values : 1 FAILED"
assert_contains "$TMP/out" "hoop-bench: wrong results: 1 failed check"

# ... and a stop does not hide it: the same corruption in the first row of an endless
# sweep (-N 0), the ranks started by hand, rank 0 sent SIGINT: both stop after the same
# row and exit 1, not 130 (the stop's code won), rank 0 saying both.
port=$((20000 + RANDOM % 12000))
( HOOP_TEST_FAULT=1:all_gather:4:CORRUPT MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=1 \
    WORLD_SIZE=2 HOOP_TOKEN=t exec timeout 60 "$BENCH" allreduce -b 64K -e 64K -w 0 -n 1 -c 1 \
    -N 0 > "$TMP/r1" 2>&1 ) &
r1=$!
( HOOP_TEST_FAULT=1:all_gather:4:CORRUPT MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=0 \
    WORLD_SIZE=2 HOOP_TOKEN=t exec timeout 60 "$BENCH" allreduce -b 64K -e 64K -w 0 -n 1 -c 1 \
    -N 0 > "$TMP/r0" 2>&1 ) &
r0=$!
wait_rows "$TMP/r0" 65536 3
kill -INT $r0
wait $r0
rc0=$?
wait $r1
rc1=$?
[ $rc0 = 1 ] && [ $rc1 = 1 ] || { cat "$TMP/r0" "$TMP/r1"; fail "wrong values, then SIGINT: exits $rc0 / $rc1, not 1 / 1"; }
assert_contains "$TMP/r0" "# hoop: stopped by SIGINT after "
assert_contains "$TMP/r0" "# Out of bounds values : 1 FAILED"
assert_contains "$TMP/r0" "hoop-bench: wrong results: 1 failed check"

# NCCL_TESTS_MIN_BW, nccl-tests' CI gate: an average busbw below 0.9 x the value fails the
# run (FAILED in the footer, a line on stderr, exit 1); at or above it, OK and exit 0.
NCCL_TESTS_MIN_BW=100000 "$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce -b 64 -e 64 \
    > "$TMP/out" 2>&1
rc=$?
[ "$rc" = 1 ] || { cat "$TMP/out"; fail "NCCL_TESTS_MIN_BW=100000: exit $rc, not 1"; }
grep -q '^# Avg bus bandwidth    : [0-9.e+-]* FAILED$' "$TMP/out" || { cat "$TMP/out"; fail "no FAILED"; }
assert_contains "$TMP/out" "below 0.9 x NCCL_TESTS_MIN_BW=100000 GB/s"
NCCL_TESTS_MIN_BW=0 "$BENCH" allreduce -b 64 -e 64 -n 1 -w 0 > "$TMP/out" 2>&1 ||
    { cat "$TMP/out"; fail "NCCL_TESTS_MIN_BW=0"; }
grep -q '^# Avg bus bandwidth    : 0 OK$' "$TMP/out" || { cat "$TMP/out"; fail "no OK"; }
# A report that cannot be written (a full disk) is a failure, as a -J or --csv file's.
"$BENCH" allreduce -b 64 -e 64 -n 1 -w 0 > /dev/full 2> "$TMP/err"
rc=$?
[ "$rc" = 1 ] || { cat "$TMP/err"; fail "> /dev/full: exit $rc, not 1"; }
assert_contains "$TMP/err" "standard output failed: No space left on device"

# Alone (no MASTER_ADDR / WORLD_SIZE): a world of one.
"$BENCH" reducescatter -b 64 -e 64 -n 1 -w 0 > "$TMP/out1" || fail "alone"
assert_contains "$TMP/out1" "# hoop: world_size 1 "

# Bad flags: one line naming the flag, exit 2 (tests/check_bench.c holds every refusal).
bad() { # WHAT ARGS...: expects exit 2 and one stderr line containing WHAT
    local what=$1
    shift
    "$BENCH" "$@" > "$TMP/bo" 2> "$TMP/be"
    rc=$?
    [ "$rc" = 2 ] || { cat "$TMP/be"; fail "'$*' exited $rc, not 2"; }
    [ "$(wc -l < "$TMP/be")" = 1 ] || { cat "$TMP/be"; fail "'$*': not one line"; }
    assert_contains "$TMP/be" "$what"
}
bad "the datatype is -d" allreduce -t f32
# Standalone with a partial env:// contract: the malformed value is named first, then
# everything missing, in one line (as libhoop and hoop-train say it).
WORLD_SIZE=abc bad "hoop-bench: WORLD_SIZE='abc' is not an integer; also MASTER_ADDR, MASTER_PORT and RANK are not set" \
    allreduce -b 64 -e 64 -n 1 -w 0
RANK=3 WORLD_SIZE=2 bad "RANK=3 is not below WORLD_SIZE=2; also MASTER_ADDR and MASTER_PORT are not set" \
    allreduce -b 64 -e 64 -n 1 -w 0
# Started by mpirun (its world size above 1, no env:// contract): refused naming the
# variable (each rank ran a world of one of its own, exit 0); a size of 1 runs alone.
OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=1 bad "OMPI_COMM_WORLD_SIZE=4: started by mpirun (Open MPI), which hoop does not read; start the ranks with hooprun" \
    allreduce -b 1K -e 1K -n 1 -w 0
PMI_SIZE=4 PMI_RANK=1 PMIX_RANK=1 bad "PMI_SIZE=4: started by mpirun or mpiexec" \
    allreduce -b 1K -e 1K -n 1 -w 0
OMPI_COMM_WORLD_SIZE=1 "$BENCH" allreduce -b 64 -e 64 -n 1 -w 0 > "$TMP/out1" 2>&1 ||
    { cat "$TMP/out1"; fail "OMPI_COMM_WORLD_SIZE=1: refused"; }
assert_contains "$TMP/out1" "# hoop: world_size 1 "
# -J and --csv naming one file, by the same path or through a symlink: refused naming
# both (the two formats were written into one file, exit 0).
bad "-J $TMP/same.json and --csv $TMP/same.json are the same file" \
    allreduce -b 1K -e 1K -n 2 -J "$TMP/same.json" --csv "$TMP/same.json"
[ ! -e "$TMP/same.json" ] || fail "-J --csv one file: $TMP/same.json left"
ln -s same2.json "$TMP/same2.csv"
bad "-J $TMP/same2.json and --csv $TMP/same2.csv are the same file" \
    allreduce -b 1K -e 1K -n 2 -J "$TMP/same2.json" --csv "$TMP/same2.csv"
bad "--algo ring" allreduce -a ring
bad "-g 2" allreduce -g 2
grep -q mpirun "$TMP/be" && fail "-g 2 suggests mpirun: $(cat "$TMP/be")"
bad "-G 1: CUDA graphs capture calls on device buffers" allreduce -G 1
bad "-z 0 with -G" allreduce --device cuda -G 1 -z 1
bad "hoop has no int8" allreduce -d int8
bad ".json" allreduce -J out.csv
bad "-n needs" allreduce -n
bad "hoop has no gather (nccl-tests' gather_perf); hoop-bench runs allreduce" gather
bad "hoop has no alltoall (nccl-tests' alltoall_perf)" alltoall_perf -b 8
bad "collective"
bad "-r 2" broadcast -r 2
# A negative root is named as such (it was "out of range [0, 1048576]").
bad "-r -1: a root is a rank, 0 or more (or all)" broadcast -r -1
bad "--device: unknown device 'gpu'" allreduce --device gpu
NCCL_TESTS_MIN_BW=fast bad "NCCL_TESTS_MIN_BW='fast' is not a bandwidth in GB/s" allreduce
"$HOOPRUN" --nproc-per-node 2 "$BENCH" reduce -r 2 > "$TMP/o" 2> "$TMP/e"
rc=$?
[ "$rc" = 2 ] || { cat "$TMP/o" "$TMP/e"; fail "-r 2 on 2 ranks exited $rc"; }
assert_contains "$TMP/e" "-r 2 is not below world_size 2"
# Each rank's line says which transports its links use (the comm picks per peer when
# HOOP_TRANSPORT is unset): shared memory on one host, tcp when asked, none alone.
for tr in shm tcp; do
    HOOP_TRANSPORT=$tr "$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce -b 8 -e 8 -n 1 -w 0 \
        -J "$TMP/links-$tr.json" > "$TMP/o" 2>&1 || { cat "$TMP/o"; fail "links over $tr"; }
    [ "$(grep -cE "^#  Rank +[01] .*, local_rank [01], links $tr\$" "$TMP/o")" = 2 ] &&
        [ "$(grep -o "local_rank [01], links $tr\"" "$TMP/links-$tr.json" | wc -l)" = 2 ] ||
        { cat "$TMP/o"; fail "the rank lines do not say links $tr"; }
done
"$BENCH" allreduce -b 8 -e 8 -n 1 -w 0 > "$TMP/o" 2>&1
grep -qE "^#  Rank +0 .*, links none\$" "$TMP/o" || { cat "$TMP/o"; fail "one rank: not 'links none'"; }
echo "PASS ($(($(now_ms) - t0)) ms)"
