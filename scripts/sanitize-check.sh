#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# scripts/sanitize-check.sh -- build hoop with a sanitizer in its own directory and run
# its tests there.
#
#   scripts/sanitize-check.sh asan [TEST...]   ASan + LeakSanitizer + UBSan, make check
#   scripts/sanitize-check.sh tsan [TEST...]   ThreadSanitizer, the threaded tests
#   scripts/sanitize-check.sh tsan all         ThreadSanitizer, the whole suite
#
# Options (before the kind): -c starts the build directory afresh; -j N runs N jobs
# (default 2). TEST names a test as make check does (tests/check_shm); without any,
# asan runs the whole suite and tsan runs $TSAN_TESTS below (the whole suite passes
# under TSan too, in about 2.5 times as long).
#
# The build lives in build-asan/ or build-tsan/ at the top of the checkout (ignored by
# git; BUILD_DIR overrides it). The checkout itself may be configured and built in
# place, which rules out a plain VPATH build from it (automake refuses a configured
# source directory), so the script copies the sources git knows (tracked files and
# untracked ones that are not ignored, uncommitted edits included) into
# <build>/srcdir and runs a VPATH build from that copy in <build>. Later runs update
# the copy, keeping the timestamps of unchanged files, so make rebuilds only what
# changed. Outside git it builds from the checkout directly, which must then be
# unconfigured (make distclean).
#
# A finding fails the run: ASan and UBSan stop the program at the first error,
# LeakSanitizer reports what is unreachable when a process exits (Check's forked test
# processes included; a process that leaves by _exit is not checked), and TSan reports
# every race, then exits 66. On failure the logs of the failing tests are printed; all
# logs stay in the build directory (tests/*.log, check.out, make.out). Exit status: 0
# when every test passed or skipped, 1 when the build or a test failed, 2 on bad usage.
set -euo pipefail

# The tests where threads share memory: the progress thread of every communicator
# (collectives, ring, reduce, direct, tcp, and the votes of check_mismatch), the
# shared-memory segments (shm), the store's server thread, DDP's grad-ready hooks
# racing the bucket all-reduces, the soak (check_soak: random collectives, several in flight), and hooprun with its workers (launcher_smoke; launcher_nodes: node 0's hooprun serves the nodes' store from a thread). The training and benchmark scripts
# (ddp_train.sh, hoop_train.sh, hoop_bench.sh) take a minute each under TSan here;
# "tsan all" runs them with the rest.
TSAN_TESTS="tests/check_collectives tests/check_direct tests/check_shm tests/check_ddp
tests/check_tcp tests/check_ring tests/check_reduce tests/check_store tests/check_mismatch
tests/check_soak tests/launcher_smoke.sh tests/launcher_nodes.sh"

usage() {
    echo "usage: $0 [-c] [-j N] asan|tsan [TEST...]" >&2
    exit 2
}

clean=0
jobs=2
while getopts "cj:h" opt; do
    case $opt in
    c) clean=1 ;;
    j) jobs=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
kind=$1
shift
case $kind in
asan) san=address ;;
tsan) san=thread ;;
*)
    echo "$0: unknown kind '$kind': use asan (ASan + UBSan) or tsan (ThreadSanitizer)" >&2
    exit 2
    ;;
esac
case $jobs in '' | *[!0-9]*) echo "$0: -j '$jobs' is not a number" >&2 && exit 2 ;; esac

top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$top/build-$kind}
# The script empties its build directory at times: it only does so to one it made
# (it holds the mark), never to a directory of something else that BUILD_DIR named.
mark=.hoop-sanitize-check
if [ -d "$build" ] && [ ! -f "$build/$mark" ] && [ -n "$(ls -A "$build")" ]; then
    echo "$0: $build exists, is not empty and was not made by this script; name another BUILD_DIR" >&2
    exit 2
fi
[ "$clean" -eq 0 ] || rm -rf "$build"
mkdir -p "$build"
build=$(cd "$build" && pwd)
[ "$build" != "$top" ] || { echo "$0: the build directory cannot be the checkout" >&2 && exit 2; }
touch "$build/$mark"

# ---------------------------------------------------------------- the sources
. "$top/scripts/tree-copy.sh"
tree_copy "$top" "$build"

# ---------------------------------------------------------------- configure and build
cd "$build"
if ! grep -q -e "--enable-sanitizers=$san" config.status 2> /dev/null ||
    [ "$src/configure" -nt config.status ]; then
    # Objects of another configuration (another sanitizer, or flags from an older
    # configure.ac) must not mix with these: start the build afresh (the copy of the
    # sources stays).
    find . -mindepth 1 -maxdepth 1 ! -name srcdir ! -name srcdir.files ! -name "$mark" \
        -exec rm -rf {} +
    "$src/configure" --enable-sanitizers="$san" > configure.out 2>&1 ||
        { tail -40 configure.out; tail -40 config.log; exit 1; }
fi
echo "sanitize-check: $kind build in $build"
start=$(date +%s)
make -j"$jobs" > make.out 2>&1 || { tail -60 make.out; exit 1; }
echo "sanitize-check: $kind build took $(($(date +%s) - start)) s"

# ---------------------------------------------------------------- run the tests
# Every finding is fatal and leaves a stack. Options a caller put in these variables
# come first, so a caller can add some (verbosity=...) but not turn leak checking or
# halting off. Suppressions are only for code hoop does not own, and each entry says
# why (scripts/sanitize-suppressions/; there are none today).
#
# Reports go to files, one per process (reports/<sanitizer>.<program>.<pid>), not to
# stderr: the script tests launch tools whose stderr goes to temporary files, and some
# expect a process to fail (a killed rank, a bad option), so a report could pass
# unseen in the test's verdict. Any report file fails the run, and the script prints
# each one. (UBSan beside ASan ignores log_path in gcc 12 and writes to stderr; a
# "runtime error:" line in any test log fails the run too. A process that has reported
# holds its report file open: a test in it that counts descriptors may fail too.)
reports=$build/reports
rm -rf "$reports"
mkdir -p "$reports"
sup=$src/scripts/sanitize-suppressions
lsan_sup="" tsan_sup=""
[ ! -f "$sup/lsan.supp" ] || lsan_sup="suppressions=$sup/lsan.supp"
[ ! -f "$sup/tsan.supp" ] || tsan_sup=":suppressions=$sup/tsan.supp"
# The CUDA driver maps its memory where ASan keeps its protected shadow gap, and every
# CUDA call then fails as out of memory (google/sanitizers#629): a CUDA build opens the
# gap, or check_cuda would skip on a GPU machine for want of a device.
gap=""
! grep -q '^#define HOOP_HAVE_CUDA 1' config.h || gap=":protect_shadow_gap=0"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1$gap:log_path=$reports/asan:log_exe_name=1"
export LSAN_OPTIONS="${LSAN_OPTIONS:-}${LSAN_OPTIONS:+${lsan_sup:+:}}$lsan_sup"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan:log_exe_name=1"
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}halt_on_error=0:second_deadlock_stack=1$tsan_sup:log_path=$reports/tsan:log_exe_name=1"
# Check's per-test timeouts only catch hangs; stretch them by the sanitizer's slowdown
# (a machine shared with other builds adds to it). Latency bounds a test asserts are a
# different matter: see latency_checked() in tests/run_suite.h.
case $kind in
asan) export CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-3} ;;
tsan) export CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-10} ;;
esac

tests=${*:-}
[ "$tests" != all ] || tests=""
[ $# -gt 0 ] || [ "$kind" = asan ] || tests=$(echo "$TSAN_TESTS" | tr '\n' ' ')
start=$(date +%s)
rc=0
if [ -n "$tests" ]; then
    make -j"$jobs" check TESTS="$tests" > check.out 2>&1 || rc=$?
else
    make -j"$jobs" check > check.out 2>&1 || rc=$?
fi
grep -E '^(PASS|FAIL|SKIP|ERROR|XFAIL|XPASS):' check.out || true
echo "sanitize-check: $kind tests took $(($(date +%s) - start)) s"
failed=""
if [ "$rc" -ne 0 ]; then
    failed=$(grep -E '^(FAIL|ERROR|XPASS):' check.out | awk '{print $2}' | tr '\n' ' ')
    [ -n "$failed" ] || tail -60 check.out # it failed before any test ran: the build
    for t in $failed; do
        log=${t%.sh}.log # automake's log of tests/x.sh is tests/x.log
        echo "================================================================ $log"
        [ -f "$log" ] || continue
        if [ "$(wc -l < "$log")" -gt 300 ]; then
            head -200 "$log"
            echo "... ($(wc -l < "$log") lines; the whole log is $build/$log)"
            tail -60 "$log"
        else
            cat "$log"
        fi
    done
fi
mapfile -t ub < <(grep -l 'runtime error:' tests/*.log 2> /dev/null || true)
if [ "${#ub[@]}" -gt 0 ]; then
    echo "sanitize-check: UBSan findings in ${ub[*]}:"
    grep -h -A12 'runtime error:' "${ub[@]}" | head -100
fi
# A report file holds a finding when it names an error or a race; one with warnings
# alone (a test that asks ASan to return NULL for a huge allocation is warned about
# each) is listed but fails nothing.
mapfile -t found < <(grep -l -E 'ERROR: [A-Za-z]+Sanitizer|WARNING: ThreadSanitizer|runtime error:' \
    "$reports"/* 2> /dev/null || true)
warned=$(find "$reports" -type f | wc -l)
warned=$((warned - ${#found[@]}))
[ "$warned" -eq 0 ] || echo "sanitize-check: $warned process(es) left warnings only in $reports"
nreports=$((${#found[@]} + ${#ub[@]}))
if [ "${#found[@]}" -gt 0 ]; then
    echo "sanitize-check: ${#found[@]} process(es) reported findings (in $reports):"
    for f in "${found[@]}"; do
        echo "================================================================ $(basename "$f")"
        # A TSan report runs long; its first lines name the race, its end the summary.
        if [ "$(wc -l < "$f")" -gt 300 ]; then
            head -200 "$f"
            echo "... ($(wc -l < "$f") lines)"
            tail -40 "$f"
        else
            cat "$f"
        fi
    done
fi
if [ "$rc" -ne 0 ] || [ "$nreports" -gt 0 ]; then
    what=$failed
    [ "$rc" -eq 0 ] || [ -n "$failed" ] || what="the build of the tests "
    [ "$nreports" -eq 0 ] || what="$what($nreports sanitizer report(s))"
    echo "sanitize-check: $kind FAILED: $what" >&2
    exit 1
fi
echo "sanitize-check: $kind passed"
