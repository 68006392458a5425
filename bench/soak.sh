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
ops=${1:-50000}
[ $# -gt 0 ] && shift
prog=${top_builddir:-.}/tests/check_soak
[ -x "$prog" ] || { echo "soak.sh: $prog is not built (make tests/check_soak)" >&2; exit 2; }
rc=0
for seed in ${@:-1}; do
    HOOP_SOAK_OPS=$ops HOOP_SOAK_SEED=$seed CK_TIMEOUT_MULTIPLIER=1000 "$prog" || rc=1
done
exit $rc
