# Benchmark helpers, built with the project's compiler, flags and BLAS:
#   make -f Makefile -f bench/bench.mk build/bench/gemm_rate
build/bench/gemm_rate: bench/gemm_rate.c build/libmeshtrain.a
	@mkdir -p build/bench
	@echo "CC $<"
	@$(CC) $(CFLAGS) -o $@ $< build/libmeshtrain.a $(LDFLAGS) $(LDLIBS)

build/bench/model_profile: bench/model_profile.c build/libmeshtrain.a
	@mkdir -p build/bench
	@echo "CC $<"
	@$(CC) $(CFLAGS) -o $@ $< build/libmeshtrain.a $(LDFLAGS) $(LDLIBS)
