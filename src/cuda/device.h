/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/device.h -- CUDA device queries (internal).
 *
 * Built by nvcc when configure finds CUDA (HOOP_HAVE_CUDA); otherwise these calls say
 * that no device exists, so every caller can stay free of #ifdefs.
 */
#ifndef HOOP_CUDA_DEVICE_H
#define HOOP_CUDA_DEVICE_H

#include "hoop/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef HOOP_HAVE_CUDA
/* Number of usable CUDA devices in *count (0 when the driver finds none; not an error). */
hoop_status hoop__cuda_device_count(int *count);
/* Adds 1.0f to each of the count floats at host pointer x through a device round trip
 * (a smoke test that the toolchain, driver and kernel launch work). */
hoop_status hoop__cuda_smoke(float *x, int count);
#else
static inline hoop_status hoop__cuda_device_count(int *count)
{
    *count = 0;
    return HOOP_OK;
}
static inline hoop_status hoop__cuda_smoke(float *x, int count)
{
    (void)x;
    (void)count;
    return HOOP_ERR_UNSUPPORTED;
}
#endif

#ifdef __cplusplus
}
#endif

#endif /* HOOP_CUDA_DEVICE_H */
