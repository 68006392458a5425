#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/launcher_smoke.sh -- the README's first job: 4 workers meet through the store under
# hooprun (on the port hooprun reserved), pass a barrier, add and all-gather. Also: bad
# env exits 2, a missing rank 0 exits 1 at about HOOP_TIMEOUT.
. "${top_srcdir:-.}/tests/launcher_lib.sh"
SMOKE=${top_builddir:-.}/tools/hoop-smoke
[ -x "$SMOKE" ] || fail "$SMOKE is not built"

t0=$(now_ms)
"$HOOPRUN" --nproc-per-node 4 "$SMOKE" > "$TMP/out" 2> "$TMP/err"
rc=$?
ms=$(($(now_ms) - t0))
echo "smoke: rc=$rc, ${ms} ms"
[ "$rc" = 0 ] || { cat "$TMP/out" "$TMP/err"; fail "4-worker smoke exited $rc"; }
[ "$(cat "$TMP/out")" = "smoke: 4 ranks joined, barrier ok, allgather ok" ] ||
    { cat "$TMP/out"; fail "unexpected smoke output"; }

# Eight workers, twice in a row (a fresh port each time).
for _ in 1 2; do
    "$HOOPRUN" --prefix --nproc-per-node 8 "$SMOKE" > "$TMP/out8" 2>&1 || { cat "$TMP/out8"; fail "8 workers"; }
    assert_contains "$TMP/out8" "[rank 0] smoke: 8 ranks joined, barrier ok, allgather ok"
done

# Bad or missing env: exit 2 with a message naming the variable.
MASTER_ADDR=127.0.0.1 MASTER_PORT=abc RANK=0 WORLD_SIZE=1 "$SMOKE" 2> "$TMP/e1"
[ $? = 2 ] || fail "MASTER_PORT=abc did not give exit 2"
assert_contains "$TMP/e1" "MASTER_PORT"
"$SMOKE" 2> "$TMP/e2"
[ $? = 2 ] || fail "a missing env did not give exit 2"
assert_contains "$TMP/e2" "MASTER_ADDR"

# -h is --help (exit 0, the usage); --help with a value is refused like any bad argument.
"$SMOKE" -h > "$TMP/h" 2>&1 || fail "hoop-smoke -h exited $?"
assert_contains "$TMP/h" "usage: hooprun --nproc-per-node N hoop-smoke"
"$SMOKE" --help=foo > "$TMP/h2" 2>&1
[ $? = 2 ] || fail "hoop-smoke --help=foo did not give exit 2"
assert_contains "$TMP/h2" "unexpected argument '--help=foo'"

# Rank 1 of 2 with nobody hosting the store: fails (exit 1) near HOOP_TIMEOUT=2 s.
t0=$(now_ms)
MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + RANDOM % 20000)) RANK=1 WORLD_SIZE=2 \
    HOOP_TOKEN=x HOOP_TIMEOUT=2 "$SMOKE" 2> "$TMP/e3"
rc=$?
ms=$(($(now_ms) - t0))
echo "missing rank 0: rc=$rc, ${ms} ms"
[ "$rc" = 1 ] || { cat "$TMP/e3"; fail "a missing rank 0 gave $rc, not 1"; }
[ "$ms" -lt 10000 ] || fail "a missing rank 0 took $ms ms with HOOP_TIMEOUT=2"
echo "PASS"
