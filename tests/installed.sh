#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/installed.sh -- what `make install` puts on a user's machine, installed with
# DESTDIR into the build tree:
#   1. every public header (and the generated hoop/version.h), the tools' man pages;
#   2. a tiny program compiled and linked with `pkg-config --cflags --libs hoop` runs
#      against the installed shared library and prints the version;
#   3. the same program linked statically with `pkg-config --static --libs hoop` runs
#      (Libs.private holds everything libhoop.a needs);
#   4. hoop.pc lists only what libhoop.so links: every -l of --static --libs is a
#      NEEDED entry of the installed libhoop.so, and every NEEDED entry (but the C
#      runtime's) is listed.
set -u
src=${top_srcdir:-.}
build=$(cd "${top_builddir:-.}" && pwd)
version=${PACKAGE_VERSION:?PACKAGE_VERSION is not set (run through make check)}
: "${libdir:?libdir is not set (run through make check)}" "${includedir:?}" "${mandir:?}" "${prefix:?}"
cc=${CC:-cc}
pkgconfig=${PKG_CONFIG:-pkg-config}
command -v "$pkgconfig" >/dev/null || { echo "SKIP: no pkg-config"; exit 77; }
command -v readelf >/dev/null || { echo "SKIP: no readelf (binutils)"; exit 77; }
# A program built without -fsanitize cannot load a sanitized libhoop.so: such a build is
# for hoop's own tests (scripts/sanitize-check.sh), not for installing.
grep -q '^#define HOOP_SANITIZERS' "$build/config.h" 2>/dev/null &&
    { echo "SKIP: a sanitizer build (--enable-sanitizers) is not installed"; exit 77; }
dest="$build/tests/installed.d"
rm -rf "$dest"
trap '[ -n "${KEEP:-}" ] || rm -rf "$dest"' EXIT
fail=0
bad() {
    echo "FAIL: $*"
    fail=1
}

# --- install --------------------------------------------------------------------------
# MAKEFLAGS is dropped: this make must not join the jobserver of the make check that runs
# this test, nor inherit its command-line variables (TESTS=...).
if ! env -u MAKEFLAGS -u MFLAGS ${MAKE:-make} -C "$build" install DESTDIR="$dest" \
    >"$dest.log" 2>&1; then
    echo "FAIL: make install DESTDIR=$dest failed:"
    tail -20 "$dest.log"
    rm -f "$dest.log"
    exit 1
fi
rm -f "$dest.log"
lib="$dest$libdir"
[ -f "$lib/libhoop.so" ] || bad "no $lib/libhoop.so"
[ -f "$lib/libhoop.a" ] || bad "no $lib/libhoop.a"
[ -f "$lib/pkgconfig/hoop.pc" ] || bad "no $lib/pkgconfig/hoop.pc"

# --- 1. headers and man pages -----------------------------------------------------------
for h in $(cd "$src/include/hoop" && ls -- *.h) version.h; do
    [ -f "$dest$includedir/hoop/$h" ] || bad "hoop/$h is not installed in $includedir/hoop"
done
if [ -f "$build/man/hooprun.1" ]; then
    for t in hooprun hoop-train hoop-bench hoop-smoke; do
        [ -f "$dest$mandir/man1/$t.1" ] || bad "man page $t.1 is not installed in $mandir/man1"
    done
fi

# --- 2. a program built with pkg-config against the shared library ----------------------
# Only the DESTDIR copy of hoop.pc is seen, its prefix moved into DESTDIR (a sysroot
# would move the -L paths of the other libraries too).
PKG_CONFIG_LIBDIR="$lib/pkgconfig"
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
export PKG_CONFIG_LIBDIR
pkgconfig="$pkgconfig --define-variable=prefix=$dest$prefix"
[ "$($pkgconfig --modversion hoop)" = "$version" ] ||
    bad "pkg-config --modversion hoop is '$($pkgconfig --modversion hoop)', not $version"
cat >"$dest/t.c" <<'EOF'
#include <stdio.h>
#include <hoop/hoop.h>
int main(void)
{
    if (hoop_version() != HOOP_VERSION_CODE) return 3;
    if (hoop_store_init(NULL, NULL) != HOOP_ERR_INVALID || hoop_last_error()[0] == 0) return 4;
    printf("%s %s\n", hoop_version_string(), hoop_status_name(HOOP_ERR_TIMEOUT));
    return 0;
}
EOF
cflags=$($pkgconfig --cflags hoop) libs=$($pkgconfig --libs hoop) slibs=$($pkgconfig --static --libs hoop)
# shellcheck disable=SC2086
if $cc -std=c99 -Wall -Werror $cflags "$dest/t.c" -o "$dest/t-shared" $libs 2>"$dest/cc.err"; then
    out=$(LD_LIBRARY_PATH="$lib" "$dest/t-shared")
    [ "$out" = "$version HOOP_ERR_TIMEOUT" ] || bad "the shared-linked program printed '$out' (exit $?)"
    LD_LIBRARY_PATH="$lib" ldd "$dest/t-shared" | grep -q "libhoop.so.* => $lib/" ||
        bad "the program did not load the installed libhoop.so: $(LD_LIBRARY_PATH="$lib" ldd "$dest/t-shared" | grep hoop)"
else
    bad "cc \$(pkg-config --cflags --libs hoop) failed: $(cat "$dest/cc.err")"
fi

# --- 3. the same program linked statically ----------------------------------------------
static=$(echo "$slibs" | sed "s|-lhoop\b|-Wl,-Bstatic -lhoop -Wl,-Bdynamic|")
# shellcheck disable=SC2086
if $cc -std=c99 $cflags "$dest/t.c" -o "$dest/t-static" $static 2>"$dest/cc.err"; then
    readelf -d "$dest/t-static" | grep -q 'NEEDED.*libhoop' && bad "t-static still needs libhoop.so"
    out=$("$dest/t-static")
    [ "$out" = "$version HOOP_ERR_TIMEOUT" ] || bad "the static-linked program printed '$out'"
else
    bad "a static link with \$(pkg-config --static --libs hoop) = '$slibs' failed: $(tail -5 "$dest/cc.err")"
fi

# --- 4. hoop.pc's libraries = libhoop.so's NEEDED ----------------------------------------
needed=$(readelf -d "$lib/libhoop.so" | sed -n 's/.*(NEEDED).*\[\(lib[^].]*\)\.so.*\]/\1/p' |
    grep -v -e '^libc$' -e '^ld-linux' -e '^libgcc_s$' -e '^libpthread$' -e '^libdl$' -e '^librt$')
listed=$($pkgconfig --static --libs-only-l hoop | tr ' ' '\n' | sed -n 's/^-l//p' | grep -v '^hoop$' |
    sed 's/^/lib/' | sort -u)
for l in $listed; do
    echo "$needed" | grep -qx "$l" ||
        bad "hoop.pc lists -l${l#lib}, but libhoop.so does not link $l (NEEDED: $(echo $needed))"
done
for n in $needed; do
    echo "$listed" | grep -qx "$n" || bad "libhoop.so links $n, but hoop.pc does not list -l${n#lib}"
done
# CUDA's libraries belong to the CUDA module alone (loaded on first use), never to libhoop.
for n in $needed; do
    case $n in libcuda* | libcublas*) bad "libhoop.so links $n: CUDA must stay in libhoop-cuda.so" ;; esac
done
if [ -e "$lib/hoop/libhoop-cuda.so" ]; then
    readelf -d "$lib/hoop/libhoop-cuda.so" | grep -q 'NEEDED.*libcudart' ||
        bad "the installed libhoop-cuda.so does not link libcudart"
fi
[ -z "$($pkgconfig --print-requires hoop)" ] || bad "hoop.pc has Requires: $($pkgconfig --print-requires hoop)"

[ "$fail" -eq 0 ] && echo "ok: installed headers, man pages, hoop.pc (links: $(echo $listed)); shared and static programs run"
exit "$fail"
