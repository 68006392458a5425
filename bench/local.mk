# bench/local.mk -- hoop-bench and the peer comparison scripts.
