# SPDX-License-Identifier: BSD-3-Clause
# tools/local.mk -- hooprun and hoop-train.

# hooprun: the launcher (options and restarts in hooprun.c, the supervisor in hooprun_proc.c,
# output relay in hooprun_out.c, the failure summary in hooprun_report.c, the nodes'
# rendezvous for restarts in hooprun_agent.c, the guard of the workers' groups in
# hooprun_guard.c).
bin_PROGRAMS += tools/hooprun
tools_hooprun_SOURCES = tools/hooprun.c tools/hooprun_proc.c tools/hooprun_bind.c \
	tools/hooprun_out.c tools/hooprun_report.c tools/hooprun_agent.c tools/hooprun_guard.c \
	tools/hooprun.h
tools_hooprun_LDADD = libhoopcore.la $(HOOP_DEP_LIBS)

# Launcher tests: shell scripts driving hooprun with small shell workers.
TESTS += tests/launcher_fail.sh tests/launcher_env.sh tests/launcher_cli.sh \
	tests/launcher_torchrun.sh tests/launcher_nodes.sh
EXTRA_DIST += tests/launcher_fail.sh tests/launcher_env.sh tests/launcher_cli.sh \
	tests/launcher_torchrun.sh tests/launcher_nodes.sh tests/launcher_lib.sh

# hoop-smoke: a rendezvous smoke test (barrier, add, all-gather through the store) under hooprun.
bin_PROGRAMS += tools/hoop-smoke
tools_hoop_smoke_SOURCES = tools/hoop-smoke.c
tools_hoop_smoke_LDADD = libhoopcore.la $(HOOP_DEP_LIBS)
TESTS += tests/launcher_smoke.sh
EXTRA_DIST += tests/launcher_smoke.sh
# A job over IPv6 (::1, link-local, an IPv6-only host name): hooprun, hoop-bench, tcp.
TESTS += tests/launcher_ipv6.sh
EXTRA_DIST += tests/launcher_ipv6.sh

# hoop-train: the main job (DDP training under hooprun, or one process); tools/train.h
# says which file holds what.
bin_PROGRAMS += tools/hoop-train
tools_hoop_train_SOURCES = tools/hoop-train.c tools/train.h tools/train_setup.c \
	tools/train_data.c tools/train_step.c tools/train_eval.c tools/train_report.c \
	tools/train_ckpt.c tools/train_cli.c tools/train_cli.h tools/train_dist.c tools/train_dist.h
tools_hoop_train_LDADD = libhoopcore.la $(HOOP_DEP_LIBS)
TESTS += tests/hoop_train.sh
EXTRA_DIST += tests/hoop_train.sh
# hooprun with hoop-train: the first failure of a bad --resume, the progress bar.
TESTS += tests/launcher_train.sh
EXTRA_DIST += tests/launcher_train.sh
TESTS += tests/ddp_train.sh
EXTRA_DIST += tests/ddp_train.sh tests/train_lib.sh

# hoop-plot: loss/accuracy curves from --metrics files, busbw against size from
# hoop-bench or nccl-tests JSON (python3 with Debian's python3-matplotlib).
# Made from tools/hoop-plot.in at build time, with the package's version in it.
bin_SCRIPTS = tools/hoop-plot
EXTRA_DIST += tools/hoop-plot.in
CLEANFILES += tools/hoop-plot
tools/hoop-plot: tools/hoop-plot.in Makefile
	$(AM_V_GEN)$(MKDIR_P) tools && \
	sed -e 's|@PACKAGE_VERSION[@]|$(PACKAGE_VERSION)|g' $(srcdir)/tools/hoop-plot.in > $@.tmp && \
	chmod +x $@.tmp && mv $@.tmp $@
TESTS += tests/hoop_plot.sh
EXTRA_DIST += tests/hoop_plot.sh
