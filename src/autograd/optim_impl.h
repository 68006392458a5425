/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/optim_impl.h -- the optimizer struct, shared by optim.c and checkpoint.c.
 *
 * Thread-safety: none; an optimizer belongs to one thread at a time.
 */
#ifndef HOOP_AUTOGRAD_OPTIM_IMPL_H
#define HOOP_AUTOGRAD_OPTIM_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "autograd/kern.h"
#include "hoop/optim.h"

struct hoop__kern;

struct hoop_optim {
    hoop_optim_config cfg;
    const struct hoop__kern *kern; /* the parameters' device's table (kern.h) */
    hoop_tensor **params;          /* count entries, not owned */
    size_t count;
    int nstate;    /* state buffers per parameter: 0 (plain SGD), 1 (SGD momentum), 2 (AdamW) */
    float **state; /* count * nstate buffers; state[i * nstate + k] has params[i]->count floats */
    int64_t steps; /* steps taken */
    /* the step's scalars (kern.h): written on the host (host_alloc memory: a captured graph
     * reads it at each replay), uploaded to the device copy the update kernels read */
    struct hoop__step_scalars *scal_host, *scal_dev;
};

#endif /* HOOP_AUTOGRAD_OPTIM_IMPL_H */
