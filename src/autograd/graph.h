/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/graph.h -- what the autograd files tell a CUDA graph being captured
 * (graph.c; the public calls are in hoop/autograd.h).
 *
 * A captured graph replays device work only. Host state that a captured call changes
 * each time it runs (an optimizer's step count and the scalars derived from it) is
 * advanced at each replay by a hook the call registers while it is being captured.
 *
 * Thread-safety: capture is per thread, as CUDA's thread-local capture mode.
 */
#ifndef HOOP_AUTOGRAD_GRAPH_H
#define HOOP_AUTOGRAD_GRAPH_H

#include "hoop/status.h"
#include "hoop/tensor.h"

/* When the calling thread is capturing a graph on device d, registers replay(user) to run
 * on the host before every replay but the first (the first runs the captured call itself,
 * whose host side has already run), and undo(user) to run if the capture fails (nothing
 * captured runs then: undo takes back the host side the call advanced, so the caller can
 * run the step eagerly). Either may be NULL. HOOP_OK and nothing when not capturing;
 * HOOP_ERR_NOMEM (the capture is then marked failed). */
hoop_status hoop__graph_on_replay(hoop_device d, void (*replay)(void *user),
                                  void (*undo)(void *user), void *user);

/* When the calling thread is capturing a graph on device d, marks the capture failed:
 * hoop_graph_end then returns st with why (the first failure is kept). */
void hoop__graph_fail(hoop_device d, hoop_status st, const char *why);

/* 1 when the calling thread is capturing a graph on device d. */
int hoop__graph_capturing(hoop_device d);

#endif /* HOOP_AUTOGRAD_GRAPH_H */
