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

/* The rules hoop_optim_new (optim.h) holds a configuration to, which a checkpoint's loaded
 * settings must meet too: a known kind; lr, weight_decay (and momentum for SGD, eps for
 * AdamW) finite and >= 0; dampening finite; Nesterov only with momentum > 0 and dampening
 * 0; betas in [0, 1). HOOP_ERR_INVALID naming the field and its value after who (the
 * function, or the file the settings came from). */
hoop_status hoop__optim_config_check(const char *who, const hoop_optim_config *c);

#endif /* HOOP_AUTOGRAD_OPTIM_IMPL_H */
