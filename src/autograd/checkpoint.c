/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/autograd/checkpoint.c -- save and load parameters, optimizer state and caller data
 * in one checksummed file, written atomically.
 *
 * Layout (little-endian, no padding):
 *   header  "HOOPCKPT" | u32 version (1) | u32 flags (bit 0: optimizer state present)
 *           | u64 total_bytes (the whole file) | u64 nparams | u64 extra_bytes
 *   params  nparams x { u32 name_len | name | u32 ndim | i64 shape[ndim] | f32 data[count] }
 *   optim   (flag) u32 kind | u32 nstate | u32 nesterov | f32 lr, momentum, dampening,
 *           weight_decay, beta1, beta2, eps | i64 steps | nparams x nstate x f32[count]
 *   extra   extra_bytes of caller data
 *   trailer u32 CRC-32 (zlib's crc32) of every byte before it
 * The writer builds the image in memory and replaces path with it whole
 * (hoop__atomic_write, core/atomic_file.c: a writer killed while writing leaves neither
 * a torn file nor a temporary one; a symbolic link at path is kept). The reader checks
 * size, magic, version and checksum before it parses, and parses twice: once to validate
 * against the caller's parameters, once to copy, so a bad file changes nothing.
 *
 * hoop_checkpoint_inspect walks the same layout without a model, to say what a file holds
 * (parameter count and elements, optimizer kind and steps, the caller data).
 *
 * Thread-safety: the functions keep no state; callers must not modify the parameters or
 * optimizer concurrently.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "autograd/autograd_impl.h"
#include "autograd/checkpoint.h"
#include "autograd/kern.h"
#include "autograd/optim_impl.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "core/fault.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c writes the host's byte order and assumes little-endian"
#endif

#define CKPT_MAGIC "HOOPCKPT"
#define CKPT_VERSION 1u
#define CKPT_HEADER_BYTES 40u
#define CKPT_OPTIM_FIXED_BYTES (3 * 4 + 7 * 4 + 8)

/* A bounded cursor over a buffer; writing with buf == NULL only counts bytes. */
struct cursor {
    unsigned char *buf;
    size_t pos, len;
    int short_read;  /* a read ran past len */
    hoop_status err; /* the first failed device copy (message set) */
};

static void put(struct cursor *c, const void *src, size_t n)
{
    if (c->buf) memcpy(c->buf + c->pos, src, n);
    c->pos += n;
}

/* put of n bytes in device d's memory: the file holds the same bytes whichever device a
 * tensor lives on, so a checkpoint written on a GPU loads on the CPU and the reverse. */
static void put_dev(struct cursor *c, hoop_device d, const void *src, size_t n)
{
    if (d == HOOP_DEVICE_CPU || c->buf == NULL) {
        put(c, src, n);
        return;
    }
    const struct hoop__kern *k;
    hoop_status st = hoop__kern_get(d, "hoop_checkpoint_save", &k);
    if (st == HOOP_OK) st = k->copy(c->buf + c->pos, src, n, 0);
    if (st != HOOP_OK && c->err == HOOP_OK) c->err = st;
    c->pos += n;
}

static void put_u32(struct cursor *c, uint32_t v)
{
    put(c, &v, 4);
}

static void put_u64(struct cursor *c, uint64_t v)
{
    put(c, &v, 8);
}

static int get(struct cursor *c, void *dst, size_t n)
{
    if (c->len - c->pos < n) {
        c->short_read = 1;
        return 0;
    }
    if (dst) memcpy(dst, c->buf + c->pos, n);
    c->pos += n;
    return 1;
}

/* get into device d's memory (dst NULL skips); a failed copy is kept in c->err. */
static int get_dev(struct cursor *c, hoop_device d, void *dst, size_t n)
{
    if (d == HOOP_DEVICE_CPU || dst == NULL) return get(c, dst, n);
    if (c->len - c->pos < n) {
        c->short_read = 1;
        return 0;
    }
    const struct hoop__kern *k;
    hoop_status st = hoop__kern_get(d, "hoop_checkpoint_load", &k);
    if (st == HOOP_OK) st = k->copy(dst, c->buf + c->pos, n, 1);
    if (st != HOOP_OK && c->err == HOOP_OK) c->err = st;
    c->pos += n;
    return 1;
}

static uint32_t get_u32(struct cursor *c)
{
    uint32_t v = 0;
    get(c, &v, 4);
    return v;
}

static uint64_t get_u64(struct cursor *c)
{
    uint64_t v = 0;
    get(c, &v, 8);
    return v;
}

// ----- writing ------------------------------------------------------------------------------

static void write_optim(struct cursor *c, const hoop_optim *o)
{
    const hoop_optim_config *k = &o->cfg;
    put_u32(c, (uint32_t)k->kind);
    put_u32(c, (uint32_t)o->nstate);
    put_u32(c, (uint32_t)k->nesterov);
    const float f[7] = {k->lr,    k->momentum, k->dampening, k->weight_decay,
                        k->beta1, k->beta2,    k->eps};
    put(c, f, sizeof(f));
    put_u64(c, (uint64_t)o->steps);
    for (size_t i = 0; i < o->count; i++)
        for (int s = 0; s < o->nstate; s++)
            put_dev(c, o->kern->device, o->state[i * (size_t)o->nstate + (size_t)s],
                    o->params[i]->count * 4);
}

/* Serialises everything; with c->buf NULL it only measures. */
static void write_image(struct cursor *c, hoop_tensor *const *params, size_t count,
                        const hoop_optim *o, const void *extra, size_t extra_bytes, uint64_t total)
{
    put(c, CKPT_MAGIC, 8);
    put_u32(c, CKPT_VERSION);
    put_u32(c, o ? 1u : 0u);
    put_u64(c, total);
    put_u64(c, count);
    put_u64(c, extra_bytes);
    for (size_t i = 0; i < count; i++) {
        const hoop_tensor *t = params[i];
        const uint32_t name_len = (uint32_t)strlen(t->name);
        put_u32(c, name_len);
        put(c, t->name, name_len);
        put_u32(c, (uint32_t)t->ndim);
        put(c, t->shape, (size_t)t->ndim * 8);
        put_dev(c, t->device, t->data, t->count * 4);
    }
    if (o) write_optim(c, o);
    if (extra_bytes) put(c, extra, extra_bytes);
}

uint32_t hoop__checkpoint_crc(const void *b, size_t n)
{
    uLong crc = crc32(0L, Z_NULL, 0);
    for (const Bytef *p = b; n > 0;) {
        const uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n; /* zlib's lengths are 32-bit */
        crc = crc32(crc, p, k);
        p += k;
        n -= k;
    }
    return (uint32_t)crc;
}

hoop_status hoop_checkpoint_save(const char *path, hoop_tensor *const *params, size_t count,
                                 const hoop_optim *opt, const void *extra, size_t extra_bytes)
{
    if (path == NULL || (params == NULL && count > 0) || (extra == NULL && extra_bytes > 0))
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_checkpoint_save: %s is NULL",
                          path == NULL                       ? "path"
                          : extra == NULL && extra_bytes > 0 ? "extra"
                                                             : "params");
    for (size_t i = 0; i < count; i++)
        if (params[i] == NULL)
            return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_checkpoint_save: params[%zu] is NULL", i);
    if (opt != NULL && opt->count != count)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop_checkpoint_save: the optimizer has %zu "
                          "parameters, %zu given",
                          opt->count, count);
    struct cursor c = {0};
    write_image(&c, params, count, opt, extra, extra_bytes, 0);
    const size_t total = c.pos + 4;
    unsigned char *img = malloc(total);
    if (img == NULL)
        return HOOP_ERROR(HOOP_ERR_NOMEM, "hoop_checkpoint_save: cannot allocate %zu bytes", total);
    c = (struct cursor){.buf = img, .len = total};
    write_image(&c, params, count, opt, extra, extra_bytes, total);
    if (c.err != HOOP_OK) {
        free(img); /* a device's copy failed: nothing is written */
        return c.err;
    }
    const uint32_t crc = hoop__checkpoint_crc(img, total - 4);
    memcpy(img + total - 4, &crc, 4);
    hoop_status st = hoop__atomic_write("checkpoint", path, img, total, HOOP__FAULT_CHECKPOINT);
    free(img);
    return st;
}

// ----- reading ------------------------------------------------------------------------------

/* O_NONBLOCK: a FIFO at path would otherwise block the open until a writer came (forever);
 * it and every other non-regular file (a directory, a device) are refused by their type. */
hoop_status hoop_checkpoint_read(const char *path, void **out, size_t *len)
{
    if (out) *out = NULL;
    if (len) *len = 0;
    if (path == NULL || out == NULL || len == NULL)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_checkpoint_read: %s is NULL",
                          !path  ? "path"
                          : !out ? "buf"
                                 : "len");
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "checkpoint '%s': cannot open: %s", path,
                          hoop__strerror(errno));
    struct stat sb;
    hoop_status st = HOOP_OK;
    unsigned char *buf = NULL;
    if (fstat(fd, &sb) != 0) {
        st = HOOP_ERROR(HOOP_ERR_SYSTEM, "checkpoint '%s': fstat: %s", path, hoop__strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = HOOP_ERROR(HOOP_ERR_INVALID, "checkpoint '%s' is not a regular file (%s)", path,
                        hoop__file_type(sb.st_mode));
        goto out;
    }
    buf = malloc(sb.st_size > 0 ? (size_t)sb.st_size : 1);
    if (buf == NULL) {
        st = HOOP_ERROR(HOOP_ERR_NOMEM, "checkpoint '%s': cannot allocate %lld bytes", path,
                        (long long)sb.st_size);
        goto out;
    }
    size_t got = 0;
    while (got < (size_t)sb.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            st = HOOP_ERROR(HOOP_ERR_SYSTEM, "checkpoint '%s': read failed: %s", path,
                            r < 0 ? hoop__strerror(errno) : "unexpected end of file");
            goto out;
        }
        got += (size_t)r;
    }
    *out = buf;
    *len = got;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return st;
}

/* Size, magic, version, checksum. */
static hoop_status check_envelope(const char *path, const unsigned char *b, size_t len)
{
    if (len < CKPT_HEADER_BYTES + 4)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "checkpoint '%s': truncated: %zu bytes, smaller than "
                          "a header (%u bytes)",
                          path, len, CKPT_HEADER_BYTES + 4);
    if (memcmp(b, CKPT_MAGIC, 8) != 0)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "checkpoint '%s': not a hoop checkpoint (wrong magic "
                          "number; expected \"%s\")",
                          path, CKPT_MAGIC);
    uint32_t version;
    uint64_t total;
    memcpy(&version, b + 8, 4);
    memcpy(&total, b + 16, 8);
    if (version != CKPT_VERSION)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "checkpoint '%s': unsupported version %u (this build "
                          "reads version %u)",
                          path, version, CKPT_VERSION);
    if (total != len)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "checkpoint '%s': truncated or extended: %zu bytes, "
                          "the header says %llu",
                          path, len, (unsigned long long)total);
    uint32_t crc;
    memcpy(&crc, b + len - 4, 4);
    const uint32_t want = hoop__checkpoint_crc(b, len - 4);
    if (crc != want)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "checkpoint '%s': bad checksum (stored crc32 %08x, "
                          "computed %08x): the file is corrupt",
                          path, crc, want);
    return HOOP_OK;
}

static hoop_status read_param(const char *path, struct cursor *c, hoop_tensor *t, size_t i,
                              int apply)
{
    char name[HOOP_TENSOR_NAME_MAX] = "";
    const uint32_t name_len = get_u32(c);
    if (name_len >= sizeof(name) || !get(c, name, name_len))
        return HOOP_ERROR(HOOP_ERR_INVALID, "checkpoint '%s': parameter %zu: bad name", path, i);
    const uint32_t ndim = get_u32(c);
    int64_t shape[HOOP_TENSOR_MAX_DIMS] = {0};
    if (ndim > HOOP_TENSOR_MAX_DIMS || !get(c, shape, ndim * 8u))
        return HOOP_ERROR(HOOP_ERR_INVALID, "checkpoint '%s': parameter %zu: bad shape", path, i);
    if (strcmp(name, t->name) != 0)
        return HOOP_ERROR(HOOP_ERR_MISMATCH,
                          "checkpoint '%s': parameter %zu is '%s' in the file "
                          "but '%s' in the model",
                          path, i, name, t->name);
    int same = (int)ndim == t->ndim;
    for (uint32_t d = 0; same && d < ndim; d++) same = shape[d] == t->shape[d];
    if (!same) {
        char file[96], model[96];
        hoop_tensor file_t = {.ndim = (int)ndim}; /* only for its shape's text */
        memcpy(file_t.shape, shape, sizeof(shape));
        return HOOP_ERROR(HOOP_ERR_MISMATCH,
                          "checkpoint '%s': parameter '%s' is %s in the file but %s in the model",
                          path, name, hoop_tensor_shape_str(&file_t, file, sizeof(file)),
                          hoop_tensor_shape_str(t, model, sizeof(model)));
    }
    if (!get_dev(c, t->device, apply ? t->data : NULL, t->count * 4))
        return HOOP_ERROR(HOOP_ERR_INVALID, "checkpoint '%s': truncated in '%s'", path, name);
    return HOOP_OK;
}

/* "sgd" / "adamw" for messages. */
static const char *kind_name(int kind)
{
    return kind == HOOP_OPTIM_SGD     ? "sgd"
           : kind == HOOP_OPTIM_ADAMW ? "adamw"
                                      : "an unknown optimizer";
}

/* A file's optimizer settings (k, of the kind the optimizer has) must pass what
 * hoop_optim_new checks, with a step count in 0..INT64_MAX-1 (a step adds one) and, for
 * SGD, a momentum buffer exactly when momentum != 0 (as hoop_optim_new makes them): a
 * crafted file would otherwise corrupt the parameters at the next step. */
static hoop_status check_optim_settings(const char *path, const hoop_optim_config *k, int nstate,
                                        int64_t steps)
{
    char who[600];
    snprintf(who, sizeof(who), "checkpoint '%s' holds an optimizer setting hoop_optim_new refuses",
             path);
    HOOP_CHECK(hoop__optim_config_check(who, k));
    if (steps < 0 || steps == INT64_MAX)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "checkpoint '%s': the optimizer's step count %lld is outside 0..%lld",
                          path, (long long)steps, (long long)INT64_MAX - 1);
    if (k->kind == HOOP_OPTIM_SGD && nstate != (k->momentum != 0.0f))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "checkpoint '%s': SGD with momentum=%g holds %d momentum buffers per "
                          "parameter (hoop_optim_new makes %d)",
                          path, (double)k->momentum, nstate, k->momentum != 0.0f);
    return HOOP_OK;
}

static hoop_status read_optim(const char *path, struct cursor *c, hoop_optim *o, int apply)
{
    hoop_optim_config k = o->cfg;
    k.kind = (hoop_optim_kind)get_u32(c);
    const int nstate = (int)get_u32(c);
    k.nesterov = (int)get_u32(c);
    float f[7];
    get(c, f, sizeof(f));
    const int64_t steps = (int64_t)get_u64(c);
    if (c->short_read)
        return HOOP_ERROR(HOOP_ERR_INVALID, "checkpoint '%s': truncated optimizer state", path);
    if (k.kind != o->cfg.kind || nstate != o->nstate)
        return HOOP_ERROR(HOOP_ERR_MISMATCH,
                          "checkpoint '%s' holds %s state (%d buffers per parameter), but this "
                          "optimizer is %s (%d buffers)",
                          path, kind_name((int)k.kind), nstate, kind_name((int)o->cfg.kind),
                          o->nstate);
    k.lr = f[0], k.momentum = f[1], k.dampening = f[2], k.weight_decay = f[3];
    k.beta1 = f[4], k.beta2 = f[5], k.eps = f[6];
    HOOP_CHECK(check_optim_settings(path, &k, nstate, steps));
    for (size_t i = 0; i < o->count; i++)
        for (int s = 0; s < nstate; s++) {
            float *dst = apply ? o->state[i * (size_t)nstate + (size_t)s] : NULL;
            if (!get_dev(c, o->kern->device, dst, o->params[i]->count * 4))
                return HOOP_ERROR(HOOP_ERR_INVALID, "checkpoint '%s': truncated optimizer state",
                                  path);
        }
    if (apply) {
        o->cfg = k;
        o->steps = steps;
    }
    return HOOP_OK;
}

struct load_args {
    const char *path;
    hoop_tensor *const *params;
    size_t count;
    hoop_optim *opt;
    void *extra;
    size_t extra_cap, *extra_bytes;
};

/* Steps over optimizer state the caller did not ask for, to reach the caller data. */
static hoop_status skip_optim(const struct load_args *a, struct cursor *c)
{
    get_u32(c);
    const uint32_t nstate = get_u32(c);
    get(c, NULL, CKPT_OPTIM_FIXED_BYTES - 8);
    for (size_t i = 0; i < a->count && nstate <= 2; i++)
        get(c, NULL, a->params[i]->count * 4 * nstate);
    if (c->short_read || nstate > 2)
        return HOOP_ERROR(HOOP_ERR_INVALID, "checkpoint '%s': truncated optimizer state", a->path);
    return HOOP_OK;
}

static hoop_status parse(const struct load_args *a, const unsigned char *b, size_t len, int apply)
{
    struct cursor c = {.buf = (unsigned char *)b, .pos = 24, .len = len - 4};
    uint32_t flags;
    memcpy(&flags, b + 12, 4);
    const uint64_t nparams = get_u64(&c), extra_bytes = get_u64(&c);
    if (nparams != a->count)
        return HOOP_ERROR(HOOP_ERR_MISMATCH,
                          "checkpoint '%s': %llu parameters in the file, %zu "
                          "in the model",
                          a->path, (unsigned long long)nparams, a->count);
    for (size_t i = 0; i < a->count; i++)
        HOOP_CHECK(read_param(a->path, &c, a->params[i], i, apply));
    if (a->opt != NULL && !(flags & 1u))
        return HOOP_ERROR(HOOP_ERR_MISMATCH, "checkpoint '%s': holds no optimizer state", a->path);
    if ((flags & 1u) && a->opt != NULL) HOOP_CHECK(read_optim(a->path, &c, a->opt, apply));
    if ((flags & 1u) && a->opt == NULL) HOOP_CHECK(skip_optim(a, &c));
    if (c.len - c.pos != extra_bytes)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "checkpoint '%s': %zu bytes left for %llu bytes of "
                          "caller data",
                          a->path, c.len - c.pos, (unsigned long long)extra_bytes);
    if (c.err != HOOP_OK) return c.err;
    if (apply && a->extra_bytes) *a->extra_bytes = (size_t)extra_bytes;
    if (apply && a->extra)
        memcpy(a->extra, b + c.pos, extra_bytes < a->extra_cap ? extra_bytes : a->extra_cap);
    return HOOP_OK;
}

// ----- inspecting -----------------------------------------------------------------------------

/* Walks the parameter records of a checked file, summing their elements into info. */
static hoop_status inspect_params(const char *path, struct cursor *c, uint64_t nparams,
                                  hoop_checkpoint_info *info, size_t **counts)
{
    if (nparams > c->len / 8) /* each record takes at least 8 bytes: a forged count */
        return HOOP_ERROR(HOOP_ERR_INVALID, "checkpoint '%s': %llu parameters cannot fit", path,
                          (unsigned long long)nparams);
    HOOP_CHECK(hoop__calloc(counts, nparams ? (size_t)nparams : 1));
    for (uint64_t i = 0; i < nparams; i++) {
        const uint32_t name_len = get_u32(c);
        get(c, NULL, name_len);
        const uint32_t ndim = get_u32(c);
        int64_t shape[HOOP_TENSOR_MAX_DIMS] = {0};
        if (c->short_read || ndim > HOOP_TENSOR_MAX_DIMS || !get(c, shape, ndim * 8u))
            return HOOP_ERROR(HOOP_ERR_INVALID, "checkpoint '%s': parameter %llu: bad record", path,
                              (unsigned long long)i);
        size_t n = 1;
        for (uint32_t d = 0; d < ndim; d++) {
            if (shape[d] < 0 || (shape[d] > 0 && n > (c->len / 4) / (size_t)shape[d]))
                return HOOP_ERROR(HOOP_ERR_INVALID, "checkpoint '%s': parameter %llu: bad shape",
                                  path, (unsigned long long)i);
            n *= (size_t)shape[d];
        }
        if (!get(c, NULL, n * 4))
            return HOOP_ERROR(HOOP_ERR_INVALID, "checkpoint '%s': truncated in parameter %llu",
                              path, (unsigned long long)i);
        (*counts)[i] = n;
        info->numel += n;
    }
    return HOOP_OK;
}

/* Steps over the optimizer section, recording its kind and step count. */
static hoop_status inspect_optim(const char *path, struct cursor *c, const size_t *counts,
                                 hoop_checkpoint_info *info)
{
    info->has_optim = 1;
    info->optim_kind = (hoop_optim_kind)get_u32(c);
    const uint32_t nstate = get_u32(c);
    get(c, NULL, CKPT_OPTIM_FIXED_BYTES - 16);
    info->optim_steps = (int64_t)get_u64(c);
    for (size_t i = 0; i < info->param_count && nstate <= 2; i++)
        get(c, NULL, counts[i] * 4 * nstate);
    if (c->short_read || nstate > 2)
        return HOOP_ERROR(HOOP_ERR_INVALID, "checkpoint '%s': truncated optimizer state", path);
    return HOOP_OK;
}

static hoop_status inspect_image(const char *path, const unsigned char *b, size_t len,
                                 hoop_checkpoint_info *info, void *extra, size_t extra_cap)
{
    struct cursor c = {.buf = (unsigned char *)b, .pos = 24, .len = len - 4};
    uint32_t flags;
    size_t *counts = NULL;
    memcpy(&flags, b + 12, 4);
    const uint64_t nparams = get_u64(&c), extra_bytes = get_u64(&c);
    info->param_count = (size_t)nparams;
    hoop_status st = inspect_params(path, &c, nparams, info, &counts);
    if (st == HOOP_OK && (flags & 1u)) st = inspect_optim(path, &c, counts, info);
    free(counts);
    HOOP_CHECK(st);
    if (c.len - c.pos != extra_bytes)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "checkpoint '%s': %zu bytes left for %llu bytes of caller data", path,
                          c.len - c.pos, (unsigned long long)extra_bytes);
    info->extra_bytes = (size_t)extra_bytes;
    if (extra) memcpy(extra, b + c.pos, extra_bytes < extra_cap ? extra_bytes : extra_cap);
    return HOOP_OK;
}

/* A checkpoint's bytes, checked and parsed: the body of both inspect forms. */
static hoop_status inspect_bytes(const char *name, const unsigned char *b, size_t len,
                                 hoop_checkpoint_info *info, void *extra, size_t extra_cap)
{
    hoop_checkpoint_info got = {0};
    hoop_status st = check_envelope(name, b, len);
    if (st == HOOP_OK) st = inspect_image(name, b, len, &got, extra, extra_cap);
    if (st == HOOP_OK) *info = got;
    return st;
}

hoop_status hoop_checkpoint_inspect(const char *path, hoop_checkpoint_info *info, void *extra,
                                    size_t extra_cap)
{
    if (info) memset(info, 0, sizeof(*info));
    if (path == NULL || info == NULL || (extra == NULL && extra_cap > 0))
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_checkpoint_inspect: %s is NULL",
                          !path   ? "path"
                          : !info ? "info"
                                  : "extra (with extra_cap > 0)");
    void *b = NULL;
    size_t len = 0;
    HOOP_CHECK(hoop_checkpoint_read(path, &b, &len));
    hoop_status st = inspect_bytes(path, b, len, info, extra, extra_cap);
    free(b);
    return st;
}

hoop_status hoop_checkpoint_inspect_mem(const char *name, const void *buf, size_t len,
                                        hoop_checkpoint_info *info, void *extra, size_t extra_cap)
{
    if (info) memset(info, 0, sizeof(*info));
    if (buf == NULL || info == NULL || (extra == NULL && extra_cap > 0))
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_checkpoint_inspect_mem: %s is NULL",
                          !buf    ? "buf"
                          : !info ? "info"
                                  : "extra (with extra_cap > 0)");
    return inspect_bytes(name ? name : "(memory)", buf, len, info, extra, extra_cap);
}

/* The arguments both load forms check (fn names the function in the message). */
static hoop_status check_load_args(const char *fn, hoop_tensor *const *params, size_t count,
                                   const hoop_optim *opt)
{
    if (params == NULL && count > 0) return HOOP_ERROR(HOOP_ERR_INVALID, "%s: params is NULL", fn);
    for (size_t i = 0; i < count; i++)
        if (params[i] == NULL)
            return HOOP_ERROR(HOOP_ERR_INVALID, "%s: params[%zu] is NULL", fn, i);
    if (opt != NULL && opt->count != count)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: the optimizer has %zu parameters, %zu given", fn,
                          opt->count, count);
    return HOOP_OK;
}

/* Checks every byte first (a dry parse), then applies: nothing changes unless all is valid. */
static hoop_status load_bytes(const struct load_args *a, const unsigned char *b, size_t len)
{
    hoop_status st = check_envelope(a->path, b, len);
    if (st == HOOP_OK) st = parse(a, b, len, 0);
    if (st == HOOP_OK) st = parse(a, b, len, 1);
    return st;
}

hoop_status hoop_checkpoint_load(const char *path, hoop_tensor *const *params, size_t count,
                                 hoop_optim *opt, void *extra, size_t extra_cap,
                                 size_t *extra_bytes)
{
    if (path == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_checkpoint_load: path is NULL");
    HOOP_CHECK(check_load_args("hoop_checkpoint_load", params, count, opt));
    void *b = NULL;
    size_t len = 0;
    HOOP_CHECK(hoop_checkpoint_read(path, &b, &len));
    const struct load_args a = {path, params, count, opt, extra, extra_cap, extra_bytes};
    hoop_status st = load_bytes(&a, b, len);
    free(b);
    return st;
}

hoop_status hoop_checkpoint_load_mem(const char *name, const void *buf, size_t len,
                                     hoop_tensor *const *params, size_t count, hoop_optim *opt,
                                     void *extra, size_t extra_cap, size_t *extra_bytes)
{
    if (buf == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_checkpoint_load_mem: buf is NULL");
    HOOP_CHECK(check_load_args("hoop_checkpoint_load_mem", params, count, opt));
    const struct load_args a = {
        name ? name : "(memory)", params, count, opt, extra, extra_cap, extra_bytes};
    return load_bytes(&a, buf, len);
}
