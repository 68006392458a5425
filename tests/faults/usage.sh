#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/faults/usage.sh -- tests/faults/matrix.sh refuses bad settings with exit 2 and a
# line saying why, before it runs a cell: a FAULTS_TIMEOUT that is not whole seconds of
# at least 1 (0.5 aborted the run half-way in shell arithmetic and it passed, "0
# failed"), and a FAULTS_CELLS that is not a regular expression or matches no cell's
# name (a typo ran nothing and passed). top_builddir points nowhere: should a refusal
# regress, the matrix stops at once on its missing programs (exit 1) instead of running.
set -u
matrix=${top_srcdir:-.}/tests/faults/matrix.sh
fail=0
refused() { # VAR=VALUE...: matrix.sh with these settings must exit 2 with its reason
    out=$(env top_builddir=/nonexistent "$@" timeout 20 bash "$matrix" 2>&1)
    rc=$?
    case $rc:$out in
    2:matrix.sh:*) echo "ok: $* -> 2: $out" ;;
    *) echo "FAIL: $* -> $rc (want 2 and matrix.sh's reason): $out" && fail=1 ;;
    esac
}
refused FAULTS_TIMEOUT=0.5
refused FAULTS_TIMEOUT=0
refused FAULTS_TIMEOUT=000
refused FAULTS_TIMEOUT=abc
refused FAULTS_TIMEOUT=-3
refused FAULTS_TIMEOUT=99999999999999999999
refused FAULTS_CELLS=kill@conect
refused FAULTS_CELLS='kill@(connect'
refused FAULTS_CELLS=kill@connect FAULTS_TIMEOUT=1.5
# Every cell's name is known (a name the check missed would be refused wrongly): each
# one alone passes the check and reaches the programs' check (exit 1 here).
for c in kill@rendezvous kill@rendezvous-r0 kill@connect fail@verdict kill@reduce-scatter \
    kill@all-gather stop@collective kill@ddp-backward kill@checkpoint stop@ddp-backward \
    cut@link; do
    out=$(env top_builddir=/nonexistent FAULTS_CELLS="^$c\$" timeout 20 bash "$matrix" 2>&1)
    rc=$?
    case $rc:$out in
    1:FAIL:*"is not built"*) echo "ok: FAULTS_CELLS=^$c\$ accepted" ;;
    *) echo "FAIL: FAULTS_CELLS=^$c\$ -> $rc: $out" && fail=1 ;;
    esac
done
exit $fail
