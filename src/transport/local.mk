# src/transport/local.mk -- sources and tests of the transport layer (included by Makefile.am).
