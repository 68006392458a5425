/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/hooprun.c -- the hoop launcher: starts nproc_per_node workers on this node with
 * the env:// contract set (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK,
 * MASTER_ADDR, MASTER_PORT, HOOP_TOKEN).
 *
 * This file turns flags, the environment and Slurm's variables into a hooprun_plan
 * (precedence: flag, then environment, then Slurm, then defaults) and prints it for
 * --dry-run; hooprun_proc.c runs it. Bad flags or env: one line on stderr, exit 2.
 * Single-threaded.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/env.h"
#include "core/hostlist.h"
#include "core/log.h"
#include "core/launch.h"
#include "hoop/version.h"
#include "hooprun.h"

#define DEFAULT_PORT 29500
#define DEFAULT_GRACE_MS 3000
#define NPROC_MAX 4096

static const char usage[] =
    "usage: hooprun [--nnodes N] [--node-rank K] --nproc-per-node P [--master-addr A]\n"
    "               [--master-port Q] [--bind core|none] [--grace S] [--no-prefix]\n"
    "               [--dry-run] PROG ARGS...\n"
    "       hooprun --help | --help-env | --version\n"
    "\n"
    "Starts P workers of PROG on this node. Worker i of node K gets RANK = K*P + i,\n"
    "LOCAL_RANK = i, WORLD_SIZE = N*P, LOCAL_WORLD_SIZE = P, NODE_RANK = K, MASTER_ADDR,\n"
    "MASTER_PORT and HOOP_TOKEN in its environment, and its own process group.\n"
    "\n"
    "  --nnodes N          nodes in the job (default: SLURM_NNODES, else 1)\n"
    "  --node-rank K       this node's index, 0..N-1 (default: SLURM_NODEID, else 0)\n"
    "  --nproc-per-node P  workers on this node, 1..4096 (required)\n"
    "  --master-addr A     host of rank 0's store (default: MASTER_ADDR; under Slurm with\n"
    "                      N > 1 the first host of SLURM_JOB_NODELIST; else 127.0.0.1)\n"
    "  --master-port Q     its port, 1..65535 (default: MASTER_PORT; with one node and no\n"
    "                      address or port given, a free port of 127.0.0.1; else 29500)\n"
    "  --bind core|none    core (default): bind each worker to its own block of the CPUs\n"
    "                      hooprun may use (hwloc's topology-aware split; nobody is bound\n"
    "                      when there are fewer CPUs than workers); none: no binding\n"
    "  --grace S           seconds between SIGTERM and SIGKILL when stopping (default 3)\n"
    "  --no-prefix         do not prefix output lines with \"[rank N] \"\n"
    "  --dry-run           print what each worker would get, start nothing\n"
    "  --help-env          list the HOOP_* settings\n"
    "  --version           print hooprun's version and exit\n"
    "\n"
    "HOOP_TOKEN: kept when set; with one node, 128 random bits are generated otherwise.\n"
    "With several nodes every node needs the same token, so export it before starting\n"
    "hooprun on each node, e.g. in the sbatch script:\n"
    "  export HOOP_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \\n')\n"
    "\n"
    "When a worker fails (non-zero exit or signal), hooprun names it, sends SIGTERM to every\n"
    "worker's process group, SIGKILL after the grace period, and exits with the worker's\n"
    "code (128 + signal). SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 are forwarded.\n";

typedef struct cli {
    int nnodes, node_rank, nproc, port; /* -1 = not given */
    const char *addr;
    int64_t grace_ms;
    int prefix, dry_run, bind;
    char **argv;
} cli;

/* The message of the last hoop error without its "file.c:123: " origin. */
static const char *user_msg(void)
{
    const char *m = hoop_last_error();
    const char *colon = strstr(m, ": ");
    if (colon && memchr(m, ' ', (size_t)(colon - m)) == NULL) return colon + 2;
    return m;
}

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
        if (strstr(user_msg(), "out of range")) /* the message already gives the range */
            fprintf(stderr, "hooprun: %s\n", user_msg());
        else
            fprintf(stderr, "hooprun: %s; allowed: an integer in %" PRId64 "..%" PRId64 "\n",
                    user_msg(), min, max);
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
    OPT_GRACE,
    OPT_BIND,
    OPT_HELP_ENV
};

static const struct option long_opts[] = {
    {"nnodes", required_argument, NULL, OPT_NNODES},
    {"node-rank", required_argument, NULL, OPT_NODE_RANK},
    {"nproc-per-node", required_argument, NULL, OPT_NPROC},
    {"master-addr", required_argument, NULL, OPT_ADDR},
    {"master-port", required_argument, NULL, OPT_PORT},
    {"grace", required_argument, NULL, OPT_GRACE},
    {"bind", required_argument, NULL, OPT_BIND},
    {"no-prefix", no_argument, NULL, 'n'},
    {"dry-run", no_argument, NULL, 'd'},
    {"help", no_argument, NULL, 'h'},
    {"help-env", no_argument, NULL, OPT_HELP_ENV},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

/* Handles one recognised option; returns 0, 2 (bad value) or -1 (printed help: exit 0). */
static int take_option(cli *c, int opt, const char *arg)
{
    switch (opt) {
    case OPT_NNODES: return parse_num("--nnodes", arg, 1, HOOP_LAUNCH_WORLD_MAX, &c->nnodes);
    case OPT_NODE_RANK:
        return parse_num("--node-rank", arg, 0, HOOP_LAUNCH_WORLD_MAX - 1, &c->node_rank);
    case OPT_NPROC: return parse_num("--nproc-per-node", arg, 1, NPROC_MAX, &c->nproc);
    case OPT_PORT: return parse_num("--master-port", arg, 1, 65535, &c->port);
    case OPT_ADDR:
        if (*arg == '\0' || strlen(arg) > 255)
            return bad_usage("--master-addr '%s' is not a host name or address", arg);
        c->addr = arg;
        return 0;
    case OPT_GRACE:
        if (hoop__parse_seconds_ms("--grace", arg, &c->grace_ms) != HOOP_OK)
            return bad_usage("%s; allowed: seconds >= 0", user_msg());
        return 0;
    case OPT_BIND:
        if (strcmp(arg, "core") != 0 && strcmp(arg, "none") != 0)
            return bad_usage("--bind '%s' is not core or none", arg);
        c->bind = strcmp(arg, "core") == 0;
        return 0;
    case 'n': c->prefix = 0; return 0;
    case 'd': c->dry_run = 1; return 0;
    case 'h': fputs(usage, stdout); return -1;
    case OPT_HELP_ENV: hoop__env_print_help(stdout); return -1;
    case 'V': printf("hooprun (hoop) %s\n", hoop_version_string()); return -1;
    }
    return 2;
}

/* Returns 0 to go on, 2 for a usage error, -1 when help was printed. */
static int parse_cli(int argc, char **argv, cli *c)
{
    *c = (cli){.nnodes = -1,
               .node_rank = -1,
               .nproc = -1,
               .port = -1,
               .grace_ms = DEFAULT_GRACE_MS,
               .prefix = 1,
               .bind = 1};
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "+:", long_opts, NULL)) != -1) {
        const char *flag = argv[optind - 1];
        if (opt == ':') return bad_usage("%s needs a value", flag);
        if (opt == '?') return bad_usage("unknown flag '%s'", flag);
        int rc = take_option(c, opt, optarg);
        if (rc != 0) return rc;
    }
    if (c->nproc < 0) return bad_usage("--nproc-per-node is required (1..%d)", NPROC_MAX);
    if (optind >= argc) return bad_usage("missing PROG to run after the flags");
    c->argv = argv + optind;
    return 0;
}

// ----- resolving the plan ------------------------------------------------------------

/* Reads an integer variable when set; 2 (message printed) when malformed. */
static int env_num(const char *name, int64_t min, int64_t max, int *out)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') return 0;
    return parse_num(name, v, min, max, out);
}

/* Fills nnodes, node_rank and (for several nodes) the master from Slurm's variables. */
static int from_slurm(const cli *c, hooprun_plan *p)
{
    const char *list = getenv("SLURM_JOB_NODELIST");
    if (list == NULL || *list == '\0') return 0;
    int nnodes = 1, node_id = 0;
    if (env_num("SLURM_NNODES", 1, HOOP_LAUNCH_WORLD_MAX, &nnodes) ||
        env_num("SLURM_NODEID", 0, HOOP_LAUNCH_WORLD_MAX - 1, &node_id))
        return 2;
    if (c->nnodes < 0) p->nnodes = nnodes;
    if (c->node_rank < 0) p->node_rank = node_id;
    if (p->nnodes == 1) return 0; /* one node: loopback is the master */
    char **hosts = NULL;
    int count = 0;
    if (hoop__hostlist_expand(list, &hosts, &count) != HOOP_OK) {
        fprintf(stderr, "hooprun: SLURM_JOB_NODELIST: %s\n", user_msg());
        return 2;
    }
    snprintf(p->master_addr, sizeof(p->master_addr), "%s", hosts[0]);
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

static int make_token(const hooprun_plan *p, char *out, size_t cap)
{
    const char *t = getenv("HOOP_TOKEN");
    if (t && *t) {
        if (strlen(t) >= cap) {
            fprintf(stderr, "hooprun: HOOP_TOKEN is longer than %zu characters\n", cap - 1);
            return 2;
        }
        snprintf(out, cap, "%s", t);
        return 0;
    }
    if (p->nnodes > 1) {
        fprintf(stderr,
                "hooprun: HOOP_TOKEN must be exported with --nnodes %d (every node needs "
                "the same secret; see hooprun --help)\n",
                p->nnodes);
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

/* Master address and port: flag, then environment, then Slurm/defaults. */
static int pick_master(const cli *c, hooprun_plan *p, int *reserve_fd)
{
    const char *env_addr = getenv("MASTER_ADDR");
    int env_port = -1;
    if (env_num("MASTER_PORT", 1, 65535, &env_port)) return 2;
    if (env_addr && strlen(env_addr) > 255) env_addr = NULL;
    if (c->addr)
        snprintf(p->master_addr, sizeof(p->master_addr), "%s", c->addr);
    else if (env_addr && *env_addr)
        snprintf(p->master_addr, sizeof(p->master_addr), "%s", env_addr);
    p->master_port = c->port > 0 ? c->port : env_port > 0 ? env_port : 0;
    int addr_given = c->addr || (env_addr && *env_addr);
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

static int resolve(const cli *c, hooprun_plan *p, int *reserve_fd)
{
    *p = (hooprun_plan){.nnodes = c->nnodes > 0 ? c->nnodes : 1,
                        .node_rank = c->node_rank >= 0 ? c->node_rank : 0,
                        .nproc_per_node = c->nproc,
                        .prefix = c->prefix,
                        .grace_ms = c->grace_ms,
                        .argv = c->argv};
    int rc = from_slurm(c, p);
    if (rc) return rc;
    if (hoop__launch_check(p->nnodes, p->node_rank, p->nproc_per_node) != HOOP_OK) {
        fprintf(stderr, "hooprun: %s\n", user_msg());
        return 2;
    }
    if ((rc = pick_master(c, p, reserve_fd)) != 0) return rc;
    if (c->bind && p->nproc_per_node <= HOOPRUN_BIND_MAX) {
        static cpu_set_t sets[HOOPRUN_BIND_MAX];
        if (hooprun_cpu_sets(p->nproc_per_node, sets)) p->cpus = sets;
    }
    return make_token(p, p->token, sizeof(p->token));
}

static void print_dry_run(const hooprun_plan *p)
{
    printf("hooprun: dry run: %d workers on node %d of %d; command:", p->nproc_per_node,
           p->node_rank, p->nnodes);
    for (char **a = p->argv; *a; a++) printf(" %s", *a);
    printf("\n");
    const char *t = getenv("HOOP_TOKEN");
    const char *token = (t && *t) ? "(from the environment)" : "(generated, 32 hex digits)";
    for (int i = 0; i < p->nproc_per_node; i++) {
        hoop_launch_ids ids;
        hoop__launch_ids_of(p->nnodes, p->node_rank, p->nproc_per_node, i, &ids);
        char cpus[256] = "(not bound)";
        if (p->cpus) hooprun_cpu_list(&p->cpus[i], cpus, sizeof(cpus));
        printf("[rank %d] RANK=%d LOCAL_RANK=%d WORLD_SIZE=%d LOCAL_WORLD_SIZE=%d NODE_RANK=%d "
               "MASTER_ADDR=%s MASTER_PORT=%d HOOP_TOKEN=%s CPUS=%s\n",
               ids.rank, ids.rank, ids.local_rank, ids.world_size, ids.local_world_size,
               ids.node_rank, p->master_addr, p->master_port, token, cpus);
    }
}

int main(int argc, char **argv)
{
    cli c;
    int rc = parse_cli(argc, argv, &c);
    if (rc) return rc < 0 ? 0 : rc;
    if (hoop__env_check_all() != HOOP_OK) {
        fprintf(stderr, "hooprun: %s (see hooprun --help-env)\n", user_msg());
        return 2;
    }
    hooprun_plan plan;
    int reserve_fd = -1;
    rc = resolve(&c, &plan, &reserve_fd);
    if (rc == 0 && c.dry_run) print_dry_run(&plan);
    if (rc == 0 && !c.dry_run) rc = hooprun_supervise(&plan);
    if (reserve_fd >= 0) close(reserve_fd);
    return rc;
}
