# SPDX-License-Identifier: BSD-3-Clause
# src/autograd/local.mk -- sources and tests of the autograd layer (included by Makefile.am).
libhoopcore_la_SOURCES += \
	%reldir%/tensor.c \
	%reldir%/tape.c \
	%reldir%/kern.c \
	%reldir%/kern_cpu.c \
	%reldir%/ops.c \
	%reldir%/activ.c \
	%reldir%/conv.c \
	%reldir%/nn.c \
	%reldir%/optim.c \
	%reldir%/graph.c \
	%reldir%/checkpoint.c
noinst_HEADERS += \
	%reldir%/autograd_impl.h \
	%reldir%/checkpoint.h \
	%reldir%/graph.h \
	%reldir%/kern.h \
	%reldir%/ops.h \
	%reldir%/optim_impl.h
hoopinclude_HEADERS += \
	include/hoop/tensor.h \
	include/hoop/autograd.h \
	include/hoop/nn.h \
	include/hoop/optim.h
EXTRA_DIST += tests/ref/make_ref.py tests/ref/autograd_ref.h

check_PROGRAMS += tests/check_tensor tests/check_ops_grad tests/check_optim tests/check_autograd_ref \
	tests/check_kern
tests_check_tensor_SOURCES = tests/check_tensor.c
tests_check_tensor_CFLAGS = $(TEST_CFLAGS)
tests_check_tensor_LDADD = $(TEST_LDADD)
tests_check_ops_grad_SOURCES = tests/check_ops_grad.c
tests_check_ops_grad_CFLAGS = $(TEST_CFLAGS)
tests_check_ops_grad_LDADD = $(TEST_LDADD)
tests_check_optim_SOURCES = tests/check_optim.c
tests_check_optim_CFLAGS = $(TEST_CFLAGS)
tests_check_optim_LDADD = $(TEST_LDADD)
tests_check_autograd_ref_SOURCES = tests/check_autograd_ref.c
tests_check_autograd_ref_CFLAGS = $(TEST_CFLAGS) -I$(top_srcdir)/tests
tests_check_autograd_ref_LDADD = $(TEST_LDADD)
tests_check_kern_SOURCES = tests/check_kern.c
tests_check_kern_CFLAGS = $(TEST_CFLAGS)
tests_check_kern_LDADD = $(TEST_LDADD)
TESTS += tests/check_tensor tests/check_ops_grad tests/check_optim tests/check_autograd_ref \
	tests/check_kern
