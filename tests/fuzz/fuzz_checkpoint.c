/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/fuzz/fuzz_checkpoint.c -- the checkpoint reader (src/autograd/checkpoint.c):
 * the input is a checkpoint's bytes for hoop_checkpoint_inspect_mem and for
 * hoop_checkpoint_load_mem (what hoop-train's ranks load from rank 0's broadcast; the
 * file forms read the file and parse it with the same code) into a small model (two parameters, "w"
 * [3, 4] and "b" [4], with SGD-momentum state). So that the fuzzer gets past the envelope, the
 * header's total size and the trailing CRC-32 are set to what the reader checks (a corrupt size or
 * checksum is tests/check_optim.c's). A failed load must leave the parameters as they
 * were.
 */
#include "fuzz.h"

#include <zlib.h>

#include "hoop/nn.h"
#include "hoop/optim.h"
#include "hoop/tensor.h"

#define TOTAL_AT 16 /* "HOOPCKPT" u32 version u32 flags, then u64 total_bytes */

static hoop_tensor *params[2];
static hoop_optim *opt;

static void model(void)
{
    static const int64_t ws[2] = {3, 4}, bs[1] = {4};
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.momentum = 0.9f;
    if (hoop_tensor_new(&params[0], 2, ws, HOOP_DEVICE_CPU, 1) != HOOP_OK ||
        hoop_tensor_new(&params[1], 1, bs, HOOP_DEVICE_CPU, 1) != HOOP_OK)
        abort();
    hoop_tensor_set_name(params[0], "w");
    hoop_tensor_set_name(params[1], "b");
    hoop_tensor_fill(params[0], 0.5f);
    hoop_tensor_fill(params[1], -1.0f);
    if (hoop_optim_new(&opt, &cfg, params, 2) != HOOP_OK) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char extra[64];
    size_t extra_bytes;
    hoop_checkpoint_info info;
    fuzz_quiet();
    if (opt == NULL) model();
    uint8_t *b = malloc(size ? size : 1);
    if (b == NULL) return 0;
    memcpy(b, data, size);
    if (size >= TOTAL_AT + 8 + 4) {
        uint64_t total = size;
        memcpy(b + TOTAL_AT, &total, 8); /* little-endian hosts only, as the format */
        uint32_t crc = (uint32_t)crc32(0L, b, (uInt)(size - 4));
        memcpy(b + size - 4, &crc, 4);
    }
    hoop_checkpoint_inspect_mem("fuzz", b, size, &info, extra, sizeof(extra));
    if (hoop_checkpoint_load_mem("fuzz", b, size, params, 2, opt, extra, sizeof(extra),
                                 &extra_bytes) != HOOP_OK) {
        if (hoop_tensor_data(params[0])[11] != 0.5f || hoop_tensor_data(params[1])[3] != -1.0f)
            abort(); /* a failed load changed a parameter */
    } else {         /* a valid file: put the values back for the next input */
        hoop_tensor_fill(params[0], 0.5f);
        hoop_tensor_fill(params[1], -1.0f);
    }
    free(b);
    return 0;
}
