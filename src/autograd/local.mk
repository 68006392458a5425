# src/autograd/local.mk -- sources and tests of the autograd layer (included by Makefile.am).
