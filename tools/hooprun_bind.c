/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/hooprun_bind.c -- hooprun's CPU binding: one disjoint block of CPUs per worker.
 *
 * The CPUs hooprun may run on (its affinity mask, which Slurm or cgroups may have cut)
 * are split into nproc_per_node blocks, each worker bound to one before it execs, as
 * `mpirun --bind-to core` does. Workers on the same cores fight over caches and the
 * scheduler moves them about; a worker alone on its block keeps its compute thread and
 * its communicator's progress thread together. With hwloc the blocks follow the machine's
 * topology (hwloc_distrib: packages, then cores, keeping hyperthreads of a core
 * together); without it they are runs of consecutive CPU numbers.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "hooprun.h"

#ifdef HOOP_HAVE_HWLOC
#include <hwloc.h>
#include <hwloc/glibc-sched.h>

static int distrib_hwloc(int nproc, cpu_set_t *sets)
{
    hwloc_topology_t topo;
    int ok = 0;
    if (hwloc_topology_init(&topo) != 0) return 0;
    hwloc_bitmap_t mine = hwloc_bitmap_alloc();
    /* Only the CPUs hooprun may use (taskset, Slurm's binding): restrict the topology. */
    if (mine && hwloc_topology_load(topo) == 0 &&
        hwloc_get_cpubind(topo, mine, HWLOC_CPUBIND_PROCESS) == 0 &&
        hwloc_topology_restrict(topo, mine, 0) == 0) {
        hwloc_obj_t root = hwloc_get_root_obj(topo);
        hwloc_cpuset_t cs[HOOPRUN_BIND_MAX];
        int npu = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
        if (npu >= nproc && hwloc_distrib(topo, &root, 1, cs, (unsigned)nproc, INT_MAX, 0) == 0) {
            ok = 1;
            for (int i = 0; i < nproc; i++) {
                CPU_ZERO(&sets[i]);
                if (hwloc_cpuset_to_glibc_sched_affinity(topo, cs[i], &sets[i], sizeof(sets[i])) ||
                    CPU_COUNT(&sets[i]) == 0)
                    ok = 0;
                hwloc_bitmap_free(cs[i]);
            }
        }
    }
    hwloc_bitmap_free(mine);
    hwloc_topology_destroy(topo);
    return ok;
}
#endif

/* Consecutive runs of the allowed CPUs, as even as they can be. */
static int distrib_plain(int nproc, cpu_set_t *sets)
{
    cpu_set_t all;
    int cpus[CPU_SETSIZE], n = 0;
    if (sched_getaffinity(0, sizeof(all), &all) != 0) return 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) cpus[n++] = c;
    if (n < nproc) return 0;
    for (int i = 0; i < nproc; i++) {
        CPU_ZERO(&sets[i]);
        for (int k = i * n / nproc; k < (i + 1) * n / nproc; k++) CPU_SET(cpus[k], &sets[i]);
    }
    return 1;
}

int hooprun_cpu_sets(int nproc, cpu_set_t *sets)
{
    if (nproc < 1 || nproc > HOOPRUN_BIND_MAX) return 0;
#ifdef HOOP_HAVE_HWLOC
    if (distrib_hwloc(nproc, sets)) return 1;
#endif
    return distrib_plain(nproc, sets);
}

void hooprun_cpu_list(const cpu_set_t *set, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE && len + 16 < cap; c++) {
        if (!CPU_ISSET(c, set) || (c > 0 && CPU_ISSET(c - 1, set))) continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set)) e++;
        len += (size_t)snprintf(buf + len, cap - len, len ? ",%d" : "%d", c);
        if (e > c) len += (size_t)snprintf(buf + len, cap - len, "-%d", e);
    }
}
