/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/memroom.h -- how much memory this process may still take before the kernel
 * kills something: the check a caller makes before it allocates and touches a large
 * buffer, since under overcommit the allocation itself succeeds and running out comes
 * later, at the first touch of a page, as the OOM killer's SIGKILL (internal; see
 * memroom.c).
 */
#ifndef HOOP_CORE_MEMROOM_H
#define HOOP_CORE_MEMROOM_H

#include <stdint.h>

#include "hoop/status.h"

HOOP_EXTERN_C_BEGIN

/* The memory this process may still take, in KiB: MemAvailable + SwapFree
 * (/proc/meminfo, proc(5)), or less where its memory cgroup leaves less below its limit
 * (cgroup v2: memory.max - memory.current; v1: memory.limit_in_bytes -
 * memory.usage_in_bytes), as in a Slurm job or a container. -1 when /proc/meminfo cannot
 * be read. A snapshot, shared with every other process of the machine or the cgroup;
 * thread-safe. */
int64_t hoop__mem_room_kib(void);

/* What hoop__mem_room_kib counts, in words for messages. */
#define HOOP__MEM_ROOM_WHAT "MemAvailable + SwapFree, or the cgroup's memory limit less its usage"

HOOP_EXTERN_C_END

#endif /* HOOP_CORE_MEMROOM_H */
