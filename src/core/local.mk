# SPDX-License-Identifier: BSD-3-Clause
# src/core/local.mk -- status, logging, env, clocks (included by Makefile.am).
libhoopcore_la_SOURCES += \
	%reldir%/status.c \
	%reldir%/atomic_file.c \
	%reldir%/log.c \
	%reldir%/backend.c \
	%reldir%/env.c \
	%reldir%/fault.c \
	%reldir%/fdlimit.c \
	%reldir%/memroom.c \
	%reldir%/resolve.c \
	%reldir%/stop.c \
	%reldir%/version.c
noinst_HEADERS += \
	%reldir%/atomic_file.h \
	%reldir%/backend.h \
	%reldir%/check.h \
	%reldir%/log.h \
	%reldir%/env.h \
	%reldir%/fault.h \
	%reldir%/fdlimit.h \
	%reldir%/memroom.h \
	%reldir%/resolve.h \
	%reldir%/stop.h \
	%reldir%/clock.h \
	%reldir%/rng.h
hoopinclude_HEADERS += \
	include/hoop/export.h \
	include/hoop/hoop.h \
	include/hoop/status.h \
	include/hoop/log.h \
	include/hoop/store.h

# hoop_version() against the generated header and configure's version.
check_PROGRAMS += tests/check_version
tests_check_version_SOURCES = tests/check_version.c
tests_check_version_CFLAGS = $(TEST_CFLAGS)
tests_check_version_LDADD = libhoop.la $(CHECK_LIBS)
TESTS += tests/check_version
# What the log does when it starts: HOOP_DEBUG=VERSION, the version line, timestamps.
check_PROGRAMS += tests/check_philox
tests_check_philox_SOURCES = tests/check_philox.c
tests_check_philox_CFLAGS = $(TEST_CFLAGS)
tests_check_philox_LDADD = $(TEST_LDADD)
TESTS += tests/check_philox
noinst_HEADERS += %reldir%/philox.h

check_PROGRAMS += tests/check_log
tests_check_log_SOURCES = tests/check_log.c
tests_check_log_CFLAGS = $(TEST_CFLAGS)
tests_check_log_LDADD = $(TEST_LDADD)
TESTS += tests/check_log

check_PROGRAMS += tests/check_status tests/check_env
tests_check_status_SOURCES = tests/check_status.c
tests_check_status_CFLAGS = $(TEST_CFLAGS)
tests_check_status_LDADD = $(TEST_LDADD)
tests_check_env_SOURCES = tests/check_env.c
tests_check_env_CFLAGS = $(TEST_CFLAGS)
tests_check_env_LDADD = $(TEST_LDADD)
TESTS += tests/check_status tests/check_env

# Links the installed-style shared library, not the convenience library.
check_PROGRAMS += tests/check_public
tests_check_public_SOURCES = tests/check_public.c
tests_check_public_CFLAGS = $(TEST_CFLAGS)
tests_check_public_LDADD = libhoop.la $(CHECK_LIBS) -ldl
TESTS += tests/check_public

# Every public function with NULL and out-of-range arguments, also through the shared library.
check_PROGRAMS += tests/check_api_args
tests_check_api_args_SOURCES = tests/check_api_args.c
tests_check_api_args_CFLAGS = $(TEST_CFLAGS)
tests_check_api_args_LDADD = libhoop.la $(CHECK_LIBS) -ldl -lm
TESTS += tests/check_api_args

# Launcher support (hooprun): Slurm node-list expansion and rank arithmetic.
libhoopcore_la_SOURCES += %reldir%/hostlist.c %reldir%/launch.c
noinst_HEADERS += %reldir%/hostlist.h %reldir%/launch.h
check_PROGRAMS += tests/check_hostlist
tests_check_hostlist_SOURCES = tests/check_hostlist.c
tests_check_hostlist_CFLAGS = $(TEST_CFLAGS)
tests_check_hostlist_LDADD = $(TEST_LDADD)
TESTS += tests/check_hostlist

# Rules of the tree itself: SPDX lines, no thread-unsafe libc calls.
dist_noinst_SCRIPTS += tests/source_lint.sh
TESTS += tests/source_lint.sh
