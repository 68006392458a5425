/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/env.h -- the table of HOOP_* settings and the distributed env contract.
 *
 * Every HOOP_* knob is declared once in env.c with its type, default, range and a
 * one-line description; `hooprun --help-env` prints that table. Readers validate the
 * value and fail with HOOP_ERR_INVALID naming the variable (tools exit 2 on it).
 */
#ifndef HOOP_CORE_ENV_H
#define HOOP_CORE_ENV_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "hoop/status.h"

HOOP_EXTERN_C_BEGIN

typedef enum hoop_env_type {
    HOOP_ENV_INT,     /* decimal integer in [min, max] */
    HOOP_ENV_BYTES,   /* integer with optional K/M/G suffix (powers of 1024), in [min, max] */
    HOOP_ENV_SECONDS, /* non-negative decimal seconds ("30", "0.5"), read back as ms */
    HOOP_ENV_STRING,  /* free text */
    HOOP_ENV_CHOICE,  /* one of the '|'-separated words in choices */
} hoop_env_type;

typedef struct hoop_env_param {
    const char *name;
    hoop_env_type type;
    const char *def; /* default, as text; NULL = unset */
    int64_t min, max;
    const char *choices; /* for HOOP_ENV_CHOICE, e.g. "ring|rd|rhd|auto" */
    const char *desc;
} hoop_env_param;

/* The table, terminated by an entry with name == NULL. */
extern const hoop_env_param hoop__env_params[];

/* Reads an INT or BYTES knob (default when unset or empty). HOOP_ERR_INVALID when the
 * value is malformed or out of range; HOOP_ERR_INTERNAL for a name not in the table. */
hoop_status hoop__env_int(const char *name, int64_t *out);

/* Reads a SECONDS knob as milliseconds. */
hoop_status hoop__env_ms(const char *name, int64_t *out_ms);

/* Reads a STRING or CHOICE knob; *out is the default (possibly NULL) when unset.
 * CHOICE values are checked against the table. */
hoop_status hoop__env_str(const char *name, const char **out);

/* HOOP_CUDA_DEVICE as a device index: *out = the index (0 .. 100000000), or -1 when it is
 * unset or empty. HOOP_ERR_INVALID naming the value when it is not digits only, or out of
 * range (the table's rule). Whether that device exists only the CUDA backend knows. */
hoop_status hoop__env_cuda_device(int *out);

/* Validates every HOOP_* variable that is set and, at INFO on INIT/ENV, logs
 * "HOOP_X set by environment to V". Unknown HOOP_* names only warn. */
hoop_status hoop__env_check_all(void);

/* Prints the table (name, type, default, range, description) for --help-env. */
void hoop__env_print_help(FILE *f);

/* Strict parsers shared with the tools: whole string, no junk, range-checked; one rule
 * for white space in all of them (none before or after the number: " 5" and "5 " are
 * refused). what names the culprit in the message ("MASTER_PORT", "--nproc-per-node").
 * Seconds have no sign (they start with a digit or a point), and a positive value under a
 * millisecond reads as 1 ms (a deadline counts whole milliseconds). */
hoop_status hoop__parse_int(const char *what, const char *s, int64_t min, int64_t max,
                            int64_t *out);
hoop_status hoop__parse_bytes(const char *what, const char *s, int64_t min, int64_t max,
                              int64_t *out);
hoop_status hoop__parse_seconds_ms(const char *what, const char *s, int64_t *out_ms);
/* A decimal number (strtod's forms: "0.1", "1e-3"), finite, in [min, max]; -0 reads as 0.
 * A value under the smallest double (strtod would round it to 0 or a denormal) is refused. */
hoop_status hoop__parse_decimal(const char *what, const char *s, double min, double max,
                                double *out);

/* The PyTorch env:// contract: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE (the last two default to RANK mod LOCAL_WORLD_SIZE and WORLD_SIZE
 * when unset), plus the connection token (HOOP_TOKEN).
 *
 * srun-native start: in a task of an srun step (SLURM_STEP_ID and SLURM_PROCID set; see
 * hoop__launch_slurm_task), each variable that is unset comes from Slurm instead:
 * RANK = SLURM_PROCID, WORLD_SIZE = the step's task count, LOCAL_RANK = SLURM_LOCALID,
 * LOCAL_WORLD_SIZE = this node's task count, MASTER_ADDR = the first host of the step's
 * node list, MASTER_PORT = hoop__launch_slurm_port(SLURM_JOB_ID, SLURM_STEP_ID). A
 * variable that is set always wins. When HOOP_TOKEN is unset and Slurm supplied any of
 * them, the token is "slurm-JOB.STEP": every task of the step agrees on it without
 * being told, and a process of another job or step (a stale worker on a reused port)
 * is refused, but a job id is no secret (squeue shows it to every user), so it does
 * not keep out someone who means to join. For that, export HOOP_TOKEN with a random
 * value before srun (srun passes it to every task). */
typedef struct hoop_dist_env {
    char master_addr[256];
    int master_port;
    int rank, world_size;
    int local_rank, local_world_size;
    char token[64];      /* "" = none; at most 63 characters: the transports' hello holds it
                          * (HOOP_TP_TOKEN_MAX), so every rank refuses a longer one itself */
    int from_slurm;      /* 1 when Slurm's variables supplied a value */
    int port_from_slurm; /* 1 when MASTER_PORT was derived from SLURM_JOB_ID */
} hoop_dist_env;

/* Does the environment describe a distributed job, so that a program should call
 * hoop_comm_init_env rather than run alone? 1 when any variable of the env:// contract
 * (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_WORLD_SIZE, LOCAL_RANK) is set
 * (hooprun, or by hand: a partial contract is then
 * refused by hoop__env_dist, naming what is missing) or when this process is a task of
 * an srun step (SLURM_STEP_ID and SLURM_PROCID set), or when another launcher's world
 * size above 1 is set (OMPI_COMM_WORLD_SIZE, PMI_SIZE, MV2_COMM_WORLD_SIZE: mpirun, which
 * hoop__env_dist then refuses by name rather than let each rank run alone); 0 otherwise.
 * Never fails. */
int hoop__env_dist_wanted(void);

/* Reads and validates the contract. HOOP_ERR_INVALID names the variable and the rule
 * it breaks ("RANK=4 is not below WORLD_SIZE=4", "RANK=5 (from SLURM_PROCID) is not
 * below WORLD_SIZE=4"); a missing variable is named too, and so is a malformed Slurm
 * variable that was needed. Logs the srun-derived values at INFO (ENV). */
hoop_status hoop__env_dist(hoop_dist_env *out);

/* hoop__env_dist without LOCAL_WORLD_SIZE and LOCAL_RANK (out's local fields 0): what
 * finds rank 0's store, for a rank that refuses its local variables and must still tell
 * the others why (hoop__store_env_refuse). The same errors for the rest. */
hoop_status hoop__env_dist_store(hoop_dist_env *out);

HOOP_EXTERN_C_END

/* Compares two settings texts, lines "--flag value\n" (hoop-train's train_cli_settings,
 * hoop-bench's bench_settings), as the ranks of one job exchange them: the first flag
 * that both list with different values. Returns 1 and copies the flag and the values a
 * and b give it into flag, va and vb (each cap bytes, truncated), or 0 when every flag
 * both list is the same. */
int hoop__settings_diff(const char *a, const char *b, char *flag, char *va, char *vb, size_t cap);

/* Appends the line "flag value\n" of such a text to buf (len bytes, written up to *pos,
 * which moves past the line), the value printf-formatted from fmt (at most 127 bytes
 * kept). Returns 0, or -1 when the line does not fit (buf and *pos unchanged but for a
 * cut-off tail after *pos, which the next line overwrites). */
int hoop__settings_vput(char *buf, size_t len, size_t *pos, const char *flag, const char *fmt,
                        va_list ap) __attribute__((format(printf, 5, 0)));
int hoop__settings_put(char *buf, size_t len, size_t *pos, const char *flag, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif /* HOOP_CORE_ENV_H */
