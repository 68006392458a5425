#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/rdma/rank_hca.sh PROGRAM ARGS... -- runs PROGRAM with HOOP_IB_HCA set from
# the worker's LOCAL_RANK: even ranks on $RDMA_DEV0 (rxe0), odd ranks on
# $RDMA_DEV1 (rxe1), so that neighbouring ranks talk across the veth pair.
# For hooprun (which sets LOCAL_RANK) inside the guest of tests/rdma/vm.sh.
: "${LOCAL_RANK:?rank_hca.sh: LOCAL_RANK is not set (start it under hooprun)}"
if [ $((LOCAL_RANK % 2)) = 0 ]; then
    HOOP_IB_HCA=${RDMA_DEV0:-rxe0}
else
    HOOP_IB_HCA=${RDMA_DEV1:-rxe1}
fi
export HOOP_IB_HCA
exec "$@"
