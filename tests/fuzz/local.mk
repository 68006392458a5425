# SPDX-License-Identifier: BSD-3-Clause
# tests/fuzz/local.mk -- the fuzz targets (issue 14). Each tests/fuzz/fuzz_NAME.c defines
# LLVMFuzzerTestOneInput for one parser of outside bytes and is built twice: always as
# tests/fuzz/replay_NAME, a check program with replay.c's main that runs the target
# over tests/fuzz/corpus/NAME (the seeds, and every input a fuzzing run crashed on), and
# under configure --enable-fuzz (clang) as tests/fuzz/fuzz_NAME with libFuzzer's main,
# which scripts/fuzz.sh runs for a bounded time (.ci/run: 30 s each).
FUZZ_LIBS = libhoopcore.la $(HOOP_DEP_LIBS)
EXTRA_DIST += tests/fuzz/corpus tests/fuzz/fuzz.h tests/fuzz/make_corpus.py tests/fuzz/usage.sh
TESTS += tests/fuzz/usage.sh

check_PROGRAMS += tests/fuzz/replay_hostlist tests/fuzz/replay_settings tests/fuzz/replay_idx \
	tests/fuzz/replay_checkpoint tests/fuzz/replay_store tests/fuzz/replay_tcp \
	tests/fuzz/replay_shm tests/fuzz/replay_ib tests/fuzz/replay_header
TESTS += tests/fuzz/replay_hostlist tests/fuzz/replay_settings tests/fuzz/replay_idx \
	tests/fuzz/replay_checkpoint tests/fuzz/replay_store tests/fuzz/replay_tcp \
	tests/fuzz/replay_shm tests/fuzz/replay_ib tests/fuzz/replay_header
tests_fuzz_replay_hostlist_SOURCES = tests/fuzz/fuzz_hostlist.c tests/fuzz/replay.c
tests_fuzz_replay_hostlist_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_NAME='"hostlist"'
tests_fuzz_replay_hostlist_LDADD = $(FUZZ_LIBS)
tests_fuzz_replay_settings_SOURCES = tests/fuzz/fuzz_settings.c tests/fuzz/replay.c
tests_fuzz_replay_settings_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_NAME='"settings"'
tests_fuzz_replay_settings_LDADD = $(FUZZ_LIBS)
tests_fuzz_replay_idx_SOURCES = tests/fuzz/fuzz_idx.c tests/fuzz/replay.c
tests_fuzz_replay_idx_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_NAME='"idx"'
tests_fuzz_replay_idx_LDADD = $(FUZZ_LIBS)
tests_fuzz_replay_checkpoint_SOURCES = tests/fuzz/fuzz_checkpoint.c tests/fuzz/replay.c
tests_fuzz_replay_checkpoint_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_NAME='"checkpoint"'
tests_fuzz_replay_checkpoint_LDADD = $(FUZZ_LIBS)
tests_fuzz_replay_store_SOURCES = tests/fuzz/fuzz_store.c tests/fuzz/replay.c
tests_fuzz_replay_store_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_NAME='"store"'
tests_fuzz_replay_store_LDADD = $(FUZZ_LIBS)
tests_fuzz_replay_tcp_SOURCES = tests/fuzz/fuzz_tcp.c tests/fuzz/replay.c
tests_fuzz_replay_tcp_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_NAME='"tcp"'
tests_fuzz_replay_tcp_LDADD = $(FUZZ_LIBS)
tests_fuzz_replay_shm_SOURCES = tests/fuzz/fuzz_shm.c tests/fuzz/replay.c
tests_fuzz_replay_shm_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_NAME='"shm"'
tests_fuzz_replay_shm_LDADD = $(FUZZ_LIBS)
tests_fuzz_replay_ib_SOURCES = tests/fuzz/fuzz_ib.c tests/fuzz/replay.c
tests_fuzz_replay_ib_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_NAME='"ib"'
tests_fuzz_replay_ib_LDADD = $(FUZZ_LIBS)
tests_fuzz_replay_header_SOURCES = tests/fuzz/fuzz_header.c tests/fuzz/replay.c
tests_fuzz_replay_header_CPPFLAGS = $(AM_CPPFLAGS) -DFUZZ_NAME='"header"'
tests_fuzz_replay_header_LDADD = $(FUZZ_LIBS)

if HOOP_FUZZ
noinst_PROGRAMS += tests/fuzz/fuzz_hostlist tests/fuzz/fuzz_settings tests/fuzz/fuzz_idx \
	tests/fuzz/fuzz_checkpoint tests/fuzz/fuzz_store tests/fuzz/fuzz_tcp tests/fuzz/fuzz_shm \
	tests/fuzz/fuzz_ib tests/fuzz/fuzz_header
tests_fuzz_fuzz_hostlist_SOURCES = tests/fuzz/fuzz_hostlist.c
tests_fuzz_fuzz_hostlist_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_hostlist_LDADD = $(FUZZ_LIBS)
tests_fuzz_fuzz_settings_SOURCES = tests/fuzz/fuzz_settings.c
tests_fuzz_fuzz_settings_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_settings_LDADD = $(FUZZ_LIBS)
tests_fuzz_fuzz_idx_SOURCES = tests/fuzz/fuzz_idx.c
tests_fuzz_fuzz_idx_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_idx_LDADD = $(FUZZ_LIBS)
tests_fuzz_fuzz_checkpoint_SOURCES = tests/fuzz/fuzz_checkpoint.c
tests_fuzz_fuzz_checkpoint_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_checkpoint_LDADD = $(FUZZ_LIBS)
tests_fuzz_fuzz_store_SOURCES = tests/fuzz/fuzz_store.c
tests_fuzz_fuzz_store_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_store_LDADD = $(FUZZ_LIBS)
tests_fuzz_fuzz_tcp_SOURCES = tests/fuzz/fuzz_tcp.c
tests_fuzz_fuzz_tcp_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_tcp_LDADD = $(FUZZ_LIBS)
tests_fuzz_fuzz_shm_SOURCES = tests/fuzz/fuzz_shm.c
tests_fuzz_fuzz_shm_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_shm_LDADD = $(FUZZ_LIBS)
tests_fuzz_fuzz_ib_SOURCES = tests/fuzz/fuzz_ib.c
tests_fuzz_fuzz_ib_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_ib_LDADD = $(FUZZ_LIBS)
tests_fuzz_fuzz_header_SOURCES = tests/fuzz/fuzz_header.c
tests_fuzz_fuzz_header_LDFLAGS = -fsanitize=fuzzer
tests_fuzz_fuzz_header_LDADD = $(FUZZ_LIBS)
endif
