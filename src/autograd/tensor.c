/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/tensor.c -- long-lived tensors (parameters, input buffers), shape helpers,
 * and the portable random stream (xoshiro256** seeded by splitmix64).
 *
 * Owns: the data and (owned) grad buffers of tensors made by hoop_tensor_new().
 * Thread-safety: none per tensor; the functions keep no global state.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/kern.h"
#include "core/check.h"
#include "core/log.h"
#include "hoop/nn.h"

// ----- shapes -------------------------------------------------------------------------------

hoop_status hoop__shape_check(const char *fn, int ndim, const int64_t *shape, size_t *count)
{
    if (ndim < 0 || ndim > HOOP_TENSOR_MAX_DIMS)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: ndim=%d is outside 0..%d", fn, ndim,
                          HOOP_TENSOR_MAX_DIMS);
    if (ndim > 0 && shape == NULL)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: shape is NULL for ndim=%d", fn, ndim);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1)
            return HOOP_ERROR(HOOP_ERR_INVALID, "%s: dimension %d is %" PRId64 " (must be >= 1)",
                              fn, i, shape[i]);
        /* Room is left for rounding the bytes up to HOOP__ALIGN without wrapping. */
        if ((uint64_t)shape[i] > ((SIZE_MAX - HOOP__ALIGN) / sizeof(float)) / n)
            return HOOP_ERROR(HOOP_ERR_INVALID, "%s: shape overflows size_t at dimension %d", fn,
                              i);
        n *= (size_t)shape[i];
    }
    *count = n;
    return HOOP_OK;
}

void hoop__tensor_header(hoop_tensor *t, int ndim, const int64_t *shape, size_t count)
{
    memset(t, 0, sizeof(*t));
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->count = count;
    t->device = HOOP_DEVICE_CPU;
}

int hoop__same_shape(const hoop_tensor *a, const hoop_tensor *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

hoop_status hoop__check_arg(const hoop_tensor *t, const char *op, const char *what)
{
    if (t == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "%s: %s is NULL", op, what);
    if (t->count > (size_t)INT_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: %s has %zu elements; ops take at most %d (BLAS "
                          "indexes with int)",
                          op, what, t->count, INT_MAX);
    return HOOP_OK;
}

hoop_status hoop__check_call(const hoop_tape *tape, hoop_tensor **out, const char *op)
{
    if (out != NULL) *out = NULL;
    if (tape == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "%s: tape is NULL", op);
    if (out == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "%s: out is NULL", op);
    return HOOP_OK;
}

char *hoop_tensor_shape_str(const hoop_tensor *t, char *buf, size_t bytes)
{
    if (buf == NULL || bytes == 0) return buf;
    if (t == NULL) {
        snprintf(buf, bytes, "(NULL)");
        return buf;
    }
    size_t used = 0;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, bytes, "(");
    for (int i = 0; i < t->ndim && used < bytes; i++)
        used +=
            (size_t)snprintf(buf + used, bytes - used, "%s%" PRId64, i ? ", " : "", t->shape[i]);
    if (used < bytes) snprintf(buf + used, bytes - used, ")");
    return buf;
}

// ----- long-lived tensors -------------------------------------------------------------------

/* count zeroed floats of device d's memory through its table k (the size rounded up to
 * HOOP__ALIGN, so vector loops may read to the end of a line). */
static hoop_status alloc_floats(const struct hoop__kern *k, size_t count, float **out)
{
    const size_t bytes = (count * sizeof(float) + HOOP__ALIGN - 1) / HOOP__ALIGN * HOOP__ALIGN;
    void *p;
    HOOP_CHECK(k->mem_alloc(&p, bytes));
    const hoop_status st = k->fill(p, bytes / sizeof(float), 0.0f);
    if (st != HOOP_OK) {
        k->mem_free(p);
        return st;
    }
    *out = p;
    return HOOP_OK;
}

static void free_buffers(hoop_tensor *t)
{
    const struct hoop__kern *k = hoop__kern_for(t->device);
    if (k == NULL) return; /* nothing was allocated without a table */
    k->mem_free(t->data);
    if (t->owns_grad) k->mem_free(t->grad);
    t->data = NULL;
    t->grad = NULL;
}

hoop_status hoop_tensor_new(hoop_tensor **out, int ndim, const int64_t *shape, hoop_device device,
                            int requires_grad)
{
    if (out == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_tensor_new: out is NULL");
    *out = NULL;
    if (device != HOOP_DEVICE_CPU && device != HOOP_DEVICE_CUDA)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_tensor_new: device %d is unknown", (int)device);
    size_t count;
    HOOP_CHECK(hoop__shape_check("hoop_tensor_new", ndim, shape, &count));
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(device, "hoop_tensor_new", &k));
    hoop_tensor *t;
    HOOP_CHECK(hoop__calloc(&t, 1));
    hoop__tensor_header(t, ndim, shape, count);
    t->device = device;
    t->long_lived = 1;
    t->requires_grad = requires_grad != 0;
    hoop_status st = alloc_floats(k, count, &t->data);
    if (st == HOOP_OK && t->requires_grad) {
        st = alloc_floats(k, count, &t->grad);
        t->owns_grad = st == HOOP_OK;
    }
    if (st != HOOP_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s", hoop_last_error());
        hoop_tensor_free(t);
        return HOOP_ERROR(st, "hoop_tensor_new: %s", why);
    }
    *out = t;
    return HOOP_OK;
}

void hoop_tensor_free(hoop_tensor *t)
{
    if (t == NULL) return;
    if (!t->long_lived) {
        HOOP_WARN("hoop_tensor_free: ignoring an arena tensor (it dies at hoop_tape_reset)");
        return;
    }
    free_buffers(t);
    free(t);
}

int hoop_tensor_ndim(const hoop_tensor *t)
{
    return t ? t->ndim : 0;
}

int64_t hoop_tensor_dim(const hoop_tensor *t, int i)
{
    return (t && i >= 0 && i < t->ndim) ? t->shape[i] : 0;
}

size_t hoop_tensor_count(const hoop_tensor *t)
{
    return t ? t->count : 0;
}

hoop_device hoop_tensor_device(const hoop_tensor *t)
{
    return t ? t->device : HOOP_DEVICE_CPU;
}

int hoop_tensor_requires_grad(const hoop_tensor *t)
{
    return t ? t->requires_grad : 0;
}

float *hoop_tensor_data(hoop_tensor *t)
{
    return t ? t->data : NULL;
}

float *hoop_tensor_grad(hoop_tensor *t)
{
    if (t == NULL) return NULL;
    if (t->long_lived) return t->grad;
    return t->grad_set ? t->grad : NULL;
}

hoop_status hoop_tensor_zero_grad(hoop_tensor *t)
{
    if (t == NULL || !t->long_lived || t->grad == NULL) return HOOP_OK;
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(t->device, "hoop_tensor_zero_grad", &k));
    return k->fill(t->grad, t->count, 0.0f);
}

/* The count check of the host copies: HOOP_ERR_INVALID naming the shape. */
static hoop_status copy_check(const hoop_tensor *t, const void *host, const char *host_name,
                              size_t count, const char *fn)
{
    if (t == NULL || host == NULL)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: %s is NULL", fn, t == NULL ? "t" : host_name);
    if (count != t->count) {
        char s[96];
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: count=%zu floats given for a tensor of shape %s (%zu elements)", fn,
                          count, hoop_tensor_shape_str(t, s, sizeof(s)), t->count);
    }
    return HOOP_OK;
}

hoop_status hoop_tensor_copy_from(hoop_tensor *t, const float *src, size_t count)
{
    HOOP_CHECK(copy_check(t, src, "src", count, "hoop_tensor_copy_from"));
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(t->device, "hoop_tensor_copy_from", &k));
    return k->copy(t->data, src, count * sizeof(float), 1);
}

hoop_status hoop_tensor_copy_to_host(const hoop_tensor *t, float *dst, size_t count)
{
    HOOP_CHECK(copy_check(t, dst, "dst", count, "hoop_tensor_copy_to_host"));
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(t->device, "hoop_tensor_copy_to_host", &k));
    return k->copy(dst, t->data, count * sizeof(float), 0);
}

hoop_status hoop__tensor_upload_async(hoop_tensor *t, const float *src, size_t count,
                                      hoop__event *after, hoop__event *done)
{
    static const char fn[] = "hoop__tensor_upload_async";
    HOOP_CHECK(copy_check(t, src, "src", count, fn));
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(t->device, fn, &k));
    void *a, *d;
    HOOP_CHECK(hoop__event_of(after, t->device, fn, "after", &a));
    HOOP_CHECK(hoop__event_of(done, t->device, fn, "done", &d));
    return k->upload_async(t->data, src, count * sizeof(float), a, d);
}

hoop_status hoop__tensor_download_async(const hoop_tensor *t, float *dst, size_t count)
{
    static const char fn[] = "hoop__tensor_download_async";
    HOOP_CHECK(copy_check(t, dst, "dst", count, fn));
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(t->device, fn, &k));
    return k->download_async(dst, t->data, count * sizeof(float));
}

hoop_status hoop_tensor_grad_to_host(const hoop_tensor *t, float *dst, size_t count)
{
    HOOP_CHECK(copy_check(t, dst, "dst", count, "hoop_tensor_grad_to_host"));
    const float *g = hoop_tensor_grad((hoop_tensor *)t);
    if (g == NULL)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_tensor_grad_to_host: %s has no gradient",
                          t->name[0] ? t->name : "the tensor");
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(t->device, "hoop_tensor_grad_to_host", &k));
    return k->copy(dst, g, count * sizeof(float), 0);
}

hoop_status hoop_tensor_fill(hoop_tensor *t, float value)
{
    if (t == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_tensor_fill: t is NULL");
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(t->device, "hoop_tensor_fill", &k));
    return k->fill(t->data, t->count, value);
}

hoop_status hoop_tensor_to_device(hoop_tensor *t, hoop_device device)
{
    if (t == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_tensor_to_device: t is NULL");
    if (!t->long_lived)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_tensor_to_device: %s is an arena tensor (only hoop_tensor_new "
                          "tensors move)",
                          t->name[0] ? t->name : "the tensor");
    if (device != HOOP_DEVICE_CPU && device != HOOP_DEVICE_CUDA)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_tensor_to_device: device %d is unknown",
                          (int)device);
    if (device == t->device) return HOOP_OK;
    if (t->grad != NULL && !t->owns_grad)
        return HOOP_ERROR(HOOP_ERR_USAGE,
                          "hoop_tensor_to_device: %s's gradient lives in a caller's buffer "
                          "(hoop_tensor_set_grad_buffer); give it back (buf NULL) first",
                          t->name[0] ? t->name : "the tensor");
    const struct hoop__kern *from, *to;
    HOOP_CHECK(hoop__kern_get(t->device, "hoop_tensor_to_device", &from));
    HOOP_CHECK(hoop__kern_get(device, "hoop_tensor_to_device", &to));
    /* Through host memory: one side of every pair of devices is the host. */
    const hoop_device host_side = device == HOOP_DEVICE_CPU ? device : t->device;
    const int upload = host_side == t->device; /* CPU -> device */
    const struct hoop__kern *dev = upload ? to : from;
    float *data = NULL, *grad = NULL;
    hoop_status st = alloc_floats(to, t->count, &data);
    if (st == HOOP_OK && t->grad) st = alloc_floats(to, t->count, &grad);
    if (st == HOOP_OK) st = dev->copy(data, t->data, t->count * sizeof(float), upload);
    if (st == HOOP_OK && t->grad) st = dev->copy(grad, t->grad, t->count * sizeof(float), upload);
    if (st != HOOP_OK) {
        to->mem_free(data);
        to->mem_free(grad);
        return st; /* t is unchanged */
    }
    free_buffers(t);
    t->data = data;
    t->grad = grad;
    t->owns_grad = grad != NULL;
    t->device = device;
    return HOOP_OK;
}

hoop_status hoop_device_check(hoop_device device)
{
    if (device != HOOP_DEVICE_CPU && device != HOOP_DEVICE_CUDA)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_device_check: device %d is unknown", (int)device);
    const struct hoop__kern *k;
    return hoop__kern_get(device, "hoop_device_check", &k);
}

const char *hoop_tensor_name(const hoop_tensor *t)
{
    return t ? t->name : "";
}

void hoop_tensor_set_name(hoop_tensor *t, const char *name)
{
    if (t) snprintf(t->name, sizeof(t->name), "%s", name ? name : "");
}

static hoop_status check_param(const hoop_tensor *p, const char *fn)
{
    if (p == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "%s: param is NULL", fn);
    if (!p->long_lived || !p->requires_grad)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s: the tensor is not a parameter (a hoop_tensor_new tensor with "
                          "requires_grad)",
                          fn);
    return HOOP_OK;
}

hoop_status hoop_tensor_set_grad_hook(hoop_tensor *param, hoop_grad_hook_fn fn, void *user)
{
    HOOP_CHECK(check_param(param, "hoop_tensor_set_grad_hook"));
    param->hook = fn;
    param->hook_user = fn ? user : NULL;
    return HOOP_OK;
}

hoop_status hoop_tensor_set_grad_buffer(hoop_tensor *param, float *buf)
{
    HOOP_CHECK(check_param(param, "hoop_tensor_set_grad_buffer"));
    if (buf == param->grad) return HOOP_OK;
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(param->device, "hoop_tensor_set_grad_buffer", &k));
    float *dst = buf;
    if (dst == NULL) HOOP_CHECK(alloc_floats(k, param->count, &dst));
    /* buf is the tensor's device's memory. On the CPU the old and new buffers may be
     * overlapping slices of one bucket (memmove); a device's come from its allocator. */
    if (param->device == HOOP_DEVICE_CPU)
        memmove(dst, param->grad, param->count * sizeof(float));
    else
        HOOP_CHECK(k->axpy_or_copy(dst, param->grad, param->count, 0));
    if (param->owns_grad) k->mem_free(param->grad);
    param->grad = dst;
    param->owns_grad = buf == NULL;
    return HOOP_OK;
}

hoop_status hoop_device_sync(hoop_device device)
{
    if (device != HOOP_DEVICE_CPU && device != HOOP_DEVICE_CUDA)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_device_sync: device %d is unknown", (int)device);
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(device, "hoop_device_sync", &k));
    return k->sync();
}

hoop_status hoop_device_describe(hoop_device device, char *buf, size_t len)
{
    if (buf == NULL || len == 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_device_describe: buf is NULL or len is 0");
    buf[0] = '\0';
    if (device != HOOP_DEVICE_CPU && device != HOOP_DEVICE_CUDA)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_device_describe: device %d is unknown",
                          (int)device);
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(device, "hoop_device_describe", &k));
    return k->describe(buf, len);
}

hoop_status hoop_host_alloc(hoop_device device, size_t bytes, void **p)
{
    if (p == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_host_alloc: p is NULL");
    *p = NULL;
    if (device != HOOP_DEVICE_CPU && device != HOOP_DEVICE_CUDA)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_host_alloc: device %d is unknown", (int)device);
    const struct hoop__kern *k;
    HOOP_CHECK(hoop__kern_get(device, "hoop_host_alloc", &k));
    return k->host_alloc(p, bytes);
}

void hoop_host_free(hoop_device device, void *p)
{
    const struct hoop__kern *k = p ? hoop__kern_for(device) : NULL;
    if (k) k->host_free(p);
}

// ----- random stream: xoshiro256** (Blackman & Vigna 2018) ----------------------------------

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void hoop_rng_seed(hoop_rng *rng, uint64_t seed)
{
    if (rng == NULL) return;
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t hoop_rng_next(hoop_rng *rng)
{
    if (rng == NULL) return 0;
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float hoop_rng_uniform(hoop_rng *rng)
{
    return (float)(hoop_rng_next(rng) >> 40) * (1.0f / 16777216.0f);
}
