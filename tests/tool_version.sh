#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/tool_version.sh -- every tool answers --version with one line
# "NAME (hoop) VERSION" (configure's PACKAGE_VERSION) and exit 0, and --help with exit 0;
# the man pages help2man wrote from them (when configure found help2man) carry the
# tool's name, the version and its options, name every tool in SEE ALSO (hoop-plot was
# missing), and only the libhoop tools' pages say they read the HOOP_* settings (the
# Python hoop-plot's said so too); and every page has a SYNOPSIS (help2man makes one
# only from a help line starting "Usage:"; the tools said "usage:", and hoop-train's usage
# line had run into the description).
set -u
build=${top_builddir:-.}
version=${PACKAGE_VERSION:?PACKAGE_VERSION is not set (run through make check)}
fail=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hoop-version.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# tool PATH OPTION: an option the man page must document.
for spec in tools/hooprun:--nproc-per-node tools/hoop-train:--epochs \
    bench/hoop-bench:--json tools/hoop-smoke:--version tools/hoop-plot:--output; do
    path=${spec%%:*} option=${spec#*:} name=${path##*/}
    if ! "$build/$path" --version >"$tmp/out" 2>"$tmp/err"; then
        echo "FAIL: $name --version exited non-zero: $(cat "$tmp/err")"
        fail=1
        continue
    fi
    want="$name (hoop) $version"
    if [ "$(cat "$tmp/out")" != "$want" ] || [ -s "$tmp/err" ]; then
        echo "FAIL: $name --version printed '$(cat "$tmp/out")' (stderr '$(cat "$tmp/err")'), not '$want'"
        fail=1
    fi
    "$build/$path" --help >/dev/null 2>&1 || { echo "FAIL: $name --help exited non-zero"; fail=1; }
    man="$build/man/$name.1"
    if [ -f "$build/man/hooprun.1" ] || [ -f "$man" ]; then
        [ -f "$man" ] || { echo "FAIL: $man was not built"; fail=1; continue; }
        upper=$(echo "$name" | tr 'a-z' 'A-Z')
        # help2man makes a SYNOPSIS only from a help line that starts "Usage:" (not "usage:").
        sed -n '/^\.SH SYNOPSIS$/{n;p;q}' "$man" | grep -q '^\.B hoop' ||
            { echo "FAIL: $man has no SYNOPSIS (does $name --help start 'Usage:'?)"; fail=1; }
        grep -q "^\.TH $upper " "$man" || { echo "FAIL: $man has no .TH $upper line"; fail=1; }
        grep -q "$version" "$man" || { echo "FAIL: $man does not name version $version"; fail=1; }
        grep -q -- "$(echo "$option" | sed 's/-/\\\\-/g')" "$man" ||
            { echo "FAIL: $man does not document $option"; fail=1; }
        for t in hooprun hoop-train hoop-bench hoop-smoke hoop-plot; do
            grep -q "^\.BR $(echo "$t" | sed 's/-/\\\\-/g') (1)" "$man" ||
                { echo "FAIL: $man's SEE ALSO does not name $t(1)"; fail=1; }
        done
        if [ "$name" = hoop-plot ]; then
            grep -q "reads the HOOP_\* settings" "$man" &&
                { echo "FAIL: $man says hoop-plot reads the HOOP_* settings"; fail=1; }
            grep -q "reads none of the HOOP_\* settings" "$man" ||
                { echo "FAIL: $man does not say hoop-plot reads no HOOP_* setting"; fail=1; }
        else
            grep -q "reads the HOOP_\* settings" "$man" ||
                { echo "FAIL: $man does not say $name reads the HOOP_* settings"; fail=1; }
        fi
    fi
done
[ -f "$build/man/hooprun.1" ] || echo "note: no man pages were built (configure found no help2man)"
[ "$fail" -eq 0 ] && echo "ok: hooprun, hoop-train, hoop-bench, hoop-smoke, hoop-plot --version = $version"
exit "$fail"
