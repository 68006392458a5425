# SPDX-License-Identifier: BSD-3-Clause
# src/ddp/local.mk -- sources and tests of the ddp layer (included by Makefile.am).
libhoopcore_la_SOURCES += %reldir%/sampler.c
hoopinclude_HEADERS += include/hoop/sampler.h

check_PROGRAMS += tests/check_sampler
tests_check_sampler_SOURCES = tests/check_sampler.c
tests_check_sampler_CFLAGS = $(TEST_CFLAGS)
tests_check_sampler_LDADD = $(TEST_LDADD)
TESTS += tests/check_sampler
libhoopcore_la_SOURCES += %reldir%/ddp.c %reldir%/ddp_dev.c %reldir%/trace.c
noinst_HEADERS += %reldir%/ddp_internal.h
hoopinclude_HEADERS += include/hoop/ddp.h

check_PROGRAMS += tests/check_ddp
tests_check_ddp_SOURCES = tests/check_ddp.c
tests_check_ddp_CFLAGS = $(TEST_CFLAGS)
tests_check_ddp_LDADD = $(TEST_LDADD)
TESTS += tests/check_ddp

# hoop-train's evaluation over the exact split, under hooprun with 1, 3 and 7 workers.
TESTS += tests/ddp_eval.sh
EXTRA_DIST += tests/ddp_eval.sh

# DDP with parameters on cuda, ranks as processes: the host layer's backend here, the GPU
# under tests/gpu/run.sh (77 without either).
check_PROGRAMS += tests/check_ddp_cuda
tests_check_ddp_cuda_SOURCES = tests/check_ddp_cuda.c
tests_check_ddp_cuda_CFLAGS = $(TEST_CFLAGS)
tests_check_ddp_cuda_LDADD = $(TEST_LDADD)
TESTS += tests/check_ddp_cuda
