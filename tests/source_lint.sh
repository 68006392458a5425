#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/source_lint.sh -- rules of the source tree that a compiler does not check.
#
# 1. Every source and script carries an SPDX-License-Identifier line (LICENSE is
#    BSD-3-Clause).
# 2. No thread-unsafe libc call with a shared static buffer in the library or the tools:
#    each communicator runs a progress thread and tests run ranks as threads, so
#    strerror (use hoop__strerror), inet_ntoa (inet_ntop), strtok (strtok_r),
#    localtime/gmtime/ctime/asctime (the _r forms) and rand (a hoop RNG) are banned.
# 3. No build product is part of the tree (a compiled Python cache, an object file).
set -u
src=${top_srcdir:-.}
fail=0
files=$(find "$src/src" "$src/tools" "$src/bench" "$src/tests" "$src/include" "$src/slurm" \
    "$src/scripts" "$src/.ci" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \
    -o -name '*.sh' -o -name '*.py' -o -name '*.mk' -o -name '*.sbatch' -o -name run \) \
    2>/dev/null | grep -v -e '/\.libs/' -e '/\.deps/')
[ -n "$files" ] || { echo "FAIL: no sources found under $src"; exit 1; }
for f in $files "$src/Makefile.am" "$src/configure.ac"; do
    if ! head -3 "$f" | grep -q 'SPDX-License-Identifier: BSD-3-Clause'; then
        echo "FAIL: $f has no SPDX-License-Identifier line in its first 3 lines"
        fail=1
    fi
done
[ -f "$src/LICENSE" ] || { echo "FAIL: no LICENSE file"; fail=1; }
for f in $files; do
    case $f in *.c | *.h | *.cu) ;; *) continue ;; esac
    case $f in */tests/*) continue ;; esac
    # Strip comments and strings roughly: a banned call in a comment is not a call.
    hits=$(sed -e 's://.*$::' -e 's:/\*.*\*/::g' -e 's:"[^"]*"::g' "$f" |
        grep -nE '(^|[^_a-zA-Z0-9])(strerror|inet_ntoa|strtok|localtime|gmtime|ctime|asctime|rand)[ ]*\(' |
        grep -v -e 'hoop__strerror' -e 'gai_strerror')
    if [ -n "$hits" ]; then
        echo "FAIL: $f calls a thread-unsafe libc function:"
        echo "$hits"
        fail=1
    fi
done
junk=$(find "$src" -name '__pycache__' -o -name '*.pyc' 2>/dev/null | grep -v '/hoop-[0-9]')
if [ -n "$junk" ] && [ -d "$src/.git" ]; then
    tracked=$(cd "$src" && git ls-files | grep -e '__pycache__' -e '\.pyc$' -e '\.o$' -e '\.lo$')
    [ -z "$tracked" ] || { echo "FAIL: build products tracked in git: $tracked"; fail=1; }
fi
[ "$fail" -eq 0 ] && echo "ok: SPDX lines, no thread-unsafe libc calls, no tracked build products"
exit "$fail"
