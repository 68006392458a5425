/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/hoop.h -- umbrella header: distributed data-parallel training in C.
 *
 * hoop is one library with layers: transports (TCP, InfiniBand verbs), collectives
 * (ring all-reduce and friends), a tape-based autograd engine, and DDP. Each concept
 * has its own header; this one includes them all.
 *
 * Conventions used by every header:
 *   - every fallible call returns hoop_status (HOOP_OK == 0) and leaves a message in
 *     hoop_last_error() of the calling thread; nothing aborts the process;
 *   - sizes in bytes are size_t *_bytes, element counts are size_t count, times are
 *     int64_t milliseconds (*_ms) unless the name says otherwise;
 *   - objects that own threads or sockets use _init/_destroy, plain values _new/_free;
 *     destroy functions accept NULL;
 *   - a NULL or out-of-range argument is an error (HOOP_ERR_INVALID naming the argument),
 *     never a crash; functions without a status (queries, setters) given a NULL handle
 *     return a neutral value (0, -1 for a rank, NULL, "" or "?") or do nothing.
 *     tests/check_api_args.c holds every public function to this.
 *
 * A worked example (a two-rank rendezvous through the store), run under hooprun:
 *
 *     hoop_store *st;
 *     if (hoop_store_init_env(&st) != HOOP_OK) {
 *         fprintf(stderr, "%s\n", hoop_last_error());
 *         return 2;
 *     }
 *     hoop_store_barrier(st, "start", -1);
 *     hoop_store_destroy(st);
 */
#ifndef HOOP_HOOP_H
#define HOOP_HOOP_H

#include "hoop/version.h"
#include "hoop/status.h"
#include "hoop/log.h"
#include "hoop/store.h"
#include "hoop/comm.h"
#include "hoop/collectives.h"
#include "hoop/sampler.h"
#include "hoop/tensor.h"
#include "hoop/autograd.h"
#include "hoop/nn.h"
#include "hoop/optim.h"
#include "hoop/data.h"
#include "hoop/ddp.h"

#endif /* HOOP_HOOP_H */
