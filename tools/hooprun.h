/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/hooprun.h -- what hooprun's option parser hands to its supervisor.
 *
 * hooprun.c resolves flags, Slurm variables and defaults into one hooprun_plan;
 * hooprun_proc.c starts the workers of that plan and watches them. Single-threaded.
 */
#ifndef HOOP_TOOLS_HOOPRUN_H
#define HOOP_TOOLS_HOOPRUN_H

#include <sched.h>
#include <stdint.h>

#define HOOPRUN_BIND_MAX 1024 /* workers per node that --bind core handles */

typedef struct hooprun_plan {
    int nnodes, node_rank, nproc_per_node;
    char master_addr[256];
    int master_port;
    char token[129];  /* HOOP_TOKEN every worker gets */
    int prefix;       /* 1: prefix each output line with "[rank N] " */
    int64_t grace_ms; /* SIGTERM -> SIGKILL delay when stopping workers */
    char **argv;      /* PROG ARGS..., NULL-terminated */
    cpu_set_t *cpus;  /* --bind core: worker i's CPUs (nproc_per_node sets); NULL = no binding */
} hooprun_plan;

/* Splits the CPUs this process may use into nproc disjoint, non-empty sets (hwloc's
 * topology-aware distribution when built with hwloc, else consecutive runs); returns 1,
 * or 0 when there are fewer CPUs than workers (then nobody is bound). */
int hooprun_cpu_sets(int nproc, cpu_set_t *sets);

/* Writes set as a list like "0-3,8" (for --dry-run and logs). */
void hooprun_cpu_list(const cpu_set_t *set, char *buf, size_t cap);

/* Starts plan->nproc_per_node workers, forwards their output and signals, stops all of
 * them when one fails, reaps everything and returns hooprun's exit status: 0 when every
 * worker exited 0, the first failed worker's code (128 + signal when killed), 128 + the
 * signal that interrupted hooprun, or 1 when hooprun itself failed (fork, pipe). */
int hooprun_supervise(const hooprun_plan *plan);

#endif /* HOOP_TOOLS_HOOPRUN_H */
