# SPDX-License-Identifier: BSD-3-Clause
# tests/faults/local.mk -- issue 14's fault-injection matrix (included by Makefile.am).
# matrix.sh kills, stops or cuts off one rank of 4 at a chosen moment (the
# HOOP_TEST_FAULT hook, src/core/fault.c, or ip link) over shm, loopback TCP and TCP
# between network namespaces, and checks what the others and hooprun do and what is
# left behind; fault_worker is one rank of a cell. The ib cells run in the Soft-RoCE
# guest (tests/rdma/suite.sh, step faults).
check_PROGRAMS += tests/faults/fault_worker
tests_faults_fault_worker_SOURCES = tests/faults/fault_worker.c
tests_faults_fault_worker_LDADD = $(TEST_LDADD)
TESTS += tests/faults/matrix.sh
EXTRA_DIST += tests/faults/matrix.sh tests/faults/cells.sh
TESTS += tests/faults/usage.sh
EXTRA_DIST += tests/faults/usage.sh
TESTS += tests/faults/interrupt.sh
EXTRA_DIST += tests/faults/interrupt.sh
