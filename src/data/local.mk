# src/data/local.mk -- sources and tests of the data layer (included by Makefile.am).
