#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/fuzz/usage.sh -- scripts/fuzz.sh refuses bad usage with exit 2 before it builds
# anything: above all -t 0, which libFuzzer would take as "no time limit" (a run that
# never ends), and -j 0. Only refusals are run here: valid arguments would build. The
# long soak, bench/soak.sh, refuses an OPS or SEED that is not a whole number in range
# (it ran seed 0 for 'x' and failed inside Check for an OPS under its warm-up).
set -u
fuzz=${top_srcdir:-.}/scripts/fuzz.sh
fail=0
# Should a refusal regress, the build would go to a scratch directory, not the tree's.
BUILD_DIR=$(mktemp -d)
export BUILD_DIR
trap 'rm -rf "$BUILD_DIR"' EXIT
refused() { # ARGS...: fuzz.sh ARGS must exit 2 at once
    out=$(timeout 20 bash "$fuzz" "$@" 2>&1)
    rc=$?
    if [ $rc = 2 ]; then
        echo "ok: fuzz.sh $* -> 2: $out"
    else
        echo "FAIL: fuzz.sh $* -> $rc (want 2): $out"
        fail=1
    fi
}
refused -t 0 hostlist
refused -t 000 hostlist
refused -j 0 hostlist
refused -t abc hostlist
refused -t -5 hostlist
refused -t 5 -j x hostlist
refused -t 5 nosuch
refused -p 0 hostlist
refused -t 5 -p x hostlist
soak=${top_srcdir:-.}/bench/soak.sh
soak_refused() { # ARGS...: soak.sh ARGS must exit 2 before it runs anything
    out=$(top_builddir=/nonexistent timeout 20 sh "$soak" "$@" 2>&1)
    rc=$?
    case $rc:$out in
    2:usage:*) echo "ok: soak.sh $* -> 2: $out" ;;
    *) echo "FAIL: soak.sh $* -> $rc (want 2 with its usage): $out" && fail=1 ;;
    esac
}
soak_refused abc
soak_refused 100
soak_refused 201 x
soak_refused 201 -1
soak_refused 201 1 99999999999999999999
exit $fail
