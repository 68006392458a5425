#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/nccl_tests_parse.sh -- a parser of nccl-tests output, written the way nccl-tests
# users write theirs: grep and awk on the text log, python3's json module on the -J file.
# It knows nothing of hoop: it reads a real all_reduce_perf log the same way
# (tests/hoop_bench_nccl.sh feeds it one in nccl-tests' format, then hoop-bench's).
#
#   tests/nccl_tests_parse.sh LOG [JSON]
#
# Prints key=value lines: test (the name after "Collective test concluded"), ranks (lines
# of the "#  Rank" table), rows, avg_busbw, oob and oob_status (the footer), one
# "row=SIZE OOP_BUSBW IP_BUSBW OOP_WRONG IP_WRONG" per data line; with JSON the same from
# its keys, prefixed json_ (json_pid= per device). Exit: 0 parsed and 0 out-of-bounds
# values, 1 a footer line missing or a failed check, 2 usage.
set -u
log=${1:-}
json=${2:-}
[ -r "$log" ] || { echo "usage: nccl_tests_parse.sh LOG [JSON]" >&2; exit 2; }

# The footer, as the usual one-liners read it.
test=$(awk '/^# Collective test concluded:/ { print $NF }' "$log")
avg=$(grep '^# Avg bus bandwidth' "$log" | awk '{ print $NF }')
oob=$(grep '^# Out of bounds values' "$log" | awk '{ print $7 }')
oob_status=$(grep '^# Out of bounds values' "$log" | awk '{ print $8 }')
ranks=$(grep -c '^#  Rank ' "$log")
# Data lines: not comments, the 13 columns size count type redop root (time algbw busbw
# #wrong) x 2; busbw is field 8 out-of-place and 12 in-place.
rows=$(awk '!/^#/ && NF >= 13 && $1 ~ /^[0-9]+$/' "$log" | wc -l)
echo "test=$test"
echo "ranks=$ranks"
echo "rows=$rows"
echo "avg_busbw=$avg"
echo "oob=$oob"
echo "oob_status=$oob_status"
awk '!/^#/ && NF >= 13 && $1 ~ /^[0-9]+$/ { print "row=" $1, $8, $12, $9, $13 }' "$log"
rc=0
[ -n "$test" ] && [ -n "$avg" ] && [ -n "$oob" ] || { echo "error: no nccl-tests footer" >&2; rc=1; }
[ "$oob_status" = OK ] || rc=1

if [ -n "$json" ]; then
    python3 - "$json" <<'EOF' || rc=1
import json, sys
d = json.load(open(sys.argv[1]))
res = d["results"]
print("json_version=%d" % d["version"])
print("json_ranks=%d" % len(d["config"]["devices"]))
for dev in d["config"]["devices"]:
    print("json_pid=%d %d %s" % (dev["rank"], dev["pid"], dev["hostname"]))
print("json_rows=%d" % len(res))
print("json_avg_busbw=%s" % d["average_bus_bandwidth"]["bandwidth"])
print("json_oob=%d" % d["out_of_bounds"]["count"])
print("json_iterations=%d" % d["config"]["iterations"])
for r in res:
    oop, ip = r["out_of_place"], r["in_place"]
    print("json_row=%d %s %s %s %s %d" % (r["size"], oop["bus_bw"], ip["bus_bw"],
                                          oop["nwrong"], ip["nwrong"], int(r["root"])))
sys.exit(0 if d["out_of_bounds"]["okay"] == "true" else 1)
EOF
fi
exit $rc
