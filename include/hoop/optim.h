/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/optim.h -- optimizers, learning-rate schedule, gradient clipping, checkpoints.
 *
 * An optimizer updates a fixed list of parameters (long-lived tensors with
 * requires_grad) from their gradients, in place, with PyTorch 1.13's exact update rules:
 *
 *   SGD (torch.optim.SGD; momentum of Sutskever et al. 2013):
 *     g = grad + weight_decay * p
 *     if momentum != 0:  b = g on the first step, else b = momentum * b + (1 - dampening) g
 *                        g = nesterov ? g + momentum * b : b
 *     p -= lr * g
 *   AdamW (torch.optim.AdamW; Loshchilov & Hutter 2019, decoupled weight decay):
 *     p *= 1 - lr * weight_decay
 *     m = beta1 m + (1 - beta1) grad;  v = beta2 v + (1 - beta2) grad^2;  t += 1
 *     p -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
 *
 * Example:
 *
 *     hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;   // SGD, lr 0.01
 *     cfg.momentum = 0.9f;
 *     hoop_optim *opt;
 *     hoop_optim_new(&opt, &cfg, hoop_model_params(m), hoop_model_param_count(m));
 *     ... hoop_backward(); hoop_clip_grad_norm(...); hoop_optim_step(opt); ...
 *     hoop_optim_free(opt);
 *
 * Thread-safety: an optimizer is not synchronised; call it from one thread at a time, and
 * not while a backward pass writes the same parameters' gradients.
 */
#ifndef HOOP_OPTIM_H
#define HOOP_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/export.h"
#include "hoop/status.h"
#include "hoop/tensor.h"

HOOP_EXTERN_C_BEGIN

typedef struct hoop_optim hoop_optim;

typedef enum hoop_optim_kind {
    HOOP_OPTIM_SGD = 0,
    HOOP_OPTIM_ADAMW = 1,
} hoop_optim_kind;

/* Hyper-parameters; start from HOOP_OPTIM_CONFIG_INIT. momentum, dampening and nesterov
 * apply to SGD; beta1, beta2 and eps to AdamW; lr and weight_decay to both. AdamW ignores
 * momentum and dampening but refuses nesterov != 0, which it could only ignore silently.
 * PyTorch's defaults: SGD weight_decay 0, AdamW lr 1e-3, betas (0.9, 0.999), eps 1e-8,
 * weight_decay 1e-2 (set them yourself when switching kind). */
typedef struct hoop_optim_config {
    hoop_optim_kind kind;
    float lr;
    float momentum;
    float dampening;
    int nesterov;
    float weight_decay;
    float beta1, beta2, eps;
} hoop_optim_config;
#define HOOP_OPTIM_CONFIG_INIT                                          \
    {                                                                   \
        HOOP_OPTIM_SGD, 0.01f, 0.0f, 0.0f, 0, 0.0f, 0.9f, 0.999f, 1e-8f \
    }

/* Makes an optimizer over count parameters (the array is copied; the tensors are not owned
 * and must outlive it). State (momentum / Adam moments) is allocated here, zeroed. The
 * updates run on the parameters' device, so all of them must be on one.
 * Errors: HOOP_ERR_INVALID (NULL pointers, a tensor without requires_grad, lr, momentum,
 * weight_decay or eps negative, infinite or NaN, dampening infinite or NaN, nesterov with
 * momentum 0 or dampening != 0, nesterov set for AdamW, betas outside [0,1), parameters on
 * different devices),
 * HOOP_ERR_UNSUPPORTED (a device this build has no kernels for), HOOP_ERR_NOMEM. */
HOOP_API hoop_status hoop_optim_new(hoop_optim **out, const hoop_optim_config *cfg,
                                    hoop_tensor *const *params, size_t count);

/* Frees the optimizer (not the parameters). NULL is accepted. */
HOOP_API void hoop_optim_free(hoop_optim *opt);

/* Applies one update to every parameter from its current gradient and increments the step
 * counter. Returns HOOP_OK (HOOP_ERR_INVALID for NULL; HOOP_ERR_USAGE naming a parameter
 * moved to another device since hoop_optim_new, nothing updated; on a device, the error of
 * a failed update kernel, which leaves the parameters after it not updated). */
HOOP_API hoop_status hoop_optim_step(hoop_optim *opt);

/* Zeroes the gradients of all the optimizer's parameters. HOOP_OK (also for NULL),
 * HOOP_ERR_USAGE as hoop_optim_step, or the device's error (a failed fill kernel). */
HOOP_API hoop_status hoop_optim_zero_grad(hoop_optim *opt);

/* Sets the learning rate used by the next step; set it every step from a schedule.
 * Errors: HOOP_ERR_INVALID for a NULL opt, or an lr that is negative, infinite or NaN (the
 * rule of hoop_optim_new()); the rate is then unchanged. */
HOOP_API hoop_status hoop_optim_set_lr(hoop_optim *opt, float lr);
HOOP_API float hoop_optim_lr(const hoop_optim *opt);

/* Steps taken so far (restored by hoop_checkpoint_load()). */
HOOP_API int64_t hoop_optim_step_count(const hoop_optim *opt);

/* Linear warm-up then cosine decay (Goyal et al. 2017; Loshchilov & Hutter 2017):
 *   step < warmup_steps:  lr = base_lr * (step + 1) / warmup_steps
 *   otherwise:            lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * q)) / 2,
 *                         q = min(1, (step - warmup_steps) / max(1, total_steps - warmup_steps))
 * step counts from 0 (a negative step is step 0; s NULL gives 0). Pure function;
 * thread-safe. */
typedef struct hoop_lr_schedule {
    float base_lr, min_lr;
    int64_t warmup_steps, total_steps;
} hoop_lr_schedule;
HOOP_API float hoop_lr_at(const hoop_lr_schedule *s, int64_t step);

/* Scales all count parameters' gradients by max_norm / (norm + 1e-6) when their global L2
 * norm (computed in double) exceeds max_norm, as torch.nn.utils.clip_grad_norm_; a norm
 * that is NaN (a NaN gradient) makes every gradient NaN, as torch's does, on every device.
 * The norm before clipping goes to *total_norm when it is not NULL.
 * Errors: HOOP_ERR_INVALID (NULL params with count > 0, a NULL entry, max_norm <= 0 or NaN,
 * parameters on different devices), HOOP_ERR_UNSUPPORTED (a device without kernels). */
HOOP_API hoop_status hoop_clip_grad_norm(hoop_tensor *const *params, size_t count, float max_norm,
                                         float *total_norm);

/* Saves count parameters (names, shapes, data) and, when opt is not NULL, the optimizer's
 * kind, hyper-parameters, step count and state, plus extra_bytes of caller data (e.g.
 * epoch and RNG state; extra may be NULL when extra_bytes is 0), to path. Format: magic
 * "HOOPCKPT", version, little-endian sections, CRC-32 (zlib) of everything before it.
 * The write is atomic: a temporary file in path's directory, fsync, rename, fsync of the
 * directory; a crash leaves the old file or the new one, never a mix. A symbolic link at
 * path to a regular file is written through: the file it names is replaced (atomically,
 * from a temporary file in that file's directory) and the link is kept.
 * Errors: HOOP_ERR_INVALID (NULL path/params; a path that names no file: empty, ending
 * in '/', or too long; a path that holds something other than a regular file, a link to
 * one or nothing: a directory, a device, a FIFO or a socket, or a link to one of them,
 * which the save would replace; a link that resolves to no file: dangling, or a loop),
 * HOOP_ERR_SYSTEM (I/O, naming path and the call), HOOP_ERR_NOMEM. */
HOOP_API hoop_status hoop_checkpoint_save(const char *path, hoop_tensor *const *params,
                                          size_t count, const hoop_optim *opt, const void *extra,
                                          size_t extra_bytes);

/* Loads a file written by hoop_checkpoint_save() into count existing parameters (same
 * count, names and shapes, else HOOP_ERR_MISMATCH naming the first difference) and, when
 * opt is not NULL, into opt (the file must hold optimizer state of the same kind over the
 * same parameters). Up to extra_cap bytes of caller data are copied to extra and their
 * stored size goes to *extra_bytes (either may be NULL). Nothing is modified unless the
 * whole file is valid. Errors: HOOP_ERR_SYSTEM (cannot open/read, naming path),
 * HOOP_ERR_INVALID (not a regular file: a directory, FIFO or device, refused without
 * waiting for a FIFO's writer; not a hoop checkpoint: wrong magic, unknown version,
 * truncated, bad checksum — the message names path and which; optimizer settings that
 * hoop_optim_new() refuses, a negative step count, or SGD momentum buffers that do not
 * match the momentum — the message names path and the field), HOOP_ERR_MISMATCH,
 * HOOP_ERR_NOMEM. */
HOOP_API hoop_status hoop_checkpoint_load(const char *path, hoop_tensor *const *params,
                                          size_t count, hoop_optim *opt, void *extra,
                                          size_t extra_cap, size_t *extra_bytes);

/* Reads the whole file at path into a new buffer: *buf (free it with free()) holds *len
 * bytes, for hoop_checkpoint_load_mem() / hoop_checkpoint_inspect_mem() (a program that
 * reads a checkpoint once and sends its bytes to other processes). Does not check the
 * contents. Only a regular file: a directory, FIFO or device is refused by its type,
 * without waiting for a FIFO's writer. Errors: HOOP_ERR_INVALID (NULL argument; not a
 * regular file, naming path and its type), HOOP_ERR_SYSTEM (cannot open or read path,
 * naming it and errno's text: ENOENT reads "No such file or directory"), HOOP_ERR_NOMEM;
 * on any error *buf is NULL and *len 0. Thread-safe (keeps no state). */
HOOP_API hoop_status hoop_checkpoint_read(const char *path, void **buf, size_t *len);

/* hoop_checkpoint_load() of a checkpoint's bytes already in memory (len bytes at buf, as
 * hoop_checkpoint_save() wrote them to a file): for a program that read the file once and
 * sent it to other processes, so that each loads exactly those bytes. name says where the
 * bytes came from in messages (NULL: "(memory)"). Errors: as hoop_checkpoint_load(), with
 * HOOP_ERR_INVALID for a NULL buf and no HOOP_ERR_SYSTEM. Thread-safe (keeps no state). */
HOOP_API hoop_status hoop_checkpoint_load_mem(const char *name, const void *buf, size_t len,
                                              hoop_tensor *const *params, size_t count,
                                              hoop_optim *opt, void *extra, size_t extra_cap,
                                              size_t *extra_bytes);

/* What a checkpoint file holds, as hoop_checkpoint_inspect() reads it. */
typedef struct hoop_checkpoint_info {
    size_t param_count;         /* parameter tensors */
    size_t numel;               /* their elements, summed (a model's "parameters") */
    int has_optim;              /* 1: optimizer state is present */
    hoop_optim_kind optim_kind; /* when has_optim */
    int64_t optim_steps;        /* when has_optim: steps the optimizer had taken */
    size_t extra_bytes;         /* size of the caller data */
} hoop_checkpoint_info;

/* Reads what the file at path holds without a model to load it into: checks it as
 * hoop_checkpoint_load() does (size, magic, version, CRC-32, every record in bounds), fills
 * *info, and copies up to extra_cap bytes of the caller data to extra (may be NULL when
 * extra_cap is 0). Lets a program say which model a file was written for before loading.
 * Errors: HOOP_ERR_INVALID (NULL path or info; not a regular file, as for
 * hoop_checkpoint_load(); not a valid checkpoint, the message names path and what is wrong),
 * HOOP_ERR_SYSTEM (cannot open or read path), HOOP_ERR_NOMEM. *info is zeroed on any error.
 * Thread-safe (keeps no state). */
HOOP_API hoop_status hoop_checkpoint_inspect(const char *path, hoop_checkpoint_info *info,
                                             void *extra, size_t extra_cap);

/* hoop_checkpoint_inspect() of a checkpoint's bytes in memory (len bytes at buf; name as
 * for hoop_checkpoint_load_mem()). Errors: HOOP_ERR_INVALID (NULL buf or info; not a valid
 * checkpoint, naming name and what is wrong). *info is zeroed on any error. Thread-safe. */
HOOP_API hoop_status hoop_checkpoint_inspect_mem(const char *name, const void *buf, size_t len,
                                                 hoop_checkpoint_info *info, void *extra,
                                                 size_t extra_cap);

HOOP_EXTERN_C_END

#endif /* HOOP_OPTIM_H */
