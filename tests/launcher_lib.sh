# SPDX-License-Identifier: BSD-3-Clause
# tests/launcher_lib.sh -- helpers shared by the launcher tests (sourced, not run).
#
# Sets HOOPRUN (the built launcher) and TMP (a scratch directory removed on exit),
# and offers fail/now_ms/assert_* helpers. Workers are small shell scripts written
# into $TMP by each test.

HOOPRUN=${top_builddir:-.}/tools/hooprun
if [ ! -x "$HOOPRUN" ]; then
    echo "FAIL: $HOOPRUN is not built"
    exit 1
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/hooprun-test.XXXXXX")
trap '[ -n "$KEEP" ] || rm -rf "$TMP"' EXIT
unset HOOP_TOKEN MASTER_ADDR MASTER_PORT SLURM_JOB_NODELIST SLURM_STEP_NODELIST SLURM_NNODES \
    SLURM_NODEID SLURM_STEP_ID SLURM_PROCID RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE

fail() {
    echo "FAIL: $*"
    exit 1
}

now_ms() {
    echo $(($(date +%s%N) / 1000000))
}

# Fails when any pid listed in the files given is still alive, or when a process group
# listed in $TMP/pgids still has a member.
assert_no_survivors() {
    local pid
    for pid in $(cat "$@" 2>/dev/null); do
        if kill -0 "$pid" 2>/dev/null; then
            ps -o pid,pgid,stat,args -p "$pid" || true
            fail "process $pid survived hooprun"
        fi
    done
    for pid in $(cat "$TMP"/pgid.* 2>/dev/null); do
        kill -0 -- "-$pid" 2>/dev/null && fail "process group $pid still has members"
    done
    return 0
}

# assert_contains FILE TEXT: FILE has a line containing TEXT.
assert_contains() {
    grep -qF -- "$2" "$1" || { echo "--- $1:"; cat "$1"; fail "'$2' not found in $1"; }
}

# wait_line FILE TEXT SECONDS: waits (in 50 ms looks) until FILE holds TEXT; 1 if it
# never does.
wait_line() {
    local _
    for _ in $(seq $(($3 * 20))); do
        grep -qF -- "$2" "$1" 2> /dev/null && return 0
        sleep 0.05
    done
    return 1
}

# expect_bad "TEXT" ARGS...: hooprun ARGS exits 2 with one stderr line containing TEXT,
# and nothing on stdout.
expect_bad() {
    local text=$1
    shift
    "$HOOPRUN" "$@" > "$TMP/out" 2> "$TMP/err"
    local rc=$?
    [ "$rc" = 2 ] || fail "hooprun $* exited $rc, not 2"
    [ "$(wc -l < "$TMP/err")" = 1 ] || fail "hooprun $* printed $(wc -l < "$TMP/err") lines"
    assert_contains "$TMP/err" "$text"
    [ -s "$TMP/out" ] && fail "hooprun $* printed on stdout"
    return 0
}
