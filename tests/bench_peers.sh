#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/bench_peers.sh -- bench/compare.sh's parts in miniature, so that a clone can trust
# them before a run of several minutes: bench/peers/tcpbw over loopback (the server and
# the client count the same bytes; bad flags exit 2), hoop-bench as compare.sh runs it,
# the Gloo and Open MPI peers on one 8-byte size when they are installed (each says why
# it is skipped otherwise), bench/compare_table.py reading all of their outputs, with
# HOOP_DEBUG lines and a failed hoop run's hooprun summary among them, and compare.sh's
# --help and refusals of bad input (nothing heavier: the comparison takes minutes).
. "${top_srcdir:-.}/tests/launcher_lib.sh"
BENCH=${top_builddir:-.}/bench/hoop-bench
TCPBW=${top_builddir:-.}/bench/peers/tcpbw
PEERS=${top_srcdir:-.}/bench/peers
[ -x "$BENCH" ] && [ -x "$TCPBW" ] || fail "hoop-bench or tcpbw is not built"
command -v python3 > /dev/null || { echo "SKIP: no python3 (compare_table.py needs it)"; exit 77; }
PYTHON=${PYTHON:-/usr/bin/python3}

# tcpbw: one stream for 0.3 s; the two sides agree on the bytes.
port=$((20000 + RANDOM % 12000))
"$TCPBW" -s -p $port -B 127.0.0.1 -i 10 > "$TMP/srv" &
srv=$!
"$TCPBW" -c 127.0.0.1 -p $port -t 0.3 -l 65536 > "$TMP/cli" || fail "tcpbw client"
wait $srv || fail "tcpbw server"
sb=$(sed -n 's/^server: streams=1 bytes=\([0-9]*\) secs=.*/\1/p' "$TMP/srv")
cb=$(sed -n 's/^client: streams=1 bytes=\([0-9]*\) secs=.*/\1/p' "$TMP/cli")
[ -n "$sb" ] && [ "$sb" = "$cb" ] && [ "$sb" -gt 0 ] ||
    { cat "$TMP/srv" "$TMP/cli"; fail "tcpbw: server and client disagree"; }
"$TCPBW" -c 127.0.0.1 -P 99 2> "$TMP/err"
[ $? = 2 ] || fail "tcpbw -P 99 did not exit 2"
assert_contains "$TMP/err" "-P"

RAW=$TMP/raw
mkdir -p "$RAW"
echo "date: test" > "$RAW/meta.txt"
# (HOOP_DEBUG=INFO: its lines share the file, as compare.sh keeps stderr with stdout)
HOOP_DEBUG=INFO "$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce --algo auto -z 2 -a 3 --show-algo \
    -b 8 -e 8 -n 50 -w 5 -c 1 > "$RAW/lo_hoop_lat_r1.txt" 2>&1 || { cat "$RAW/lo_hoop_lat_r1.txt"; fail "hoop"; }
# A line of 13 fields that starts with two integers but is no row.
echo "8 2 float sum -1 stray words in place of the times and rates here" >> "$RAW/lo_hoop_lat_r1.txt"
# Round 2's hoop run fails (as ALGO=bogus makes compare.sh's): its file holds only
# stderr, hooprun's failure summary; the table still comes, with "-" for it.
"$HOOPRUN" --nproc-per-node 2 "$BENCH" allreduce --algo bogus -b 8 -e 8 \
    > "$RAW/lo_hoop_lat_r2.txt" 2>&1 && fail "--algo bogus ran"
ran="hoop"
if "$PYTHON" -c 'import torch.distributed' 2> /dev/null; then
    GLOO_SOCKET_IFNAME=lo MASTER_ADDR=127.0.0.1 timeout 120 "$PYTHON" "$PEERS/gloo_allreduce.py" \
        --launch 2 -b 8 -e 8 -r 1 -w 1 -T 1 -l test > "$RAW/lo_gloo_lat_r1.txt" 2>&1 ||
        { cat "$RAW/lo_gloo_lat_r1.txt"; fail "the Gloo peer"; }
    assert_contains "$RAW/lo_gloo_lat_r1.txt" "# Out of bounds values : 0 OK"
    ran="$ran gloo"
else
    echo "no torch in $PYTHON: the Gloo peer is not tried"
fi
if command -v mpicc > /dev/null && command -v mpirun > /dev/null; then
    mpicc -O2 -Wall -Wextra -Werror -o "$TMP/mpi_allreduce" "$PEERS/mpi_allreduce.c" ||
        fail "mpi_allreduce.c does not build"
    timeout 120 mpirun --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include lo -np 2 "$TMP/mpi_allreduce" -b 8 -e 8 -r 1 -w 1 -T 1 -l test \
        > "$RAW/lo_mpi_lat_r1.txt" 2>&1 || { cat "$RAW/lo_mpi_lat_r1.txt"; fail "the MPI peer"; }
    assert_contains "$RAW/lo_mpi_lat_r1.txt" "# Out of bounds values : 0 OK"
    ran="$ran mpi"
else
    echo "no Open MPI (mpicc, mpirun): the MPI peer is not tried"
fi

# compare_table.py: hoop's row has numbers and its algorithm; a peer that ran has its time.
# (it died on the first HOOP_DEBUG or hooprun line: int('vm:28036:28038'))
python3 "${top_srcdir:-.}/bench/compare_table.py" "$RAW" > "$TMP/table" 2> "$TMP/err" ||
    { cat "$TMP/err"; fail "compare_table.py"; }
grep -q '^| 2 | - | - | - | - | - | - |  |$' "$TMP/table" ||
    { cat "$TMP/table"; fail "compare_table.py: the failed round 2 is not all '-'"; }
row=$(grep '^| 1 |' "$TMP/table" | head -1)
python3 - "$row" "$ran" <<'EOF' || { cat "$TMP/table"; fail "compare_table.py's latency row"; }
import sys
cells = [c.strip() for c in sys.argv[1].strip('|').split('|')]
ran = sys.argv[2].split()
assert float(cells[1]) > 0 and float(cells[2]) > 0 and cells[7] in ("rd", "ring", "rhd"), cells
assert (cells[3] != '-') == ("gloo" in ran) and (cells[4] != '-') == ("mpi" in ran), cells
EOF
# compare.sh's own input, checked before anything runs (SKIP_LO and SKIP_NETNS keep a
# run light should a check let one through): --help prints its usage, exit 0 (it exited
# 2 saying nothing); a bad value or BUILD_DIR exits 2 with one line naming it (ROUNDS=abc
# was a seq error and an empty comparison, exit 0; /nonexistent bash's cd error).
COMPARE=${top_srcdir:-.}/bench/compare.sh
"$COMPARE" --help > "$TMP/out" 2>&1 || { cat "$TMP/out"; fail "compare.sh --help exited $?"; }
assert_contains "$TMP/out" "Usage: $COMPARE [BUILD_DIR]"
assert_contains "$TMP/out" "env: ROUNDS=2"
refused() { # FRAGMENT ENV... -- ARGS...: compare.sh exits 2 with one line holding FRAGMENT
    local frag=$1 envs=()
    shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env SKIP_LO=1 SKIP_NETNS=1 OUT="$TMP/cmp" "${envs[@]}" "$COMPARE" "$@" > "$TMP/out" 2>&1
    local rc=$?
    [ $rc = 2 ] && [ "$(wc -l < "$TMP/out")" = 1 ] && grep -qF -- "compare.sh: $frag" "$TMP/out" ||
        { cat "$TMP/out"; fail "compare.sh ${envs[*]} $*: exit $rc, not 2 with one line '$frag'"; }
}
refused "ROUNDS='abc' is not a number of rounds" ROUNDS=abc --
refused "ROUNDS='0' is not a number of rounds" ROUNDS=0 --
refused "LINK_SECS='1s' is not a number of seconds" LINK_SECS=1s --
refused "ALGO='bogus' is not one of auto ring rd rhd" ALGO=bogus --
refused "LO_TRANSPORT='ib' is not tcp or shm" LO_TRANSPORT=ib --
refused "SKIP_LO='yes' is not 0 or 1" SKIP_LO=yes --
refused "PYTHON='$TMP/nopython' is not a program" PYTHON="$TMP/nopython" --
refused "BUILD_DIR '$TMP/none' is not a directory" -- "$TMP/none"
refused "unknown option '-x'" -- -x
[ ! -e "$TMP/cmp" ] || fail "compare.sh made OUT before refusing"
echo "PASS (ran: $ran)"
