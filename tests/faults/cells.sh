# SPDX-License-Identifier: BSD-3-Clause
# tests/faults/cells.sh -- the cells of the fault-injection matrix (sourced, not run):
# tests/faults/matrix.sh runs them over shm, loopback TCP and TCP between network
# namespaces; tests/rdma/suite.sh (step faults) over ib in the Soft-RoCE guest.
#
# A cell starts 4 ranks, makes one of them (the victim) fail at a chosen moment, and
# checks, as issue 14 asks:
#   - every other rank (a survivor) returns an error on its own within HOOP_TIMEOUT + 1 s
#     of the fault, and its message names the victim ("rank V");
#   - where hooprun runs the job, it exits non-zero naming the victim as the first
#     failure;
#   - nothing is left behind: no process of the cell's sessions, no file in its TMPDIR,
#     no new /dev/shm entry, no socket (faults_sockets_left, the topology's; after a cut,
#     none still holding data while the link is down, none at all once it is back);
#     the checkpoint on disk is complete (fault_worker ckpt: envelope, checksum, layout)
#     and is the last one rank 0 said it saved, with nothing beside it;
#   - a stopped victim, continued once the others have ended, fails too; a victim cut
#     off fails too, naming a rank across its broken link;
# and prints the cell's row of the matrix: verdict and time, then each survivor's time
# to error (from the fault) and message. FAULTS_PROFILE=1 adds when the fault came and
# when the ranks ended, from the cell's start.
#
# Faults: the HOOP_TEST_FAULT hook (src/core/fault.c), which makes the victim send itself
# SIGKILL or SIGSTOP at a named point and prints the time it did, or a link of the
# victim's taken down with ip link (faults_link_cut) in the middle of a large call.
#
# The caller sets: FW (tests/faults/fault_worker), HOOPRUN, TRAIN (hoop-train), DATA (a
# small Fashion-MNIST cut, or empty: the training cells skip), T_S (HOOP_TIMEOUT, whole
# seconds), WORK (a scratch folder), TP (the HOOP_TRANSPORT value), LABEL (the matrix's
# first column), and defines the topology:
#   faults_prefix R        the words that run a command as rank R (ip netns exec NS, a
#                          wrapper that execs, or nothing); the pid must stay the same
#   faults_hooprun_prefix  the same for a hooprun of all 4 ranks (one host); TRAIN_WRAP
#                          (optional) the words hooprun puts before each worker
#   faults_master          MASTER_ADDR
#   faults_port            MASTER_PORT for the next cell
#   faults_sockets_left    prints the sockets a cell left (none: nothing)
#   faults_link_slow R, faults_link_cut R, faults_link_mend R
#                          (cut cells) limit R's link's rate, take it down, restore it
#   faults_side R          (optional) which side of the cut rank R is on (default: 1 for
#                          the victim, 0 for the others); after a cut every rank must
#                          name a rank on the other side
# Results: FAULTS_PASS, FAULTS_FAIL (counts) and FAULTS_FAILED (cell names).

FAULTS_PASS=0
FAULTS_FAIL=0
FAULTS_FAILED=""
FAULTS_N=4

faults_side() { [ "$1" = "$victim" ] && echo 1 || echo 0; }

# Whether cell NAME is to run: FAULTS_CELLS (a regular expression; unset: every cell).
faults_want() { [[ $1 =~ ${FAULTS_CELLS:-.} ]]; }

# The first N records of a gzipped IDX file (Fashion-MNIST), unpacked, with the count in
# its header set to N.
idx_cut() { # SRC.gz DST HEADER_BYTES RECORD_BYTES N
    local n=$5
    {
        zcat "$1" | head -c 4
        printf '%b' "$(printf '\\%03o\\%03o\\%03o\\%03o' $((n >> 24 & 255)) $((n >> 16 & 255)) \
            $((n >> 8 & 255)) $((n & 255)))"
        zcat "$1" | head -c $(($3 + $4 * n)) | tail -c +9
    } > "$2"
}

# A small Fashion-MNIST (TRAIN training and TEST test records) in DIR, from Debian's
# dataset-fashion-mnist; 1 (and nothing made) when that is not installed.
faults_data() { # DIR TRAIN TEST
    local src=/usr/share/datasets/fashion-mnist
    [ -r "$src/train-images-idx3-ubyte.gz" ] || return 1
    mkdir -p "$1"
    idx_cut "$src/train-images-idx3-ubyte.gz" "$1/train-images-idx3-ubyte" 16 784 "$2"
    idx_cut "$src/train-labels-idx1-ubyte.gz" "$1/train-labels-idx1-ubyte" 8 1 "$2"
    idx_cut "$src/t10k-images-idx3-ubyte.gz" "$1/t10k-images-idx3-ubyte" 16 784 "$3"
    idx_cut "$src/t10k-labels-idx1-ubyte.gz" "$1/t10k-labels-idx1-ubyte" 8 1 "$3"
}

# The state letter of pid (R, S, T, Z...; empty when it is gone), without a fork.
faults_state() {
    local line
    { read -r line < "/proc/$1/stat"; } 2> /dev/null || return 0
    line=${line##*) }
    echo "${line%% *}"
}

# True when pid is alive and not a zombie.
faults_alive() {
    local s
    s=$(faults_state "$1")
    [ -n "$s" ] && [ "$s" != Z ]
}

# True when pid is stopped (SIGSTOP).
faults_stopped() { [ "$(faults_state "$1")" = T ]; }

faults_now() { echo "$EPOCHREALTIME"; } # bash 5: seconds.microseconds, no fork

# Microseconds since the epoch, as an integer.
faults_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }

# Seconds from A to B (decimal numbers), 3 decimals.
faults_dt() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

# "SECONDS.NANOS" from the victim's hook line in FILE (empty when it has none).
faults_hook_time() {
    sed -n 's/^hoop: HOOP_TEST_FAULT: .* at \([0-9]*\.[0-9]*\)$/\1/p' "$1" | head -n 1
}

# Waits (0.05 s steps) until COMMAND succeeds or SECONDS pass; 1 on timeout.
faults_wait_for() { # SECONDS COMMAND...
    local end=$(($(faults_us) + $1 * 1000000))
    shift
    until "$@"; do
        [ "$(faults_us)" -lt $end ] || return 1
        sleep 0.05
    done
}

# The cell's processes: every process of the sessions of its pids ($cell_sids).
faults_session_procs() {
    ps -e -o sid=,pid=,stat=,args= | awk -v s=" $cell_sids " 'index(s, " " $1 " ")'
}

# Kills what a cell left running, by session (only this cell's sessions), and waits for
# the subshells that watched its ranks.
faults_reap() {
    local pid
    for pid in $(faults_session_procs | awk '{ print $2 }'); do
        kill -CONT "$pid" 2> /dev/null
        kill -KILL "$pid" 2> /dev/null
    done
    wait 2> /dev/null
}

# Records a problem of the current cell.
faults_bad() { cell_bad="$cell_bad; $*"; }

# The message part of a survivor's error line (fault_worker's, or hoop-train's last
# "hoop-train: " line), one line.
faults_msg_coll() { sed -n 's/^fw: rank [0-9]* error at [0-9.]* in \(.*\)$/\1/p' "$1" | tail -n 1; }
faults_msg_train() { grep '^hoop-train: ' "$1" | grep -v 'saved\|device\|parameters,' | tail -n 1 | sed 's/^hoop-train: //'; }

# Does MSG name rank V ("rank 2", or in a list: "ranks 1, 2"), not as part of a number?
faults_names() { echo "$1" | grep -qE "ranks? ([0-9]+, )*$2([^0-9]|\$)"; }
# The line of node R's hooprun (summary file SUM) that stopped its worker for the
# victim V's failure: the failure heard from the nodes' meeting is V's ("failed on node
# V (host): rank V ..."), or a survivor's that was told first and whose message names V
# ("failed on node 0 (host): rank 0 exited with code 1 (its message: ... rank V failed
# ...)": rank 0 saw V's death and its hooprun reported before V's did).
faults_stopped_for() { # R V SUM
    grep -E "^hooprun \(node $1\): .*failed on node ($2 \(.*\): rank $2 |[0-9]+ \(.*\): rank [0-9]+ .*its message: .*ranks? $2([^0-9]|\$))" "$3" 2> /dev/null
}

# Starts rank R of the cell: ENV... -- COMMAND...; out in $cell_dir/rank.R, pid in pid[R],
# exit status (once it ended) in $cell_dir/rc.R. The command leads a session of its own
# (setsid: what it starts can be found by session); a subshell waits for it, so that
# this shell never reports a job killed by a signal.
faults_start() { # R ENV... -- COMMAND...
    local r=$1 envs=()
    shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    rm -f "$cell_dir/pid.$r" "$cell_dir/rc.$r"
    (
        # shellcheck disable=SC2046 # the prefix is words
        env "${envs[@]}" setsid $(faults_prefix "$r") "$@" > "$cell_dir/rank.$r" 2>&1 &
        echo $! > "$cell_dir/pid.$r"
        wait $!
        echo $? > "$cell_dir/rc.$r"
    ) 2> /dev/null &
    until [ -s "$cell_dir/pid.$r" ]; do sleep 0.005; done
    pid[r]=$(cat "$cell_dir/pid.$r")
    cell_sids="$cell_sids ${pid[r]}"
}

# Rank R's exit status, once it has ended ("-" while it runs).
faults_rc() {
    local _
    for _ in $(seq 50); do
        [ -s "$cell_dir/rc.$1" ] && { cat "$cell_dir/rc.$1"; return; }
        faults_alive "${pid[$1]}" && break
        sleep 0.02
    done
    echo -
}

# The leftovers of the cell: processes, files, shared memory, sockets.
faults_leftovers() {
    local p f s
    p=$(faults_session_procs)
    [ -z "$p" ] || { faults_bad "processes left: $(echo "$p" | tr -s ' \n' ' ')"; faults_reap; }
    f=$(find "$cell_dir/tmp" -mindepth 1 2> /dev/null | head -n 5)
    [ -z "$f" ] || faults_bad "files left in TMPDIR: $(echo "$f" | tr '\n' ' ')"
    s=$(ls -A /dev/shm 2> /dev/null | LC_ALL=C sort | comm -13 "$WORK/shm.before" - | head -n 5)
    [ -z "$s" ] || faults_bad "new /dev/shm entries: $(echo "$s" | tr '\n' ' ')"
    # A socket closed towards a link that was down (and is back) needs the kernel a
    # moment to finish its close: the sockets must be gone within 3 s.
    faults_wait_for 3 eval '[ -z "$(faults_sockets_left)" ]'
    s=$(faults_sockets_left)
    [ -z "$s" ] || faults_bad "sockets left: $(echo "$s" | tr -s ' \n' ' ')"
}

# Begins a cell: NAME VICTIM.
faults_begin() {
    cell=$1
    victim=$2
    cell_dir=$WORK/$LABEL.$cell
    cell_sids=""
    cell_bad=""
    cell_rows=""
    rm -rf "$cell_dir"
    mkdir -p "$cell_dir/tmp"
    ls -A /dev/shm 2> /dev/null | LC_ALL=C sort > "$WORK/shm.before"
    port=$(faults_port)
    cell_t0=$(faults_now)
    unset pid
    declare -ga pid
}

# Ends a cell: checks leftovers, prints its row, counts it.
faults_end() {
    local verdict=PASS
    faults_leftovers
    [ -z "$cell_bad" ] || verdict=FAIL
    printf '%-6s %-20s %-4s (cell %s s)\n' "$LABEL" "$cell" "$verdict" \
        "$(faults_dt "$cell_t0" "$(faults_now)")"
    printf '%s' "$cell_rows"
    if [ -n "$cell_bad" ]; then
        echo "       problems:${cell_bad#;}"
        FAULTS_FAIL=$((FAULTS_FAIL + 1))
        FAULTS_FAILED="$FAULTS_FAILED $LABEL.$cell"
        for f in "$cell_dir"/rank.* "$cell_dir"/hooprun.*; do
            [ -f "$f" ] || continue
            echo "       --- ${f##*/} (last lines)"
            grep -v 'hoop INFO' "$f" | tail -n 6 | sed 's/^/       | /'
        done
    else
        FAULTS_PASS=$((FAULTS_PASS + 1))
    fi
    cell_sids="" # reaped: nothing of it is left to end (a caller's cleanup reaps these)
}

# One survivor's row: R SECONDS MESSAGE.
faults_row() {
    local shown=$3
    [ ${#shown} -le 190 ] || shown="${shown:0:187}..."
    cell_rows="$cell_rows$(printf '         rank %d  %7s s  %s' "$1" "$2" "$shown")"$'\n'
}

# MSG's status and its words agree: a HOOP_ERR_TIMEOUT speaks of a time limit or a wait (a link
# error's words under a timeout's status once came from a record adopted without its
# text). Says what is wrong (faults_bad) for rank R.
faults_coherent() { # R MSG
    case $2 in *HOOP_ERR_TIMEOUT*) ;; *) return ;; esac
    echo "$2" | grep -qE 'HOOP_TIMEOUT|within|waited|never arrived|deadline|[0-9] ?ms|no progress' ||
        faults_bad "rank $1's status is HOOP_ERR_TIMEOUT but its message tells of no time limit"
}

# Judges survivor R's error: its time T (or empty), message MSG, against the fault at F.
faults_judge() { # R T F MSG [WANT-RANK]
    local r=$1 t=$2 f=$3 msg=$4 want=${5:-$victim} dt
    if [ -z "$t" ] || [ -z "$msg" ]; then
        faults_bad "rank $r returned no error"
        faults_row "$r" "-" "(no error)"
        return
    fi
    dt=$(faults_dt "$f" "$t")
    faults_row "$r" "$dt" "$msg"
    awk -v d="$dt" -v l="$T_S" 'BEGIN { exit !(d <= l + 1) }' ||
        faults_bad "rank $r failed $dt s after the fault (limit: HOOP_TIMEOUT $T_S s + 1 s)"
    faults_names "$msg" "$want" || faults_bad "rank $r's message does not name rank $want"
    faults_coherent "$r" "$msg"
}

# ---------------------------------------------------------------- collective cells

# A cell of fault_worker ranks started by hand (env://: nobody stops the survivors):
# NAME VICTIM HOOK COUNT CALLS [stop|cut] (a cut's first call is small: see below)
#   HOOK    a HOOP_TEST_FAULT value for the victim, or "-" (cut: the fault is ip link)
#   stop    the hook stops the victim: once the survivors have ended, it is continued
#           and must fail too
#   cut     the victim's link is slowed (faults_link_slow) before the start, call 0 is
#           small (so that every rank starts call 1 at about the same time: a large one
#           would end late on some ranks, and spread their deadlines) and call 1 long;
#           once every rank is in call 1, the link goes down (faults_link_cut)
faults_coll() {
    local name=$1 v=$2 hook=$3 count=$4 calls=$5 how=${6:-kill} r f="" t msg rc
    local first=()
    faults_begin "$name" "$v"
    if [ "$how" = cut ]; then
        faults_link_slow "$v"
        first=(1024)
    fi
    for r in $(seq 0 $((FAULTS_N - 1))); do
        faults_start "$r" RANK="$r" LOCAL_RANK="$r" WORLD_SIZE=$FAULTS_N \
            LOCAL_WORLD_SIZE="${LOCAL_WS:-$FAULTS_N}" MASTER_ADDR="$(faults_master)" \
            MASTER_PORT="$port" HOOP_TOKEN=faults HOOP_TIMEOUT="$T_S" HOOP_ALGO=ring \
            HOOP_TRANSPORT="$TP" TMPDIR="$cell_dir/tmp" ${hook:+HOOP_TEST_FAULT=$hook} \
            -- "$FW" coll "$count" "$calls" "${first[@]}"
    done
    if [ "$how" = cut ]; then
        # Every rank inside call 1 (a rank that finished call 0 early would otherwise be
        # cut while the others still finish call 0).
        if faults_wait_for 60 eval '[ "$(cat "$cell_dir"/rank.* | grep -c "^fw: rank [0-9]* call 1")" = $FAULTS_N ]'; then
            sleep 0.3
            f=$(faults_now)
            faults_link_cut "$v"
        else
            faults_bad "rank $v never started call 1"
        fi
    else
        faults_wait_for 60 eval '[ -n "$(faults_hook_time "$cell_dir/rank.$v")" ]' ||
            faults_bad "the hook never fired on rank $v"
        f=$(faults_hook_time "$cell_dir/rank.$v")
    fi
    [ -n "$f" ] || f=$(faults_now)
    [ -z "${FAULTS_PROFILE:-}" ] || echo "profile: fault at +$(faults_dt "$cell_t0" "$f") s"
    # The survivors (for a cut: everyone) must end on their own; allow them a margin
    # beyond the limit, so that a late one is measured rather than killed.
    for r in $(seq 0 $((FAULTS_N - 1))); do
        [ "$r" = "$v" ] && [ "$how" != cut ] && continue
        faults_wait_for $((T_S + 10)) eval '! faults_alive ${pid[r]}' ||
            faults_bad "rank $r still runs $((T_S + 10)) s after the fault (a hang)"
    done
    if [ "$how" = stop ]; then
        if faults_stopped "${pid[v]}"; then
            local c
            c=$(faults_now)
            kill -CONT "${pid[v]}"
            faults_wait_for $((T_S + 10)) eval '! faults_alive ${pid[v]}' ||
                faults_bad "rank $v, continued, still runs $((T_S + 10)) s later"
            t=$(sed -n 's/^fw: rank [0-9]* error at \([0-9.]*\) .*/\1/p' "$cell_dir/rank.$v")
            [ -n "$t" ] || faults_bad "rank $v, continued, returned no error"
            [ -z "$t" ] || cont_row="continued at +$(faults_dt "$f" "$c") s, its error $(faults_dt "$c" "$t") s later: $(faults_msg_coll "$cell_dir/rank.$v")"
            [ -z "$t" ] || faults_coherent "$v" "$(faults_msg_coll "$cell_dir/rank.$v")"
        else
            faults_bad "rank $v is not stopped"
        fi
    fi
    if [ "$how" = cut ]; then
        # With the link still down, a socket may be closing (a FIN and a last record
        # queued), but none may still hold the call's data (they retransmit for minutes).
        local full
        full=$(faults_sockets_left | awk '$3 > 4096')
        [ -z "$full" ] || faults_bad "sockets still sending data after the failure: $(echo "$full" | tr -s ' \n' ' ')"
        faults_link_mend "$v"
    fi
    local rcs=()
    [ -z "${FAULTS_PROFILE:-}" ] || echo "profile: ended at +$(faults_dt "$cell_t0" "$(faults_now)") s"
    for r in $(seq 0 $((FAULTS_N - 1))); do rcs[r]=$(faults_rc "$r"); done
    faults_reap
    [ -z "${FAULTS_PROFILE:-}" ] || echo "profile: reaped at +$(faults_dt "$cell_t0" "$(faults_now)") s"
    for r in $(seq 0 $((FAULTS_N - 1))); do
        [ "$r" = "$v" ] && [ "$how" != cut ] && continue
        rc=${rcs[r]}
        [ "$rc" = 1 ] || faults_bad "rank $r exited with $rc, not 1 (an error)"
        # A fault in the start-up fails every rank's start-up: no rank may leave
        # hoop_comm_init with a communicator (its first call would blame another rank).
        case $hook in *:rendezvous:* | *:connect:* | *:verdict:*)
            grep -q "^fw: rank $r error at [0-9.]* in init:" "$cell_dir/rank.$r" ||
                faults_bad "rank $r's start-up succeeded although rank $v's failed" ;;
        esac
        msg=$(faults_msg_coll "$cell_dir/rank.$r")
        t=$(sed -n 's/^fw: rank [0-9]* error at \([0-9.]*\) .*/\1/p' "$cell_dir/rank.$r")
        local want=$v
        if [ "$how" = cut ]; then # every rank, the victim too, names one across the cut
            want=none
            for q in $(echo "$msg" | grep -oE 'rank [0-9]+' | awk '{ print $2 }'); do
                [ "$(faults_side "$q")" != "$(faults_side "$r")" ] && want=$q && break
            done
        fi
        # A rank that began after the fault (a slow start under load) can only have
        # waited from its own start: its limit counts from there.
        local f_r=$f t_init
        t_init=$(sed -n 's/^fw: rank [0-9]* init at \([0-9.]*\)$/\1/p' "$cell_dir/rank.$r")
        [ -n "$t_init" ] && f_r=$(awk -v f="$f" -v s="$t_init" 'BEGIN { printf "%.9f", (s > f ? s : f) }')
        faults_judge "$r" "$t" "$f_r" "$msg" "$want"
    done
    if [ -n "${cont_row:-}" ]; then
        cell_rows="$cell_rows         rank $v  $cont_row"$'\n'
        cont_row=""
    fi
    faults_end
}

# ---------------------------------------------------------------- training cells

# hoop-train of 4 ranks under hooprun (one hooprun per rank where the topology has one
# namespace per rank, HOOPRUN_PER_RANK=1), the victim killed by HOOK: NAME VICTIM HOOK.
# The checkpoint cell (HOOK at checkpoint) also checks the file left on disk.
faults_train() {
    local name=$1 v=$2 hook=$3 r f t msg ckpt line hrs
    faults_begin "$name" "$v"
    if [ -z "${DATA:-}" ]; then
        printf '%-6s %-20s %-4s %s\n' "$LABEL" "$name" SKIP "no Fashion-MNIST cut (DATA)"
        return
    fi
    local saved_prefix
    saved_prefix=$(declare -f faults_prefix)
    ckpt=$cell_dir/ckpt
    mkdir -p "$ckpt"
    local train=("$TRAIN" --data "$DATA" --epochs 2 --batch-size 64 --threads 1
        --progress plain --log-every 0 --checkpoint "$ckpt/run.ckpt" --checkpoint-every 2)
    # hooprun stops the survivors 1 s after the first failure (SIGTERM, then SIGKILL
    # after --grace). Under emulation (FAULTS_SETTLE_STRICT=0) a survivor may need more
    # than the default 3 s of grace to meet its own error, and is judged by the same
    # limit as everywhere (HOOP_TIMEOUT + 1 s): it gets the grace to reach it, so that a
    # slow one is measured, not killed.
    local grace=()
    [ "${FAULTS_SETTLE_STRICT:-1}" = 0 ] && grace=(--grace $((T_S + 2)))
    local common=(HOOP_TOKEN=faults HOOP_TIMEOUT="$T_S" HOOP_TRANSPORT="$TP" TMPDIR="$cell_dir/tmp"
        HOOP_TEST_FAULT="$hook" OPENBLAS_NUM_THREADS=1)
    if [ "${HOOPRUN_PER_RANK:-0}" = 1 ]; then
        hrs=$(seq 0 $((FAULTS_N - 1)))
        for r in $hrs; do
            faults_start "$r" "${common[@]}" -- "$HOOPRUN" --nnodes $FAULTS_N --node-rank "$r" \
                --nproc-per-node 1 --master-addr "$(faults_master)" --master-port "$port" \
                --bind none "${grace[@]}" --log-dir "$cell_dir/logs.$r" "${train[@]}"
        done
    else
        hrs=0
        faults_prefix() { faults_hooprun_prefix; } # one hooprun for all (until the cell ends)
        faults_start 0 "${common[@]}" -- "$HOOPRUN" --nproc-per-node $FAULTS_N \
            --master-addr "$(faults_master)" --master-port "$port" --bind none "${grace[@]}" \
            --log-dir "$cell_dir/logs.0" ${TRAIN_WRAP:-} "${train[@]}"
        eval "$saved_prefix"
    fi
    # The rank's own log: logs.R/rank_R.log (one hooprun per rank) or logs.0/rank_R.log.
    rlog() { if [ "${HOOPRUN_PER_RANK:-0}" = 1 ]; then echo "$cell_dir/logs.$1/rank_$1.log"; else echo "$cell_dir/logs.0/rank_$1.log"; fi; }
    faults_wait_for 120 eval '[ -n "$(faults_hook_time "$(rlog $v)" 2> /dev/null)" ]' ||
        faults_bad "the hook never fired on rank $v"
    f=$(faults_hook_time "$(rlog "$v")" 2> /dev/null)
    [ -n "$f" ] || f=$(faults_now)
    local rcs=()
    for r in $hrs; do
        faults_wait_for $((T_S + 15)) eval '! faults_alive ${pid[r]}' ||
            faults_bad "hooprun ${r} still runs $((T_S + 15)) s after the fault"
        rcs[r]=$(faults_rc "$r")
    done
    faults_reap
    for r in $hrs; do
        local rc=${rcs[r]} sum=$cell_dir/rank.$r
        [ "$rc" != 0 ] || faults_bad "hooprun $r exited 0"
        # One hooprun: it must blame the victim. One per rank: the victim's hooprun
        # blames it, the others their own worker (whose message names the victim), or,
        # having learnt of the victim's failure from the nodes' meeting first
        # (tools/hooprun_agent.c), name the victim's node and rank as they stop theirs
        # (as "attempt failed on node V (host): rank V ...", or, when node 0's hooprun
        # had already gone, in its GOODBYE: "... after the attempt failed on node V ...").
        local want=$v
        [ "${HOOPRUN_PER_RANK:-0}" = 1 ] && want=$r
        [ "$r" != "$v" ] && faults_stopped_for "$r" "$v" "$sum" > /dev/null && continue
        grep -q "^hooprun: first failure: rank $want " "$sum" ||
            faults_bad "hooprun $r does not name rank $want first: $(grep 'first failure' "$sum")"
    done
    # Each survivor: failed on its own (before hooprun's SIGTERM), in time, naming the victim.
    for r in $(seq 0 $((FAULTS_N - 1))); do
        [ "$r" = "$v" ] && continue
        local sum=$cell_dir/rank.0
        [ "${HOOPRUN_PER_RANK:-0}" = 1 ] && sum=$cell_dir/rank.$r
        line=$(grep -E "^hooprun:   $r +" "$sum" | tail -n 1)
        # Stopped by its hooprun for the victim's failure (one hooprun per rank, above).
        local stop
        stop=$(faults_stopped_for "$r" "$v" "$sum")
        if [ -z "$line" ] && [ -n "$stop" ]; then
            cell_rows="$cell_rows         rank $r  stopped by its hooprun: ${stop#hooprun }"$'\n'
            continue
        fi
        # On its own: before hooprun's SIGTERM (1 s after the first failure). Under
        # emulation (FAULTS_SETTLE_STRICT=0) a survivor may need longer; it must still
        # end with its own error (exit 1, the message below), not by the signal.
        case $line in
        *"failed too"* | *"first failure"*) ;;
        *"ended after hooprun's SIGTERM"*)
            [ "${FAULTS_SETTLE_STRICT:-1}" = 0 ] && echo "$line" | grep -qE "^hooprun: +$r +\S+ +[0-9]+ +1 " ||
                faults_bad "rank $r did not fail on its own: $line"
            ;;
        *) faults_bad "rank $r did not fail on its own: ${line:-no summary row}" ;;
        esac
        t=$(echo "$line" | grep -oE '[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}')
        [ -z "$t" ] || t=$(date -d "$(date -d "@${f%.*}" +%F) $t" +%s.%N)
        # Across midnight the row's date is the next day's.
        [ -z "$t" ] || t=$(awk -v t="$t" -v f="$f" 'BEGIN { if (t < f - 43200) t += 86400; printf "%.3f", t }')
        # The row's time is the worker's exit, which comes after its error by however
        # long its teardown takes (under ASan a leak scan of a training heap: 0.1 to
        # 0.3 s). The error's own time is when hooprun last wrote to the rank's log (its
        # last line is the error): that, when earlier, is what is judged.
        local mt
        mt=$(stat -c %.3Y "$(rlog "$r")" 2> /dev/null)
        [ -n "$t" ] && [ -n "$mt" ] && t=$(awk -v t="$t" -v m="$mt" 'BEGIN { printf "%.3f", m < t ? m : t }')
        msg=$(faults_msg_train "$(rlog "$r")")
        faults_judge "$r" "$t" "$f" "$msg"
    done
    if [ -f "$ckpt/run.ckpt" ]; then
        local saved check
        saved=$(sed -n 's/^hoop-train: saved .* (step \([0-9]*\))$/\1/p' "$(rlog 0)" | tail -n 1)
        check=$("$FW" ckpt "$ckpt/run.ckpt" 2>&1)
        cell_rows="$cell_rows         checkpoint: $check (last save announced: step ${saved:-none})"$'\n'
        case $check in "ckpt ok: step ${saved:-x},"*) ;; *) faults_bad "the checkpoint is not the last one saved (step ${saved:-none}): $check" ;; esac
    elif grep -q 'saved' "$(rlog 0)" 2> /dev/null; then
        faults_bad "rank 0 said it saved a checkpoint, but there is none"
    fi
    local extra
    extra=$(find "$ckpt" -mindepth 1 ! -name run.ckpt | head -n 3)
    [ -z "$extra" ] || faults_bad "files left beside the checkpoint: $(echo "$extra" | tr '\n' ' ')"
    faults_end
}
