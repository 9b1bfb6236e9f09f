# meshtrain build. `make` builds build/libmeshtrain.a and build/meshtrain;
# `make test` builds and runs every test (see tests/run_all.sh); `make asan`
# builds everything with AddressSanitizer + UndefinedBehaviorSanitizer into
# build-asan/ and runs the unit tests and the short scripted tests there;
# `make fuzz FUZZ_S=N` runs every libFuzzer target of tests/fuzz/ N seconds.
# `make MPI=0` builds without MPI into build-nompi/: the plain C compiler, no
# libmpi, src/comm/local.c instead of src/comm/mpi.c (one process; what the
# GPU build uses on a machine without Open MPI).
MPI     ?= 1
ifeq ($(MPI),0)
BUILD   ?= build-nompi
CC      := cc
COMM_BACKEND_SKIP := src/comm/mpi.c
else
BUILD   ?= build
CC      := mpicc
COMM_BACKEND_SKIP := src/comm/local.c
endif
OPT     ?= -O2
CFLAGS  := -std=c11 $(OPT) -g -march=native -fopenmp -fno-math-errno \
           -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE -Isrc -Iinclude \
           -I/usr/include/x86_64-linux-gnu/openblas-openmp $(EXTRA_CFLAGS)
LDLIBS  := -L/usr/lib/x86_64-linux-gnu/openblas-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -ldnnl -lpcre2-8 -licuuc -lm
LDFLAGS := -fopenmp $(EXTRA_LDFLAGS)
# PLplot draws `meshtrain plot`, libyaml reads `train --config`: only the CLI links them
PLPLOT_CFLAGS := $(shell pkg-config --cflags plplot 2>/dev/null || echo -I/usr/include/plplot)
CLI_LDLIBS := -lplplot -lyaml

LIB_SRC := $(filter-out $(COMM_BACKEND_SKIP),$(shell find src -name '*.c' -not -path 'src/cli/*' | sort))
CLI_SRC := $(shell find src/cli -name '*.c' | sort)
TEST_SRC := $(wildcard tests/test_*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
HEADERS := $(shell find src include -name '*.h')
# each object depends on the headers it includes (-MMD -MP: build/obj/**/*.d), not on every header;
# an object without its .d (a build directory from before) is rebuilt
DEPFLAGS = -MMD -MP -MF $(@:%.o=%.d)
DEP_FILES = $(LIB_OBJ:%.o=%.d) $(CLI_OBJ:%.o=%.d) $(TEST_SRC:tests/%.c=$(BUILD)/obj/tests/%.d)

.PHONY: all test bench clean asan fuzz cuda print-cflags print-ldlibs
all: $(BUILD)/libmeshtrain.a $(BUILD)/meshtrain $(TEST_BIN)

$(BUILD)/obj/src/cli/cmd_plot.o: CFLAGS += $(PLPLOT_CFLAGS)
$(BUILD)/obj/%.o: %.c $(BUILD)/obj/%.d
	@mkdir -p $(dir $@)
	@echo "CC $<"
	@$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/libmeshtrain.a: $(LIB_OBJ)
	@mkdir -p $(BUILD)
	@echo "AR $@"
	@rm -f $@ && ar rcs $@ $^

$(BUILD)/meshtrain: $(CLI_OBJ) $(BUILD)/libmeshtrain.a
	@echo "LD $@"
	@$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libmeshtrain.a $(LDLIBS) $(CLI_LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libmeshtrain.a $(BUILD)/obj/tests/%.d
	@mkdir -p $(BUILD)/tests $(BUILD)/obj/tests
	@echo "LD $@"
	@$(CC) $(CFLAGS) -MMD -MP -MF $(BUILD)/obj/tests/$*.d -Itests -o $@ $< $(BUILD)/libmeshtrain.a $(LDFLAGS) $(LDLIBS)

test: all
	bash tests/run_all.sh

bench: all
	bash bench/run_bench.sh

SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
asan:
	$(MAKE) BUILD=build-asan OPT=-O1 EXTRA_CFLAGS="$(SAN)" EXTRA_LDFLAGS="$(SAN)" all
	MT_BUILD=build-asan bash tests/asan/run.sh

# `make cuda`: the CUDA kernels (src/cuda/*.cu) and the GPU tests (tests/gpu/*.cu, which compare
# them with the CPU library) with nvcc from /usr/local/cuda into build-cuda/; the CPU build never
# needs CUDA. Run the tests with `bash tests/gpu/run.sh` (skipped where no GPU exists).
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVFLAGS   := -O2 -std=c++17 $(CUDA_ARCH) -fmad=false -prec-div=true -prec-sqrt=true -Isrc -Xcompiler -Wall,-Werror
CUDA_SRC  := $(wildcard src/cuda/*.cu)
CUDA_OBJ  := $(CUDA_SRC:%.cu=build-cuda/obj/%.o)
GPU_TESTS := $(patsubst tests/gpu/%.cu,build-cuda/tests/gpu/%,$(wildcard tests/gpu/*.cu))
cuda: $(GPU_TESTS)
build-cuda/obj/%.o: %.cu $(HEADERS)
	@mkdir -p $(dir $@)
	@echo "NVCC $<"
	@$(NVCC) $(NVFLAGS) -c $< -o $@
build-cuda/obj/tests/gpu/%.o: tests/gpu/%.cu $(HEADERS)
	@mkdir -p $(dir $@)
	@echo "NVCC $<"
	@$(NVCC) $(NVFLAGS) -c $< -o $@
build-cuda/tests/gpu/%: build-cuda/obj/tests/gpu/%.o $(CUDA_OBJ) build/libmeshtrain.a
	@mkdir -p $(dir $@)
	@echo "LD $@"
	@mpicxx -fopenmp -o $@ $^ $(LDLIBS) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart
.SECONDARY: $(CUDA_OBJ)

FUZZ_S ?= 60
fuzz:
	FUZZ_S=$(FUZZ_S) bash tests/fuzz/run.sh

# the flags tests/fuzz/run.sh compiles its targets with
print-cflags:
	@echo $(CFLAGS)
print-ldlibs:
	@echo $(LDLIBS)

clean:
	rm -rf build build-asan build-fuzz build-cuda build-nompi

$(DEP_FILES):
-include $(wildcard $(DEP_FILES))
