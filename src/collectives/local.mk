# SPDX-License-Identifier: BSD-3-Clause
# src/collectives/local.mk -- sources and tests of the collectives layer (included by Makefile.am).
libhoopcore_la_SOURCES += \
	%reldir%/algo.c \
	%reldir%/capture.c \
	%reldir%/chain.c \
	%reldir%/claims.c \
	%reldir%/collectives.c \
	%reldir%/comm.c \
	%reldir%/devres.c \
	%reldir%/direct.c \
	%reldir%/exec.c \
	%reldir%/links.c \
	%reldir%/memops.c \
	%reldir%/progress.c \
	%reldir%/rd.c \
	%reldir%/reduce.c \
	%reldir%/rendezvous.c \
	%reldir%/rhd.c \
	%reldir%/ring.c \
	%reldir%/sched_check.c \
	%reldir%/shared.c \
	%reldir%/shared_cuda.c \
	%reldir%/stage.c \
	%reldir%/vote.c
noinst_HEADERS += \
	%reldir%/coll.h \
	%reldir%/comm.h \
	%reldir%/exec.h \
	%reldir%/links.h \
	%reldir%/memops.h \
	%reldir%/reduce_elem.h \
	%reldir%/rendezvous.h
hoopinclude_HEADERS += include/hoop/comm.h include/hoop/collectives.h

check_PROGRAMS += tests/check_collectives tests/check_ring tests/check_reduce tests/check_direct \
	tests/check_mismatch
tests_check_collectives_SOURCES = tests/check_collectives.c tests/coll_harness.h
tests_check_collectives_CFLAGS = $(TEST_CFLAGS)
tests_check_collectives_LDADD = $(TEST_LDADD)
tests_check_ring_SOURCES = tests/check_ring.c tests/coll_harness.h
tests_check_ring_CFLAGS = $(TEST_CFLAGS)
tests_check_ring_LDADD = $(TEST_LDADD)
tests_check_reduce_SOURCES = tests/check_reduce.c
tests_check_reduce_CFLAGS = $(TEST_CFLAGS)
tests_check_reduce_LDADD = $(TEST_LDADD)
tests_check_direct_SOURCES = tests/check_direct.c tests/coll_harness.h tests/direct_ref.h
tests_check_direct_CFLAGS = $(TEST_CFLAGS)
tests_check_direct_LDADD = $(TEST_LDADD)
tests_check_mismatch_SOURCES = tests/check_mismatch.c tests/coll_harness.h
tests_check_mismatch_CFLAGS = $(TEST_CFLAGS)
tests_check_mismatch_LDADD = $(TEST_LDADD)
TESTS += tests/check_collectives tests/check_ring tests/check_reduce tests/check_direct \
	tests/check_mismatch

# The soak (issue 14): thousands of random collectives on 4 ranks, checked exactly.
check_PROGRAMS += tests/check_soak
tests_check_soak_SOURCES = tests/check_soak.c tests/coll_harness.h
tests_check_soak_CFLAGS = $(TEST_CFLAGS)
tests_check_soak_LDADD = $(TEST_LDADD)
TESTS += tests/check_soak

check_PROGRAMS += tests/check_links
tests_check_links_SOURCES = tests/check_links.c
tests_check_links_CFLAGS = $(TEST_CFLAGS)
tests_check_links_LDADD = $(TEST_LDADD)
TESTS += tests/check_links

check_PROGRAMS += tests/check_exec
tests_check_exec_SOURCES = tests/check_exec.c
tests_check_exec_CFLAGS = $(TEST_CFLAGS)
tests_check_exec_LDADD = $(TEST_LDADD)
TESTS += tests/check_exec

TESTS += tests/mixed_links.sh
EXTRA_DIST += tests/mixed_links.sh
TESTS += tests/fd_limit.sh
EXTRA_DIST += tests/fd_limit.sh

# Collectives on GPU buffers, through the CUDA backend (the host execution layer's build
# here, the real one under tests/gpu/run.sh).
check_PROGRAMS += tests/check_coll_device
tests_check_coll_device_SOURCES = tests/check_coll_device.c tests/coll_harness.h
tests_check_coll_device_CFLAGS = $(TEST_CFLAGS)
tests_check_coll_device_LDADD = $(TEST_LDADD)
TESTS += tests/check_coll_device

# Staged sends and receives through the fixed pool of stage slots (HOOP_MEMOPS=staged).
check_PROGRAMS += tests/check_stage
tests_check_stage_SOURCES = tests/check_stage.c tests/coll_harness.h
tests_check_stage_CFLAGS = $(TEST_CFLAGS)
tests_check_stage_LDADD = $(TEST_LDADD)
TESTS += tests/check_stage

# Device memory the ranks of a node map (CUDA IPC) and the device direct algorithm.
check_PROGRAMS += tests/check_coll_ipc
tests_check_coll_ipc_SOURCES = tests/check_coll_ipc.c tests/coll_harness.h tests/direct_ref.h
tests_check_coll_ipc_CFLAGS = $(TEST_CFLAGS)
tests_check_coll_ipc_LDADD = $(TEST_LDADD)
TESTS += tests/check_coll_ipc

check_PROGRAMS += tests/check_coll_stream
tests_check_coll_stream_SOURCES = tests/check_coll_stream.c tests/coll_harness.h
tests_check_coll_stream_CFLAGS = $(TEST_CFLAGS)
tests_check_coll_stream_LDADD = $(TEST_LDADD)
TESTS += tests/check_coll_stream

# A buggy plug-in algorithm: the rd row's schedule function is the test's wrapper
# (GNU ld --wrap; the test links the static core library, whose algo.o refers to it).
check_PROGRAMS += tests/check_badsched
tests_check_badsched_SOURCES = tests/check_badsched.c tests/coll_harness.h
tests_check_badsched_CFLAGS = $(TEST_CFLAGS)
tests_check_badsched_LDFLAGS = -Wl,--wrap=hoop__allreduce_rd
tests_check_badsched_LDADD = $(TEST_LDADD)
TESTS += tests/check_badsched
