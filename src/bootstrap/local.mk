# SPDX-License-Identifier: BSD-3-Clause
# src/bootstrap/local.mk -- sources and tests of the bootstrap layer (included by Makefile.am).
# The rendezvous store: wire format and shared helpers, key table, server, client, and
# barrier / all-gather / env:// start-up on top of the client.
libhoopcore_la_SOURCES += \
	%reldir%/store_proto.c \
	%reldir%/store_table.c \
	%reldir%/store_server.c \
	%reldir%/store_client.c \
	%reldir%/store_sync.c
noinst_HEADERS += \
	%reldir%/store_proto.h \
	%reldir%/store_table.h

check_PROGRAMS += tests/check_store
tests_check_store_SOURCES = tests/check_store.c
tests_check_store_CFLAGS = $(TEST_CFLAGS)
tests_check_store_LDADD = $(TEST_LDADD)
TESTS += tests/check_store
