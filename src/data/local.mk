# SPDX-License-Identifier: BSD-3-Clause
# src/data/local.mk -- sources and tests of the data layer (included by Makefile.am).
libhoopcore_la_SOURCES += \
	%reldir%/idx.c \
	%reldir%/dataset.c \
	%reldir%/loader.c
noinst_HEADERS += %reldir%/idx.h
hoopinclude_HEADERS += include/hoop/data.h

check_PROGRAMS += tests/check_idx
tests_check_idx_SOURCES = tests/check_idx.c
tests_check_idx_CFLAGS = $(TEST_CFLAGS)
tests_check_idx_LDADD = $(TEST_LDADD)
TESTS += tests/check_idx
