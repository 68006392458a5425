# SPDX-License-Identifier: BSD-3-Clause
# tests/rdma/local.mk -- hoop over real verbs: Soft-RoCE (rdma_rxe) in a qemu guest made
# of Debian packages (tests/rdma/vm.sh). Not part of `make check`:
#   make check-rdma    tests/rdma/suite.sh in the guest (RDMA_STEPS=smoke, or step names,
#                      to run a part); a guest that cannot run here skips with one line
#                      (HOOP_RDMA_REQUIRE=1 makes that a failure)
#   make bench-rdma    bench/rdma_bench.sh in the guest: perftest against hoop-bench
EXTRA_DIST += tests/rdma/vm.sh tests/rdma/suite.sh tests/rdma/guest-init.sh \
	tests/rdma/initramfs-init tests/rdma/rank_hca.sh bench/rdma_bench.sh
CLEANFILES += tests/rdma-logs/*.log bench/rdma-logs/*
# The guest's hard limit, boot included: above the sum of the steps' own timeouts, so a
# hung step is reported by the suite, not by the guest being killed.
RDMA_TIMEOUT = 1550
RDMA_STEPS =
RDMA_VM = bash $(top_srcdir)/tests/rdma/vm.sh
rdma_skip = if test $$rc -eq 77 && test -z "$$HOOP_RDMA_REQUIRE"; then \
	echo "$@: skipped: the guest cannot run here (the line above says why)"; rc=0; fi; exit $$rc
check-rdma: all $(check_PROGRAMS)
	@rc=0; $(RDMA_VM) --timeout $(RDMA_TIMEOUT) -- \
	  bash $(abs_top_srcdir)/tests/rdma/suite.sh $(RDMA_STEPS) || rc=$$?; $(rdma_skip)
bench-rdma: all
	@rc=0; $(RDMA_VM) --timeout 900 -- bash $(abs_top_srcdir)/bench/rdma_bench.sh || rc=$$?; \
	$(rdma_skip)
.PHONY: check-rdma bench-rdma
