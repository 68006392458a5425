# src/ddp/local.mk -- sources and tests of the ddp layer (included by Makefile.am).
