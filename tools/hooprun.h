/*
 * tools/hooprun.h -- what hooprun's option parser hands to its supervisor.
 *
 * hooprun.c resolves flags, Slurm variables and defaults into one hooprun_plan;
 * hooprun_proc.c starts the workers of that plan and watches them. Single-threaded.
 */
#ifndef HOOP_TOOLS_HOOPRUN_H
#define HOOP_TOOLS_HOOPRUN_H

#include <stdint.h>

typedef struct hooprun_plan {
    int nnodes, node_rank, nproc_per_node;
    char master_addr[256];
    int master_port;
    char token[129];  /* HOOP_TOKEN every worker gets */
    int prefix;       /* 1: prefix each output line with "[rank N] " */
    int64_t grace_ms; /* SIGTERM -> SIGKILL delay when stopping workers */
    char **argv;      /* PROG ARGS..., NULL-terminated */
} hooprun_plan;

/* Starts plan->nproc_per_node workers, forwards their output and signals, stops all of
 * them when one fails, reaps everything and returns hooprun's exit status: 0 when every
 * worker exited 0, the first failed worker's code (128 + signal when killed), 128 + the
 * signal that interrupted hooprun, or 1 when hooprun itself failed (fork, pipe). */
int hooprun_supervise(const hooprun_plan *plan);

#endif /* HOOP_TOOLS_HOOPRUN_H */
