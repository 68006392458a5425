#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/mixed_links.sh -- ranks whose links differ agree on the cost model: six processes
# on this host, rank 0 with HOOP_TRANSPORT=tcp and the others in auto mode, so ranks 3
# and 4 (whose peers are all auto ranks) link over shm only while every other rank has a
# tcp link. At 64 KiB the shm figures pick ring and tcp's pick rd; a rank that modelled
# only its own links would call another algorithm than its peers (HOOP_ERR_MISMATCH).
# Every rank must model the slowest link of the comm: rd, and the all-reduces succeed.
. "${top_srcdir:-.}/tests/launcher_lib.sh"
BENCH=${top_builddir:-.}/bench/hoop-bench
[ -x "$BENCH" ] || fail "hoop-bench is not built"

for _ in 1 2 3; do # a random port may be taken: try another
    port=$((20000 + RANDOM % 12000))
    pids=""
    for r in 0 1 2 3 4 5; do
        tp=auto
        [ "$r" = 0 ] && tp=tcp
        HOOP_TRANSPORT=$tp HOOP_TIMEOUT=60 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r \
            WORLD_SIZE=6 LOCAL_RANK=$r LOCAL_WORLD_SIZE=6 \
            "$BENCH" allreduce -b 64K -e 64K -n 2 -w 1 -c 1 --show-algo > "$TMP/out.$r" 2>&1 &
        pids="$pids $!"
    done
    rc=0
    for p in $pids; do wait "$p" || rc=1; done
    [ "$rc" = 0 ] && break
    grep -q "Address already in use" "$TMP"/out.* || break
done
[ "$rc" = 0 ] || { cat "$TMP"/out.*; fail "a rank failed"; }
grep -q "MISMATCH" "$TMP"/out.* && fail "ranks called different algorithms"
line=$(grep -E '^ +65536 ' "$TMP/out.0")
[ -n "$line" ] || { cat "$TMP/out.0"; fail "no 64 KiB row"; }
# shellcheck disable=SC2086 # the row, split into its columns
set -- $line
[ "${13}" = 0 ] && [ "${9}" = 0 ] || fail "wrong values: $line"
[ "${14}" = rd ] || fail "64 KiB ran ${14}, not rd (tcp's figures): $line"
echo "PASS: 6 ranks, mixed tcp/shm links, one algorithm (rd) at 64 KiB"
