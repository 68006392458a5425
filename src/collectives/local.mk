# src/collectives/local.mk -- sources and tests of the collectives layer (included by Makefile.am).
