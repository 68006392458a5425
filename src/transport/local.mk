# SPDX-License-Identifier: BSD-3-Clause
# src/transport/local.mk -- sources and tests of the transport layer (included by Makefile.am).
libhoopcore_la_SOURCES += %reldir%/tcp.c %reldir%/shm.c %reldir%/ib.c %reldir%/sock.c \
	%reldir%/registry.c
noinst_HEADERS += %reldir%/transport.h %reldir%/reqpool.h %reldir%/sock.h %reldir%/registry.h

check_PROGRAMS += tests/check_tcp
tests_check_tcp_SOURCES = tests/check_tcp.c tests/tp_harness.h
tests_check_tcp_CFLAGS = $(TEST_CFLAGS)
tests_check_tcp_LDADD = $(TEST_LDADD)
TESTS += tests/check_tcp

check_PROGRAMS += tests/check_shm
tests_check_shm_SOURCES = tests/check_shm.c tests/tp_harness.h
tests_check_shm_CFLAGS = $(TEST_CFLAGS)
tests_check_shm_LDADD = $(TEST_LDADD)
TESTS += tests/check_shm
