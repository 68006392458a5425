# SPDX-License-Identifier: BSD-3-Clause
# src/cuda/local.mk -- device memory, streams, kernels (built by nvcc when CUDA is found).
if HAVE_CUDA
libhoopcore_la_SOURCES += %reldir%/device.cu
endif
EXTRA_DIST += %reldir%/device.cu tests/gpu/run.sh
noinst_HEADERS += %reldir%/device.h
# nvcc objects have no automatic dependency tracking: rebuild them when any header changes.
CUDA_HEADER_DEPS = $(noinst_HEADERS) $(hoopinclude_HEADERS)
%reldir%/device.lo: $(CUDA_HEADER_DEPS)

check_PROGRAMS += tests/check_cuda
tests_check_cuda_SOURCES = tests/check_cuda.c
tests_check_cuda_CFLAGS = $(AM_CFLAGS)
tests_check_cuda_LDADD = libhoopcore.la $(HOOP_DEP_LIBS)
TESTS += tests/check_cuda
