/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/fuzz/fuzz_hostlist.c -- Slurm's node lists and tasks-per-node lists
 * (src/core/hostlist.c): the first line of the input is expanded as a node list
 * (SLURM_JOB_NODELIST), the second read as SLURM_TASKS_PER_NODE for nodes 0-3. An
 * accepted list must give non-empty names and counts of at least 1.
 */
#include "fuzz.h"

#include "core/hostlist.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_str(data, size), *spec = NULL, **hosts;
    int count, tasks;
    if (s == NULL) return 0;
    fuzz_quiet();
    char *nl = strchr(s, '\n');
    if (nl) *nl = '\0', spec = nl + 1;
    if (hoop__hostlist_expand(s, &hosts, &count) == HOOP_OK) {
        if (count < 1) abort();
        for (int i = 0; i < count; i++)
            if (hosts[i] == NULL || hosts[i][0] == '\0') abort();
        hoop__hostlist_free(hosts, count);
    }
    for (int id = 0; spec && id < 4; id++)
        if (hoop__hostlist_tasks_on_node("SLURM_TASKS_PER_NODE", spec, id, &tasks) == HOOP_OK &&
            tasks < 1)
            abort();
    free(s);
    return 0;
}
