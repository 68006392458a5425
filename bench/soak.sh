#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# bench/soak.sh -- the long soak (issue 14): tests/check_soak with many more calls and
# several seeds. Each pass (shared memory, then TCP on loopback) runs OPS collectives of
# random kind, size, dtype, op, root, algorithm and placement on 4 ranks, checks every
# result exactly, and fails when open fds or threads change or resident memory or the
# heap grows after the warm-up; its summary lines are printed.
#
#   bench/soak.sh [OPS [SEED...]]      (defaults: 50000 calls per pass, seed 1)
#
# Run from a build tree after `make check` (or `make tests/check_soak`).
set -eu
usage() {
    echo "usage: soak.sh [OPS [SEED...]]: OPS a whole number above 200 (the warm-up's calls), each SEED a whole number below 2^63; $*" >&2
    exit 2
}
ops=${1:-50000}
[ $# -gt 0 ] && shift
case $ops in '' | *[!0-9]*) usage "OPS is '$ops'" ;; esac
[ ${#ops} -le 9 ] && [ "$ops" -gt 200 ] || usage "OPS is $ops"
for seed in "$@"; do
    case $seed in '' | *[!0-9]*) usage "a SEED is '$seed'" ;; esac
    [ ${#seed} -le 18 ] || usage "a SEED is $seed"
done
prog=${top_builddir:-.}/tests/check_soak
[ -x "$prog" ] || { echo "soak.sh: $prog is not built (make tests/check_soak)" >&2; exit 2; }
rc=0
for seed in ${@:-1}; do
    HOOP_SOAK_OPS=$ops HOOP_SOAK_SEED=$seed CK_TIMEOUT_MULTIPLIER=1000 "$prog" || rc=1
done
exit $rc
