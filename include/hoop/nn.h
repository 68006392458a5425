/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/nn.h -- layers and models: parameter containers with a forward pass.
 *
 * A hoop_model owns its parameters (long-lived tensors with requires_grad) in
 * registration order, each with a name such as "fc1.weight". Built-in architectures:
 *   - MLP: sizes {784, 512, 256, 10} gives fc1 (784->512), ReLU, fc2 (512->256), ReLU,
 *     fc3 (256->10); no activation after the last layer (logits).
 *   - CNN: conv1 (C->c1, 3x3, padding 1) ReLU maxpool 2; conv2 (c1->c2, 3x3, padding 1)
 *     ReLU maxpool 2; flatten; fc1 (c2*(H/4)*(W/4) -> hidden) ReLU [dropout]; fc2
 *     (hidden -> classes).
 * A model made by hoop_model_new() is an empty container: add parameters with
 * hoop_model_add_param() and write the forward pass yourself with the ops of
 * hoop/autograd.h (hoop_model_forward() then fails with HOOP_ERR_USAGE).
 *
 * Initialisation follows PyTorch's nn.Linear / nn.Conv2d defaults: weights
 * Kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and biases
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (He et al. 2015), drawn from xoshiro256** seeded by
 * splitmix64 (Blackman & Vigna 2018), so the same seed gives the same bits everywhere.
 * The values differ from PyTorch's (another generator), the distribution does not.
 *
 * Thread-safety: a model is not synchronised; one thread at a time.
 */
#ifndef HOOP_NN_H
#define HOOP_NN_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/autograd.h"
#include "hoop/export.h"
#include "hoop/status.h"
#include "hoop/tensor.h"

HOOP_EXTERN_C_BEGIN

typedef struct hoop_model hoop_model;

/* A portable random stream: xoshiro256** (Blackman & Vigna 2018), state filled from a
 * 64-bit seed by splitmix64. Plain struct; copy it to fork a stream. */
typedef struct hoop_rng {
    uint64_t s[4];
} hoop_rng;

/* Seeds rng from seed. */
HOOP_API void hoop_rng_seed(hoop_rng *rng, uint64_t seed);
/* Next 64 random bits. */
HOOP_API uint64_t hoop_rng_next(hoop_rng *rng);
/* Uniform float in [0, 1) with 24 random bits. */
HOOP_API float hoop_rng_uniform(hoop_rng *rng);

/* Fills t with U(-bound, bound), bound = gain * sqrt(3 / fan_in) (Kaiming/He uniform;
 * gain sqrt(2) for ReLU, or 1/sqrt(3) for PyTorch's default layer init).
 * Errors: HOOP_ERR_INVALID (t or rng NULL, fan_in < 1, gain not finite). */
HOOP_API hoop_status hoop_init_kaiming_uniform(hoop_tensor *t, int64_t fan_in, float gain,
                                               hoop_rng *rng);

/* Fills t with U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010).
 * Errors: HOOP_ERR_INVALID (t or rng NULL, fan_in or fan_out < 0, fan_in + fan_out < 1,
 * gain not finite). */
HOOP_API hoop_status hoop_init_xavier_uniform(hoop_tensor *t, int64_t fan_in, int64_t fan_out,
                                              float gain, hoop_rng *rng);

/* Fills t with U(lo, hi), drawn from rng on the host in index order whatever t's device
 * (a CUDA tensor gets the same values, uploaded), so a model starts from the same weights
 * on every device. Errors: HOOP_ERR_INVALID (t or rng NULL), HOOP_ERR_NOMEM, the
 * device's copy error. */
HOOP_API hoop_status hoop_init_uniform(hoop_tensor *t, float lo, float hi, hoop_rng *rng);

/* Configuration of the small CNN. Use HOOP_CNN_CONFIG_INIT and change fields.
 * height and width must be multiples of 4. dropout in [0,1) is applied after fc1's ReLU
 * in training mode (0 = none). */
typedef struct hoop_cnn_config {
    int64_t in_channels, height, width; /* input (N, in_channels, height, width) */
    int64_t conv1_channels, conv2_channels, hidden, classes;
    float dropout;
} hoop_cnn_config;
#define HOOP_CNN_CONFIG_INIT             \
    {                                    \
        1, 28, 28, 32, 64, 128, 10, 0.0f \
    }

/* Makes an empty model (no parameters, no built-in forward). Errors: HOOP_ERR_INVALID,
 * HOOP_ERR_NOMEM. */
HOOP_API hoop_status hoop_model_new(hoop_model **out);

/* Makes an MLP with nsizes-1 linear layers fc1..fc{nsizes-1} of sizes[i] -> sizes[i+1],
 * ReLU between them, PyTorch-default init from seed. Parameters in order: fc1.weight
 * (sizes[1], sizes[0]), fc1.bias (sizes[1]), fc2.weight, ... Errors: HOOP_ERR_INVALID
 * (nsizes < 2 or a size < 1), HOOP_ERR_NOMEM. */
HOOP_API hoop_status hoop_model_new_mlp(hoop_model **out, const int64_t *sizes, size_t nsizes,
                                        uint64_t seed);

/* Makes the CNN described above. Parameters in order: conv1.weight (c1,C,3,3), conv1.bias,
 * conv2.weight (c2,c1,3,3), conv2.bias, fc1.weight, fc1.bias, fc2.weight, fc2.bias.
 * Errors: HOOP_ERR_INVALID (cfg NULL, sizes < 1, height/width not multiples of 4, a weight
 * or a sample's activations of more than INT_MAX elements), HOOP_ERR_NOMEM. */
HOOP_API hoop_status hoop_model_new_cnn(hoop_model **out, const hoop_cnn_config *cfg,
                                        uint64_t seed);

/* Frees the model and its parameters. NULL is accepted. */
HOOP_API void hoop_model_free(hoop_model *m);

/* Adds a zeroed parameter (requires_grad) named name (copied) of the given shape at the
 * end of the registration order; *out (may be NULL) receives it, owned by the model.
 * Errors: HOOP_ERR_INVALID (bad shape, NULL, empty or duplicate name, a name of
 * HOOP_TENSOR_NAME_MAX bytes or more, which would be cut), HOOP_ERR_NOMEM. */
HOOP_API hoop_status hoop_model_add_param(hoop_model *m, const char *name, int ndim,
                                          const int64_t *shape, hoop_tensor **out);

/* Runs the built-in forward pass on tape: x is (N, features) or (N, C, H, W) for the MLP
 * (flattened to (N, sizes[0])), (N, C, H, W) for the CNN; *logits is (N, classes).
 * Errors: HOOP_ERR_INVALID (x's shape does not fit; the message names both shapes),
 * HOOP_ERR_USAGE (a model from hoop_model_new()), HOOP_ERR_NOMEM. */
HOOP_API hoop_status hoop_model_forward(hoop_model *m, hoop_tape *tape, hoop_tensor *x,
                                        hoop_tensor **logits);

/* Parameters in registration order. hoop_model_param() returns NULL for i >= count.
 * hoop_model_params() returns the array itself (count entries, valid until the next
 * hoop_model_add_param() or hoop_model_free()), convenient for hoop_optim_new(). */
HOOP_API size_t hoop_model_param_count(const hoop_model *m);
HOOP_API hoop_tensor *hoop_model_param(const hoop_model *m, size_t i);
HOOP_API hoop_tensor *const *hoop_model_params(const hoop_model *m);

/* Total number of scalar parameters (sum of counts). */
HOOP_API size_t hoop_model_numel(const hoop_model *m);

/* Registers fn(param, user) as the grad-ready hook of every parameter of m (see
 * hoop_backward()). fn NULL removes them. */
HOOP_API void hoop_model_set_grad_hook(hoop_model *m, hoop_grad_hook_fn fn, void *user);

/* Zeroes every parameter's gradient. HOOP_OK, or the device's error (first failing
 * parameter). */
HOOP_API hoop_status hoop_model_zero_grad(hoop_model *m);

/* Moves every parameter of m to device (hoop_tensor_to_device), as torch's Module.to():
 * build the model (initialised on the host, so identically on every device), then move
 * it, then make the optimizer. Errors: HOOP_ERR_INVALID (m NULL), a parameter's error with
 * its name; parameters moved before the failing one stay moved (call again to finish). */
HOOP_API hoop_status hoop_model_to_device(hoop_model *m, hoop_device device);

HOOP_EXTERN_C_END

#endif /* HOOP_NN_H */
