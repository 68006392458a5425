#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/bench_peers.sh -- bench/compare.sh's parts in miniature, so that a clone can trust
# them before a run of several minutes: bench/peers/tcpbw over loopback (the server and
# the client count the same bytes; bad flags exit 2), hoop-bench as compare.sh runs it,
# the Gloo and Open MPI peers on one 8-byte size when they are installed (each says why
# it is skipped otherwise), and bench/compare_table.py reading all of their outputs, with
# HOOP_DEBUG lines and a failed hoop run's hooprun summary among them.
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
echo "PASS (ran: $ran)"
