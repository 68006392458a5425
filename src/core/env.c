/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/env.c -- the HOOP_* settings table and strict env / flag parsing.
 *
 * Owns nothing but constant data. Reads the environment with getenv() on demand;
 * callers parse once at init and keep the values in their config. Thread-safe as long
 * as nobody calls setenv() concurrently (as for getenv() itself).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/check.h"
#include "core/env.h"
#include "core/fault.h"
#include "core/launch.h"
#include "core/log.h"
#include "hoop/comm.h"         /* HOOP_ALGO_CHOICES: the algorithm names' one list */
#include "transport/ib_util.h" /* the HOOP_IB_HCA and HOOP_IB_ADDR_RANGE parsers */

extern char **environ;

#define KIB 1024LL
#define MIB (1024LL * 1024)
#define GIB (1024LL * 1024 * 1024)
#define TIB (1024LL * 1024 * 1024 * 1024)

static hoop_status power_of_two(const char *name, const char *text, int64_t num)
{
    (void)text;
    if (num & (num - 1))
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s=%lld is not a power of two", name, (long long)num);
    return HOOP_OK;
}

/* HOOP_IB_HCA and HOOP_IB_ADDR_RANGE: the verbs transport's own parsers check the
 * form, so that a typo fails before any device is opened, with the same message. */
static hoop_status hca_list(const char *name, const char *text, int64_t num)
{
    hoop__ib_hca_spec spec;
    (void)name, (void)num;
    return hoop__ib_hca_parse(text, &spec);
}

static hoop_status cidr(const char *name, const char *text, int64_t num)
{
    (void)name, (void)num;
    return hoop__ib_addr_range_check(text);
}

/* HOOP_DEBUG_SUBSYS: a comma list of the log's subsystems (log.c parses it). */
static hoop_status subsystems(const char *name, const char *text, int64_t num)
{
    unsigned mask;
    char bad[64];
    (void)num;
    if (!text || hoop__log_parse_mask(text, &mask, bad, (int)sizeof(bad))) return HOOP_OK;
    return HOOP_ERROR(HOOP_ERR_INVALID,
                      "%s='%s': '%s' is not a subsystem (INIT,BOOT,NET,TCP,IB,COLL,CUDA,ALLOC,"
                      "AUTOGRAD,DDP,ENV,DATA,LAUNCH,ALL; ^ excludes)",
                      name, text, bad);
}

/* HOOP_DEBUG_TIMESTAMP_FORMAT: the logger's own check (log.c) says what is wrong. */
static hoop_status timestamp_format(const char *name, const char *text)
{
    char why[160];
    if (!text || !*text || hoop__log_ts_format_check(text, why, sizeof(why))) return HOOP_OK;
    return HOOP_ERROR(HOOP_ERR_INVALID,
                      "%s='%s': %s; it takes text with strftime's conversions (%%Y %%m %%d %%H "
                      "%%M %%S %%F %%T %%z and the other C and POSIX ones, %%E and %%O forms), "
                      "%%%% and %%f or %%1f..%%9f (digits of the second's fraction), in at most "
                      "127 bytes",
                      name, text, why);
}

/* HOOP_TEST_FAULT: the test hook's own parser (fault.c) checks the form. */
static hoop_status test_fault(const char *text)
{
    hoop__fault_spec spec;
    return text ? hoop__fault_parse(text, &spec) : HOOP_OK;
}

/* HOOP_CUDA_DEVICE: a device index (whether that device exists is known only to the
 * worker that opens CUDA) into *v; unset or empty: -1, none forced. No sign and no white
 * space: digits only. */
static hoop_status device_index(const char *name, const char *text, int64_t *v)
{
    *v = -1;
    if (!text || !*text) return HOOP_OK;
    if (*text < '0' || *text > '9')
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s='%s' is not a device index (0, 1, 2, ...)", name,
                          text);
    return hoop__parse_int(name, text, 0, 100000000, v);
}

/* Rules beyond type, range and choices, for the settings that have one; the getters
 * apply them, so hooprun's check and every reader agree. */
static hoop_status rule_of(const hoop_env_param *p, const char *text, int64_t num)
{
    if (strcmp(p->name, "HOOP_SHM_BYTES") == 0) return power_of_two(p->name, text, num);
    if (strcmp(p->name, "HOOP_DEBUG_SUBSYS") == 0) return subsystems(p->name, text, num);
    if (strcmp(p->name, "HOOP_IB_HCA") == 0) return hca_list(p->name, text, num);
    if (strcmp(p->name, "HOOP_IB_ADDR_RANGE") == 0) return cidr(p->name, text, num);
    if (strcmp(p->name, "HOOP_TEST_FAULT") == 0) return test_fault(text);
    if (strcmp(p->name, "HOOP_DEBUG_TIMESTAMP_FORMAT") == 0) return timestamp_format(p->name, text);
    if (strcmp(p->name, "HOOP_CUDA_DEVICE") == 0) return device_index(p->name, text, &num);
    return HOOP_OK;
}

const hoop_env_param hoop__env_params[] = {
    {"HOOP_DEBUG", HOOP_ENV_CHOICE, "WARN", 0, 0, "NONE|WARN|INFO|DEBUG|TRACE|VERSION",
     "log level; VERSION: WARN plus one 'hoop version X.Y.Z' line per process (INFO and up "
     "name the version in an INFO INIT line)"},
    {"HOOP_DEBUG_SUBSYS", HOOP_ENV_STRING, "INIT,ENV", 0, 0, NULL,
     "subsystems to log: comma list of INIT,BOOT,NET,TCP,IB,COLL,CUDA,ALLOC,AUTOGRAD,DDP,ENV,"
     "DATA,LAUNCH,ALL; ^ excludes"},
    {"HOOP_DEBUG_FILE", HOOP_ENV_STRING, NULL, 0, 0, NULL,
     "write logs to this file instead of stderr (%h = host, %p = pid)"},
    {"HOOP_DEBUG_TIMESTAMP_FORMAT", HOOP_ENV_STRING, NULL, 0, 0, NULL,
     "start every log line with the local time in this strftime format (C and POSIX "
     "conversions), %Nf = N digits of the second's fraction (e.g. '[%F %T.%3f] '), at most "
     "127 bytes; unset: no timestamps"},
    {"HOOP_TIMEOUT", HOOP_ENV_SECONDS, "300", 0, 0, NULL,
     "deadline in seconds (> 0) for every blocking wait (rendezvous, collectives)"},
    {"HOOP_TOKEN", HOOP_ENV_STRING, NULL, 0, 0, NULL,
     "shared secret every connection must present (at most 63 characters); hooprun sets "
     "128 random bits; srun without hooprun: slurm-JOB.STEP, not a secret"},
    {"HOOP_TRANSPORT", HOOP_ENV_CHOICE, "auto", 0, 0, "auto|tcp|shm|ib",
     "transport between ranks: auto = shm between ranks on one host, ib between hosts "
     "that both have a usable RDMA device, else tcp; tcp|shm|ib = every link over that one "
     "(an error where it cannot reach a peer)"},
    {"HOOP_SHM_BYTES", HOOP_ENV_BYTES, "4M", 64 * KIB, 1 * GIB, NULL,
     "shm transport: ring bytes per link, a power of two (K/M/G suffixes)"},
    {"HOOP_SOCKET_IFNAME", HOOP_ENV_STRING, NULL, 0, 0, NULL,
     "interfaces for TCP listen addresses, up and running ones only: prefixes, =NAME for "
     "exactly NAME, comma-separated; ^LIST leaves LIST out (NCCL_SOCKET_IFNAME's form; "
     "default: routes to MASTER_ADDR)"},
    {"HOOP_TCP_NSOCKS", HOOP_ENV_INT, "2", 1, 16, NULL, "TCP streams per link"},
    {"HOOP_CHUNK_BYTES", HOOP_ENV_BYTES, "512K", 4 * KIB, 64 * MIB, NULL,
     "bytes a ring step moves per chunk (K/M/G suffixes)"},
    {"HOOP_ALGO", HOOP_ENV_CHOICE, "auto", 0, 0, HOOP_ALGO_CHOICES,
     "all-reduce algorithm; auto = alpha-beta-gamma cost model by size and world size, and "
     "direct on shared buffers (8 KiB up on 2 ranks, 64 KiB on more)"},
    {"HOOP_MEMOPS", HOOP_ENV_CHOICE, "sync", 0, 0, "sync|async|staged",
     "the collectives' copies and reductions on host memory: sync = by the progress thread "
     "at once; async = queued to a helper thread and polled, as a GPU's are; staged = async, "
     "and every send and receive goes through host staging, as a GPU buffer's does (testing)"},
    {"HOOP_STAGE_SLOTS", HOOP_ENV_INT, "8", 2, 256, NULL,
     "collectives on GPU buffers (and HOOP_MEMOPS=staged): pinned host slots of one chunk "
     "each that staged sends and receives go through; staging memory = slots x chunk"},
    {"HOOP_IB_HCA", HOOP_ENV_STRING, NULL, 0, 0, NULL,
     "RDMA devices for the ib transport, NCCL's syntax: mlx5_0:1,mlx5_1 (device[:port]; a "
     "name is a prefix unless the list starts with =; a leading ^ excludes the listed ones); "
     "unset: every device"},
    {"HOOP_IB_GID_INDEX", HOOP_ENV_INT, "-1", -1, 255, NULL,
     "ib: GID index on RoCE ports; -1 = automatic: a RoCE v2 GID holding an IPv4-mapped "
     "address, never a link-local one (within HOOP_IB_ADDR_RANGE when set)"},
    {"HOOP_IB_ADDR_RANGE", HOOP_ENV_STRING, NULL, 0, 0, NULL,
     "ib: the network (CIDR, e.g. 10.0.0.0/8 or fd00::/8) the automatic GID's address must "
     "be in; unset: any"},
    {"HOOP_IB_TIMEOUT", HOOP_ENV_INT, "20", 1, 31, NULL,
     "ib: ack timeout exponent: a lost packet is resent after 4.096 us x 2^N (20: 4.3 s)"},
    {"HOOP_IB_RETRY_CNT", HOOP_ENV_INT, "7", 0, 7, NULL,
     "ib: resends after an ack timeout before the link fails"},
    {"HOOP_IB_TC", HOOP_ENV_INT, "0", 0, 255, NULL,
     "ib: traffic class of RoCE packets (the IP header's DSCP and ECN bits)"},
    {"HOOP_IB_SL", HOOP_ENV_INT, "0", 0, 15, NULL, "ib: InfiniBand service level"},
    {"HOOP_IB_REG_CACHE", HOOP_ENV_INT, "1", 0, 2, NULL,
     "ib: how long a user buffer's registration lasts: 1 = its call (every chunk of a "
     "buffer shares one); 2 = across calls, for programs that never free a buffer given "
     "to hoop while the comm lives (memory from hoop_comm_alloc_shared is kept under 1 "
     "too); 0 = one message"},
    {"HOOP_CPU_BIND", HOOP_ENV_STRING, NULL, 0, 0, NULL,
     "set by hooprun --bind core (its default): this worker's CPUs, e.g. 0-3 (read only)"},
    {"HOOP_OMP_DEFAULT", HOOP_ENV_INT, "0", 0, 1, NULL,
     "set to 1 by hooprun when it set OMP_NUM_THREADS=1 itself (several workers, none set): "
     "hoop-train then shares the cores instead; an OMP_NUM_THREADS of the user's is kept "
     "(read only)"},
    {"HOOP_ENV_WARNED", HOOP_ENV_INT, "0", 0, 1, NULL,
     "set to 1 by hooprun in its workers: hooprun has warned of unknown HOOP_* variables, "
     "so the workers do not repeat it (read only)"},
    {"HOOP_TRACE_FILE", HOOP_ENV_STRING, NULL, 0, 0, NULL,
     "write a Chrome trace of DDP steps to this file (merged by rank 0)"},
    {"HOOP_ARENA_POISON", HOOP_ENV_INT, "0", 0, 1, NULL,
     "1: fill every tape arena allocation with NaN (debugging: reads of activations or "
     "gradients that no op wrote show up as NaN)"},
    {"HOOP_CUDA_BACKEND", HOOP_ENV_STRING, NULL, 0, 0, NULL,
     "path of the CUDA backend module to load at the first CUDA tensor; unset: "
     "$(pkglibdir)/libhoop-cuda.so, then .libs/ of the build tree"},
    {"HOOP_CUDA_DEVICE", HOOP_ENV_STRING, NULL, 0, 0, NULL,
     "this worker's GPU (an index among the visible ones); unset: local_rank modulo the "
     "number of GPUs"},
    {"HOOP_CUDA_TF32", HOOP_ENV_INT, "0", 0, 1, NULL,
     "1: let cuBLAS use TF32 tensor cores for f32 GEMMs (faster, about 1e-3 relative error); "
     "0: full f32"},
    {"HOOP_TEST_FAULT", HOOP_ENV_STRING, NULL, 0, 0, NULL,
     "TEST HOOK, never for real jobs: RANK:POINT:INDEX:SIGNAL (e.g. 2:all_gather:3:KILL) "
     "makes that rank send itself SIGNAL (KILL|STOP|TERM|SEGV) at POINT (rendezvous|connect: "
     "its INDEX-th communicator's set-up; reduce_scatter|all_gather: that phase of call "
     "#INDEX; backward: its INDEX-th backward pass; checkpoint: half-way through its "
     "INDEX-th checkpoint save; verdict: its INDEX-th communicator's set-up, its links up; "
     "store_sync: its INDEX-th store all-gather or barrier, its arrival set), "
     "or with FAIL at verdict fail there with an error and stay alive; used by "
     "tests/faults/matrix.sh, the fault-injection matrix"},
    {NULL, 0, NULL, 0, 0, NULL, NULL},
};

static const hoop_env_param *lookup(const char *name)
{
    for (const hoop_env_param *p = hoop__env_params; p->name; p++)
        if (strcmp(p->name, name) == 0) return p;
    return NULL;
}

static const char *value_of(const hoop_env_param *p)
{
    const char *v = getenv(p->name);
    return (v && *v) ? v : p->def;
}

/* The one rule for a number's text, in every setting and flag that takes a number (the
 * parsers below: integers, sizes, seconds, decimals): the string is the number and
 * nothing else, white space around it included. strtoll and strtod skip leading blanks
 * by themselves, so each parser asks this first, and " 5" or "5 " is refused by every
 * one of them alike rather than read by some and refused by others. Returns 1 when s
 * is non-empty and starts and ends with something other than white space. */
static int bare_text(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    return n > 0 && !isspace((unsigned char)s[0]) && !isspace((unsigned char)s[n - 1]);
}

hoop_status hoop__parse_int(const char *what, const char *s, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    if (s == NULL || *s == '\0')
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s is empty; expected an integer in [%" PRId64 ", %" PRId64 "]", what,
                          min, max);
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!bare_text(s) || (errno != 0 && errno != ERANGE) || *end != '\0')
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s='%s' is not an integer", what, s);
    if (errno == ERANGE || v < min || v > max) /* ERANGE: past what 64 bits hold */
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s=%s is out of range [%" PRId64 ", %" PRId64 "]",
                          what, s, min, max);
    *out = v;
    return HOOP_OK;
}

hoop_status hoop__parse_bytes(const char *what, const char *s, int64_t min, int64_t max,
                              int64_t *out)
{
    char *end;
    if (!bare_text(s) || !isdigit((unsigned char)s[0]))
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s='%s' is not a size in bytes (e.g. 4096, 512K, 8M)",
                          what, s ? s : "");
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    long long mult = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K':
        mult = KIB;
        end++;
        break;
    case 'M':
        mult = MIB;
        end++;
        break;
    case 'G':
        mult = GIB;
        end++;
        break;
    case 'T':
        mult = TIB;
        end++;
        break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') end++;
    if ((errno != 0 && errno != ERANGE) || *end != '\0')
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s='%s' is not a size in bytes (e.g. 4096, 512K, 8M)",
                          what, s);
    /* A size past what 64 bits hold is a size out of range, not a malformed one. */
    int over = errno == ERANGE || v > (unsigned long long)INT64_MAX / (unsigned long long)mult;
    int64_t b = over ? INT64_MAX : (int64_t)v * mult;
    if (over || b < min || b > max)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s=%s is out of range [%" PRId64 ", %" PRId64 "] bytes", what, s, min,
                          max);
    *out = b;
    return HOOP_OK;
}

/* A duration has no sign: its text starts with a digit or a point ("30", "0.5", ".5"; not
 * "+5", "-0" or "inf"), and is decimal: strtod would also read C's hexadecimal floats
 * ("0x10" as 16 s, "0x1p-2" as 0.25 s), which no other reader of these settings (a shell
 * script, Python's float) takes, so they are refused. */
hoop_status hoop__parse_seconds_ms(const char *what, const char *s, int64_t *out_ms)
{
    char *end = NULL;
    errno = 0;
    int unsigned_num = s && (isdigit((unsigned char)s[0]) || s[0] == '.') &&
                       s[strspn(s, "0123456789.eE+-")] == '\0';
    double v = bare_text(s) && unsigned_num ? strtod(s, &end) : -1;
    if (end == NULL || (errno != 0 && errno != ERANGE) || *end != '\0' || isnan(v) || v < 0) {
        /* "-1", "-0.5": a number, but a duration has no sign; say so rather than "not a
         * number" (strtod reads the whole text as a number that is < 0 or -0). */
        char *e2 = NULL;
        double neg = s && s[0] == '-' && bare_text(s) ? strtod(s, &e2) : NAN;
        if (e2 && *e2 == '\0' && !isnan(neg) && s[1 + strspn(s + 1, "0123456789.")] == '\0')
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "%s='%s' is negative: a duration has no sign (e.g. 30, 0.5)", what,
                              s);
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s='%s' is not a number of seconds (e.g. 30, 0.5)",
                          what, s ? s : "");
    }
    if (errno == ERANGE && v < 1.0) { /* underflow: positive, far under a millisecond */
        *out_ms = 1;
        return HOOP_OK;
    }
    if (errno == ERANGE || v > 1e9) /* a billion seconds (31 years) is the longest deadline */
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s='%s' is too large: at most 1e9 seconds", what, s);
    *out_ms = (int64_t)llround(v * 1000.0);
    if (*out_ms == 0 && v > 0) *out_ms = 1; /* a deadline counts whole ms: at least 1 */
    return HOOP_OK;
}

hoop_status hoop__parse_decimal(const char *what, const char *s, double min, double max,
                                double *out)
{
    char *end = NULL;
    errno = 0;
    double v = bare_text(s) ? strtod(s, &end) : NAN;
    if (end == NULL || *end != '\0' || isnan(v) || (errno != 0 && errno != ERANGE))
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s='%s' is not a number", what, s ? s : "");
    if (errno == ERANGE && fabs(v) < 1.0) /* underflow: strtod gives 0 or a denormal */
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s=%s is too small: under the smallest double (%g)",
                          what, s, DBL_MIN);
    if (errno == ERANGE || isinf(v) || v < min || v > max)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s=%s is out of range [%g, %g]", what, s, min, max);
    *out = v == 0.0 ? 0.0 : v; /* -0 reads as 0 */
    return HOOP_OK;
}

hoop_status hoop__env_int(const char *name, int64_t *out)
{
    const hoop_env_param *p = lookup(name);
    if (p == NULL || (p->type != HOOP_ENV_INT && p->type != HOOP_ENV_BYTES))
        return HOOP_INTERNAL_ERROR("%s is not an integer setting in the env table", name);
    const char *v = value_of(p);
    if (p->type == HOOP_ENV_BYTES)
        HOOP_CHECK(hoop__parse_bytes(name, v, p->min, p->max, out));
    else
        HOOP_CHECK(hoop__parse_int(name, v, p->min, p->max, out));
    return rule_of(p, v, *out);
}

hoop_status hoop__env_ms(const char *name, int64_t *out_ms)
{
    const hoop_env_param *p = lookup(name);
    if (p == NULL || p->type != HOOP_ENV_SECONDS)
        return HOOP_INTERNAL_ERROR("%s is not a seconds setting in the env table", name);
    HOOP_CHECK(hoop__parse_seconds_ms(name, value_of(p), out_ms));
    if (*out_ms <= 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s='%s' must be more than 0 seconds", name,
                          value_of(p));
    return HOOP_OK;
}

/* Is word one of the '|'-separated choices? */
static int in_choices(const char *choices, const char *word)
{
    size_t n = strlen(word);
    for (const char *c = choices; *c;) {
        size_t len = strcspn(c, "|");
        if (len == n && strncasecmp(c, word, n) == 0) return 1;
        c += len + (c[len] == '|');
    }
    return 0;
}

hoop_status hoop__env_str(const char *name, const char **out)
{
    const hoop_env_param *p = lookup(name);
    if (p == NULL || (p->type != HOOP_ENV_STRING && p->type != HOOP_ENV_CHOICE))
        return HOOP_INTERNAL_ERROR("%s is not a text setting in the env table", name);
    const char *v = value_of(p);
    if (p->type == HOOP_ENV_CHOICE && p->choices && v && !in_choices(p->choices, v))
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s='%s' is not one of %s", name, v, p->choices);
    HOOP_CHECK(rule_of(p, v, 0));
    *out = v;
    return HOOP_OK;
}

hoop_status hoop__env_cuda_device(int *out)
{
    int64_t v;
    HOOP_CHECK(device_index("HOOP_CUDA_DEVICE", getenv("HOOP_CUDA_DEVICE"), &v));
    *out = (int)v;
    return HOOP_OK;
}

static hoop_status check_one(const hoop_env_param *p)
{
    int64_t i;
    const char *s;
    switch (p->type) {
    case HOOP_ENV_INT:
    case HOOP_ENV_BYTES: return hoop__env_int(p->name, &i);
    case HOOP_ENV_SECONDS: return hoop__env_ms(p->name, &i);
    case HOOP_ENV_STRING:
    case HOOP_ENV_CHOICE: return hoop__env_str(p->name, &s);
    }
    return HOOP_OK;
}

/* The edit distance (insertions, deletions, substitutions; Levenshtein 1966) between a
 * and b, counted up to 3 (3 = "3 or more"); names up to 63 characters. */
static int edit_distance(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (na > 63 || nb > 63) return 3;
    int row[64];
    for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb] < 3 ? row[nb] : 3;
}

/* The setting nearest to name within 2 edits (a typo: HOOP_TIMOUT), or NULL. */
static const char *nearest_setting(const char *name)
{
    const char *best = NULL;
    int best_d = 3;
    for (const hoop_env_param *p = hoop__env_params; p->name; p++) {
        int d = edit_distance(name, p->name);
        if (d < best_d) best_d = d, best = p->name;
    }
    return best;
}

hoop_status hoop__env_check_all(void)
{
    for (const hoop_env_param *p = hoop__env_params; p->name; p++) {
        const char *v = getenv(p->name);
        if (v == NULL || *v == '\0') continue;
        HOOP_CHECK(check_one(p));
        if (strcmp(p->name, "HOOP_TOKEN") == 0) v = "(hidden)";
        HOOP_INFO(ENV, "%s set by environment to %s", p->name, v);
    }
    /* Under hooprun, which warned already: one warning, not one per worker too. */
    const char *warned = getenv("HOOP_ENV_WARNED");
    if (warned && strcmp(warned, "1") == 0) return HOOP_OK;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "HOOP_", 5) != 0) continue;
        char name[128];
        size_t len = strcspn(*e, "=");
        snprintf(name, sizeof(name), "%.*s", (int)len, *e);
        const char *near = lookup(name) == NULL ? nearest_setting(name) : NULL;
        if (lookup(name) == NULL)
            HOOP_WARN("%s is not a hoop setting (%s%s%shooprun --help-env lists them); ignored",
                      name, near ? "did you mean " : "", near ? near : "", near ? "? " : "");
    }
    return HOOP_OK;
}

static const char *type_name(hoop_env_type t)
{
    static const char *names[] = {"int", "bytes", "seconds", "string", "choice"};
    return names[t];
}

void hoop__env_print_help(FILE *f)
{
    int w = 20; /* the name column fits the longest name */
    for (const hoop_env_param *p = hoop__env_params; p->name; p++)
        if ((int)strlen(p->name) > w) w = (int)strlen(p->name);
    fprintf(f, "%-*s %-8s %-10s %-22s %s\n", w, "variable", "type", "default", "range",
            "description");
    for (const hoop_env_param *p = hoop__env_params; p->name; p++) {
        char range[64] = "";
        if (p->type == HOOP_ENV_INT || p->type == HOOP_ENV_BYTES)
            snprintf(range, sizeof(range), "%" PRId64 "..%" PRId64, p->min, p->max);
        else if (p->type == HOOP_ENV_CHOICE && p->choices)
            snprintf(range, sizeof(range), "%s", p->choices);
        else if (p->type == HOOP_ENV_SECONDS)
            snprintf(range, sizeof(range), "> 0, <= 1e9");
        fprintf(f, "%-*s %-8s %-10s %-22s %s\n", w, p->name, type_name(p->type),
                p->def ? p->def : "-", range, p->desc);
    }
}

// ----- the env:// contract, with an srun step's variables as fallback -------------------

/* "RANK=5" or, for a value an srun step gave, "RANK=5 (from SLURM_PROCID)". */
static const char *described(char *buf, size_t cap, const char *name, int v, const char *src)
{
    if (src)
        snprintf(buf, cap, "%s=%d (from %s)", name, v, src);
    else
        snprintf(buf, cap, "%s=%d", name, v);
    return buf;
}

/* One integer of the contract: the environment's value; else the srun step's (slurm_from
 * names its variable, NULL outside a step); else def, or an error when required. *src
 * is set to slurm_from when that was used, else NULL. */
static hoop_status dist_int(const char *name, int64_t min, int64_t max, int required, int64_t def,
                            const char *slurm_from, int slurm_value, int *out, const char **src)
{
    const char *v = getenv(name);
    *src = NULL;
    if (v && *v) {
        int64_t x;
        HOOP_CHECK(hoop__parse_int(name, v, min, max, &x));
        *out = (int)x;
        return HOOP_OK;
    }
    if (slurm_from) {
        if (slurm_value < min || slurm_value > max)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "%s=%d (from %s) is out of range [%" PRId64 ", %" PRId64 "]", name,
                              slurm_value, slurm_from, min, max);
        *out = slurm_value;
        *src = slurm_from;
        return HOOP_OK;
    }
    if (required)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s is not set (hint: start workers with hooprun or srun, "
                          "or set MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE)",
                          name);
    *out = (int)def;
    return HOOP_OK;
}

/* Is any variable of the contract unset? Only then are Slurm's variables read, so that
 * workers hooprun started under srun (which set everything) never depend on them. */
/* The env:// contract's variables. */
static const char *const contract[] = {"MASTER_ADDR", "MASTER_PORT",      "WORLD_SIZE",
                                       "RANK",        "LOCAL_WORLD_SIZE", "LOCAL_RANK"};

/* How many of them are set (non-empty). */
static size_t contract_set(void)
{
    size_t n = 0;
    for (size_t i = 0; i < HOOP_ARRAY_SIZE(contract); i++) {
        const char *v = getenv(contract[i]);
        n += v != NULL && *v != '\0';
    }
    return n;
}

static int contract_incomplete(void)
{
    return contract_set() < HOOP_ARRAY_SIZE(contract);
}

static hoop_status dist_master(hoop_dist_env *out, const hoop_slurm_task *sl)
{
    const char *addr = getenv("MASTER_ADDR");
    if ((addr == NULL || *addr == '\0') && sl) {
        snprintf(out->master_addr, sizeof(out->master_addr), "%s", sl->master_addr);
        out->from_slurm = 1;
        return HOOP_OK;
    }
    if (addr == NULL || *addr == '\0')
        return HOOP_ERROR(HOOP_ERR_INVALID, "MASTER_ADDR is not set (hint: start workers with "
                                            "hooprun or srun, or export MASTER_ADDR=<host of "
                                            "rank 0>)");
    if (strlen(addr) >= sizeof(out->master_addr))
        return HOOP_ERROR(HOOP_ERR_INVALID, "MASTER_ADDR is longer than %zu characters",
                          sizeof(out->master_addr) - 1);
    strcpy(out->master_addr, addr);
    return HOOP_OK;
}

/* HOOP_TOKEN when set; else, when the srun step supplied part of the contract, the
 * step's "slurm-JOB.STEP" (see env.h for what that protects against); else none. */
static hoop_status dist_token(hoop_dist_env *out, const hoop_slurm_task *sl)
{
    const char *t = getenv("HOOP_TOKEN");
    if (t && *t) {
        if (strlen(t) >= sizeof(out->token))
            return HOOP_ERROR(HOOP_ERR_INVALID, "HOOP_TOKEN is longer than %zu characters",
                              sizeof(out->token) - 1);
        strcpy(out->token, t);
    } else if (sl && out->from_slurm) {
        snprintf(out->token, sizeof(out->token), "%s", sl->token);
    }
    return HOOP_OK;
}

/* Other launchers' world sizes, and who sets each. hoop reads none of them: a process
 * they started as one of several ranks would otherwise run a world of its own. */
static const struct {
    const char *name, *launcher;
} foreign[] = {{"OMPI_COMM_WORLD_SIZE", "mpirun (Open MPI)"},
               {"PMI_SIZE", "mpirun or mpiexec (PMI: MPICH, Intel MPI)"},
               {"MV2_COMM_WORLD_SIZE", "mpirun (MVAPICH)"}};

/* The index in foreign[] of the first launcher whose world size is above 1, -1 when none
 * (unset, 1, or not a number: nothing to refuse). */
static int foreign_launcher(void)
{
    for (size_t i = 0; i < HOOP_ARRAY_SIZE(foreign); i++) {
        const char *v = getenv(foreign[i].name);
        char *end;
        if (v == NULL || *v == '\0') continue;
        errno = 0; /* (strtol, not hoop__parse_int: no error message is set for a value skipped) */
        long n = strtol(v, &end, 10);
        if (errno == 0 && *end == '\0' && n > 1) return (int)i;
    }
    return -1;
}

int hoop__env_dist_wanted(void)
{
    const char *step = getenv("SLURM_STEP_ID"), *procid = getenv("SLURM_PROCID");
    /* Any part of the env:// contract means a distributed job: hoop__env_dist then names
     * what is missing or malformed, instead of the program running alone unawares. So
     * does another launcher's world size above 1 (hoop__env_dist refuses it by name). */
    if (contract_set() > 0) return 1;
    if (step && *step && procid && *procid) return 1;
    return foreign_launcher() >= 0;
}

/* Outside an srun step, with required variables unset: checks the ones that are set
 * first, so that a malformed value is named before what is missing (one who typed
 * WORLD_SIZE=abc learns that, not only that MASTER_ADDR is unset), and names every
 * required variable that is missing at once. Returns the error to report. */
static const char *const required[] = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"};

static hoop_status dist_incomplete(void)
{
    static const struct {
        const char *name;
        int64_t min, max;
    } ints[] = {{"MASTER_PORT", 1, 65535},
                {"WORLD_SIZE", 1, 1 << 20},
                {"RANK", 0, INT32_MAX},
                {"LOCAL_WORLD_SIZE", 1, 1 << 20},
                {"LOCAL_RANK", 0, INT32_MAX}};
    char missing[128] = "", bad[512] = "";
    size_t used = 0, nmissing = 0, left = 0;
    for (size_t i = 0; i < HOOP_ARRAY_SIZE(required); i++) {
        const char *v = getenv(required[i]);
        left += v == NULL || *v == '\0';
    }
    for (size_t i = 0; i < HOOP_ARRAY_SIZE(required); i++) { /* "A, B and C" */
        const char *v = getenv(required[i]);
        if (v && *v) continue;
        nmissing++;
        const char *sep = nmissing == 1 ? "" : nmissing == left ? " and " : ", ";
        int k = snprintf(missing + used, sizeof(missing) - used, "%s%s", sep, required[i]);
        used += k > 0 ? (size_t)k : 0;
    }
    const char *addr = getenv("MASTER_ADDR");
    int64_t x[HOOP_ARRAY_SIZE(ints)] = {0};
    int given[HOOP_ARRAY_SIZE(ints)] = {0};
    if (addr && strlen(addr) > 255)
        snprintf(bad, sizeof(bad), "MASTER_ADDR is longer than 255 characters");
    for (size_t i = 0; !bad[0] && i < HOOP_ARRAY_SIZE(ints); i++) {
        const char *v = getenv(ints[i].name);
        given[i] = v && *v;
        if (given[i] &&
            hoop__parse_int(ints[i].name, v, ints[i].min, ints[i].max, &x[i]) != HOOP_OK)
            snprintf(bad, sizeof(bad), "%s", hoop_last_error());
    }
    if (!bad[0] && given[1] && given[2] && x[2] >= x[1]) /* RANK, WORLD_SIZE */
        snprintf(bad, sizeof(bad), "RANK=%" PRId64 " is not below WORLD_SIZE=%" PRId64, x[2], x[1]);
    const char *hint = "(hint: start workers with hooprun or srun, or set MASTER_ADDR, "
                       "MASTER_PORT, RANK and WORLD_SIZE)";
    const char *verb = nmissing == 1 ? "is" : "are";
    if (bad[0])
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s; also %s %s not set %s", bad, missing, verb, hint);
    return HOOP_ERROR(HOOP_ERR_INVALID, "%s %s not set %s", missing, verb, hint);
}

/* Is a variable the contract requires unset (whatever an srun step would give)? */
static int required_unset(void)
{
    for (size_t i = 0; i < HOOP_ARRAY_SIZE(required); i++) {
        const char *v = getenv(required[i]);
        if (v == NULL || *v == '\0') return 1;
    }
    return 0;
}

/* hoop__env_dist, or with local = 0 hoop__env_dist_store. */
static hoop_status dist_parse(hoop_dist_env *out, int local)
{
    memset(out, 0, sizeof(*out));
    hoop_slurm_task slurm;
    int in_step = 0;
    if (contract_incomplete()) HOOP_CHECK(hoop__launch_slurm_task(&slurm, &in_step));
    const hoop_slurm_task *sl = in_step ? &slurm : NULL;
    if (sl == NULL && required_unset()) {
        int f = contract_set() == 0 ? foreign_launcher() : -1;
        if (f >= 0)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "%s=%s: started by %s, which hoop does not read; start the ranks "
                              "with hooprun (or set RANK, WORLD_SIZE, MASTER_ADDR and "
                              "MASTER_PORT)",
                              foreign[f].name, getenv(foreign[f].name), foreign[f].launcher);
        return dist_incomplete();
    }
    const char *port_src, *ws_src, *rank_src, *lws_src, *lr_src;
    char a[96], b[96];
    HOOP_CHECK(dist_master(out, sl));
    HOOP_CHECK(dist_int("MASTER_PORT", 1, 65535, 1, 0, sl ? "SLURM_JOB_ID" : NULL,
                        sl ? sl->master_port : 0, &out->master_port, &port_src));
    HOOP_CHECK(dist_int("WORLD_SIZE", 1, 1 << 20, 1, 0, sl ? sl->world_from : NULL,
                        sl ? sl->world_size : 0, &out->world_size, &ws_src));
    HOOP_CHECK(dist_int("RANK", 0, INT32_MAX, 1, 0, sl ? "SLURM_PROCID" : NULL, sl ? sl->rank : 0,
                        &out->rank, &rank_src));
    if (out->rank >= out->world_size)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s is not below %s",
                          described(a, sizeof(a), "RANK", out->rank, rank_src),
                          described(b, sizeof(b), "WORLD_SIZE", out->world_size, ws_src));
    lws_src = lr_src = NULL;
    if (local) {
        HOOP_CHECK(dist_int("LOCAL_WORLD_SIZE", 1, out->world_size, 0, out->world_size,
                            sl ? sl->local_world_from : NULL, sl ? sl->local_world_size : 0,
                            &out->local_world_size, &lws_src));
        HOOP_CHECK(dist_int("LOCAL_RANK", 0, INT32_MAX, 0, out->rank % out->local_world_size,
                            sl ? "SLURM_LOCALID" : NULL, sl ? sl->local_rank : 0, &out->local_rank,
                            &lr_src));
        const char *lws = getenv("LOCAL_WORLD_SIZE"); /* unset: WORLD_SIZE's (one node) */
        if (out->local_rank >= out->local_world_size)
            return HOOP_ERROR(HOOP_ERR_INVALID, "%s is not below %s",
                              described(a, sizeof(a), "LOCAL_RANK", out->local_rank, lr_src),
                              described(b, sizeof(b), "LOCAL_WORLD_SIZE", out->local_world_size,
                                        lws_src ? lws_src
                                        : lws == NULL || !*lws
                                            ? "WORLD_SIZE, as LOCAL_WORLD_SIZE is unset"
                                            : NULL));
    }
    out->from_slurm |= port_src || ws_src || rank_src || lws_src || lr_src;
    out->port_from_slurm = port_src != NULL;
    HOOP_CHECK(dist_token(out, sl));
    if (!local) return HOOP_OK;
    static atomic_int said; /* once per process: comm and store both read the contract */
    char master[300];
    if (out->from_slurm && atomic_exchange(&said, 1) == 0)
        HOOP_INFO(ENV, "srun step: rank %d of %d (local %d of %d), master %s (%s), token %s",
                  out->rank, out->world_size, out->local_rank, out->local_world_size,
                  hoop__hostport(master, sizeof(master), out->master_addr, out->master_port),
                  sl->master_from,
                  getenv("HOOP_TOKEN") && *getenv("HOOP_TOKEN")
                      ? "from HOOP_TOKEN"
                      : "derived from the job id (not a secret; export HOOP_TOKEN)");
    return HOOP_OK;
}

hoop_status hoop__env_dist(hoop_dist_env *out)
{
    return dist_parse(out, 1);
}

hoop_status hoop__env_dist_store(hoop_dist_env *out)
{
    return dist_parse(out, 0);
}

// ----- settings texts compared across ranks ------------------------------------------------

/* Finds flag's line in text: its value's start and length, or NULL. */
static const char *find_value(const char *text, const char *flag, size_t flen, size_t *vlen)
{
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        if (!end) return NULL;
        if ((size_t)(end - line) > flen && !strncmp(line, flag, flen) && line[flen] == ' ') {
            *vlen = (size_t)(end - line) - flen - 1;
            return line + flen + 1;
        }
        line = end + 1;
    }
    return NULL;
}

int hoop__settings_diff(const char *a, const char *b, char *flag, char *va, char *vb, size_t cap)
{
    for (const char *line = a; *line;) {
        const char *end = strchr(line, '\n'), *sp = strchr(line, ' ');
        if (!end || !sp || sp > end) return 0;
        size_t flen = (size_t)(sp - line), alen = (size_t)(end - sp - 1), blen;
        const char *bv = find_value(b, line, flen, &blen);
        if (bv && (alen != blen || memcmp(sp + 1, bv, alen) != 0)) {
            snprintf(flag, cap, "%.*s", (int)flen, line);
            snprintf(va, cap, "%.*s", (int)alen, sp + 1);
            snprintf(vb, cap, "%.*s", (int)blen, bv);
            return 1;
        }
        line = end + 1;
    }
    return 0;
}

int hoop__settings_vput(char *buf, size_t len, size_t *pos, const char *flag, const char *fmt,
                        va_list ap)
{
    char value[128];
    vsnprintf(value, sizeof value, fmt, ap);
    int n = snprintf(buf + *pos, len - *pos, "%s %s\n", flag, value);
    if (n < 0 || (size_t)n >= len - *pos) return -1;
    *pos += (size_t)n;
    return 0;
}

int hoop__settings_put(char *buf, size_t len, size_t *pos, const char *flag, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = hoop__settings_vput(buf, len, pos, flag, fmt, ap);
    va_end(ap);
    return r;
}
