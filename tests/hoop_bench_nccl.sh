#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/hoop_bench_nccl.sh -- a nccl-tests output parser (tests/nccl_tests_parse.sh: grep
# and awk on the footer and the table, python3's json on -J) reads hoop-bench's output
# under hooprun, as issue 10 asks to be shown.
#
# 1. The parser on a log and a JSON file in nccl-tests' own format (tests/ref/), against
#    the values written in them: it is a nccl-tests parser, not one fitted to hoop.
# 2. hoop-bench allreduce under tools/hooprun with its defaults, 2 ranks, -J: the parser
#    must find the footer, the 2-line rank table and the 7 rows of the sweep (frozen
#    sizes), the text and the JSON must agree (busbw to the printed 2 decimals, the
#    average to %g's 6 digits, the pids), and the average must be the mean of the rows.
#    hooprun prefixes nothing by default (as mpirun and torchrun; --prefix asks for
#    "[rank N] "): a prefixed line is not nccl-tests' line, and no nccl-tests parser
#    strips it, so a prefix under the defaults fails this test.
# 3. A reduce-scatter in half precision: the name and the rows.
. "${top_srcdir:-.}/tests/launcher_lib.sh"
BENCH=${top_builddir:-.}/bench/hoop-bench
PARSE=${top_srcdir:-.}/tests/nccl_tests_parse.sh
REF=${top_srcdir:-.}/tests/ref
[ -x "$BENCH" ] || fail "$BENCH is not built"
command -v python3 > /dev/null || { echo "SKIP: no python3 (the parser's JSON reader needs it)"; exit 77; }

expect() { # FILE LINE: LINE is one of FILE's lines
    grep -qxF -- "$2" "$1" || { cat "$1"; fail "'$2' not parsed"; }
}

# 1. nccl-tests' own format.
sh "$PARSE" "$REF/nccl_tests_all_reduce.txt" "$REF/nccl_tests_all_reduce.json" > "$TMP/ref.kv" ||
    { cat "$TMP/ref.kv"; fail "the parser rejects nccl-tests' format"; }
for line in test=all_reduce_perf ranks=4 rows=3 avg_busbw=62.6117 oob=0 oob_status=OK \
    "row=4194304 62.91 64.20 0 0" json_ranks=4 json_rows=3 json_avg_busbw=62.611715 json_oob=0 \
    "json_pid=2 40007 node-b2" "json_row=16777216 83.88608 85.019676 0.0 0.0 -1"; do
    expect "$TMP/ref.kv" "$line"
done

# 2. hoop-bench under hooprun's defaults.
run() { # HOOP-BENCH-ARGS...: on 2 ranks into $TMP/out, under hooprun's defaults
    "$HOOPRUN" --nproc-per-node 2 "$BENCH" "$@" > "$TMP/out" 2> "$TMP/err" ||
        { cat "$TMP/out" "$TMP/err"; fail "hoop-bench $*"; }
    if grep -q '^\[rank [0-9]*\] ' "$TMP/out"; then
        cat "$TMP/out"
        fail "hooprun prefixed the workers' lines under its defaults"
    fi
}
run allreduce -b 8 -e 64K -f 4 -n 5 -w 1 -J "$TMP/r.json"
sh "$PARSE" "$TMP/out" "$TMP/r.json" > "$TMP/kv" || { cat "$TMP/out" "$TMP/kv"; fail "parser"; }
for line in test=all_reduce_perf ranks=2 rows=7 oob=0 oob_status=OK json_ranks=2 json_rows=7 \
    json_oob=0 json_iterations=5; do
    expect "$TMP/kv" "$line"
done
python3 - "$TMP/kv" "$TMP/out" <<'EOF' || { cat "$TMP/out" "$TMP/kv"; fail "text and JSON disagree"; }
import re, sys
kv = [l.rstrip("\n").split("=", 1) for l in open(sys.argv[1])]
one = {k: v for k, v in kv}
rows = [v.split() for k, v in kv if k == "row"]
jrows = [v.split() for k, v in kv if k == "json_row"]
sizes = [8, 32, 128, 512, 2048, 8192, 32768]
assert [int(r[0]) for r in rows] == sizes and [int(r[0]) for r in jrows] == sizes
for t, j in zip(rows, jrows):
    assert t[3:5] == ["0", "0"] and j[3:6] == ["0.0", "0.0", "-1"], (t, j)
    for p in (1, 2):  # the text's busbw is the JSON's, rounded to 2 decimals
        assert abs(float(t[p]) - float(j[p])) <= 0.0051, (t, j)
busbw = [float(j[p]) for j in jrows for p in (1, 2)]
avg, javg = float(one["avg_busbw"]), float(one["json_avg_busbw"])
assert abs(javg - sum(busbw) / len(busbw)) <= 2e-6, (javg, busbw)
assert abs(avg - javg) <= 1e-5 * javg + 1e-6, (avg, javg)  # %g: 6 digits
text_pids = [int(m) for m in re.findall(r"^#  Rank +\d+ Group +0 Pid +(\d+) on ",
                                         open(sys.argv[2]).read(), re.M)]
jpids = [int(v.split()[1]) for k, v in kv if k == "json_pid"]
assert text_pids == jpids and len(set(jpids)) == 2, (text_pids, jpids)
EOF

# 3. Another collective and type: nccl-tests' name for it, 3 rows.
run reducescatter -d half -b 1K -e 4K -f 2 -n 2 -w 0
sh "$PARSE" "$TMP/out" > "$TMP/kv" || { cat "$TMP/out"; fail "parser on reducescatter"; }
expect "$TMP/kv" test=reduce_scatter_perf
expect "$TMP/kv" rows=3
awk '!/^#/ && NF >= 13 && $3 != "half" { bad = 1 } END { exit bad }' "$TMP/out" || fail "type column"
echo PASS
