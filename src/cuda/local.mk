# src/cuda/local.mk -- device memory, streams, kernels (built by nvcc when CUDA is found).
if HAVE_CUDA
libhoopcore_la_SOURCES += %reldir%/device.cu
endif
EXTRA_DIST += %reldir%/device.cu
noinst_HEADERS += %reldir%/device.h
