# tools/local.mk -- hooprun and hoop-train.

# hoop-train: the training job (issue 4; DDP arrives with issue 5).
bin_PROGRAMS += tools/hoop-train
tools_hoop_train_SOURCES = tools/hoop-train.c tools/train_cli.c tools/train_cli.h
tools_hoop_train_LDADD = libhoopcore.la $(HOOP_DEP_LIBS)
TESTS += tests/hoop_train.sh
EXTRA_DIST += tests/hoop_train.sh
