# src/bootstrap/local.mk -- sources and tests of the bootstrap layer (included by Makefile.am).
