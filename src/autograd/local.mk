# src/autograd/local.mk -- sources and tests of the autograd layer (included by Makefile.am).
hoopinclude_HEADERS += \
	include/hoop/tensor.h \
	include/hoop/autograd.h \
	include/hoop/nn.h \
	include/hoop/optim.h
