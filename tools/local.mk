# tools/local.mk -- hooprun and hoop-train.
