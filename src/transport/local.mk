# SPDX-License-Identifier: BSD-3-Clause
# src/transport/local.mk -- sources and tests of the transport layer (included by Makefile.am).
libhoopcore_la_SOURCES += %reldir%/tcp.c %reldir%/shm.c %reldir%/ib.c %reldir%/sock.c \
	%reldir%/registry.c
noinst_HEADERS += %reldir%/transport.h %reldir%/reqpool.h %reldir%/sock.h %reldir%/registry.h \
	%reldir%/hello.h %reldir%/frame.h

# The verbs transport's device-independent helpers (built with or without libibverbs).
libhoopcore_la_SOURCES += %reldir%/ib_util.c %reldir%/regcache.c
noinst_HEADERS += %reldir%/ib_util.h %reldir%/regcache.h

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

# The verbs transport on a real device: skips (77) where there is none; `make
# check-rdma` runs it on Soft-RoCE inside a qemu guest.
check_PROGRAMS += tests/check_ib
tests_check_ib_SOURCES = tests/check_ib.c tests/tp_harness.h
tests_check_ib_CFLAGS = $(TEST_CFLAGS)
tests_check_ib_LDADD = $(TEST_LDADD)
TESTS += tests/check_ib

check_PROGRAMS += tests/check_ib_host
tests_check_ib_host_SOURCES = tests/check_ib_host.c
tests_check_ib_host_CFLAGS = $(TEST_CFLAGS)
tests_check_ib_host_LDADD = $(TEST_LDADD)
TESTS += tests/check_ib_host
