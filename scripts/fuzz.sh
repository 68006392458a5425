#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# scripts/fuzz.sh -- builds the libFuzzer targets of tests/fuzz/ with clang, ASan and UBSan
# (configure CC=clang --enable-fuzz --enable-sanitizers, in its own build directory,
# default build-fuzz/) and runs each for a bounded time from its seed corpus.
#
#   scripts/fuzz.sh [-t SECONDS] [-j N] [-p P] [TARGET...]  (default: 30 s each, every target)
#
# -j N: make's jobs for the build; -p P: how many targets fuzz at once (default 1; each
# target is one process on one core, so a machine with P free cores gives each its whole
# SECONDS as with -p 1, in 1/P of the wall time).
#
# Each run starts from tests/fuzz/corpus/TARGET (read only) and grows a working corpus in
# BUILD/corpus/TARGET, which later runs reuse. Per target it prints libFuzzer's totals:
# executions, exec/s, edges covered (cov), features (ft), corpus size. A crash, a
# sanitizer report, a leak or a timeout (-timeout=10 s per input) stops that target; the
# input that did it is kept as BUILD/crashes/TARGET/crash-* (or leak-*, timeout-*), and
# the fix goes with that file copied into tests/fuzz/corpus/TARGET/, where make check
# replays it (tests/fuzz/replay_TARGET). Exit status: 0 no finding, 1 a finding or a
# failed build, 2 bad usage; stopped by SIGHUP, SIGINT or SIGTERM it stops its fuzzers
# and exits 128 + the signal.
set -euo pipefail
secs=30
jobs=2
par=1
while getopts "t:j:p:h" opt; do
    case $opt in
    t) secs=$OPTARG ;;
    j) jobs=$OPTARG ;;
    p) par=$OPTARG ;;
    *) echo "usage: $0 [-t SECONDS] [-j N] [-p P] [TARGET...]" >&2 && exit 2 ;;
    esac
done
shift $((OPTIND - 1))
# At least 1 each: libFuzzer reads -max_total_time=0 as "no limit" (a run that never
# ends), and make refuses -j0.
for v in "$secs" "$jobs" "$par"; do
    case $v in '' | *[!0-9]*) v=0 ;; esac
    [ "${#v}" -le 9 ] && [ "$((10#$v))" -ge 1 ] ||
        { echo "$0: -t, -j and -p take whole numbers of at least 1" >&2 && exit 2; }
done
all="hostlist settings idx checkpoint store tcp shm ib header"
targets=${*:-$all}
for t in $targets; do
    case " $all " in *" $t "*) ;; *) echo "$0: unknown target '$t' ($all)" >&2 && exit 2 ;; esac
done
command -v clang > /dev/null || { echo "$0: clang is not installed (Debian: clang libclang-rt-14-dev)" >&2; exit 2; }

top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build-fuzz}
mkdir -p "$build"
build=$(cd "$build" && pwd)
[ "$build" != "$top" ] || { echo "$0: the build directory cannot be the checkout" >&2 && exit 2; }
. "$top/scripts/tree-copy.sh"
tree_copy "$top" "$build"

cd "$build"
if ! grep -q -e "--enable-fuzz" config.status 2> /dev/null || [ "$src/configure" -nt config.status ]; then
    find . -mindepth 1 -maxdepth 1 ! -name srcdir ! -name srcdir.files ! -name corpus \
        -exec rm -rf {} +
    "$src/configure" CC=clang --enable-fuzz --enable-sanitizers --without-cuda > configure.out 2>&1 ||
        { tail -40 configure.out; tail -40 config.log; exit 1; }
fi
start=$(date +%s)
progs=$(for t in $targets; do echo "tests/fuzz/fuzz_$t"; done)
make -j"$jobs" $progs > make.out 2>&1 || { tail -60 make.out; exit 1; }
echo "fuzz: built $(echo $targets) in $(($(date +%s) - start)) s ($build)"

export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1:halt_on_error=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:print_stacktrace=1"
# fuzz_one TARGET: runs it, writes its summary to fuzz-TARGET.sum; its exit status is
# libFuzzer's.
fuzz_one() {
    local t=$1 log=fuzz-$1.log r=0 execs rate cov
    mkdir -p "corpus/$t" "crashes/$t"
    "./tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 \
        -print_final_stats=1 -artifact_prefix="crashes/$t/" "corpus/$t" "$src/tests/fuzz/corpus/$t" \
        > "$log" 2>&1 || r=$?
    execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
    rate=$(awk '/stat::average_exec_per_sec/ {print $2}' "$log")
    cov=$(grep -E '^#[0-9]+' "$log" | tail -1 | sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\) corp: \([0-9]*\).*/cov \1 ft \2 corpus \3/p')
    echo "fuzz: $t: ${execs:-?} executions (${rate:-?}/s), ${cov:-no coverage line}, exit $r" > "fuzz-$t.sum"
    if [ "$r" -ne 0 ]; then
        grep -E -A30 'ERROR: |runtime error|==ERROR|SUMMARY' "$log" | head -60 >> "fuzz-$t.sum"
        echo "fuzz: $t: the input is in $build/crashes/$t/ (whole log: $build/$log)" >> "fuzz-$t.sum"
    fi
    return "$r"
}
# Stopped by a signal (a CI stage's time limit, ^C to this script alone), it stops its
# fuzzers too: each is the child of a subshell below, and would otherwise run out its
# SECONDS as an orphan, a core each. By parent pid: only this run's fuzzers.
stop_all() {
    local j
    for j in $(jobs -p); do
        pkill -TERM -P "$j" 2> /dev/null || true
        kill -TERM "$j" 2> /dev/null || true
    done
    wait 2> /dev/null || true
    echo "$0: stopped by a signal; the fuzzers were stopped too" >&2
    exit "$1"
}
trap 'stop_all 129' HUP
trap 'stop_all 130' INT
trap 'stop_all 143' TERM
# P at a time; the summaries are printed in the targets' order.
running=0
for t in $targets; do
    rm -f "fuzz-$t.sum"
    if [ "$running" -ge "$par" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    fuzz_one "$t" &
    running=$((running + 1))
done
wait || true
rc=0
for t in $targets; do
    if [ -f "fuzz-$t.sum" ]; then cat "fuzz-$t.sum"; else echo "fuzz: $t: no summary (the run was cut short)"; fi
    grep -q "^fuzz: $t: .*, exit 0\$" "fuzz-$t.sum" 2> /dev/null || rc=1
done
exit $rc
