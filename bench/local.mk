# bench/local.mk -- hoop-bench and the peer comparison scripts.

# Training throughput (issue 4): OpenBLAS's sgemm rate at the MLP's shapes, and the
# script that runs hoop-train's benchmark mode beside PyTorch. Built, never run by check.
noinst_PROGRAMS += bench/sgemm_rate
bench_sgemm_rate_SOURCES = bench/sgemm_rate.c
bench_sgemm_rate_LDADD = libhoopcore.la $(HOOP_DEP_LIBS)
EXTRA_DIST += bench/train_throughput.sh bench/torch_mlp.py bench/torch_ddp.py \
	bench/ddp_scaling.sh bench/ddp_netns.sh
