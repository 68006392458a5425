# SPDX-License-Identifier: BSD-3-Clause
# scripts/tree-copy.sh -- sourced by scripts/sanitize-check.sh and scripts/fuzz.sh:
# tree_copy TOP BUILD sets src to a source tree they may configure out of place. A git
# checkout is configured in place, which rules out a plain VPATH build from it (automake
# refuses), so the tracked and untracked-but-not-ignored files are copied to
# BUILD/srcdir, keeping the timestamps of unchanged files so that make rebuilds only
# what changed; a tree that is not a checkout (a release tarball) is used as it is,
# provided it is unconfigured. Exits 1 (autogen failed) or 2 (a configured tarball).
tree_copy() {
    local top=$1 build=$2 manifest
    if [ "$(git -C "$top" rev-parse --show-toplevel 2> /dev/null)" = "$top" ]; then
        src=$build/srcdir
        mkdir -p "$src"
        manifest=$build/srcdir.files
        (cd "$top" && git ls-files -z --cached --others --exclude-standard |
            while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done) \
            > "$manifest.new"
        # Files that left the checkout since the last copy leave the copy too.
        if [ -f "$manifest" ]; then
            comm -23 <(tr '\0' '\n' < "$manifest" | sort) <(tr '\0' '\n' < "$manifest.new" | sort) |
                while IFS= read -r f; do rm -f "$src/$f"; done
        fi
        # Copy only what differs, so unchanged files keep their timestamps.
        (cd "$top" && tr '\0' '\n' < "$manifest.new" | while IFS= read -r f; do
            cmp -s "$f" "$src/$f" 2> /dev/null || printf '%s\0' "$f"
        done) > "$manifest.changed"
        if [ -s "$manifest.changed" ]; then
            (cd "$top" && tar -c --null -T "$manifest.changed" -f -) | (cd "$src" && tar -x -p -f -)
        fi
        mv "$manifest.new" "$manifest"
        rm -f "$manifest.changed"
        if [ ! -x "$src/configure" ] || [ "$src/configure.ac" -nt "$src/configure" ]; then
            (cd "$src" && ./autogen.sh > "$build/autogen.log" 2>&1) ||
                { cat "$build/autogen.log"; exit 1; }
        fi
    else
        src=$top
        if [ -f "$src/config.status" ]; then
            echo "$0: $src is configured in place and is not a git checkout;" \
                "run 'make distclean' there first" >&2
            exit 2
        fi
        [ -x "$src/configure" ] || (cd "$src" && ./autogen.sh)
    fi
}
