/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/kern.c -- which kernel table runs an op: the per-device dispatch of
 * kern.h, the device checks every op makes, the table's ABI check, and the test-only
 * override.
 *
 * Owns: one table pointer per device (NULL for CUDA in this version: no CUDA kernels are
 * built yet). Thread-safety: the lookups only read; hoop__kern_override (tests) writes
 * and must not run beside an op.
 */
#include "autograd/autograd_impl.h"
#include "autograd/kern.h"
#include "core/check.h"

#define NDEVICES 2 /* HOOP_DEVICE_CPU, HOOP_DEVICE_CUDA */

static const struct hoop__kern *tables[NDEVICES] = {
    [HOOP_DEVICE_CPU] = &hoop__kern_cpu,
    [HOOP_DEVICE_CUDA] = NULL,
};

const struct hoop__kern *hoop__kern_for(hoop_device d)
{
    return (unsigned)d < NDEVICES ? tables[d] : NULL;
}

const char *hoop__device_name(hoop_device d)
{
    switch (d) {
    case HOOP_DEVICE_CPU: return "cpu";
    case HOOP_DEVICE_CUDA: return "cuda";
    }
    return "unknown device";
}

hoop_status hoop__kern_validate(const struct hoop__kern *k, const char *what)
{
    if (k == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "%s is NULL", what);
    if (k->size != sizeof(struct hoop__kern))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s has size %zu bytes, this build expects %zu: it was built "
                          "against another version of hoop",
                          what, k->size, sizeof(struct hoop__kern));
    if (k->name == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "%s has no name", what);
#define SLOT(f) \
    if (k->f == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "%s (%s) has no %s", what, k->name, #f)
    SLOT(gemm);
    SLOT(fill);
    SLOT(axpy_or_copy);
    SLOT(add);
    SLOT(bias_fill);
    SLOT(bias_add);
    SLOT(bias_grad);
    SLOT(unary_fwd);
    SLOT(unary_bwd);
    SLOT(softmax_fwd);
    SLOT(softmax_bwd);
    SLOT(ce_fwd);
    SLOT(ce_bwd);
    SLOT(reduce_fwd);
    SLOT(reduce_bwd);
    SLOT(dropout_fwd);
    SLOT(dropout_bwd);
    SLOT(im2col);
    SLOT(col2im);
    SLOT(pool_fwd);
    SLOT(pool_bwd);
    SLOT(sgd);
    SLOT(adamw);
    SLOT(sqnorm);
    SLOT(scale);
#undef SLOT
    return HOOP_OK;
}

hoop_status hoop__op_kern(const char *op, hoop_tensor *const *in, const char *const *names, int nin,
                          const struct hoop__kern **k)
{
    int first = -1;
    for (int i = 0; i < nin; i++) {
        if (in[i] == NULL) continue;
        if (first < 0) {
            first = i;
            continue;
        }
        if (in[i]->device != in[first]->device)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "%s: %s is on %s but %s is on %s; all inputs of an op must be on "
                              "one device",
                              op, names[first], hoop__device_name(in[first]->device), names[i],
                              hoop__device_name(in[i]->device));
    }
    const hoop_device d = first < 0 ? HOOP_DEVICE_CPU : in[first]->device;
    *k = hoop__kern_for(d);
    if (*k == NULL)
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "%s: this build has no %s kernels", op,
                          hoop__device_name(d));
    return HOOP_OK;
}

hoop_status hoop__kern_override(hoop_device d, const struct hoop__kern *k)
{
    if ((unsigned)d >= NDEVICES)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__kern_override: device %d is unknown", (int)d);
    if (k == NULL) {
        tables[d] = d == HOOP_DEVICE_CPU ? &hoop__kern_cpu : NULL;
        return HOOP_OK;
    }
    HOOP_CHECK(hoop__kern_validate(k, "hoop__kern_override: the table"));
    tables[d] = k;
    return HOOP_OK;
}
