/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/hooprun.c -- the hoop launcher: starts nproc_per_node workers on this node with
 * the env:// contract set (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK,
 * MASTER_ADDR, MASTER_PORT, HOOP_TOKEN, and torchrun's GROUP_RANK, ROLE_RANK, ...).
 *
 * This file turns flags (hoop's and torchrun's spellings), the environment and Slurm's
 * variables into a hooprun_plan (precedence: flag, then environment, then Slurm, then
 * defaults), prints it for --dry-run, and runs it through hooprun_proc.c once per
 * attempt: after a failure, --max-restarts starts the whole group again with a new
 * rendezvous. Bad flags or env: one line on stderr, exit 2. Single-threaded.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/env.h"
#include "core/fault.h"
#include "core/hostlist.h"
#include "core/log.h"
#include "core/launch.h"
#include "hoop/version.h"
#include "hooprun.h"
#include "transport/transport.h"

#define DEFAULT_PORT 29500
#define RDZV_DEFAULT_PORT 29400 /* torchrun's default for --rdzv-endpoint without a port */
#define DEFAULT_GRACE_MS 3000
/* after a SIGINT/SIGTERM/SIGHUP/SIGQUIT hooprun forwarded, when --grace is not given: the
 * workers may be saving a checkpoint (torchelastic gives its workers 30 s too) */
#define DEFAULT_STOP_GRACE_MS 30000
#define NPROC_MAX 4096
#define RESTARTS_MAX 1000

static const char usage[] =
    "Usage: hooprun [OPTION]... --nproc-per-node P PROG ARGS...\n"
    "  or:  hooprun -h | --help | --help-env\n"
    "\n"
    "OPTION: [--nnodes N] [--node-rank K] [--master-addr A]\n"
    "        [--master-port Q | --rdzv-endpoint A[:Q] | --standalone]\n"
    "        [--max-restarts R] [--log-dir DIR [--tee [0-3]]] [--bind core|none]\n"
    "        [--grace S] [--prefix] [--dry-run]\n"
    "\n"
    "Starts P workers of PROG on this node. Worker i of node K gets RANK = K*P + i,\n"
    "LOCAL_RANK = i, WORLD_SIZE = N*P, LOCAL_WORLD_SIZE = P, NODE_RANK = K, MASTER_ADDR,\n"
    "MASTER_PORT and HOOP_TOKEN in its environment, and its own process group; also\n"
    "torchrun's GROUP_RANK = K, GROUP_WORLD_SIZE = N, ROLE_RANK = RANK, ROLE_WORLD_SIZE =\n"
    "WORLD_SIZE, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, and, with P > 1,\n"
    "OMP_NUM_THREADS=1 unless it is set. torchrun's spellings with '_' work too:\n"
    "--nproc_per_node, --node_rank, --master_addr, --master_port, --rdzv_endpoint,\n"
    "--rdzv_backend, --rdzv_id, --max_restarts, --log_dir, --no_python. torchrun flags\n"
    "that hooprun lacks (-m, --run-path, --redirects, --role, ...) are refused, each with\n"
    "what to do instead.\n"
    "\n"
    "  --nnodes N          nodes in the job; N:N is accepted (default: SLURM_NNODES, which\n"
    "                      must match the hosts of Slurm's node list, else 1)\n"
    "  --node-rank K       this node's index, 0..N-1 (default: SLURM_NODEID, required with\n"
    "                      several hosts in Slurm's node list, else 0); each\n"
    "                      node needs its own: one claimed twice while a node is missing\n"
    "                      ends the job at once (exit 2); later, the newcomer alone exits 2\n"
    "  --nproc-per-node P  workers on this node, 1..4096, or auto|cpu: one per CPU hooprun\n"
    "                      may use (required)\n"
    "  --master-addr A     host of rank 0's store (default: MASTER_ADDR; under Slurm with\n"
    "                      N > 1 the first host of SLURM_STEP_NODELIST inside an srun step,\n"
    "                      else of SLURM_JOB_NODELIST; else 127.0.0.1 on one node, and\n"
    "                      required on several): a host name\n"
    "                      (letters, digits, '-', '_', '.'; up to 253), an IPv4 address,\n"
    "                      or an IPv6 one without brackets (fe80::1%eth0 too); checked by\n"
    "                      its form, not looked up\n"
    "  --master-port Q     its port, 1..65535 (default: MASTER_PORT; with one node and no\n"
    "                      address or port given, a free port of 127.0.0.1; else 29500);\n"
    "                      with N > 1 the nodes' hoopruns also meet at Q + 1 (node 0's\n"
    "                      serves it) before each attempt: both ports must be open\n"
    "  --rdzv-endpoint A[:Q]  the same as --master-addr A --master-port Q (Q: 29400); an\n"
    "                      IPv6 A in brackets: [::1]:29500; --rdzv-backend c10d|static\n"
    "                      and --rdzv-id are accepted and unused\n"
    "  --standalone        one node on 127.0.0.1 with a free port, whatever MASTER_ADDR,\n"
    "                      MASTER_PORT or Slurm say\n"
    "  --max-restarts R    after a failure, stop everyone and start the whole group again,\n"
    "                      up to R times (default 0), each time with a new rendezvous (a\n"
    "                      new free port when hooprun picked it, and a HOOP_TOKEN carrying\n"
    "                      the restart count, so a worker of an earlier attempt cannot join);\n"
    "                      with N > 1 every node starts each attempt together (they meet\n"
    "                      at MASTER_PORT + 1), and every node needs the same R\n"
    "  --log-dir DIR       write each worker's stdout and stderr, as written, to\n"
    "                      DIR/rank_N.log (DIR/rank_N.restart_K.log after restart K),\n"
    "                      instead of the terminal; DIR and its missing parents are made\n"
    "  --tee, -t [0-3]     with --log-dir, also show 1 stdout, 2 stderr, 3 both (the default)\n"
    "                      on the terminal, as torchrun's --tee\n"
    "  --bind core|none    core (default): bind each worker to its own block of the CPUs\n"
    "                      hooprun may use (hwloc's topology-aware split; nobody is bound\n"
    "                      when there are fewer CPUs than workers); none: no binding\n"
    "  --grace S           seconds between SIGTERM and SIGKILL when stopping (default 3,\n"
    "                      or 30 after a SIGINT, SIGTERM, SIGHUP or SIGQUIT that hooprun\n"
    "                      forwards: the workers may be saving a checkpoint)\n"
    "  --prefix            prefix each worker's terminal lines with \"[rank N] \" (as\n"
    "                      mpirun --tag-output; also --tag-output). Off by default, as\n"
    "                      mpirun and torchrun: rank 0's lines (hoop-train's log,\n"
    "                      hoop-bench's nccl-tests report) reach parsers unchanged.\n"
    "                      --no-prefix: the default, accepted. Log files never carry one.\n"
    "  --dry-run           print what each worker would get (every variable above, with\n"
    "                      the first attempt's restart count, and its CPUs), start nothing\n"
    "  --no-python         accepted: hooprun always runs PROG itself, as torchrun\n"
    "                      --no-python does (for a Python script, PROG is python3 or the\n"
    "                      script with its #! line; for a module, python3 -m MODULE)\n"
    "  --help-env          list the HOOP_* settings\n"
    "  --version           print hooprun's version and exit\n"
    "\n"
    "Output: a worker's stderr always, and its stdout with --prefix or --log-dir or on a\n"
    "terminal, pass through hooprun, which relays them line by line: a line goes out\n"
    "whole as it ends (prefixed under --prefix), so relayed lines of different ranks\n"
    "never mix; a piece ending in '\\r' (a progress bar being redrawn) goes out at once;\n"
    "a line longer than 64 KiB goes out in 64 KiB pieces, each ended by a newline, and a\n"
    "last line without one gets one. Otherwise the workers share hooprun's stdout\n"
    "directly, as under torchrun: a stdout line written in pieces, or longer than 4096\n"
    "bytes (PIPE_BUF) into a pipe, can be cut by another rank's output. hooprun always\n"
    "reads the workers' stderr: its last lines name a failure. A reader that stops\n"
    "reading stops the relayed workers once 1 MiB waits for it, never hooprun's watch.\n"
    "\n"
    "HOOP_TOKEN: kept when set, with one node followed by this launch's 32 random bits\n"
    "(-XXXXXXXX, replacing its last characters where it would pass 63), so that two jobs\n"
    "given one MASTER_PORT and token cannot join each other; with one node, 128 random\n"
    "bits are generated when it is not set.\n"
    "With several nodes every node needs the same token, so export it before starting\n"
    "hooprun on each node, e.g. in the sbatch script:\n"
    "  export HOOP_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \\n')\n"
    "\n"
    "When a worker fails (non-zero exit or signal), hooprun sends SIGTERM to every worker's\n"
    "process group 1 s later (workers failing at the same time end on their own\n"
    "meanwhile), SIGKILL after the grace period, then names the first failure with its\n"
    "last stderr lines and prints a summary (rank, host, pid, exit code, signal, time), and\n"
    "exits with that worker's code (128 + signal). SIGINT, SIGTERM, SIGHUP, SIGQUIT,\n"
    "SIGUSR1 and SIGUSR2 are forwarded.\n";

typedef struct cli {
    int nnodes, node_rank, nproc, port; /* -1 = not given */
    const char *addr;
    char rdzv_host[256]; /* --rdzv-endpoint's host */
    int rdzv;            /* --rdzv-endpoint given */
    int port_flag;       /* --master-port given */
    int standalone, max_restarts, tee;
    const char *log_dir;
    int64_t grace_ms;
    int grace_given; /* --grace given: it applies after a stop signal too */
    int prefix, dry_run, bind;
    char **argv;
} cli;

/* Prints "hooprun: <message> (see hooprun --help)" and returns 2, the usage exit code. */
static int bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hooprun: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see hooprun --help)\n");
    va_end(ap);
    return 2;
}

/* Parses an integer flag or variable value; prints the one-line error itself. */
static int parse_num(const char *what, const char *s, int64_t min, int64_t max, int *out)
{
    int64_t v;
    if (hoop__parse_int(what, s, min, max, &v) != HOOP_OK) {
        /* "out of range" and "is empty; expected ..." already give the range */
        if (strstr(hoop_last_error(), "out of range") || strstr(hoop_last_error(), "expected"))
            fprintf(stderr, "hooprun: %s\n", hoop_last_error());
        else
            fprintf(stderr, "hooprun: %s; allowed: an integer in %" PRId64 "..%" PRId64 "\n",
                    hoop_last_error(), min, max);
        return 2;
    }
    *out = (int)v;
    return 0;
}

enum {
    OPT_NNODES = 256,
    OPT_NODE_RANK,
    OPT_NPROC,
    OPT_ADDR,
    OPT_PORT,
    OPT_RDZV_ENDPOINT,
    OPT_RDZV_BACKEND,
    OPT_RDZV_ID,
    OPT_STANDALONE,
    OPT_MAX_RESTARTS,
    OPT_LOG_DIR,
    OPT_TEE,
    OPT_GRACE,
    OPT_BIND,
    OPT_HELP_ENV,
    OPT_NO_PYTHON
};

/* hoop's spellings, then torchrun's with '_' (the '-' ones are the same). */
static const struct option long_opts[] = {
    {"nnodes", required_argument, NULL, OPT_NNODES},
    {"node-rank", required_argument, NULL, OPT_NODE_RANK},
    {"nproc-per-node", required_argument, NULL, OPT_NPROC},
    {"master-addr", required_argument, NULL, OPT_ADDR},
    {"master-port", required_argument, NULL, OPT_PORT},
    {"rdzv-endpoint", required_argument, NULL, OPT_RDZV_ENDPOINT},
    {"rdzv-backend", required_argument, NULL, OPT_RDZV_BACKEND},
    {"rdzv-id", required_argument, NULL, OPT_RDZV_ID},
    {"standalone", no_argument, NULL, OPT_STANDALONE},
    {"max-restarts", required_argument, NULL, OPT_MAX_RESTARTS},
    {"log-dir", required_argument, NULL, OPT_LOG_DIR},
    {"tee", optional_argument, NULL, OPT_TEE},
    {"grace", required_argument, NULL, OPT_GRACE},
    {"bind", required_argument, NULL, OPT_BIND},
    {"no-prefix", no_argument, NULL, 'n'},
    {"prefix", no_argument, NULL, 'p'},
    {"tag-output", no_argument, NULL, 'p'},
    {"dry-run", no_argument, NULL, 'd'},
    {"help", no_argument, NULL, 'h'},
    {"help-env", no_argument, NULL, OPT_HELP_ENV},
    {"version", no_argument, NULL, 'V'},
    {"node_rank", required_argument, NULL, OPT_NODE_RANK},
    {"nproc_per_node", required_argument, NULL, OPT_NPROC},
    {"master_addr", required_argument, NULL, OPT_ADDR},
    {"master_port", required_argument, NULL, OPT_PORT},
    {"rdzv_endpoint", required_argument, NULL, OPT_RDZV_ENDPOINT},
    {"rdzv_backend", required_argument, NULL, OPT_RDZV_BACKEND},
    {"rdzv_id", required_argument, NULL, OPT_RDZV_ID},
    {"max_restarts", required_argument, NULL, OPT_MAX_RESTARTS},
    {"log_dir", required_argument, NULL, OPT_LOG_DIR},
    {"no-python", no_argument, NULL, OPT_NO_PYTHON},
    {"no_python", no_argument, NULL, OPT_NO_PYTHON},
    {NULL, 0, NULL, 0},
};

/* torchrun's flags that hooprun lacks, with what to do instead: named as such, not as an
 * unknown flag (both spellings; the value, if any, does not matter). */
static const struct {
    const char *name, *hint;
} torchrun_only[] = {
    {"-m", "hooprun runs PROG directly, as torchrun --no-python does: for a module, give "
           "python3 -m MODULE ARGS... as PROG"},
    {"--module", "hooprun runs PROG directly, as torchrun --no-python does: for a module, give "
                 "python3 -m MODULE ARGS... as PROG"},
    {"--run-path", "hooprun runs PROG directly, as torchrun --no-python does: give python3 "
                   "SCRIPT ARGS... as PROG"},
    {"--monitor-interval", "hooprun notices a worker's end at once (it is told, not polling): "
                           "drop it"},
    {"--redirects", "--log-dir DIR writes each rank's stdout and stderr to DIR/rank_N.log "
                    "(with --tee to see them too)"},
    {"-r", "torchrun's -r is --redirects: --log-dir DIR writes each rank's stdout and stderr "
           "to DIR/rank_N.log (with --tee to see them too)"},
    {"--role", "hooprun's workers have one role: ROLE_RANK = RANK, ROLE_WORLD_SIZE = "
               "WORLD_SIZE"},
    {"--local-addr", "each rank's links listen on the address routed towards MASTER_ADDR, or "
                     "on HOOP_SOCKET_IFNAME's (hooprun --help-env)"},
    {"--rdzv-conf", "the rendezvous takes no settings but HOOP_TIMEOUT (hooprun --help-env)"},
    {"--local-ranks-filter", "every rank's lines are shown; --log-dir DIR keeps each rank's "
                             "in DIR/rank_N.log"},
    {"--start-method", "hooprun always starts PROG with fork and exec"},
    {"--log-line-prefix-template", "--prefix starts each line with \"[rank N] \""},
};

/* The hint for flag (as given: "--run_path=x", "-m") when it is torchrun's, else NULL;
 * name gets the flag as given, without its value. */
static const char *torchrun_hint(const char *flag, char *name, size_t cap)
{
    size_t len = strcspn(flag, "=");
    char key[64];
    if (len >= cap || len >= sizeof(key)) return NULL;
    snprintf(name, cap, "%.*s", (int)len, flag);
    snprintf(key, sizeof(key), "%s", name);
    for (char *q = key + 2; len > 2 && *q; q++)
        if (*q == '_') *q = '-'; /* torchrun's '_' spellings */
    for (size_t i = 0; i < sizeof(torchrun_only) / sizeof(torchrun_only[0]); i++)
        if (strcmp(key, torchrun_only[i].name) == 0) return torchrun_only[i].hint;
    return NULL;
}

/* --nnodes N, or torchrun's MIN:MAX when both are N (hooprun is not elastic). */
static int parse_nnodes(const char *arg, int *out)
{
    const char *colon = strchr(arg, ':');
    if (colon == NULL) return parse_num("--nnodes", arg, 1, HOOP_LAUNCH_WORLD_MAX, out);
    char min[32];
    int lo, hi;
    if (colon == arg || colon[1] == '\0')
        return bad_usage("--nnodes '%s': give MIN:MAX with both numbers, the same (hooprun is "
                         "not elastic), or one node count",
                         arg);
    snprintf(min, sizeof(min), "%.*s", (int)(colon - arg), arg);
    if (parse_num("--nnodes", min, 1, HOOP_LAUNCH_WORLD_MAX, &lo) ||
        parse_num("--nnodes", colon + 1, 1, HOOP_LAUNCH_WORLD_MAX, &hi))
        return 2;
    if (lo != hi)
        return bad_usage("--nnodes %s: hooprun is not elastic; give one node count (N or N:N)",
                         arg);
    *out = lo;
    return 0;
}

/* --nproc-per-node P, or auto|cpu: one worker per CPU this process may use. */
static int parse_nproc(const char *arg, int *out)
{
    if (strcmp(arg, "auto") == 0 || strcmp(arg, "cpu") == 0) {
        cpu_set_t mine;
        *out = sched_getaffinity(0, sizeof(mine), &mine) == 0 ? CPU_COUNT(&mine) : 1;
        if (*out > NPROC_MAX) *out = NPROC_MAX;
        return 0;
    }
    if (strcmp(arg, "gpu") == 0)
        return bad_usage("--nproc-per-node gpu: hooprun does not count GPUs yet; give the number "
                         "of workers (each takes GPU LOCAL_RANK modulo the GPUs), auto or cpu");
    return parse_num("--nproc-per-node", arg, 1, NPROC_MAX, out);
}

/* --rdzv-endpoint HOST[:PORT] or [V6ADDR][:PORT]; PORT defaults to torchrun's 29400. */
static int parse_endpoint(cli *c, const char *arg)
{
    const char *host = arg, *port = NULL;
    size_t hlen;
    if (*arg == '[') {
        const char *close = strchr(arg, ']');
        if (close == NULL || (close[1] != '\0' && close[1] != ':'))
            return bad_usage("--rdzv-endpoint '%s' is not HOST:PORT or [ADDR]:PORT", arg);
        host = arg + 1;
        hlen = (size_t)(close - host);
        if (close[1] == ':') port = close + 2;
    } else {
        const char *colon = strrchr(arg, ':');
        if (colon && strchr(arg, ':') != colon)
            return bad_usage("--rdzv-endpoint '%s': write an IPv6 address as [ADDR]:PORT", arg);
        hlen = colon ? (size_t)(colon - arg) : strlen(arg);
        if (colon) port = colon + 1;
    }
    if (hlen == 0 || hlen >= sizeof(c->rdzv_host))
        return bad_usage("--rdzv-endpoint '%s' has no host name or address", arg);
    snprintf(c->rdzv_host, sizeof(c->rdzv_host), "%.*s", (int)hlen, host);
    if (hoop__launch_check_host("--rdzv-endpoint's host", c->rdzv_host) != HOOP_OK)
        return bad_usage("%s", hoop_last_error());
    c->rdzv = 1;
    c->port = RDZV_DEFAULT_PORT;
    return port ? parse_num("--rdzv-endpoint's port", port, 1, 65535, &c->port) : 0;
}

/* --tee N (torchrun's: 0 none, 1 stdout, 2 stderr, 3 both); plain --tee means 3. A
 * separate value is taken only when it is one of those digits. */
static int parse_tee(cli *c, const char *arg, int argc, char **argv)
{
    /* "--tee 3" as torchrun writes it: a following number is the value (one outside 0-3
     * is refused below rather than run as the program). */
    if (arg == NULL && optind < argc && argv[optind][0] &&
        strspn(argv[optind], "0123456789") == strlen(argv[optind]))
        arg = argv[optind++];
    if (arg == NULL) {
        c->tee = 3;
        return 0;
    }
    if (strlen(arg) != 1 || arg[0] < '0' || arg[0] > '3')
        return bad_usage("--tee '%s' is not 0, 1, 2 or 3 (hooprun has no per-rank mapping)", arg);
    c->tee = arg[0] - '0';
    return 0;
}

/* Handles one recognised option; returns 0, 2 (bad value) or -1 (printed help: exit 0). */
static int take_option(cli *c, int opt, const char *arg, int argc, char **argv)
{
    switch (opt) {
    case OPT_NNODES: return parse_nnodes(arg, &c->nnodes);
    case OPT_NODE_RANK:
        return parse_num("--node-rank", arg, 0, HOOP_LAUNCH_WORLD_MAX - 1, &c->node_rank);
    case OPT_NPROC: return parse_nproc(arg, &c->nproc);
    case OPT_PORT: return parse_num("--master-port", arg, 1, 65535, &c->port);
    case OPT_ADDR:
        if (hoop__launch_check_host("--master-addr", arg) != HOOP_OK)
            return bad_usage("%s", hoop_last_error());
        c->addr = arg;
        return 0;
    case OPT_RDZV_ENDPOINT: return parse_endpoint(c, arg);
    case OPT_RDZV_BACKEND:
        if (strcmp(arg, "c10d") != 0 && strcmp(arg, "static") != 0)
            return bad_usage("--rdzv-backend '%s': hooprun's rendezvous is rank 0's store, as "
                             "c10d or static",
                             arg);
        return 0;
    case OPT_RDZV_ID: return 0; /* one rendezvous per endpoint: nothing to tell apart */
    case OPT_STANDALONE: c->standalone = 1; return 0;
    case OPT_MAX_RESTARTS:
        return parse_num("--max-restarts", arg, 0, RESTARTS_MAX, &c->max_restarts);
    case OPT_LOG_DIR:
        if (*arg == '\0' || strlen(arg) > 3000)
            return bad_usage("--log-dir '%s' is not a usable directory name", arg);
        c->log_dir = arg;
        return 0;
    case OPT_TEE: return parse_tee(c, arg, argc, argv);
    case OPT_GRACE:
        if (hoop__parse_seconds_ms("--grace", arg, &c->grace_ms) != HOOP_OK)
            return bad_usage("%s; allowed: seconds >= 0", hoop_last_error());
        c->grace_given = 1;
        return 0;
    case OPT_BIND:
        if (strcmp(arg, "core") != 0 && strcmp(arg, "none") != 0)
            return bad_usage("--bind '%s' is not core or none", arg);
        c->bind = strcmp(arg, "core") == 0;
        return 0;
    case 'n': c->prefix = 0; return 0;
    case 'p': c->prefix = 1; return 0;
    case 'd': c->dry_run = 1; return 0;
    case 'h': fputs(usage, stdout); return -1;
    case OPT_HELP_ENV: hoop__env_print_help(stdout); return -1;
    case OPT_NO_PYTHON: return 0; /* torchrun's: what hooprun always does */
    case 'V': printf("hooprun (hoop) %s\n", hoop_version_string()); return -1;
    }
    return 2;
}

/* Flags that contradict each other: one line naming both. */
static int check_combinations(const cli *c)
{
    if (c->rdzv && (c->addr || c->port_flag))
        return bad_usage("--rdzv-endpoint and --master-addr/--master-port say the same thing; "
                         "give one");
    if (c->standalone && (c->addr || c->rdzv || c->port_flag))
        return bad_usage("--standalone picks 127.0.0.1 and a free port itself; drop "
                         "--master-addr, --master-port and --rdzv-endpoint");
    if (c->standalone && c->nnodes > 1)
        return bad_usage("--standalone runs one node; it cannot go with --nnodes %d", c->nnodes);
    if (c->standalone && c->node_rank > 0)
        return bad_usage("--standalone runs one node; it cannot go with --node-rank %d",
                         c->node_rank);
    if (c->tee >= 0 && !c->log_dir)
        return bad_usage("--tee copies what --log-dir writes to the terminal; give --log-dir DIR");
    return 0;
}

/* Is arg "--NAME=VALUE" for a flag NAME that takes no value (getopt_long refuses it as it
 * refuses an unknown flag: the message must say which it is)? */
static int takes_no_value(const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (strncmp(arg, "--", 2) != 0 || eq == NULL) return 0;
    for (const struct option *o = long_opts; o->name; o++)
        if (o->has_arg == no_argument && strlen(o->name) == (size_t)(eq - arg - 2) &&
            strncmp(o->name, arg + 2, (size_t)(eq - arg - 2)) == 0)
            return 1;
    return 0;
}

/* Returns 0 to go on, 2 for a usage error, -1 when help was printed. */
static int parse_cli(int argc, char **argv, cli *c)
{
    *c = (cli){.nnodes = -1,
               .node_rank = -1,
               .nproc = -1,
               .port = -1,
               .tee = -1,
               .grace_ms = DEFAULT_GRACE_MS,
               .prefix = 0,
               .bind = 1};
    opterr = 0;
    int opt, at = optind ? optind : 1;
    /* -h and -t (--tee) as torchrun takes them; at: the argument the flag came from (a
     * single-dash word is read by getopt as a cluster of short flags, without moving
     * optind past it). */
    while ((opt = getopt_long(argc, argv, "+:ht:", long_opts, NULL)) != -1) {
        if (opt == 't') opt = OPT_TEE;
        const char *flag = at < argc ? argv[at] : argv[optind - 1];
        at = optind;
        if (opt == ':') return bad_usage("%s needs a value", flag);
        if (opt == '?' && takes_no_value(flag))
            return bad_usage("%.*s takes no value ('%s')", (int)strcspn(flag, "="), flag, flag);
        if (opt == '?' && flag[0] == '-' && flag[1] != '-' && strlen(flag) > 2)
            return bad_usage("unknown flag '%s' (long flags take two dashes: '-%s')", flag, flag);
        char name[64];
        const char *hint = opt == '?' ? torchrun_hint(flag, name, sizeof(name)) : NULL;
        if (hint) return bad_usage("%s is a torchrun flag that hooprun lacks: %s", name, hint);
        if (opt == '?') return bad_usage("unknown flag '%s'", flag);
        if (opt == OPT_PORT) c->port_flag = 1;
        int rc = take_option(c, opt, optarg, argc, argv);
        if (rc != 0) return rc;
    }
    if (c->nproc < 0) return bad_usage("--nproc-per-node is required (1..%d)", NPROC_MAX);
    if (optind >= argc) return bad_usage("missing PROG to run after the flags");
    if (argv[optind][0] == '\0') return bad_usage("PROG is an empty string");
    c->argv = argv + optind;
    return check_combinations(c);
}

// ----- resolving the plan ------------------------------------------------------------

/* Reads an integer variable when set; 2 (message printed) when malformed. */
static int env_num(const char *name, int64_t min, int64_t max, int *out)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return 0;
    return parse_num(name, v, min, max, out);
}

/* Slurm's node count or node id without its node list (a wrapper or hand-made environment
 * that kept some of Slurm's variables): they would be ignored, and each node would run a
 * job of its own on 127.0.0.1. Returns 0 when neither would be used (unset, 1 and 0, or
 * overridden by --nnodes / --node-rank), else 2 after saying why. */
static int partial_slurm(const cli *c)
{
    const char *nn = getenv("SLURM_NNODES"), *id = getenv("SLURM_NODEID");
    int nnodes = 1, node_id = 0;
    if ((c->nnodes < 0 && env_num("SLURM_NNODES", 1, HOOP_LAUNCH_WORLD_MAX, &nnodes)) ||
        (c->node_rank < 0 && env_num("SLURM_NODEID", 0, HOOP_LAUNCH_WORLD_MAX - 1, &node_id)))
        return 2;
    const char *name = nnodes > 1 ? "SLURM_NNODES" : node_id > 0 ? "SLURM_NODEID" : NULL;
    if (name == NULL) return 0;
    fprintf(stderr,
            "hooprun: %s=%s is set but neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is, "
            "so the master's host is unknown; give --nnodes, --node-rank and --master-addr "
            "(or unset the SLURM_* variables for a one-node run)\n",
            name, nnodes > 1 ? nn : id);
    return 2;
}

/* Fills nnodes, node_rank and (for several nodes) the master from Slurm's variables,
 * noting which variable each came from. The node list is the step's inside an srun step
 * (SLURM_STEP_NODELIST, which srun's SLURM_NNODES counts), else the job's. A node count
 * taken from SLURM_NNODES must match the hosts of that list: a disagreement would start
 * a job whose master or size is wrong, so it is refused naming both. */
static int from_slurm(const cli *c, hooprun_plan *p)
{
    const char *list = getenv("SLURM_JOB_NODELIST"), *step_list = getenv("SLURM_STEP_NODELIST");
    const char *list_from = "SLURM_JOB_NODELIST", *nn = getenv("SLURM_NNODES");
    if (list == NULL || *list == '\0') return partial_slurm(c);
    if (step_list && *step_list) list = step_list, list_from = "SLURM_STEP_NODELIST";
    int nnodes = 1, node_id = 0;
    if (env_num("SLURM_NNODES", 1, HOOP_LAUNCH_WORLD_MAX, &nnodes) ||
        env_num("SLURM_NODEID", 0, HOOP_LAUNCH_WORLD_MAX - 1, &node_id))
        return 2;
    int nnodes_used = c->nnodes < 0 && nn && *nn;
    if (c->nnodes < 0) p->nnodes = nnodes;
    if (nnodes_used) p->nnodes_from = "SLURM_NNODES";
    if (c->node_rank < 0) p->node_rank = node_id;
    int node_id_given = getenv("SLURM_NODEID") && *getenv("SLURM_NODEID");
    if (c->node_rank < 0 && node_id_given) p->node_rank_from = "SLURM_NODEID";
    if (p->nnodes == 1 && !nnodes_used) return 0; /* one node: loopback is the master */
    char **hosts = NULL;
    int count = 0;
    if (hoop__hostlist_expand(list, &hosts, &count) != HOOP_OK) {
        fprintf(stderr, "hooprun: %s: %s\n", list_from, hoop_last_error());
        return 2;
    }
    if (nnodes_used && count != nnodes) {
        fprintf(stderr,
                "hooprun: SLURM_NNODES=%d but %s='%s' names %d host%s; they must agree (one "
                "hooprun per node)\n",
                nnodes, list_from, list, count, count == 1 ? "" : "s");
        hoop__hostlist_free(hosts, count);
        return 2;
    }
    if (p->nnodes > 1 && c->node_rank < 0 && !node_id_given) {
        /* Every node would take index 0: one of them would be refused as a second node 0
         * only after it reached the store, and the message would not say why. */
        fprintf(stderr,
                "hooprun: %s names %d hosts but SLURM_NODEID is %s, so this node's index "
                "is unknown; start hooprun with srun (one task per node) or give "
                "--node-rank\n",
                list_from, count, getenv("SLURM_NODEID") ? "empty" : "not set");
        hoop__hostlist_free(hosts, count);
        return 2;
    }
    if (p->nnodes > 1) {
        /* The same form check as --master-addr's ('-bad' would be taken as a flag). */
        char what[64];
        snprintf(what, sizeof(what), "%s's first host", list_from);
        if (hoop__launch_check_host(what, hosts[0]) != HOOP_OK) {
            fprintf(stderr, "hooprun: %s\n", hoop_last_error());
            hoop__hostlist_free(hosts, count);
            return 2;
        }
        snprintf(p->master_addr, sizeof(p->master_addr), "%s", hosts[0]);
    }
    hoop__hostlist_free(hosts, count);
    return 0;
}

/* Binds a TCP socket to 127.0.0.1 port 0 with SO_REUSEADDR and keeps it (not listening)
 * for hooprun's whole life: the kernel hands that port to no other bind(), while rank 0's
 * store, which binds with SO_REUSEADDR and listens, may still take it. So no other
 * program can grab the port between our choice and the store's bind. Returns the fd. */
static int reserve_port(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        perror("hooprun: reserving a free port on 127.0.0.1");
        if (fd >= 0) close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    HOOP_INFO(LAUNCH, "reserved 127.0.0.1:%d for rank 0's store", *port);
    return fd;
}

static int make_token(hooprun_plan *p, char *out, size_t cap)
{
    const char *t = getenv("HOOP_TOKEN");
    if (t && *t) {
        /* What every worker's hoop_comm_init_env accepts (the transports' hello holds
         * it): refused here, once, rather than by every worker of every attempt. */
        size_t most = cap - 1 < HOOP_TP_TOKEN_MAX - 1 ? cap - 1 : HOOP_TP_TOKEN_MAX - 1;
        if (strlen(t) > most) {
            fprintf(stderr, "hooprun: HOOP_TOKEN is longer than %zu characters\n", most);
            return 2;
        }
        if (p->nnodes > 1) {
            snprintf(out, cap, "%s", t);
            return 0;
        }
        /* One node: this launch's 32 random bits are appended (the token's last characters
         * give way where it would not fit), so that a worker of another job given the same
         * MASTER_PORT and token is refused by this job's store, and ours by its, instead of
         * completing each other's world. */
        uint32_t nonce;
        if (getrandom(&nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce)) {
            perror("hooprun: getrandom");
            return 1;
        }
        snprintf(out, cap, "%.*s-%08x", (int)(strlen(t) < most - 9 ? strlen(t) : most - 9), t,
                 nonce);
        p->token_tail = 9; /* a restart's -r<k> goes before them, not over them */
        return 0;
    }
    if (p->nnodes > 1) {
        fprintf(stderr,
                "hooprun: HOOP_TOKEN must be exported with %s%s%d (every node needs the same "
                "secret; see hooprun --help)\n",
                p->nnodes_from, p->nnodes_from[0] == '-' ? " " : "=", p->nnodes);
        return 2;
    }
    unsigned char raw[16];
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        perror("hooprun: getrandom");
        return 1;
    }
    for (size_t i = 0; i < sizeof(raw); i++) snprintf(out + 2 * i, cap - 2 * i, "%02x", raw[i]);
    return 0;
}

/* Master address and port: flag, then environment, then Slurm/defaults; --standalone
 * takes 127.0.0.1 and a free port whatever the environment says. */
static int pick_master(const cli *c, hooprun_plan *p, int *reserve_fd)
{
    const char *env_addr = c->standalone ? NULL : getenv("MASTER_ADDR");
    int env_port = -1;
    if (!c->standalone && env_num("MASTER_PORT", 1, 65535, &env_port)) return 2;
    const char *flag_addr = c->rdzv ? c->rdzv_host : c->addr;
    /* The variable is checked as the flag is, where it is used (a flag wins over it). */
    if (!flag_addr && env_addr && *env_addr &&
        hoop__launch_check_host("MASTER_ADDR", env_addr) != HOOP_OK)
        return bad_usage("%s", hoop_last_error());
    if (flag_addr)
        snprintf(p->master_addr, sizeof(p->master_addr), "%s", flag_addr);
    else if (env_addr && *env_addr)
        snprintf(p->master_addr, sizeof(p->master_addr), "%s", env_addr);
    p->master_port = c->port > 0 ? c->port : env_port > 0 ? env_port : 0;
    int addr_given = flag_addr || (env_addr && *env_addr);
    if (c->standalone) p->master_addr[0] = '\0';
    if (p->master_addr[0] == '\0') {
        if (p->nnodes > 1)
            return bad_usage("--master-addr (or MASTER_ADDR) is required with --nnodes %d "
                             "outside Slurm",
                             p->nnodes);
        snprintf(p->master_addr, sizeof(p->master_addr), "127.0.0.1");
    }
    if (p->master_port > 0) return 0;
    if (p->nnodes == 1 && !addr_given) {
        *reserve_fd = reserve_port(&p->master_port);
        return *reserve_fd < 0 ? 1 : 0;
    }
    p->master_port = DEFAULT_PORT;
    return 0;
}

/* --log-dir: created (with its parents) when missing, and it must be writable, with no
 * directory where this node's ranks' logs (p) go. */
static int check_log_dir(const char *dir, const hooprun_plan *p)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s", dir);
    for (char *q = path + 1;; q++) {
        if (*q != '/' && *q != '\0') continue;
        char was = *q;
        *q = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "hooprun: --log-dir %s: cannot create %s: %s\n", dir, path,
                    hoop__strerror(errno));
            return 2;
        }
        *q = was;
        if (was == '\0') break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) != 0) {
        fprintf(stderr, "hooprun: --log-dir %s is not a writable directory\n", dir);
        return 2;
    }
    /* access() says yes to root where no file can be made (/proc, /sys): make one. */
    snprintf(path, sizeof(path), "%s/.hooprun-probe-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "hooprun: --log-dir %s: cannot create a file there: %s\n", dir,
                hoop__strerror(errno));
        return 2;
    }
    close(fd);
    unlink(path);
    /* A rank's log where something other than a file stands (a directory, a FIFO that
     * would block hooprun's open, a link to nowhere): the worker could not start (exit 1),
     * or hooprun hung. Checked for every attempt's log, made for the first's. */
    for (int i = 0; i < p->nproc_per_node; i++) {
        int rank = p->node_rank * p->nproc_per_node + i;
        for (int k = 0; k <= p->max_restarts; k++) {
            if (k == 0)
                snprintf(path, sizeof(path), "%s/rank_%d.log", dir, rank);
            else
                snprintf(path, sizeof(path), "%s/rank_%d.restart_%d.log", dir, rank, k);
            const char *what =
                stat(path, &st) == 0 && !S_ISREG(st.st_mode) ? hoop__file_type(st.st_mode) : NULL;
            if (what) {
                fprintf(stderr, "hooprun: --log-dir %s: %s, rank %d's log, is %s\n", dir, path,
                        rank, what);
                return 2;
            }
            if (k > 0) continue;
            if ((fd = hoop__open_output(path, 0)) < 0) {
                fprintf(stderr, "hooprun: --log-dir %s: cannot create %s, rank %d's log: %s\n", dir,
                        path, rank, hoop__strerror(errno));
                return 2;
            }
            close(fd);
        }
    }
    return 0;
}

/* Node 0 of several, whose master is a host name that resolves here to loopback
 * addresses only (Debian and Ubuntu map a machine's own name to 127.0.1.1 in /etc/hosts):
 * its stores would listen where no other host can connect, and the other nodes would wait
 * out HOOP_TIMEOUT. Said at once, as a warning: nodes on this one host (a test) do work. */
static void warn_loopback_master(const hooprun_plan *p)
{
    struct in6_addr a6;
    struct in_addr a4;
    if (p->nnodes < 2 || p->node_rank != 0 || inet_pton(AF_INET, p->master_addr, &a4) == 1 ||
        inet_pton(AF_INET6, p->master_addr, &a6) == 1)
        return; /* an address typed as such is meant */
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(p->master_addr, NULL, &hints, &res) != 0) return; /* said later */
    int loopback = res != NULL;
    char first[INET6_ADDRSTRLEN] = "?";
    for (const struct addrinfo *a = res; a; a = a->ai_next) {
        const void *bits = a->ai_family == AF_INET
                               ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                               : (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
        if (a == res) inet_ntop(a->ai_family, bits, first, sizeof(first));
        if (a->ai_family == AF_INET)
            loopback &= (ntohl(((struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr) >> 24) == 127;
        else
            loopback &= IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr);
    }
    freeaddrinfo(res);
    if (loopback)
        fprintf(stderr,
                "hooprun: warning: the master '%s' resolves here to %s, a loopback address "
                "(/etc/hosts?): node 0's stores will listen there, where nodes on other hosts "
                "cannot connect; give --master-addr an address they can reach\n",
                p->master_addr, first);
}

static int resolve(const cli *c, hooprun_plan *p, int *reserve_fd)
{
    *p = (hooprun_plan){.nnodes = c->nnodes > 0 ? c->nnodes : 1,
                        .node_rank = c->node_rank >= 0 ? c->node_rank : 0,
                        .nproc_per_node = c->nproc,
                        .prefix = c->prefix,
                        .grace_ms = c->grace_ms,
                        .stop_grace_ms = c->grace_given ? c->grace_ms : DEFAULT_STOP_GRACE_MS,
                        .argv = c->argv,
                        .log_dir = c->log_dir,
                        .tee = c->tee > 0 ? c->tee : 0,
                        .max_restarts = c->max_restarts,
                        .nnodes_from = "--nnodes",
                        .node_rank_from = "--node-rank"};
    if (gethostname(p->host, sizeof(p->host) - 1) != 0) snprintf(p->host, sizeof(p->host), "?");
    int rc = c->standalone ? 0 : from_slurm(c, p);
    if (rc) return rc;
    if (hoop__launch_check_from(p->nnodes, p->nnodes_from, p->node_rank, p->node_rank_from,
                                p->nproc_per_node) != HOOP_OK) {
        fprintf(stderr, "hooprun: %s\n", hoop_last_error());
        return 2;
    }
    if ((rc = pick_master(c, p, reserve_fd)) != 0) return rc;
    warn_loopback_master(p);
    if (c->log_dir && !c->dry_run && (rc = check_log_dir(c->log_dir, p)) != 0) return rc;
    if (c->bind && p->nproc_per_node <= HOOPRUN_BIND_MAX) {
        static cpu_set_t sets[HOOPRUN_BIND_MAX];
        if (hooprun_cpu_sets(p->nproc_per_node, sets)) p->cpus = sets;
    }
    return make_token(p, p->token, sizeof(p->token));
}

static void print_dry_run(const hooprun_plan *p)
{
    printf("hooprun: dry run: %d worker%s on node %d of %d; command:", p->nproc_per_node,
           p->nproc_per_node == 1 ? "" : "s", p->node_rank, p->nnodes);
    for (char **a = p->argv; *a; a++) printf(" %s", *a);
    printf("\n");
    const char *t = getenv("HOOP_TOKEN");
    const char *token = !(t && *t)      ? "(generated, 32 hex digits)"
                        : p->nnodes > 1 ? "(from the environment)"
                                        : "(from the environment, with this launch's -XXXXXXXX)";
    if (p->nnodes > 1) {
        char hp[300];
        printf("hooprun: dry run: the nodes' hoopruns meet at %s (MASTER_PORT + 1, served by "
               "node 0's) before each attempt\n",
               hoop__hostport(hp, sizeof(hp), p->master_addr, hooprun_agent_port(p->master_port)));
    }
    /* As set_worker_env (hooprun_proc.c) sets them for the first attempt. */
    const char *omp = getenv("OMP_NUM_THREADS");
    const char *omp_set =
        p->nproc_per_node > 1 && omp == NULL ? " OMP_NUM_THREADS=1 HOOP_OMP_DEFAULT=1" : "";
    for (int i = 0; i < p->nproc_per_node; i++) {
        hoop_launch_ids ids;
        hoop__launch_ids_of(p->nnodes, p->node_rank, p->nproc_per_node, i, &ids);
        char cpus[256] = "(not bound)";
        if (p->cpus) hooprun_cpu_list(&p->cpus[i], cpus, sizeof(cpus));
        printf("[rank %d] RANK=%d LOCAL_RANK=%d WORLD_SIZE=%d LOCAL_WORLD_SIZE=%d NODE_RANK=%d "
               "MASTER_ADDR=%s MASTER_PORT=%d HOOP_TOKEN=%s CPUS=%s GROUP_RANK=%d "
               "GROUP_WORLD_SIZE=%d ROLE_RANK=%d ROLE_WORLD_SIZE=%d TORCHELASTIC_RESTART_COUNT=0 "
               "TORCHELASTIC_MAX_RESTARTS=%d%s\n",
               ids.rank, ids.rank, ids.local_rank, ids.world_size, ids.local_world_size,
               ids.node_rank, p->master_addr, p->master_port, token, cpus, ids.node_rank, p->nnodes,
               ids.rank, ids.world_size, p->max_restarts, omp_set);
    }
}

// ----- attempts ------------------------------------------------------------------------

/* The token of attempt k: the base token for the first attempt; for a restart, the base
 * with "-r<k>" appended, kept within what the transports accept (the suffix replaces
 * the base's last characters when it would not fit), so that a worker left from an
 * earlier attempt presents a stale token and is refused. The base's last tail characters
 * (one node's launch bits, make_token) stay whole at the end: "-r<k>" goes before them
 * and the user's part gives way. */
static void attempt_token(const char *base, int tail, int k, char *out, size_t cap)
{
    char suffix[16] = "";
    if (k > 0) snprintf(suffix, sizeof(suffix), "-r%d", k);
    size_t room = HOOP_TP_TOKEN_MAX - 1 - strlen(suffix) - (size_t)tail;
    size_t keep = strlen(base) - (size_t)tail; /* the user's part; then the kept tail */
    if (keep > room) keep = room;
    snprintf(out, cap, "%.*s%s%s", (int)keep, base, suffix, base + strlen(base) - tail);
}

/* Runs the plan, and again after a failure while restarts are left (torchrun's
 * --max-restarts: the whole group, each time with a new rendezvous). */
static int run_attempts(hooprun_plan *p, int *reserve_fd)
{
    char base[sizeof(p->token)];
    int last = 1; /* the last attempt's exit code */
    snprintf(base, sizeof(base), "%s", p->token);
    for (int k = 0;; k++) {
        p->restart = k;
        attempt_token(base, p->token_tail, k, p->token, sizeof(p->token));
        if (k > 0 && *reserve_fd >= 0) { /* the port was ours: take a new one */
            int old = *reserve_fd;
            *reserve_fd = reserve_port(&p->master_port);
            close(old);
            if (*reserve_fd < 0) return 1;
        }
        int rc = hooprun_agent_begin(p, k); /* every node starts attempt k together */
        /* A restart that cannot happen ends with the failure that asked for it, unless a
         * signal's code is to be mirrored. */
        if (rc != 0) return k == 0 || rc > 128 ? rc : last;
        char master[300];
        if (k > 0)
            fprintf(stderr,
                    "hooprun: restart %d of %d: starting %s %d worker%s again (rendezvous %s, "
                    "restart count %d in the token)\n",
                    k, p->max_restarts, p->nproc_per_node == 1 ? "the" : "all", p->nproc_per_node,
                    p->nproc_per_node == 1 ? "" : "s",
                    hoop__hostport(master, sizeof(master), p->master_addr, p->master_port), k);
        int failed;
        rc = hooprun_supervise(p, &failed);
        /* Every worker here exited 0: the attempt ends when every node's did. */
        if (!failed && rc == 0) rc = hooprun_agent_end(p, &failed);
        if (!failed) return rc;
        last = rc;
        /* Another node's hooprun left on a signal (SIGINT to that node alone): the same
         * exit code here, as on a node that got it itself. */
        if (hooprun_agent_mirrored(NULL)) return hooprun_agent_mirrored(p);
        if (k >= p->max_restarts) {
            if (p->max_restarts > 0)
                fprintf(stderr, "hooprun: no restarts left (--max-restarts %d); exiting with %d\n",
                        p->max_restarts, rc);
            return rc;
        }
    }
}

/* Can PROG be run, as execvp would find it? An unrunnable one fails once, in one line,
 * instead of in every worker (a failure report for each of them). Returns 0 or 127. */
static int check_prog(const char *prog)
{
    char path[4096], missing[4200];
    struct stat sb;
    const char *why = "No such file or directory";
    if (strchr(prog, '/')) {
        if (stat(prog, &sb) == 0 && S_ISDIR(sb.st_mode))
            why = "Is a directory";
        else if (access(prog, X_OK) == 0)
            why = NULL;
        else if (errno == EACCES)
            why = "Permission denied (not executable)";
    } else {
        why = hooprun_which(prog, path, sizeof(path)) ? NULL : "not found on PATH";
    }
    /* A script whose #! interpreter is missing: execvp would say ENOENT, which reads as
     * if the script itself were missing. Name the interpreter instead. */
    if (why == NULL &&
        hooprun_interpreter_missing(strchr(prog, '/') ? prog : path, missing, sizeof(missing)))
        why = missing;
    if (why == NULL) return 0;
    fprintf(stderr, "hooprun: cannot run '%s': %s\n", prog, why);
    return 127;
}

/* HOOP_TEST_FAULT names a rank of this job (its form was checked with the other
 * settings): a rank outside the world would leave the hook silently unfired. Returns 0,
 * or 2 after saying why. */
static int check_fault_rank(const hooprun_plan *p)
{
    const char *v = getenv("HOOP_TEST_FAULT");
    hoop__fault_spec spec;
    if (!v || hoop__fault_parse(v, &spec) != HOOP_OK) return 0;
    int world_size = p->nnodes * p->nproc_per_node;
    if (spec.rank < world_size) return 0;
    fprintf(stderr,
            "hooprun: HOOP_TEST_FAULT='%s': rank %d is outside the job (world_size %d, ranks "
            "0..%d); the hook would never fire\n",
            v, spec.rank, world_size, world_size - 1);
    return 2;
}

int main(int argc, char **argv)
{
    /* A closed stdin, stdout or stderr reads and writes /dev/null: else the next pipe or
     * file would take its number (the guard's pipe became its stdin, and the guard, given
     * /dev/null there, refused to start). */
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF && open("/dev/null", O_RDWR) != fd) return 1;
    if (argc > 1 && strcmp(argv[1], "--guard-of") == 0) return hooprun_guard_main(argc, argv);
    cli c;
    int rc = parse_cli(argc, argv, &c);
    if (rc < 0) return fflush(stdout) != 0 || ferror(stdout); /* --help > /dev/full: 1 */
    if (rc) return rc;
    hooprun_out_init();
    hooprun_plan plan;
    int reserve_fd = -1;
    unsetenv("HOOP_ENV_WARNED"); /* only hooprun's workers are told that */
    if (hoop__env_check_all() != HOOP_OK) {
        char why[400];
        snprintf(why, sizeof(why), "%s", hoop_last_error());
        fprintf(stderr, "hooprun: %s (see hooprun --help-env)\n", why);
        /* The other nodes are told, where this node can find them (else they wait
         * HOOP_TIMEOUT for a node that never comes). */
        if (!c.dry_run && resolve(&c, &plan, &reserve_fd) == 0) hooprun_agent_refuse(&plan, why);
        if (reserve_fd >= 0) close(reserve_fd);
        return 2;
    }
    rc = resolve(&c, &plan, &reserve_fd);
    if (rc == 0) rc = check_fault_rank(&plan);
    if (rc == 0) rc = hooprun_agent_check(&plan);
    if (rc == 0 && c.dry_run) print_dry_run(&plan);
    /* The nodes meet before this node checks its program, so that the others are told
     * at once when it cannot run it. */
    if (rc == 0 && !c.dry_run && plan.nnodes > 1 &&
        hooprun_signals_connecting(plan.node_rank) != 0) {
        perror("hooprun: setting up signals");
        rc = 1;
    }
    if (rc == 0 && !c.dry_run && plan.nnodes > 1) rc = hooprun_agent_open(&plan);
    /* From here a signal is read between the meetings' slices (and forwarded while the
     * workers run), so that a hooprun told to stop says so to the other nodes. */
    if (rc == 0 && !c.dry_run && plan.nnodes > 1 && hooprun_signals_init() != 0) {
        perror("hooprun: setting up signals");
        rc = 1;
    }
    if (rc == 0 && !c.dry_run) rc = check_prog(plan.argv[0]);
    if (rc == 0 && !c.dry_run) rc = run_attempts(&plan, &reserve_fd);
    hooprun_agent_close(&plan, rc);
    hooprun_guard_end();
    if (reserve_fd >= 0) close(reserve_fd);
    return rc;
}
