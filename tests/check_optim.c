/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_optim.c -- optimizer rules (hand-computed values), the learning-rate
 * schedule, gradient clipping, and checkpoint save/load (bit-for-bit round trip; truncated,
 * foreign and corrupt files rejected with messages naming the file and the fault).
 * Multi-step agreement with PyTorch is in check_autograd_ref.c.
 */
#define _GNU_SOURCE /* nftw, memfd_create */
#include <check.h>
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "autograd/checkpoint.h"
#include "core/atomic_file.h"
#include "core/fault.h"
#include "hoop/autograd.h"
#include "hoop/nn.h"
#include "hoop/optim.h"
#include "run_suite.h"

static hoop_tensor *param(int64_t n, float value, float grad)
{
    hoop_tensor *p;
    ck_assert_int_eq(hoop_tensor_new(&p, 1, &n, HOOP_DEVICE_CPU, 1), HOOP_OK);
    hoop_tensor_fill(p, value);
    for (int64_t i = 0; i < n; i++) hoop_tensor_grad(p)[i] = grad;
    return p;
}

// ----- optimizer rules ------------------------------------------------------------------------

START_TEST(test_sgd_momentum_by_hand)
{
    hoop_tensor *p = param(3, 1.0f, 0.5f);
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.lr = 0.1f;
    cfg.momentum = 0.9f;
    cfg.weight_decay = 0.1f;
    hoop_optim *o;
    ck_assert_int_eq(hoop_optim_new(&o, &cfg, &p, 1), HOOP_OK);
    /* step 1: g = 0.5 + 0.1*1 = 0.6, b = 0.6, p = 1 - 0.06 = 0.94 */
    ck_assert_int_eq(hoop_optim_step(o), HOOP_OK);
    ck_assert_float_eq_tol(hoop_tensor_data(p)[0], 0.94f, 1e-6f);
    /* step 2: g = 0.5 + 0.094 = 0.594, b = 0.54 + 0.594 = 1.134, p = 0.94 - 0.1134 */
    ck_assert_int_eq(hoop_optim_step(o), HOOP_OK);
    ck_assert_float_eq_tol(hoop_tensor_data(p)[2], 0.8266f, 1e-6f);
    hoop_optim_zero_grad(o);
    ck_assert_float_eq(hoop_tensor_grad(p)[1], 0.0f);
    hoop_optim_set_lr(o, 0.5f);
    ck_assert_float_eq(hoop_optim_lr(o), 0.5f);
    ck_assert_int_eq(hoop_optim_step_count(o), 2);
    hoop_optim_free(o);
    hoop_tensor_free(p);
}
END_TEST

START_TEST(test_adamw_first_step_by_hand)
{
    hoop_tensor *p = param(2, 2.0f, -0.3f);
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.kind = HOOP_OPTIM_ADAMW;
    cfg.lr = 0.01f;
    cfg.weight_decay = 0.5f;
    hoop_optim *o;
    ck_assert_int_eq(hoop_optim_new(&o, &cfg, &p, 1), HOOP_OK);
    ck_assert_int_eq(hoop_optim_step(o), HOOP_OK);
    /* decay: 2 * (1 - 0.005) = 1.99; first Adam step moves by lr * sign(g) (eps aside). */
    ck_assert_float_eq_tol(hoop_tensor_data(p)[0], 1.99f + 0.01f, 1e-6f);
    hoop_optim_free(o);
    hoop_tensor_free(p);
}
END_TEST

START_TEST(test_optim_config_errors)
{
    hoop_tensor *p = param(2, 0.0f, 0.0f), *x;
    const int64_t n = 2;
    ck_assert_int_eq(hoop_tensor_new(&x, 1, &n, HOOP_DEVICE_CPU, 0), HOOP_OK);
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    hoop_optim *o = NULL;
    cfg.nesterov = 1;
    ck_assert_int_eq(hoop_optim_new(&o, &cfg, &p, 1), HOOP_ERR_INVALID);
    assert_error_has("Nesterov", NULL);
    cfg = (hoop_optim_config)HOOP_OPTIM_CONFIG_INIT;
    cfg.lr = -1.0f;
    ck_assert_int_eq(hoop_optim_new(&o, &cfg, &p, 1), HOOP_ERR_INVALID);
    cfg = (hoop_optim_config)HOOP_OPTIM_CONFIG_INIT;
    cfg.kind = HOOP_OPTIM_ADAMW;
    cfg.beta2 = 1.0f;
    ck_assert_int_eq(hoop_optim_new(&o, &cfg, &p, 1), HOOP_ERR_INVALID);
    /* Nesterov is SGD's; AdamW would ignore it silently. */
    cfg = (hoop_optim_config)HOOP_OPTIM_CONFIG_INIT;
    cfg.kind = HOOP_OPTIM_ADAMW;
    cfg.nesterov = 1;
    ck_assert_int_eq(hoop_optim_new(&o, &cfg, &p, 1), HOOP_ERR_INVALID);
    assert_error_has("hoop_optim_new: nesterov=1", "AdamW");
    ck_assert_ptr_null(o);
    cfg = (hoop_optim_config)HOOP_OPTIM_CONFIG_INIT;
    ck_assert_int_eq(hoop_optim_new(&o, &cfg, &x, 1), HOOP_ERR_INVALID);
    assert_error_has("params[0]", NULL);
    ck_assert_ptr_null(o);
    hoop_optim_free(NULL);
    hoop_tensor_free(x);
    hoop_tensor_free(p);
}
END_TEST

START_TEST(test_lr_schedule)
{
    const hoop_lr_schedule s = {
        .base_lr = 0.1f, .min_lr = 0.001f, .warmup_steps = 10, .total_steps = 110};
    ck_assert_float_eq_tol(hoop_lr_at(&s, 0), 0.01f, 1e-7f);
    ck_assert_float_eq_tol(hoop_lr_at(&s, 9), 0.1f, 1e-7f);
    ck_assert_float_eq_tol(hoop_lr_at(&s, 10), 0.1f, 1e-7f);
    ck_assert_float_eq_tol(hoop_lr_at(&s, 60), 0.0505f, 1e-6f); /* half way: the mean */
    ck_assert_float_eq_tol(hoop_lr_at(&s, 110), 0.001f, 1e-7f);
    ck_assert_float_eq_tol(hoop_lr_at(&s, 500), 0.001f, 1e-7f);
    const float q = 0.001f + 0.099f * (1.0f + cosf((float)M_PI * 0.25f)) / 2.0f;
    ck_assert_float_eq_tol(hoop_lr_at(&s, 35), q, 1e-6f);
}
END_TEST

START_TEST(test_clip_grad_norm)
{
    hoop_tensor *p[2] = {param(3, 0.0f, 1.0f), param(1, 0.0f, 0.0f)};
    hoop_tensor_grad(p[1])[0] = 1.0f; /* global norm: sqrt(4) = 2 */
    float norm = 0.0f;
    ck_assert_int_eq(hoop_clip_grad_norm(p, 2, 5.0f, &norm), HOOP_OK);
    ck_assert_float_eq_tol(norm, 2.0f, 1e-6f);
    ck_assert_float_eq(hoop_tensor_grad(p[0])[0], 1.0f); /* under the limit: untouched */
    ck_assert_int_eq(hoop_clip_grad_norm(p, 2, 1.0f, &norm), HOOP_OK);
    ck_assert_float_eq_tol(hoop_tensor_grad(p[0])[2], 0.5f, 1e-6f);
    ck_assert_float_eq_tol(hoop_tensor_grad(p[1])[0], 0.5f, 1e-6f);
    ck_assert_int_eq(hoop_clip_grad_norm(p, 2, 0.0f, NULL), HOOP_ERR_INVALID);
    /* a NaN gradient: the norm is NaN, and every gradient becomes NaN (torch's rule, and
     * the CUDA kernel's), not left as it was */
    hoop_tensor_grad(p[0])[0] = NAN;
    ck_assert_int_eq(hoop_clip_grad_norm(p, 2, 1.0f, &norm), HOOP_OK);
    ck_assert(isnan(norm));
    ck_assert(isnan(hoop_tensor_grad(p[0])[1]));
    ck_assert(isnan(hoop_tensor_grad(p[1])[0]));
    hoop_tensor_free(p[0]);
    hoop_tensor_free(p[1]);
}
END_TEST

// ----- checkpoints --------------------------------------------------------------------------

/* Every fixture's folder is made inside this one, which main makes and removes whole
 * after the run: a test that fails half-way (its assertion ends its process before
 * fixture_free) leaves nothing in /tmp. */
static char tmp_root[256];

struct fixture {
    char dir[300], path[sizeof(tmp_root) + 64];
    hoop_model *m;
    hoop_optim *opt;
};

/* A CNN-free small MLP trained 3 AdamW steps, so the optimizer state is non-trivial. */
static void fixture_make(struct fixture *f, uint64_t seed)
{
    snprintf(f->dir, sizeof(f->dir), "%s/fixture_XXXXXX", tmp_root);
    ck_assert_ptr_nonnull(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/model.ckpt", f->dir);
    const int64_t sizes[3] = {6, 5, 3};
    ck_assert_int_eq(hoop_model_new_mlp(&f->m, sizes, 3, seed), HOOP_OK);
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.kind = HOOP_OPTIM_ADAMW;
    ck_assert_int_eq(hoop_optim_new(&f->opt, &cfg, hoop_model_params(f->m), 4), HOOP_OK);
    hoop_rng rng;
    hoop_rng_seed(&rng, seed);
    for (int s = 0; s < 3; s++) {
        for (size_t i = 0; i < 4; i++) {
            hoop_tensor *p = hoop_model_param(f->m, i);
            for (size_t k = 0; k < hoop_tensor_count(p); k++)
                hoop_tensor_grad(p)[k] = hoop_rng_uniform(&rng) - 0.5f;
        }
        ck_assert_int_eq(hoop_optim_step(f->opt), HOOP_OK);
    }
}

static void fixture_free(struct fixture *f)
{
    hoop_optim_free(f->opt);
    hoop_model_free(f->m);
    unlink(f->path);
    ck_assert_int_eq(rmdir(f->dir), 0); /* no temporary file left behind */
}

/* One more identical step on both sides must give identical bits (state restored). */
static void step_both(struct fixture *a, struct fixture *b)
{
    for (size_t i = 0; i < 4; i++) {
        hoop_tensor *pa = hoop_model_param(a->m, i), *pb = hoop_model_param(b->m, i);
        for (size_t k = 0; k < hoop_tensor_count(pa); k++)
            hoop_tensor_grad(pa)[k] = hoop_tensor_grad(pb)[k] = 0.01f * (float)k;
    }
    ck_assert_int_eq(hoop_optim_step(a->opt), HOOP_OK);
    ck_assert_int_eq(hoop_optim_step(b->opt), HOOP_OK);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char *buf = malloc(1 << 20);
    *n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

START_TEST(test_checkpoint_round_trip)
{
    struct fixture a, b;
    fixture_make(&a, 1);
    fixture_make(&b, 2);
    const char extra[] = "epoch=7";
    ck_assert_int_eq(
        hoop_checkpoint_save(a.path, hoop_model_params(a.m), 4, a.opt, extra, sizeof(extra)),
        HOOP_OK);
    char got[32] = "";
    size_t got_bytes = 0;
    ck_assert_int_eq(hoop_checkpoint_load(a.path, hoop_model_params(b.m), 4, b.opt, got,
                                          sizeof(got), &got_bytes),
                     HOOP_OK);
    ck_assert_uint_eq(got_bytes, sizeof(extra));
    ck_assert_str_eq(got, "epoch=7");
    ck_assert_int_eq(hoop_optim_step_count(b.opt), 3);
    /* Saving what was loaded reproduces the file byte for byte. */
    char again[sizeof(b.dir) + 16];
    snprintf(again, sizeof(again), "%s/again.ckpt", b.dir);
    ck_assert_int_eq(
        hoop_checkpoint_save(again, hoop_model_params(b.m), 4, b.opt, extra, sizeof(extra)),
        HOOP_OK);
    size_t na, nb;
    unsigned char *fa = slurp(a.path, &na), *fb = slurp(again, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_mem_eq(fa, fb, na);
    free(fa);
    free(fb);
    /* A new file's mode follows the umask, as open(O_CREAT, 0666) would give it. */
    static const mode_t masks[] = {022, 077, 002};
    for (int i = 0; i < 3; i++) {
        unlink(again);
        mode_t old = umask(masks[i]);
        ck_assert_int_eq(hoop_checkpoint_save(again, hoop_model_params(b.m), 4, b.opt, NULL, 0),
                         HOOP_OK);
        umask(old);
        struct stat sb;
        ck_assert_int_eq(stat(again, &sb), 0);
        ck_assert_msg((sb.st_mode & 0777) == (0666 & ~masks[i]), "umask %03o: mode %03o",
                      (unsigned)masks[i], (unsigned)(sb.st_mode & 0777));
    }
    unlink(again);
    /* A name of NAME_MAX characters (255): its temporary file needs a shorter name. */
    char longest[sizeof(b.dir) + 260];
    int at = snprintf(longest, sizeof(longest), "%s/", b.dir);
    memset(longest + at, 'c', 255);
    longest[at + 255] = '\0';
    ck_assert_int_eq(hoop_checkpoint_save(longest, hoop_model_params(b.m), 4, b.opt, NULL, 0),
                     HOOP_OK);
    ck_assert_int_eq(hoop_checkpoint_load(longest, hoop_model_params(b.m), 4, b.opt, NULL, 0, NULL),
                     HOOP_OK);
    ck_assert_int_eq(unlink(longest), 0);
    longest[at + 255] = 'c'; /* 256: refused before anything is written, naming why */
    longest[at + 256] = '\0';
    ck_assert_int_eq(hoop_checkpoint_save(longest, hoop_model_params(b.m), 4, b.opt, NULL, 0),
                     HOOP_ERR_INVALID);
    assert_error_has("File name too long", "at most 255");
    /* A symbolic link to a regular file is written through: the file it names gets the
     * save, the link stays a link (it was replaced by a regular file). */
    char link[sizeof(b.dir) + 16];
    snprintf(link, sizeof(link), "%s/latest.ckpt", b.dir);
    ck_assert_int_eq(hoop_checkpoint_save(again, hoop_model_params(b.m), 4, NULL, NULL, 0),
                     HOOP_OK);
    ck_assert_int_eq(symlink("again.ckpt", link), 0);
    ck_assert_int_eq(hoop__atomic_probe("checkpoint", link), HOOP_OK);
    ck_assert_int_eq(hoop_checkpoint_save(link, hoop_model_params(a.m), 4, a.opt, NULL, 0),
                     HOOP_OK);
    struct stat lsb;
    ck_assert_int_eq(lstat(link, &lsb), 0);
    ck_assert_msg(S_ISLNK(lsb.st_mode), "the save replaced the link");
    unsigned char *fl = slurp(again, &nb);
    ck_assert_uint_eq(nb, na - sizeof(extra)); /* a's state, without the caller data */
    free(fl);
    ck_assert_int_eq(unlink(link), 0);
    unlink(again);
    step_both(&a, &b);
    for (size_t i = 0; i < 4; i++) {
        hoop_tensor *pa = hoop_model_param(a.m, i), *pb = hoop_model_param(b.m, i);
        ck_assert_mem_eq(hoop_tensor_data(pa), hoop_tensor_data(pb),
                         hoop_tensor_count(pa) * sizeof(float));
    }
    /* Parameters only (no optimizer) load from the same file too. */
    ck_assert_int_eq(hoop_checkpoint_load(a.path, hoop_model_params(b.m), 4, NULL, NULL, 0, NULL),
                     HOOP_OK);
    fixture_free(&a);
    fixture_free(&b);
}
END_TEST

/* The in-memory forms read exactly what the file forms read from the same bytes, and
 * refuse a corrupt copy (naming it) without touching the model. */
START_TEST(test_checkpoint_in_memory)
{
    struct fixture a, b, c;
    fixture_make(&a, 1);
    fixture_make(&b, 2);
    fixture_make(&c, 2);
    const char extra[] = "epoch=7";
    ck_assert_int_eq(
        hoop_checkpoint_save(a.path, hoop_model_params(a.m), 4, a.opt, extra, sizeof(extra)),
        HOOP_OK);
    size_t n;
    unsigned char *bytes = slurp(a.path, &n);
    /* hoop_checkpoint_read: the file's bytes, as stdio reads them. */
    void *rb = (void *)&n;
    size_t rn = 0;
    ck_assert_int_eq(hoop_checkpoint_read(a.path, &rb, &rn), HOOP_OK);
    ck_assert_uint_eq(rn, n);
    ck_assert_mem_eq(rb, bytes, n);
    free(rb);
    hoop_checkpoint_info fi, mi;
    char fx[16] = "", mx[16] = "";
    ck_assert_int_eq(hoop_checkpoint_inspect(a.path, &fi, fx, sizeof(fx)), HOOP_OK);
    ck_assert_int_eq(hoop_checkpoint_inspect_mem("copy", bytes, n, &mi, mx, sizeof(mx)), HOOP_OK);
    ck_assert_mem_eq(&fi, &mi, sizeof(fi));
    ck_assert_str_eq(mx, "epoch=7");
    /* b from the bytes, c from the file: the same bits, and the same next step. */
    char got[16] = "";
    size_t got_bytes = 0;
    ck_assert_int_eq(hoop_checkpoint_load_mem("copy", bytes, n, hoop_model_params(b.m), 4, b.opt,
                                              got, sizeof(got), &got_bytes),
                     HOOP_OK);
    ck_assert_uint_eq(got_bytes, sizeof(extra));
    ck_assert_str_eq(got, "epoch=7");
    ck_assert_int_eq(hoop_checkpoint_load(a.path, hoop_model_params(c.m), 4, c.opt, NULL, 0, NULL),
                     HOOP_OK);
    step_both(&b, &c);
    for (size_t i = 0; i < 4; i++) {
        hoop_tensor *pb = hoop_model_param(b.m, i), *pc = hoop_model_param(c.m, i);
        ck_assert_mem_eq(hoop_tensor_data(pb), hoop_tensor_data(pc),
                         hoop_tensor_count(pb) * sizeof(float));
    }
    /* One flipped byte of the copy: refused by its checksum, naming the copy; b unchanged. */
    float before = hoop_tensor_data(hoop_model_param(b.m, 0))[0];
    bytes[n / 2] ^= 0x40;
    ck_assert_int_eq(hoop_checkpoint_load_mem("copy from rank 0", bytes, n, hoop_model_params(b.m),
                                              4, b.opt, NULL, 0, NULL),
                     HOOP_ERR_INVALID);
    assert_error_has("checkpoint 'copy from rank 0'", "bad checksum");
    ck_assert_float_eq(hoop_tensor_data(hoop_model_param(b.m, 0))[0], before);
    ck_assert_int_eq(hoop_checkpoint_inspect_mem(NULL, bytes, n, &mi, NULL, 0), HOOP_ERR_INVALID);
    assert_error_has("checkpoint '(memory)'", "bad checksum");
    ck_assert_uint_eq(mi.param_count, 0); /* zeroed on error */
    free(bytes);
    fixture_free(&a);
    fixture_free(&b);
    fixture_free(&c);
}
END_TEST

static void rewrite(const char *path, long offset, const void *bytes, size_t n, long truncate_to)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    if (n) {
        ck_assert_int_eq(fseek(f, offset, SEEK_SET), 0);
        ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
    }
    fclose(f);
    if (truncate_to >= 0) ck_assert_int_eq(truncate(path, truncate_to), 0);
}

/* Loading must fail with HOOP_ERR_INVALID naming path and want, leaving b untouched. */
static void expect_rejected(struct fixture *b, const char *path, const char *want)
{
    hoop_tensor *p0 = hoop_model_param(b->m, 0);
    const float before = hoop_tensor_data(p0)[0];
    ck_assert_int_eq(hoop_checkpoint_load(path, hoop_model_params(b->m), 4, b->opt, NULL, 0, NULL),
                     HOOP_ERR_INVALID);
    assert_error_has(path, want);
    ck_assert_float_eq(hoop_tensor_data(p0)[0], before);
}

/* Recomputes the trailing CRC-32 after an edit, so the parser itself is what refuses. */
static void fix_crc(const char *path)
{
    size_t n;
    unsigned char *b = slurp(path, &n);
    const uint32_t crc = (uint32_t)crc32(0L, b, (uInt)(n - 4));
    free(b);
    rewrite(path, (long)n - 4, &crc, 4, -1);
}

/* The trailer's checksum covers every byte of a file of 4 GiB or more: zlib's crc32()
 * takes a 32-bit length, and (uInt)(2^32 + 4 KiB) would checksum 4 KiB. The 4 GiB view
 * is one 64 MiB memory file mapped 64 times over (and once more for the tail), so it
 * costs 64 MiB of RAM; each copy ends in a byte that is not 0. */
START_TEST(test_checkpoint_crc_past_4gib)
{
    const size_t piece = (size_t)64 << 20, tail = 4096, n = ((size_t)1 << 32) + tail;
    int fd = memfd_create("crc", 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)piece), 0);
    unsigned char *b = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ck_assert_ptr_ne(b, MAP_FAILED);
    for (size_t at = 0; at < n; at += piece) {
        const size_t len = n - at < piece ? n - at : piece;
        ck_assert_ptr_eq(
            mmap(b + at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd, 0),
            b + at);
    }
    b[piece - 1] = 7;
    b[n - 1] = 1; /* within the tail's copy: byte 4095 of the file */
    /* The reference from one copy's CRC, combined (zlib's crc32_combine) 64 times and
     * with the tail's: one pass over 64 MiB instead of a second over 4 GiB. */
    const uLong one = crc32(0L, b, (uInt)piece);
    uLong want = one;
    for (size_t at = piece; at + piece <= n; at += piece)
        want = crc32_combine(want, one, (z_off_t)piece);
    want = crc32_combine(want, crc32(0L, b, (uInt)tail), (z_off_t)tail);
    ck_assert_uint_eq(hoop__checkpoint_crc(b, n), (uint32_t)want);
    ck_assert_uint_ne((uint32_t)want,
                      (uint32_t)crc32(0L, b, (uInt)n)); /* what a 32-bit length covers */
    munmap(b, n);
    close(fd);
}
END_TEST

/* inspect says what a file holds without a model: counts, kind, steps, caller data. */
START_TEST(test_checkpoint_inspect)
{
    struct fixture a;
    fixture_make(&a, 1);
    const char extra[] = "epoch=7";
    ck_assert_int_eq(
        hoop_checkpoint_save(a.path, hoop_model_params(a.m), 4, a.opt, extra, sizeof(extra)),
        HOOP_OK);
    hoop_checkpoint_info info;
    char got[4] = "";
    ck_assert_int_eq(hoop_checkpoint_inspect(a.path, &info, got, sizeof(got)), HOOP_OK);
    ck_assert_uint_eq(info.param_count, 4);
    ck_assert_uint_eq(info.numel, 6 * 5 + 5 + 5 * 3 + 3); /* the 6-5-3 MLP's weights, biases */
    ck_assert_int_eq(info.has_optim, 1);
    ck_assert_int_eq(info.optim_kind, HOOP_OPTIM_ADAMW);
    ck_assert_int_eq(info.optim_steps, 3);
    ck_assert_uint_eq(info.extra_bytes, sizeof(extra));
    ck_assert_mem_eq(got, "epoc", 4); /* only extra_cap bytes copied */
    ck_assert_int_eq(hoop_checkpoint_save(a.path, hoop_model_params(a.m), 4, NULL, NULL, 0),
                     HOOP_OK);
    ck_assert_int_eq(hoop_checkpoint_inspect(a.path, &info, NULL, 0), HOOP_OK);
    ck_assert_int_eq(info.has_optim, 0);
    ck_assert_uint_eq(info.extra_bytes, 0);
    /* A forged parameter count with a valid checksum is refused, not trusted. */
    const uint64_t forged = 1u << 30;
    rewrite(a.path, 24, &forged, 8, -1);
    fix_crc(a.path);
    ck_assert_int_eq(hoop_checkpoint_inspect(a.path, &info, NULL, 0), HOOP_ERR_INVALID);
    assert_error_has(a.path, "cannot fit");
    ck_assert_uint_eq(info.param_count, 0); /* zeroed on error */
    /* A forged shape (far more elements than stored) runs out of bytes. */
    ck_assert_int_eq(hoop_checkpoint_save(a.path, hoop_model_params(a.m), 4, NULL, NULL, 0),
                     HOOP_OK);
    const int64_t rows = 1000; /* fc1.weight is (5, 6): name_len at 40, name, ndim at 54 */
    rewrite(a.path, 58, &rows, 8, -1);
    fix_crc(a.path);
    ck_assert_int_eq(hoop_checkpoint_inspect(a.path, &info, NULL, 0), HOOP_ERR_INVALID);
    assert_error_has(a.path, "parameter 0: bad shape");
    ck_assert_int_eq(hoop_checkpoint_inspect(NULL, &info, NULL, 0), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop_checkpoint_inspect(a.path, NULL, NULL, 0), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop_checkpoint_inspect(a.path, &info, NULL, 4), HOOP_ERR_INVALID);
    fixture_free(&a);
}
END_TEST

START_TEST(test_checkpoint_rejects_bad_files)
{
    struct fixture a, b;
    fixture_make(&a, 1);
    fixture_make(&b, 2);
    ck_assert_int_eq(hoop_checkpoint_save(a.path, hoop_model_params(a.m), 4, a.opt, NULL, 0),
                     HOOP_OK);
    rewrite(a.path, 100, "\x7f", 1, -1); /* one flipped byte in the body */
    expect_rejected(&b, a.path, "bad checksum");
    ck_assert_int_eq(hoop_checkpoint_save(a.path, hoop_model_params(a.m), 4, a.opt, NULL, 0),
                     HOOP_OK);
    rewrite(a.path, 0, "NOTHOOP!", 8, -1);
    expect_rejected(&b, a.path, "wrong magic");
    ck_assert_int_eq(hoop_checkpoint_save(a.path, hoop_model_params(a.m), 4, a.opt, NULL, 0),
                     HOOP_OK);
    rewrite(a.path, 0, NULL, 0, 200);
    expect_rejected(&b, a.path, "truncated");
    rewrite(a.path, 0, NULL, 0, 10);
    expect_rejected(&b, a.path, "truncated");
    ck_assert_int_eq(hoop_checkpoint_save(a.path, hoop_model_params(a.m), 4, a.opt, NULL, 0),
                     HOOP_OK);
    const uint32_t v99 = 99;
    rewrite(a.path, 8, &v99, 4, -1);
    expect_rejected(&b, a.path, "unsupported version 99");
    /* A model of another shape: HOOP_ERR_MISMATCH naming the parameter. */
    ck_assert_int_eq(hoop_checkpoint_save(a.path, hoop_model_params(a.m), 4, a.opt, NULL, 0),
                     HOOP_OK);
    hoop_model *other;
    const int64_t sizes[3] = {6, 4, 3};
    ck_assert_int_eq(hoop_model_new_mlp(&other, sizes, 3, 1), HOOP_OK);
    ck_assert_int_eq(hoop_checkpoint_load(a.path, hoop_model_params(other), 4, NULL, NULL, 0, NULL),
                     HOOP_ERR_MISMATCH);
    assert_error_has("fc1.weight", "is (5, 6) in the file but (4, 6) in the model");
    hoop_model_free(other);
    char missing[sizeof(a.dir) + 16];
    snprintf(missing, sizeof(missing), "%s/missing.ckpt", a.dir);
    ck_assert_int_eq(hoop_checkpoint_load(missing, hoop_model_params(b.m), 4, NULL, NULL, 0, NULL),
                     HOOP_ERR_SYSTEM);
    assert_error_has(missing, "cannot open");
    void *rb = (void *)&b;
    size_t rn = 7;
    ck_assert_int_eq(hoop_checkpoint_read(missing, &rb, &rn), HOOP_ERR_SYSTEM);
    assert_error_has(missing, "No such file");
    ck_assert_ptr_null(rb);
    ck_assert_uint_eq(rn, 0);
    /* Not a regular file: refused by its type; a FIFO without waiting for a writer. */
    ck_assert_int_eq(hoop_checkpoint_load(a.dir, hoop_model_params(b.m), 4, NULL, NULL, 0, NULL),
                     HOOP_ERR_INVALID);
    assert_error_has(a.dir, "is not a regular file (a directory)");
    ck_assert_int_eq(mkfifo(missing, 0600), 0);
    hoop_checkpoint_info info;
    ck_assert_int_eq(hoop_checkpoint_inspect(missing, &info, NULL, 0), HOOP_ERR_INVALID);
    assert_error_has(missing, "is not a regular file (a FIFO)");
    ck_assert_int_eq(hoop_checkpoint_read(missing, &rb, &rn), HOOP_ERR_INVALID);
    assert_error_has(missing, "is not a regular file (a FIFO)");
    ck_assert_int_eq(unlink(missing), 0);
    /* A save (and the probe) to a path ending in '/' is refused naming that path: it was
     * written beside it and failed naming a temporary file inside the missing directory. */
    char slash[sizeof(a.dir) + 16];
    snprintf(slash, sizeof(slash), "%s/x/", a.dir);
    ck_assert_int_eq(hoop_checkpoint_save(slash, hoop_model_params(a.m), 4, NULL, NULL, 0),
                     HOOP_ERR_INVALID);
    assert_error_has(slash, "ends in '/'");
    ck_assert_msg(strstr(hoop_last_error(), ".tmp") == NULL, "%s", hoop_last_error());
    ck_assert_int_eq(hoop__atomic_probe("checkpoint", slash), HOOP_ERR_INVALID);
    assert_error_has(slash, "ends in '/'");
    /* A directory, a symbolic link to one and a dangling link are refused alike, the link
     * kept (a save replaced either link with a regular file). */
    ck_assert_int_eq(hoop_checkpoint_save(a.dir, hoop_model_params(a.m), 4, NULL, NULL, 0),
                     HOOP_ERR_INVALID);
    assert_error_has(a.dir, "is not a regular file (a directory)");
    char link[sizeof(a.dir) + 16];
    snprintf(link, sizeof(link), "%s/link", a.dir);
    ck_assert_int_eq(symlink(".", link), 0);
    ck_assert_int_eq(hoop_checkpoint_save(link, hoop_model_params(a.m), 4, NULL, NULL, 0),
                     HOOP_ERR_INVALID);
    assert_error_has(link, "(a symbolic link to a directory)");
    ck_assert_int_eq(hoop__atomic_probe("checkpoint", link), HOOP_ERR_INVALID);
    assert_error_has(link, "(a symbolic link to a directory)");
    ck_assert_int_eq(unlink(link), 0);
    ck_assert_int_eq(symlink("missing/x", link), 0);
    ck_assert_int_eq(hoop_checkpoint_save(link, hoop_model_params(a.m), 4, NULL, NULL, 0),
                     HOOP_ERR_INVALID);
    assert_error_has(link, "resolves to no file");
    ck_assert_int_eq(hoop__atomic_probe("checkpoint", link), HOOP_ERR_INVALID);
    assert_error_has(link, "resolves to no file");
    char target[64];
    ck_assert_int_eq(readlink(link, target, sizeof(target)), 9); /* still "missing/x" */
    ck_assert_int_eq(unlink(link), 0);
    fixture_free(&a);
    fixture_free(&b);
}
END_TEST

/* One optimizer field of the file at path set to the n bytes at v (offset off into the
 * optimizer section, which ends state_bytes before the trailer), the CRC recomputed:
 * loading into m's parameters and opt must fail naming path and want, changing nothing. */
static void expect_bad_setting(const char *path, hoop_model *m, hoop_optim *opt, size_t state_bytes,
                               long off, const void *v, size_t n, const char *want)
{
    size_t len;
    unsigned char *orig = slurp(path, &len);
    const long at = (long)(len - 4 - state_bytes - (3 * 4 + 7 * 4 + 8)) + off;
    rewrite(path, at, v, n, -1);
    fix_crc(path);
    const float p0 = hoop_tensor_data(hoop_model_param(m, 0))[0], lr = hoop_optim_lr(opt);
    const int64_t steps = hoop_optim_step_count(opt);
    ck_assert_int_eq(hoop_checkpoint_load(path, hoop_model_params(m), 4, opt, NULL, 0, NULL),
                     HOOP_ERR_INVALID);
    assert_error_has(path, want);
    ck_assert_float_eq(hoop_tensor_data(hoop_model_param(m, 0))[0], p0);
    ck_assert_float_eq(hoop_optim_lr(opt), lr);
    ck_assert_int_eq(hoop_optim_step_count(opt), steps);
    FILE *f = fopen(path, "wb"); /* the original back, for the next field */
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(orig, 1, len, f), len);
    fclose(f);
    free(orig);
}

/* A file whose optimizer settings hoop_optim_new would refuse (crafted, with a valid CRC)
 * is refused as HOOP_ERR_INVALID naming the file and the field: loaded, it corrupted the
 * parameters at the next step. */
START_TEST(test_checkpoint_rejects_bad_settings)
{
    struct fixture a, b;
    fixture_make(&a, 1);
    fixture_make(&b, 2);
    ck_assert_int_eq(hoop_checkpoint_save(a.path, hoop_model_params(a.m), 4, a.opt, NULL, 0),
                     HOOP_OK);
    const size_t adam_state = 2 * 53 * 4; /* m and v of the 6-5-3 MLP's 53 elements */
    const float nan = NAN, neg = -5.0f, inf = INFINITY, two = 2.0f, minus1 = -1.0f;
    const int64_t steps = -3;
    const uint32_t one = 1;
    /* offsets: nesterov 8, lr 12, momentum 16, dampening 20, weight_decay 24, beta1 28, beta2 32,
     * eps 36, steps 40 */
    expect_bad_setting(a.path, b.m, b.opt, adam_state, 12, &nan, 4, "lr=nan");
    expect_bad_setting(a.path, b.m, b.opt, adam_state, 12, &neg, 4, "lr=-5");
    expect_bad_setting(a.path, b.m, b.opt, adam_state, 24, &inf, 4, "weight_decay=inf");
    expect_bad_setting(a.path, b.m, b.opt, adam_state, 36, &minus1, 4, "eps=-1");
    expect_bad_setting(a.path, b.m, b.opt, adam_state, 28, &two, 4, "beta1=2");
    expect_bad_setting(a.path, b.m, b.opt, adam_state, 40, &steps, 8, "step count -3");
    expect_bad_setting(a.path, b.m, b.opt, adam_state, 8, &one, 4, "nesterov=1");
    /* SGD with momentum: a NaN momentum, and a momentum of 0 over a momentum buffer. */
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.momentum = 0.9f;
    hoop_optim *sa, *sb;
    ck_assert_int_eq(hoop_optim_new(&sa, &cfg, hoop_model_params(a.m), 4), HOOP_OK);
    ck_assert_int_eq(hoop_optim_new(&sb, &cfg, hoop_model_params(b.m), 4), HOOP_OK);
    ck_assert_int_eq(hoop_checkpoint_save(a.path, hoop_model_params(a.m), 4, sa, NULL, 0), HOOP_OK);
    const float zero = 0.0f;
    expect_bad_setting(a.path, b.m, sb, 53 * 4, 16, &nan, 4, "momentum=nan");
    expect_bad_setting(a.path, b.m, sb, 53 * 4, 16, &zero, 4, "momentum=0");
    ck_assert_int_eq(hoop_checkpoint_load(a.path, hoop_model_params(b.m), 4, sb, NULL, 0, NULL),
                     HOOP_OK); /* the file as written */
    hoop_optim_free(sa);
    hoop_optim_free(sb);
    fixture_free(&a);
    fixture_free(&b);
}
END_TEST

/* A writer killed half-way through a save (the HOOP_TEST_FAULT hook, in a child) leaves
 * the previous checkpoint whole and nothing else: no torn file, no temporary one. */
START_TEST(test_checkpoint_killed_writer)
{
    struct fixture a, b;
    fixture_make(&a, 1);
    fixture_make(&b, 2);
    ck_assert_int_eq(hoop_checkpoint_save(a.path, hoop_model_params(a.m), 4, a.opt, NULL, 0),
                     HOOP_OK);
    size_t n0, n1;
    unsigned char *before = slurp(a.path, &n0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) { /* saves b's parameters over a's file and dies in the middle */
        if (hoop__fault_arm("0:checkpoint:0:KILL") != HOOP_OK) _exit(3);
        hoop_checkpoint_save(a.path, hoop_model_params(b.m), 4, b.opt, NULL, 0);
        _exit(4); /* not reached: the hook kills the child */
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child ended with %d",
                  status);
    unsigned char *after = slurp(a.path, &n1);
    ck_assert_uint_eq(n0, n1);
    ck_assert_mem_eq(before, after, n0);
    free(before);
    free(after);
    DIR *d = opendir(a.dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        ck_assert_msg(e->d_name[0] == '.' || strcmp(e->d_name, "model.ckpt") == 0,
                      "the killed save left '%s' beside the checkpoint", e->d_name);
    closedir(d);
    fixture_free(&a);
    fixture_free(&b);
}
END_TEST

/* A save that fails after the data is written names the checkpoint first, the temporary
 * file in parentheses (it began "checkpoint: rename '<tmp>' -> ..."), and leaves no
 * temporary file. The rename is made to fail as root too: the writer stops half-way (the
 * HOOP_TEST_FAULT hook, in a child) and the destination becomes a directory meanwhile. */
START_TEST(test_checkpoint_rename_fails)
{
    struct fixture a;
    fixture_make(&a, 1);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) { /* sends the save's message, exits 0 when it failed as a system error */
        close(fds[0]);
        if (hoop__fault_arm("0:checkpoint:0:STOP") != HOOP_OK) _exit(3);
        hoop_status st = hoop_checkpoint_save(a.path, hoop_model_params(a.m), 4, a.opt, NULL, 0);
        const char *msg = hoop_last_error();
        if (write(fds[1], msg, strlen(msg)) < 0) _exit(5);
        _exit(st == HOOP_ERR_SYSTEM ? 0 : 4);
    }
    close(fds[1]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, WUNTRACED), pid);
    ck_assert_msg(WIFSTOPPED(status), "the child ended with %d before the rename", status);
    ck_assert_int_eq(mkdir(a.path, 0700), 0);
    ck_assert_int_eq(kill(pid, SIGCONT), 0);
    char msg[2048];
    size_t len = 0;
    for (ssize_t r;
         len < sizeof(msg) - 1 && (r = read(fds[0], msg + len, sizeof(msg) - 1 - len)) > 0;)
        len += (size_t)r;
    msg[len] = '\0';
    close(fds[0]);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child ended with %d: %s",
                  status, msg);
    char want[sizeof(a.path) + 64];
    snprintf(want, sizeof(want), "checkpoint '%s': cannot move the written file into place (",
             a.path);
    ck_assert_msg(strstr(msg, want) != NULL, "'%s' not in: %s", want, msg);
    ck_assert_msg(strstr(msg, "(temporary file '") != NULL, "no temporary file in: %s", msg);
    ck_assert_int_eq(rmdir(a.path), 0);
    fixture_free(&a); /* asserts the directory is empty: the temporary file was removed */
}
END_TEST

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* hoop__atomic_probe does what a save does before writing: in a writable directory it
 * succeeds and leaves nothing there (path untouched); where no file can be made (a missing
 * directory; /proc, where root passes access(W_OK)) it fails with the save's message. */
START_TEST(test_checkpoint_probe)
{
    char dir[sizeof(tmp_root) + 32], path[sizeof(dir) + 32];
    snprintf(dir, sizeof(dir), "%s/probe_XXXXXX", tmp_root);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/run.ckpt", dir);
    ck_assert_int_eq(hoop__atomic_probe("checkpoint", path), HOOP_OK);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        ck_assert_msg(e->d_name[0] == '.', "the probe left %s", e->d_name);
    closedir(d);
    ck_assert_int_eq(rmdir(dir), 0);
    ck_assert_int_eq(hoop__atomic_probe("checkpoint", path), HOOP_ERR_SYSTEM); /* dir is gone */
    ck_assert_msg(strstr(hoop_last_error(), "cannot create a temporary file beside") != NULL, "%s",
                  hoop_last_error());
    ck_assert_int_eq(hoop__atomic_probe("checkpoint", "/proc/version"), HOOP_ERR_SYSTEM);
    ck_assert_msg(strstr(hoop_last_error(), "'/proc/version'") != NULL, "%s", hoop_last_error());
}
END_TEST

/* The file at path holds text (its whole contents). */
static void assert_holds(const char *path, const char *text)
{
    size_t n;
    unsigned char *got = slurp(path, &n);
    ck_assert_uint_eq(n, strlen(text));
    ck_assert_mem_eq(got, text, n);
    free(got);
}

/* A save over a file the user may not write (0444, to keep it) is refused as open(2)
 * would refuse it, naming the mode; the file keeps its contents. Run by a user the mode
 * applies to (root passes access(W_OK)). */
static void assert_not_writable_refused(const char *path)
{
    ck_assert_int_eq(hoop__atomic_probe("checkpoint", path), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__atomic_write("checkpoint", path, "new", 3, HOOP__FAULT_NONE),
                     HOOP_ERR_INVALID);
    ck_assert_msg(strstr(hoop_last_error(), "is not writable by this user (mode 0444)") != NULL,
                  "%s", hoop_last_error());
    assert_holds(path, "kept");
}

/* A save keeps the replaced file's mode (a checkpoint made 0600 stayed private: the new
 * file took the umask's 0644) and, as root, its owner; a file the user may not write is
 * refused. */
START_TEST(test_checkpoint_keeps_mode)
{
    char dir[sizeof(tmp_root) + 32], path[sizeof(dir) + 32];
    snprintf(dir, sizeof(dir), "%s/mode_XXXXXX", tmp_root);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/run.ckpt", dir);
    mode_t old = umask(022);
    static const mode_t modes[] = {0600, 0640, 0604, 0664};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(hoop__atomic_write("checkpoint", path, "x", 1, HOOP__FAULT_NONE), HOOP_OK);
        ck_assert_int_eq(chmod(path, modes[i]), 0);
        ck_assert_int_eq(hoop__atomic_write("checkpoint", path, "yy", 2, HOOP__FAULT_NONE),
                         HOOP_OK);
        struct stat sb;
        ck_assert_int_eq(stat(path, &sb), 0);
        ck_assert_msg((sb.st_mode & 07777) == modes[i], "mode %04o became %04o", (unsigned)modes[i],
                      (unsigned)(sb.st_mode & 07777));
        assert_holds(path, "yy");
    }
    umask(old);
    ck_assert_int_eq(hoop__atomic_write("checkpoint", path, "kept", 4, HOOP__FAULT_NONE), HOOP_OK);
    ck_assert_int_eq(chmod(path, 0444), 0);
    if (geteuid() != 0) {
        assert_not_writable_refused(path);
        return;
    }
    /* As root: the owner stays (nobody's file stays nobody's) ... */
    ck_assert_int_eq(chmod(path, 0644), 0);
    ck_assert_int_eq(chown(path, 65534, 65534), 0);
    ck_assert_int_eq(hoop__atomic_write("checkpoint", path, "kept", 4, HOOP__FAULT_NONE), HOOP_OK);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_msg(sb.st_uid == 65534 && sb.st_gid == 65534, "owner %d:%d", (int)sb.st_uid,
                  (int)sb.st_gid);
    /* ... and nobody may not replace root's 0444 file in a directory it may write. */
    ck_assert_int_eq(chown(path, 0, 0), 0);
    ck_assert_int_eq(chmod(path, 0444), 0);
    ck_assert_int_eq(chmod(tmp_root, 0711), 0);
    ck_assert_int_eq(chmod(dir, 0777), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
        assert_not_writable_refused(path); /* a failed assertion exits non-zero */
        _exit(0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "as nobody: status %d", status);
    ck_assert_int_eq(chmod(tmp_root, 0700), 0);
}
END_TEST

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_root, sizeof(tmp_root), "%s/hoop_ckpt_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmp_root)) {
        perror(tmp_root);
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("optim");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_sgd_momentum_by_hand);
    tcase_add_test(core, test_adamw_first_step_by_hand);
    tcase_add_test(core, test_lr_schedule);
    tcase_add_test(core, test_clip_grad_norm);
    tcase_add_test(core, test_checkpoint_round_trip);
    tcase_add_test(core, test_checkpoint_in_memory);
    TCase *errors = tcase_create("errors");
    tcase_add_test(errors, test_optim_config_errors);
    tcase_add_test(errors, test_checkpoint_rejects_bad_files);
    tcase_add_test(errors, test_checkpoint_rejects_bad_settings);
    tcase_add_test(errors, test_checkpoint_inspect);
    tcase_add_test(errors, test_checkpoint_killed_writer);
    tcase_add_test(errors, test_checkpoint_rename_fails);
    tcase_add_test(errors, test_checkpoint_probe);
    tcase_add_test(errors, test_checkpoint_keeps_mode);
    suite_add_tcase(s, core);
    suite_add_tcase(s, errors);
    TCase *big = tcase_create("big");
    tcase_set_timeout(big, 30); /* one CRC pass over 4 GiB: 4 s here */
    tcase_add_test(big, test_checkpoint_crc_past_4gib);
    suite_add_tcase(s, big);
    int rc = run_suite(s);
    nftw(tmp_root, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    return rc;
}
