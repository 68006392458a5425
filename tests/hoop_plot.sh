#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/hoop_plot.sh -- tools/hoop-plot draws what its inputs hold.
#
# Frozen inputs with known values: a hoop-train metrics file (with a resumed run that
# redoes steps), a nccl-tests -J file (two datatypes, a "nan", a null in-place) and
# hoop-bench's earlier JSON; hoop-plot's summary of each figure must give the counts and
# last values written here, and the PNG must be a PNG of the expected size. Then today's
# hoop-bench JSON, whatever its keys, and the errors (exit 2). Skips (77) without
# matplotlib.
set -u
plot=${top_builddir:-.}/tools/hoop-plot
bench=${top_builddir:-.}/bench/hoop-bench
if ! python3 -c 'import matplotlib' 2>/dev/null && ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    echo "SKIP: matplotlib is not installed (Debian: python3-matplotlib)"
    exit 77
fi
fail=0
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
bad() {
    echo "FAIL: $*"
    fail=1
}

# png_size FILE: "WIDTHxHEIGHT" from the IHDR chunk, or nothing when it is no PNG.
png_size() {
    [ "$(od -An -c -j1 -N3 "$1" 2>/dev/null | tr -d ' ')" = PNG ] || return 0
    od -An -tu1 -j16 -N8 "$1" | awk '{ printf "%dx%d\n", (($1 * 256 + $2) * 256 + $3) * 256 + $4,
        (($5 * 256 + $6) * 256 + $7) * 256 + $8 }'
}

# expect_summary OUT LINE: hoop-plot's output has exactly this line.
expect_summary() {
    grep -qxF -- "$2" "$1" || bad "missing '$2' in: $(cat "$1")"
}

# 1. Metrics: steps 10..40 in epoch 1, epoch 1 ends at 40; a resumed run redoes 30 and
# 40 (other values replace the first ones), epoch 2 ends at 80.
cat >"$tmp/m.jsonl" <<'EOF2'
{"type":"step","epoch":1,"step":10,"train_loss":2.0}
{"type":"step","epoch":1,"step":20,"train_loss":1.5}
{"type":"step","epoch":1,"step":30,"train_loss":9.9}
{"type":"step","epoch":1,"step":30,"train_loss":1.2}
{"type":"step","epoch":1,"step":40,"train_loss":1.0}
{"type":"epoch","epoch":1,"step":40,"train_loss":1.4,"test_loss":1.1,"test_acc":0.71}
{"type":"step","epoch":2,"step":50,"train_loss":0.9}
{"type":"step","epoch":2,"step":60,"train_loss":0.8}
{"type":"step","epoch":2,"step":70,"train_loss":0.7}
{"type":"step","epoch":2,"step":80,"train_loss":0.6}
{"type":"epoch","epoch":2,"step":80,"train_loss":0.75,"test_loss":0.8,"test_acc":0.8125}
EOF2
# The same history, stopped at step 60 and resumed from the checkpoint of step 40.
head -8 "$tmp/m.jsonl" >"$tmp/r.jsonl"
sed -n '7,11p' "$tmp/m.jsonl" >>"$tmp/r.jsonl"
for f in m r; do
    "$plot" "$tmp/$f.jsonl" -o "$tmp/$f.png" >"$tmp/$f.out" 2>&1 || bad "metrics $f: exit $?: $(cat "$tmp/$f.out")"
    expect_summary "$tmp/$f.out" "hoop-plot: wrote $tmp/$f.png"
    expect_summary "$tmp/$f.out" "  train loss: 8 points, last 0.6000 at step 80"
    expect_summary "$tmp/$f.out" "  train loss (epoch): 2 points, last 0.7500 at step 80"
    expect_summary "$tmp/$f.out" "  test loss (epoch): 2 points, last 0.8000 at step 80"
    expect_summary "$tmp/$f.out" "  test accuracy: 2 epochs, last 81.25% at step 80"
    [ "$(png_size "$tmp/$f.png")" = 1320x550 ] || bad "$f.png: $(png_size "$tmp/$f.png")"
done
echo "ok: metrics: loss and accuracy curves, a resumed run's redone steps replaced"

# 2. nccl-tests -J: float sum at 1K, 1M, 4M (in-place "nan" at 1M), half sum at 1K.
cat >"$tmp/n.json" <<'EOF2'
{"version":2,"start_time":"2025-01-01 00:00:00","args":["./build/all_reduce_perf","-b","1K","-e","4M","-f","1024","-J","n.json"],"env":[],"nccl_version":22300,
"config":{"nthreads":1,"ngpus":1,"minimum_bytes":1024,"maximum_bytes":4194304,"step_factor":1024,
"devices":[{"rank":0,"group":0,"pid":1,"hostname":"a","device":0,"device_hex":"0000:01:00","device_info":"GPU"},
{"rank":1,"group":0,"pid":2,"hostname":"a","device":1,"device_hex":"0000:02:00","device_info":"GPU"}]},
"results":[
{"size":1024,"count":256,"type":"float","redop":"sum","root":"    -1","out_of_place":{"time":10.0,"alg_bw":0.10,"bus_bw":0.10,"nwrong":0.0},"in_place":{"time":10.0,"alg_bw":0.10,"bus_bw":0.11,"nwrong":0.0},"actual_iterations":20,"experiment_name":""},
{"size":1048576,"count":262144,"type":"float","redop":"sum","root":"    -1","out_of_place":{"time":50.0,"alg_bw":20.97,"bus_bw":20.97,"nwrong":0.0},"in_place":{"time":"nan","alg_bw":"nan","bus_bw":"nan","nwrong":null},"actual_iterations":20,"experiment_name":""},
{"size":4194304,"count":1048576,"type":"float","redop":"sum","root":"    -1","out_of_place":{"time":150.0,"alg_bw":27.96,"bus_bw":27.960000,"nwrong":0.0},"in_place":{"time":151.0,"alg_bw":27.78,"bus_bw":27.777000,"nwrong":0.0},"actual_iterations":20,"experiment_name":""},
{"size":1024,"count":512,"type":"half","redop":"sum","root":"    -1","out_of_place":null,"in_place":{"time":9.0,"alg_bw":0.11,"bus_bw":0.113,"nwrong":0.0},"actual_iterations":20,"experiment_name":""}],
"out_of_bounds":{"count":0,"okay":"true"},"average_bus_bandwidth":{"bandwidth":12.3,"okay":"unchecked"},"errors":[],"end_time":"2025-01-01 00:00:01"}
EOF2
"$plot" "$tmp/n.json" -o "$tmp/n.png" >"$tmp/n.out" 2>&1 || bad "nccl-tests JSON: exit $?: $(cat "$tmp/n.out")"
expect_summary "$tmp/n.out" "  all_reduce, 2 ranks float sum, out-of-place: 3 sizes 1K..4M, busbw at the largest 27.960 GB/s, peak 27.960 GB/s"
expect_summary "$tmp/n.out" "  all_reduce, 2 ranks float sum, in-place: 2 sizes 1K..4M, busbw at the largest 27.777 GB/s, peak 27.777 GB/s"
expect_summary "$tmp/n.out" "  all_reduce, 2 ranks half sum, in-place: 1 size 1K..1K, busbw at the largest 0.113 GB/s, peak 0.113 GB/s"
[ "$(png_size "$tmp/n.png")" = 990x605 ] || bad "n.png: $(png_size "$tmp/n.png")"
echo "ok: nccl-tests JSON: busbw against size per datatype, nan and null skipped"

# 3. hoop-bench's earlier JSON (rows, busbw), 8 and 64K.
cat >"$tmp/h.json" <<'EOF2'
{"collective": "allreduce", "world_size": 4, "algorithm": "auto", "type": "f32", "redop": "sum", "root": -1,
 "rows": [
  {"size": 8, "count": 2, "out_of_place": {"time_us": 2.0, "algbw": 0.004, "busbw": 0.006, "wrong": 0}, "in_place": {"time_us": 2.0, "algbw": 0.004, "busbw": 0.006, "wrong": 0}},
  {"size": 65536, "count": 16384, "out_of_place": {"time_us": 20.0, "algbw": 3.2768, "busbw": 4.9152, "wrong": 0}, "in_place": {"time_us": 19.0, "algbw": 3.449, "busbw": 5.174, "wrong": 0}}],
 "wrong_total": 0, "avg_busbw": 2.5}
EOF2
# With the nccl-tests file in one figure: each curve is named after its file.
"$plot" "$tmp/h.json" "$tmp/n.json" -o "$tmp/hn.png" >"$tmp/hn.out" 2>&1 || bad "two files: exit $?"
expect_summary "$tmp/hn.out" "  h.json: allreduce, 4 ranks f32 sum, out-of-place: 2 sizes 8..64K, busbw at the largest 4.915 GB/s, peak 4.915 GB/s"
expect_summary "$tmp/hn.out" "  h.json: allreduce, 4 ranks f32 sum, in-place: 2 sizes 8..64K, busbw at the largest 5.174 GB/s, peak 5.174 GB/s"
expect_summary "$tmp/hn.out" "  n.json: all_reduce, 2 ranks float sum, out-of-place: 3 sizes 1K..4M, busbw at the largest 27.960 GB/s, peak 27.960 GB/s"
echo "ok: hoop-bench's earlier JSON, and two files in one figure"

# 4. What hoop-bench writes today (nccl-tests' -J, or --json before it), one rank.
if [ -x "$bench" ]; then
    "$bench" allreduce -b 8 -e 64K -f 8 -n 2 -w 1 -J "$tmp/live.json" >"$tmp/live.log" 2>&1 ||
        "$bench" allreduce -b 8 -e 64K -f 8 -n 2 -w 1 --json "$tmp/live.json" >"$tmp/live.log" 2>&1 ||
        bad "hoop-bench failed: $(cat "$tmp/live.log")"
    "$plot" "$tmp/live.json" -o "$tmp/live.png" >"$tmp/live.out" 2>&1 ||
        bad "today's hoop-bench JSON: exit $?: $(cat "$tmp/live.out")"
    if grep -Eq "allreduce, 1 rank (f32|float) sum, out-of-place: 5 sizes 8..32K, busbw" "$tmp/live.out"; then
        echo "ok: today's hoop-bench JSON: $(sed -n 2p "$tmp/live.out")"
    else
        bad "today's hoop-bench JSON: $(cat "$tmp/live.out")"
    fi
fi

# 5. Errors: exit 2 and a message naming the file (and the line).
"$plot" "$tmp/none.jsonl" -o "$tmp/x.png" >"$tmp/e" 2>&1
[ $? = 2 ] && grep -q "none.jsonl: cannot read" "$tmp/e" || bad "missing file: $(cat "$tmp/e")"
printf '{"type":"step","step":1,"train_loss":1}\n{oops\n' >"$tmp/bad.jsonl"
"$plot" "$tmp/bad.jsonl" -o "$tmp/x.png" >"$tmp/e" 2>&1
[ $? = 2 ] && grep -q "bad.jsonl:2: not a JSON line" "$tmp/e" || bad "bad line: $(cat "$tmp/e")"
# -N cycles repeat every size: one point per size (the mean), said; a failed check named.
cat >"$tmp/cyc.json" <<'EOF2'
{"results":[
{"size":8,"type":"float","redop":"sum","out_of_place":{"bus_bw":1.0,"nwrong":0},"in_place":{"bus_bw":2.0,"nwrong":0}},
{"size":64,"type":"float","redop":"sum","out_of_place":{"bus_bw":3.0,"nwrong":0},"in_place":{"bus_bw":4.0,"nwrong":0}},
{"size":8,"type":"float","redop":"sum","out_of_place":{"bus_bw":2.0,"nwrong":0},"in_place":{"bus_bw":2.0,"nwrong":1}},
{"size":64,"type":"float","redop":"sum","out_of_place":{"bus_bw":5.0,"nwrong":0},"in_place":{"bus_bw":4.0,"nwrong":0}}]}
EOF2
"$plot" "$tmp/cyc.json" >"$tmp/e" 2>&1 || bad "-N cycles: exit $?: $(cat "$tmp/e")"
grep -q "out-of-place: 2 sizes 8..64 x 2 cycles (their mean), busbw at the largest 4.000 GB/s, peak 4.000 GB/s" "$tmp/e" &&
    grep -q "cyc.json: 1 measurement failed their check" "$tmp/e" && [ -s "$tmp/cyc.png" ] ||
    bad "-N cycles: $(cat "$tmp/e")"
# A size of 0 on a log scale, hoop-bench's CSV, a directory that is not there: exit 2.
printf '{"results":[{"size":0,"out_of_place":{"bus_bw":1}}]}' >"$tmp/z.json"
"$plot" "$tmp/z.json" >"$tmp/e" 2>&1
[ $? = 2 ] && grep -q "z.json: result 0 has size 0" "$tmp/e" || bad "size 0: $(cat "$tmp/e")"
printf 'collective,world_size,size,count\nallreduce,2,8,2\n' >"$tmp/b.csv"
"$plot" "$tmp/b.csv" -o "$tmp/x.png" >"$tmp/e" 2>&1
[ $? = 2 ] && grep -q "b.csv: a CSV file; hoop-plot reads hoop-bench's JSON" "$tmp/e" || bad "CSV: $(cat "$tmp/e")"
"$plot" "$tmp/m.jsonl" -o "$tmp/none/x.png" >"$tmp/e" 2>&1
[ $? = 2 ] && grep -q "is not a writable directory" "$tmp/e" || bad "-o in a missing directory: $(cat "$tmp/e")"
# An earlier hoop-train's diverged epoch ("-nan", "inf": no JSON): read, the values named.
printf '{"type":"epoch","step":3,"train_loss":-nan,"test_loss":inf,"test_acc":0.1}\n' >"$tmp/nan.jsonl"
"$plot" "$tmp/nan.jsonl" -o "$tmp/nan.png" >"$tmp/e" 2>&1
[ $? = 0 ] && grep -q "nan.jsonl: 2 loss or accuracy values not a finite number" "$tmp/e" &&
    grep -q "test accuracy: 1 epoch, last 10.00%" "$tmp/e" || bad "-nan and inf: $(cat "$tmp/e")"
# A record cut off by a kill, a resumed run's records after it (hoop-train starts them on a
# new line): plotted, the cut-off one skipped and named (the whole file was refused).
printf '{"type":"step","step":1,"train_loss":1}\n{"type":"step","ep\n{"type":"step","step":2,"train_loss":0.5}\n' >"$tmp/cut.jsonl"
"$plot" "$tmp/cut.jsonl" -o "$tmp/cut.png" >"$tmp/e" 2>&1
[ $? = 0 ] && grep -q "cut.jsonl:2: skipped a cut-off record" "$tmp/e" && grep -q "train loss: 2 points" "$tmp/e" ||
    bad "a cut-off record: $(cat "$tmp/e")"
# A benchmark JSON cut off inside its fourth result (hoop-bench or nccl-tests killed
# while writing it): the three complete results drawn, the cut said.
head -c "$(grep -bo '{"size":1024,"count":512' "$tmp/n.json" | cut -d: -f1)" "$tmp/n.json" >"$tmp/nc.json"
printf '{"size":1024,"count":512,"ty' >>"$tmp/nc.json"
"$plot" "$tmp/nc.json" -o "$tmp/nc.png" >"$tmp/e" 2>&1
[ $? = 0 ] && grep -q "nc.json: cut off after 3 complete results" "$tmp/e" &&
    grep -q "float sum, out-of-place: 3 sizes 1K..4M" "$tmp/e" && ! grep -q " half " "$tmp/e" ||
    bad "a cut-off benchmark JSON: $(cat "$tmp/e")"
head -c 200 "$tmp/n.json" >"$tmp/nh.json" # cut in its header: refused, saying so
"$plot" "$tmp/nh.json" -o "$tmp/nh.png" >"$tmp/e" 2>&1
[ $? = 2 ] && grep -q "nh.json: a benchmark JSON cut off before its results" "$tmp/e" ||
    bad "a benchmark JSON cut in its header: $(cat "$tmp/e")"
"$plot" "$tmp/m.jsonl" "$tmp/n.json" -o "$tmp/x.png" >"$tmp/e" 2>&1
[ $? = 2 ] && grep -q "mix metrics and benchmark results" "$tmp/e" || bad "mixed: $(cat "$tmp/e")"
"$plot" "$tmp/m.jsonl" -o "$tmp/x.svg" >"$tmp/e" 2>&1
[ $? = 2 ] && grep -q "must end in .png" "$tmp/e" || bad "not .png: $(cat "$tmp/e")"
[ -e "$tmp/x.png" ] && bad "a failed run wrote $tmp/x.png"
echo "ok: errors exit 2 naming the file"
exit $fail
