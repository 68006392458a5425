#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/public_headers.sh -- every public header compiles on its own, strictly:
#   as C99 with -std=c99 -pedantic -Werror -Wall -Wextra, and
#   as C++ (C++11, the oldest a user may still have) with -pedantic -Werror -Wall -Wextra,
# each one alone in a translation unit (so it includes what it uses) and twice in a row
# (its include guard works). The generated hoop/version.h comes from the build tree.
set -u
src=${top_srcdir:-.}
build=${top_builddir:-.}
cc=${CC:-cc}
cxx=${HEADER_CXX:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hoop-headers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
n=0

headers=$(cd "$src/include/hoop" && ls -- *.h)
[ -f "$build/include/hoop/version.h" ] && headers="$headers version.h"
headers=$(printf '%s\n' $headers | sort -u)
[ -n "$headers" ] || { echo "FAIL: no headers in $src/include/hoop"; exit 1; }

# compile LANG-NAME COMPILER FLAGS... : compiles $tmp/t.* with the include paths.
try() {
    what=$1 file=$2
    shift 2
    if ! "$@" -I"$build/include" -I"$src/include" -fsyntax-only "$file" >"$tmp/out" 2>&1; then
        echo "FAIL: hoop/$h as $what:"
        sed 's/^/    /' "$tmp/out"
        fail=1
    fi
}

for h in $headers; do
    # A declaration after the includes: ISO C forbids an empty translation unit.
    printf '#include "hoop/%s"\n#include "hoop/%s"\ntypedef int hoop_header_check;\n' \
        "$h" "$h" >"$tmp/t.c"
    cp "$tmp/t.c" "$tmp/t.cc"
    try "C99" "$tmp/t.c" $cc -std=c99 -pedantic -Werror -Wall -Wextra
    [ -n "$cxx" ] && try "C++11" "$tmp/t.cc" $cxx -std=c++11 -pedantic -Werror -Wall -Wextra
    n=$((n + 1))
done
[ "$n" -ge 14 ] || { echo "FAIL: only $n headers found: $headers"; fail=1; }
[ -n "$cxx" ] || echo "note: no C++ compiler found by configure; checked C99 only"
[ "$fail" -eq 0 ] && echo "ok: $n public headers compile alone as C99${cxx:+ and C++11} (-pedantic -Werror)"
exit "$fail"
