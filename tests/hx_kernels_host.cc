/* SPDX-License-Identifier: BSD-3-Clause */
/* tests/hx_kernels_host.cc -- tests/hx_kernels.cu compiled for the host execution layer. */
#include "hx_kernels.cu"
