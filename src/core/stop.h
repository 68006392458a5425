/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/stop.h -- a program's stop request from its signal handler (internal; used
 * by hoop-train and hoop-bench).
 *
 * One stop signal often arrives two or three times: timeout(1) and Slurm's scancel signal
 * a process and then its group or every process of the step, and hooprun forwards what
 * it gets on top. Those copies come within milliseconds of each other; a person who
 * presses Ctrl-C again to stop at once comes later. So a stop signal within
 * HOOP__STOP_REPEAT_MS of the first is the same request, and only a later one is a
 * second (a copy stopped the process at once, leaving its report half written).
 */
#ifndef HOOP_CORE_STOP_H
#define HOOP_CORE_STOP_H

#define HOOP__STOP_REPEAT_MS 250

/* What a stop signal is (returned by hoop__stop_request). */
enum { HOOP__STOP_FIRST = 1, HOOP__STOP_COPY = 0, HOOP__STOP_AGAIN = 2 };

/* For a signal handler (async-signal-safe: lock-free atomics and clock_gettime): takes
 * stop signal sig and says whether it is the first (kept: hoop__stop_requested returns
 * it), a copy (within HOOP__STOP_REPEAT_MS of the first, any signal) or a second request
 * (later). Never fails. */
int hoop__stop_request(int sig);

/* The first stop signal taken by hoop__stop_request, 0 when none. Any thread. */
int hoop__stop_requested(void);

#endif
