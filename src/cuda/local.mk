# SPDX-License-Identifier: BSD-3-Clause
# src/cuda/local.mk -- the CUDA backend: device memory, streams, kernels (built by nvcc
# when CUDA is found) as the module libhoop-cuda.so, which libhoop loads on first use
# (src/autograd/kern.c), and its build on the host execution layer for the tests.
EXTRA_DIST += tests/gpu/run.sh tests/gpu/pack.sh tests/cuda_no_fma.sh
# nvcc objects have no automatic dependency tracking: rebuild them when any header changes.
CUDA_HEADER_DEPS = $(noinst_HEADERS) $(hoopinclude_HEADERS)

# The public API with the CUDA backend at the path HOOP_CUDA_BACKEND names (the real one
# on a GPU machine: tests/gpu/run.sh; skips without one).
check_PROGRAMS += tests/check_cuda
tests_check_cuda_SOURCES = tests/check_cuda.c
tests_check_cuda_CFLAGS = $(AM_CFLAGS)
tests_check_cuda_LDADD = libhoopcore.la $(HOOP_DEP_LIBS)
TESTS += tests/check_cuda

# The host execution layer (issue 12): kernel sources compiled a second time, by the host's
# C++ compiler, run their kernels on the CPU in make check (the build machines have no GPU).
noinst_HEADERS += %reldir%/hx.h %reldir%/hx_int.h %reldir%/hx_blas.h %reldir%/kern_rt.h %reldir%/kern_blas.h
# libhoophx: the layer; libhoopcudahx: the CUDA backend (src/cuda/ctx.cu, kern_cuda.cu,
# ops/*.cu) built on it, for the tests that run the CUDA table on the host (built by
# make check only, as the tests are).
check_LTLIBRARIES = libhoophx.la libhoopcudahx.la
libhoophx_la_SOURCES = %reldir%/hx.cc %reldir%/hx_fiber.cc %reldir%/hx_stream.cc %reldir%/hx_ipc.cc \
	%reldir%/hx_graph.cc %reldir%/hx_blas.cc
libhoophx_la_CPPFLAGS = $(AM_CPPFLAGS)
libhoopcudahx_la_SOURCES = %reldir%/hx_backend.cc
libhoopcudahx_la_LIBADD = libhoophx.la
CUDA_BACKEND_FILES = %reldir%/ctx.cu %reldir%/alloc.cu %reldir%/kern_cuda.cu \
	%reldir%/ops/bias.cu %reldir%/ops/elementwise.cu %reldir%/ops/gemm.cu
CUDA_BACKEND_FILES += %reldir%/ops/optim.cu %reldir%/ops/im2col.cu %reldir%/ops/pool.cu
CUDA_BACKEND_FILES += %reldir%/ops/unary.cu %reldir%/ops/softmax.cu %reldir%/ops/reduce.cu
CUDA_BACKEND_FILES += %reldir%/ops/dropout.cu %reldir%/graph.cu %reldir%/coll_reduce.cu \
	%reldir%/coll_memops.cu %reldir%/coll_direct.cu
noinst_HEADERS += %reldir%/ctx.h %reldir%/alloc.h %reldir%/ops/ops.h %reldir%/coll.h
EXTRA_DIST += $(CUDA_BACKEND_FILES)
%reldir%/hx_backend.lo: $(CUDA_BACKEND_FILES)
# The same backend as a loadable module on the host layer (the tests point
# HOOP_CUDA_BACKEND at .libs/libhoop-cuda-hx.so); -rpath makes libtool build it shared.
check_LTLIBRARIES += libhoop-cuda-hx.la
libhoop_cuda_hx_la_SOURCES = %reldir%/hx_module.cc %reldir%/hx.cc %reldir%/hx_fiber.cc \
	%reldir%/hx_stream.cc %reldir%/hx_ipc.cc %reldir%/hx_graph.cc \
	%reldir%/hx_blas.cc
libhoop_cuda_hx_la_CXXFLAGS = $(AM_CXXFLAGS) -fvisibility=hidden
libhoop_cuda_hx_la_LDFLAGS = -module -avoid-version -shared -rpath $(abs_builddir) $(AM_LDFLAGS) \
	$(MODULE_NO_UNDEFINED)
libhoop_cuda_hx_la_LIBADD = $(BLAS_LIBS) -lm
EXTRA_DIST += %reldir%/module.cu
check_PROGRAMS += tests/check_hx
tests_check_hx_SOURCES = tests/check_hx.c tests/hx_kernels_host.cc tests/hx_graph_host.cc
tests_check_hx_CFLAGS = $(TEST_CFLAGS) -DHOOP_HX_HOST_TESTS=1
tests_check_hx_LDADD = libhoophx.la $(TEST_LDADD)
TESTS += tests/check_hx
# The kernel-table tests (the CUDA table on the host layer against the CPU table); the
# nodist dummy.cc makes automake link them with the C++ driver.
KERN_CUDA_TESTS = tests/check_kern_cuda tests/check_kern_cuda_a tests/check_kern_cuda_b
KERN_CUDA_TESTS += tests/check_cuda_ctx tests/check_cuda_coll
check_PROGRAMS += $(KERN_CUDA_TESTS)
TESTS += $(KERN_CUDA_TESTS)
KERN_CUDA_HX_LDADD = libhoopcudahx.la $(TEST_LDADD)
tests_check_kern_cuda_SOURCES = tests/check_kern_cuda.c tests/kern_cuda_harness.h
nodist_EXTRA_tests_check_kern_cuda_SOURCES = dummy.cc
tests_check_kern_cuda_CFLAGS = $(TEST_CFLAGS)
tests_check_kern_cuda_LDADD = $(KERN_CUDA_HX_LDADD)
tests_check_kern_cuda_a_SOURCES = tests/check_kern_cuda_a.c tests/kern_cuda_harness.h
nodist_EXTRA_tests_check_kern_cuda_a_SOURCES = dummy.cc
tests_check_kern_cuda_a_CFLAGS = $(TEST_CFLAGS)
tests_check_kern_cuda_a_LDADD = $(KERN_CUDA_HX_LDADD)
tests_check_kern_cuda_b_SOURCES = tests/check_kern_cuda_b.c tests/kern_cuda_harness.h
nodist_EXTRA_tests_check_kern_cuda_b_SOURCES = dummy.cc
tests_check_kern_cuda_b_CFLAGS = $(TEST_CFLAGS)
tests_check_kern_cuda_b_LDADD = $(KERN_CUDA_HX_LDADD)
tests_check_cuda_ctx_SOURCES = tests/check_cuda_ctx.c
nodist_EXTRA_tests_check_cuda_ctx_SOURCES = dummy.cc
tests_check_cuda_ctx_CFLAGS = $(TEST_CFLAGS)
tests_check_cuda_ctx_LDADD = $(KERN_CUDA_HX_LDADD)
tests_check_cuda_coll_SOURCES = tests/check_cuda_coll.c
nodist_EXTRA_tests_check_cuda_coll_SOURCES = dummy.cc
tests_check_cuda_coll_CFLAGS = $(TEST_CFLAGS)
tests_check_cuda_coll_LDADD = $(KERN_CUDA_HX_LDADD)
EXTRA_DIST += tests/hx_kernels.cu
if HAVE_CUDA
# The CUDA backend built by nvcc: the installed module, which alone links CUDA's
# libraries.
pkglib_LTLIBRARIES = libhoop-cuda.la
libhoop_cuda_la_SOURCES = $(CUDA_BACKEND_FILES) %reldir%/module.cu
libhoop_cuda_la_LDFLAGS = -module -avoid-version -shared $(AM_LDFLAGS) $(MODULE_NO_UNDEFINED)
libhoop_cuda_la_LIBADD = $(CUDA_LIBS) -lcublas
%reldir%/module.lo: $(CUDA_HEADER_DEPS)
# The same objects linked statically, and the kernel-table tests against them: they skip
# (77) without a GPU; tests/gpu/run.sh runs them where one is lent.
check_LTLIBRARIES += libhoopcudagpu.la
libhoopcudagpu_la_SOURCES = $(CUDA_BACKEND_FILES)
$(CUDA_BACKEND_FILES:.cu=.lo): $(CUDA_HEADER_DEPS)
KERN_CUDA_GPU_LDADD = libhoopcudagpu.la $(TEST_LDADD) $(CUDA_LIBS) -lcublas
check_PROGRAMS += $(KERN_CUDA_TESTS:=_gpu)
tests_check_kern_cuda_gpu_SOURCES = tests/check_kern_cuda.c tests/kern_cuda_harness.h
tests_check_kern_cuda_gpu_CFLAGS = $(TEST_CFLAGS) -DHOOP_KERN_CUDA_GPU=1
tests_check_kern_cuda_gpu_LDADD = $(KERN_CUDA_GPU_LDADD)
tests_check_kern_cuda_a_gpu_SOURCES = tests/check_kern_cuda_a.c tests/kern_cuda_harness.h
tests_check_kern_cuda_a_gpu_CFLAGS = $(TEST_CFLAGS) -DHOOP_KERN_CUDA_GPU=1
tests_check_kern_cuda_a_gpu_LDADD = $(KERN_CUDA_GPU_LDADD)
tests_check_kern_cuda_b_gpu_SOURCES = tests/check_kern_cuda_b.c tests/kern_cuda_harness.h
tests_check_kern_cuda_b_gpu_CFLAGS = $(TEST_CFLAGS) -DHOOP_KERN_CUDA_GPU=1
tests_check_kern_cuda_b_gpu_LDADD = $(KERN_CUDA_GPU_LDADD)
tests_check_cuda_ctx_gpu_SOURCES = tests/check_cuda_ctx.c
tests_check_cuda_ctx_gpu_CFLAGS = $(TEST_CFLAGS) -DHOOP_KERN_CUDA_GPU=1
tests_check_cuda_ctx_gpu_LDADD = $(KERN_CUDA_GPU_LDADD)
tests_check_cuda_coll_gpu_SOURCES = tests/check_cuda_coll.c
tests_check_cuda_coll_gpu_CFLAGS = $(TEST_CFLAGS) -DHOOP_KERN_CUDA_GPU=1
tests_check_cuda_coll_gpu_LDADD = $(KERN_CUDA_GPU_LDADD)
TESTS += $(KERN_CUDA_TESTS:=_gpu)
# The same hx test with its kernels built by nvcc.
check_PROGRAMS += tests/check_hx_gpu
tests_check_hx_gpu_SOURCES = tests/check_hx.c
tests_check_hx_gpu_CFLAGS = $(TEST_CFLAGS)
tests_check_hx_gpu_LDADD = tests/hx_kernels.lo $(TEST_LDADD) $(CUDA_LIBS) -lcublas
TESTS += tests/check_hx_gpu
# The kernels that must match the CPU bit for bit hold no FMA nvcc contracted (no GPU needed).
TESTS += tests/cuda_no_fma.sh
tests/hx_kernels.lo: $(CUDA_HEADER_DEPS)
CLEANFILES += tests/hx_kernels.lo tests/hx_kernels.o tests/.libs/hx_kernels.o
endif

# Whole models on CUDA tensors against the CPU engine, through the loaded backend (the
# host-layer module here, the real one under tests/gpu/run.sh); needs the module built.
check_PROGRAMS += tests/check_cuda_train
tests_check_cuda_train_SOURCES = tests/check_cuda_train.c
tests_check_cuda_train_CFLAGS = $(TEST_CFLAGS)
tests_check_cuda_train_LDADD = $(TEST_LDADD)
TESTS += tests/check_cuda_train
