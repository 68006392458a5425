# SPDX-License-Identifier: BSD-3-Clause
# bench/local.mk -- hoop-bench and the peer comparison scripts.

# Training throughput (issue 4): OpenBLAS's sgemm rate at the MLP's shapes, and the
# script that runs hoop-train's benchmark mode beside PyTorch. Built, never run by check.
noinst_PROGRAMS += bench/sgemm_rate
bench_sgemm_rate_SOURCES = bench/sgemm_rate.c
bench_sgemm_rate_LDADD = libhoopcore.la $(HOOP_DEP_LIBS)
EXTRA_DIST += bench/train_throughput.sh bench/torch_mlp.py bench/torch_ddp.py bench/soak.sh \
	bench/ddp_scaling.sh bench/ddp_netns.sh

# The peers of bench/compare.sh (issue 10): the link-rate tool is built here; the Open MPI
# benchmark is built by compare.sh with mpicc when Open MPI is installed; Gloo's is Python.
noinst_PROGRAMS += bench/peers/tcpbw
bench_peers_tcpbw_SOURCES = bench/peers/tcpbw.c
EXTRA_DIST += bench/peers/mpi_allreduce.c bench/peers/gloo_allreduce.py bench/peers/netns_ring.sh \
	tests/bench_peers.sh
TESTS += tests/bench_peers.sh

# hoop-bench (issue 3): nccl-tests-style sweeps of every collective, run under hooprun.
bin_PROGRAMS += bench/hoop-bench
bench_hoop_bench_SOURCES = bench/hoop-bench.c bench/bench_data.c bench/bench.h \
	bench/bench_opts.c bench/bench_report.c bench/bench_cli.h
bench_hoop_bench_LDADD = libhoopcore.la $(HOOP_DEP_LIBS)
TESTS += tests/hoop_bench.sh tests/hoop_bench_nccl.sh
EXTRA_DIST += tests/hoop_bench.sh tests/hoop_bench_nccl.sh tests/nccl_tests_parse.sh \
	tests/ref/nccl_tests_all_reduce.txt tests/ref/nccl_tests_all_reduce.json \
	bench/compare.sh bench/compare_table.py bench/RESULTS.md
check_PROGRAMS += tests/check_bench
tests_check_bench_SOURCES = tests/check_bench.c bench/bench_data.c bench/bench.h \
	bench/bench_opts.c bench/bench_report.c bench/bench_cli.h
tests_check_bench_CFLAGS = $(TEST_CFLAGS)
tests_check_bench_LDADD = $(TEST_LDADD)
TESTS += tests/check_bench

# A transport's own ping-pong below the collectives (issue 11: against ib_write_lat).
noinst_PROGRAMS += bench/tp_pingpong
bench_tp_pingpong_SOURCES = bench/tp_pingpong.c
bench_tp_pingpong_LDADD = libhoopcore.la $(HOOP_DEP_LIBS)

# The GPU's ceilings beside hoop's GPU benchmarks (tests/gpu/run.sh runs it where a GPU is
# lent): copies, launch and graph overheads, the SGD kernel against the copy rate. Built by
# make check with the other GPU programs (it links the check-only CUDA backend).
EXTRA_DIST += bench/gpu_ceilings.cu bench/torch_gpu.py bench/gpu_train.sh
if HAVE_CUDA
check_PROGRAMS += bench/gpu_ceilings
bench_gpu_ceilings_SOURCES =
nodist_EXTRA_bench_gpu_ceilings_SOURCES = dummy.cc
bench_gpu_ceilings_LDADD = bench/gpu_ceilings.lo libhoopcudagpu.la $(TEST_LDADD) $(CUDA_LIBS) \
	-lcublas
bench/gpu_ceilings.lo: $(CUDA_HEADER_DEPS)
CLEANFILES += bench/gpu_ceilings.lo bench/gpu_ceilings.o bench/.libs/gpu_ceilings.o
endif
