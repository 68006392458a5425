/* SPDX-License-Identifier: BSD-3-Clause */
/* src/core/memroom.c -- hoop__mem_room_kib: /proc/meminfo and the memory cgroups. */
#include "core/memroom.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Reads one integer from file (cgroup v2's "max", no limit, is not one): 1, else 0. */
static int read_i64(const char *file, int64_t *v)
{
    FILE *f = fopen(file, "re");
    int ok = f && fscanf(f, "%" SCNd64, v) == 1;
    if (f) fclose(f);
    return ok;
}

/* The value of key in a memory.stat file ("total_inactive_file 123"), or 0. */
static int64_t stat_value(const char *file, const char *key)
{
    char line[256];
    int64_t v = 0;
    size_t kl = strlen(key);
    FILE *f = fopen(file, "re");
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ' ') {
            if (sscanf(line + kl + 1, "%" SCNd64, &v) != 1) v = 0;
            break;
        }
    if (f) fclose(f);
    return v;
}

/* The room that cgroup directory dir leaves below its own limit, in KiB: the files limit
 * and usage (bytes), less the inactive file cache that memory.stat counts under key
 * inactive (the kernel reclaims it before it kills: a job that has just written its
 * data files has that room); -1 where there is no limit or the files cannot be read. */
static int64_t cgroup_room(const char *dir, const char *limit, const char *usage,
                           const char *inactive)
{
    char path[512];
    int64_t max, cur;
    snprintf(path, sizeof(path), "%s/%s", dir, limit);
    if (!read_i64(path, &max)) return -1;
    snprintf(path, sizeof(path), "%s/%s", dir, usage);
    if (!read_i64(path, &cur)) return -1;
    snprintf(path, sizeof(path), "%s/memory.stat", dir);
    int64_t reclaim = stat_value(path, inactive);
    if (reclaim > 0 && reclaim < cur) cur -= reclaim;
    return max > cur ? (max - cur) / 1024 : 0;
}

/* The least room of cgroup directory root + path and of each of its ancestors up to
 * root, in KiB (a limit may sit on a parent: a Slurm job's above its step's, a systemd
 * slice, a pod); -1 where none of them has a limit. */
static int64_t tree_room(const char *root, const char *path, const char *limit, const char *usage,
                         const char *inactive)
{
    char dir[512];
    int64_t room = -1;
    size_t top = strlen(root);
    snprintf(dir, sizeof(dir), "%s%s", root, path);
    for (;;) {
        int64_t r = cgroup_room(dir, limit, usage, inactive);
        if (r >= 0 && (room < 0 || r < room)) room = r;
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= top || !slash || (size_t)(slash - dir) < top) break;
        *slash = '\0';
    }
    return room;
}

/* The room this process's memory cgroups leave, in KiB (-1: none known). Its lines in
 * /proc/self/cgroup: "0::/PATH" (v2, under /sys/fs/cgroup) and "N:memory:/PATH" (v1,
 * under /sys/fs/cgroup/memory). A v1 path from outside a container's cgroup namespace
 * names no directory inside it: there the mount's root is the container's own cgroup. */
static int64_t cgroup_room_kib(void)
{
    char line[512], v2[300] = "", v1[300] = "";
    int has_v2 = 0, has_v1 = 0;
    FILE *f = fopen("/proc/self/cgroup", "re");
    while (f && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        const char *ctl = c1 + 1, *path = c2 + 1;
        if (!*ctl && !has_v2) {
            snprintf(v2, sizeof(v2), "%s", strcmp(path, "/") ? path : "");
            has_v2 = 1;
        }
        for (const char *t = ctl; !has_v1 && (t = strstr(t, "memory")) != NULL; t += 6)
            if ((t == ctl || t[-1] == ',') && (t[6] == '\0' || t[6] == ',')) {
                snprintf(v1, sizeof(v1), "%s", strcmp(path, "/") ? path : "");
                has_v1 = 1;
            }
    }
    if (f) fclose(f);
    int64_t room = -1, r;
    if (has_v1) {
        const char *mnt = "/sys/fs/cgroup/memory";
        r = tree_room(mnt, v1, "memory.limit_in_bytes", "memory.usage_in_bytes",
                      "total_inactive_file");
        if (r < 0 && v1[0])
            r = cgroup_room(mnt, "memory.limit_in_bytes", "memory.usage_in_bytes",
                            "total_inactive_file");
        if (r >= 0) room = r;
    }
    if (has_v2) {
        r = tree_room("/sys/fs/cgroup", v2, "memory.max", "memory.current", "inactive_file");
        if (r >= 0 && (room < 0 || r < room)) room = r;
    }
    return room;
}

int64_t hoop__mem_room_kib(void)
{
    char line[256];
    int64_t avail = -1, swap = 0, v;
    FILE *f = fopen("/proc/meminfo", "re");
    while (f && fgets(line, sizeof(line), f)) {
        if (sscanf(line, "MemAvailable: %" SCNd64, &v) == 1) avail = v;
        if (sscanf(line, "SwapFree: %" SCNd64, &v) == 1) swap = v;
    }
    if (f) fclose(f);
    if (avail < 0) return -1;
    avail += swap;
    int64_t cg = cgroup_room_kib();
    return cg >= 0 && cg < avail ? cg : avail;
}
