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

# src/comm/nccl.c needs NCCL's headers: only `make gpu-mpi` compiles it (below)
LIB_SRC := $(filter-out $(COMM_BACKEND_SKIP) src/comm/nccl.c,$(shell find src -name '*.c' -not -path 'src/cli/*' | sort))
CLI_SRC := $(shell find src/cli -name '*.c' | sort)
TEST_SRC := $(wildcard tests/test_*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
HEADERS := $(shell find src include -name '*.h')
# each object depends on the headers it includes (-MMD -MP: build/obj/**/*.d), not on every header;
# an object without its .d (a build directory from before) is rebuilt. clang writes the .d after the
# object, which would leave every object older than its .d and rebuilt each time: the object is touched
DEPFLAGS = -MMD -MP -MF $(@:%.o=%.d)
DEP_FILES = $(LIB_OBJ:%.o=%.d) $(CLI_OBJ:%.o=%.d) $(TEST_SRC:tests/%.c=$(BUILD)/obj/tests/%.d)

.PHONY: all test bench clean asan fuzz fuzz-pack cuda gpu gpu-emu gpu-mpi gpu-pack print-cflags print-ldlibs
all: $(BUILD)/libmeshtrain.a $(BUILD)/meshtrain $(TEST_BIN)

$(BUILD)/obj/src/cli/cmd_plot.o: CFLAGS += $(PLPLOT_CFLAGS)
$(BUILD)/obj/%.o: %.c $(BUILD)/obj/%.d
	@mkdir -p $(dir $@)
	@echo "CC $<"
	@$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@ && touch $@

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
	@$(CC) $(CFLAGS) -MMD -MP -MF $(BUILD)/obj/tests/$*.d -Itests -o $@ $< $(BUILD)/libmeshtrain.a $(LDFLAGS) $(LDLIBS) && touch $@

test: all
	bash tests/run_all.sh

bench: all
	bash bench/run_bench.sh

SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
asan:
	$(MAKE) BUILD=build-asan OPT=-O1 EXTRA_CFLAGS="$(SAN)" EXTRA_LDFLAGS="$(SAN)" all
	MT_BUILD=build-asan bash tests/asan/run.sh

# ---- CUDA (docs/usage.md, "GPU kernels"); the CPU build never needs it.
# `make gpu`: src/cuda/*.cu and the kernel tests (tests/gpu/test_*.cu, which compare every kernel
# with the CPU op of build/libmeshtrain.a) with nvcc from /usr/local/cuda, sm_90 plus PTX, warnings
# as errors, into build-gpu/; `make gpu-pack`: those binaries, tests/gpu/run.sh and the shared
# libraries they need beyond CUDA and libc, in build-gpu-pack/ (carried to a bare GPU machine).
# A register spill is a build error (-Xptxas -warn-spills with -Werror).
# `make gpu-emu`: the same sources with the host C++ compiler against the CPU emulation
# (src/cuda/emu/), linked with MPI (several ranks, each an emulated device),
# plus the emulation's own test (tests/gpu/emu_*.cu), into build-gpu-emu/ and, with ASan +
# UBSan, build-gpu-emu/asan/; tests/check_gpu_emu.sh runs them.
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVFLAGS   := -O2 -std=c++17 $(CUDA_ARCH) -fmad=false -prec-div=true -prec-sqrt=true -Isrc -Itests \
             -Xcompiler -Wall,-Wextra,-ffp-contract=off -Xptxas -warn-spills -Werror all-warnings
CUDA_SRC  := $(sort $(wildcard src/cuda/*.cu))
CUDA_HDR  := $(shell find src/cuda -name '*.h') src/core/philox.h src/core/dtype.h src/ops/ops.h src/comm/device.h \
             src/ops/kernel_table.h src/device/backend.h src/core/mem.h src/core/error.h
GPU_TEST_SRC := $(wildcard tests/gpu/test_*.cu)
# the test binaries use only ops/ and core/ of the library: no MPI, no libyaml
GPU_LDLIBS := $(LDLIBS) -fopenmp -lpthread
GPU_OBJ   := $(CUDA_SRC:%.cu=build-gpu/obj/%.o)
GPU_TESTS := $(GPU_TEST_SRC:tests/gpu/%.cu=build-gpu/tests/%)
# the CLI of both GPU builds: the one-process library and CLI of `make MPI=0` (build-nompi/), the CUDA
# objects (src/cuda/backend.cu is {device} cuda), linked with the C++ driver
NOMPI_CLI_OBJ := $(CLI_SRC:%.c=build-nompi/obj/%.o)
.PHONY: nompi-objs
nompi-objs:
	@$(MAKE) -s --no-print-directory MPI=0 build-nompi/libmeshtrain.a $(NOMPI_CLI_OBJ)
ifneq ($(MPI),0)
build-nompi/libmeshtrain.a $(NOMPI_CLI_OBJ): nompi-objs ;
endif
GPU_CLI_LDLIBS := $(LDLIBS) $(CLI_LDLIBS) -fopenmp -lpthread
MPI_LINK := $(shell mpicc --showme:link 2>/dev/null || echo -lmpi)
# bench_kernels: each kernel of a GPT-2 124M bf16 step timed alone (the device run's profile part)
gpu: $(GPU_TESTS) build-gpu/tests/bench_kernels build-gpu/meshtrain
cuda: gpu
build-gpu/meshtrain: $(GPU_OBJ) nompi-objs
	@echo "LD $@"
	@g++ -o $@ $(NOMPI_CLI_OBJ) $(GPU_OBJ) build-nompi/libmeshtrain.a $(GPU_CLI_LDLIBS) \
	  -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcublasLt -lcudart
build-gpu/obj/%.o: %.cu $(CUDA_HDR)
	@mkdir -p $(dir $@)
	@echo "NVCC $<"
	@$(NVCC) $(NVFLAGS) -c $< -o $@
build-gpu/tests/%: build-gpu/obj/tests/gpu/%.o $(GPU_OBJ) $(BUILD)/libmeshtrain.a
	@mkdir -p $(dir $@)
	@echo "LD $@"
	@g++ -o $@ $^ $(GPU_LDLIBS) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcublasLt -lcudart
# build-gpu/meshtrain-mpi: the same CUDA objects on the MPI build's library and CLI (build/), for
# several ranks on a GPU machine (Open MPI carried in the pack: tests/gpu/pack.sh)
# and NCCL beside MPI (src/comm/nccl.c, {comm} nccl)
gpu-mpi: build-gpu/meshtrain-mpi build-gpu/tests/test_nccl
# comm/nccl.c's hooks on a one-rank communicator (tests/gpu/test_nccl.c; needs a GPU to run)
build-gpu/tests/test_nccl: tests/gpu/test_nccl.c build-gpu/obj/src/comm/nccl.o src/comm/device.h
	@mkdir -p $(dir $@)
	@echo "CC $@"
	@$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -o $@ $< build-gpu/obj/src/comm/nccl.o -L$(CUDA_HOME)/lib64 \
	  -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcudart
build-gpu/obj/src/comm/nccl.o: src/comm/nccl.c src/comm/device.h
	@mkdir -p $(dir $@)
	@echo "CC $<"
	@mpicc $(CFLAGS) -I$(CUDA_HOME)/include -c $< -o $@
build-gpu/meshtrain-mpi: $(GPU_OBJ) build-gpu/obj/src/comm/nccl.o $(BUILD)/libmeshtrain.a $(CLI_OBJ)
	@echo "LD $@"
	@g++ -o $@ $(CLI_OBJ) $(GPU_OBJ) build-gpu/obj/src/comm/nccl.o $(BUILD)/libmeshtrain.a $(GPU_CLI_LDLIBS) \
	  $(MPI_LINK) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcublas -lcublasLt -lcudart
gpu-pack: gpu gpu-mpi
	bash tests/gpu/pack.sh build-gpu-pack

EMU_FLAGS := -std=c++17 -O2 -g -DMT_CUDA_EMU -ffp-contract=off -Wall -Wextra -Werror -Isrc -Itests -pthread
EMU_SAN   := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
EMU_SRC   := $(CUDA_SRC) src/cuda/emu/emu.cc
EMU_TEST_SRC := $(GPU_TEST_SRC) $(wildcard tests/gpu/emu_*.cu)
EMU_OBJ   := $(patsubst %,build-gpu-emu/obj/%.o,$(EMU_SRC))
EMU_TESTS := $(foreach t,$(notdir $(EMU_TEST_SRC:.cu=)),build-gpu-emu/tests/$(t) build-gpu-emu/asan/tests/$(t))
# build-gpu-emu/meshtrain is the MPI build's library and CLI (build/) with the emulated CUDA backend: each
# rank of `mpirun -np N` is an emulated device, its collectives of device buffers host-staged (issue 29)
gpu-emu: $(EMU_TESTS) build-gpu-emu/meshtrain
build-gpu-emu/meshtrain: $(EMU_OBJ) $(BUILD)/libmeshtrain.a $(CLI_OBJ)
	@echo "LD $@"
	@g++ -pthread -o $@ $(CLI_OBJ) $(EMU_OBJ) $(BUILD)/libmeshtrain.a $(GPU_CLI_LDLIBS) $(MPI_LINK)
build-gpu-emu/obj/%.o: % $(CUDA_HDR)
	@mkdir -p $(dir $@)
	@echo "EMU $<"
	@g++ $(EMU_FLAGS) -x c++ -c $< -o $@
build-gpu-emu/asan/obj/%.o: % $(CUDA_HDR)
	@mkdir -p $(dir $@)
	@echo "EMU-ASAN $<"
	@g++ $(EMU_FLAGS) $(EMU_SAN) -x c++ -c $< -o $@
build-gpu-emu/tests/%: build-gpu-emu/obj/tests/gpu/%.cu.o $(EMU_OBJ) $(BUILD)/libmeshtrain.a
	@mkdir -p $(dir $@)
	@echo "LD $@"
	@g++ -pthread -o $@ $^ $(GPU_LDLIBS)
build-gpu-emu/asan/tests/%: build-gpu-emu/asan/obj/tests/gpu/%.cu.o $(EMU_OBJ:build-gpu-emu/%=build-gpu-emu/asan/%) $(BUILD)/libmeshtrain.a
	@mkdir -p $(dir $@)
	@echo "LD $@"
	@g++ $(EMU_SAN) -pthread -o $@ $^ $(GPU_LDLIBS)
.SECONDARY: $(GPU_OBJ) $(EMU_OBJ) $(EMU_OBJ:build-gpu-emu/%=build-gpu-emu/asan/%) \
  $(GPU_TEST_SRC:%.cu=build-gpu/obj/%.o) $(patsubst %,build-gpu-emu/obj/%.o,$(EMU_TEST_SRC)) \
  $(patsubst %,build-gpu-emu/asan/obj/%.o,$(EMU_TEST_SRC))

FUZZ_S ?= 60
fuzz:
	FUZZ_S=$(FUZZ_S) bash tests/fuzz/run.sh

# the fuzz targets, prebuilt, with their corpora and libraries: run elsewhere with
# `FUZZ_JOBS=N FUZZ_S=S bash build-fuzz-pack/run.sh` (no clang needed there)
fuzz-pack:
	FUZZ_S=0 bash tests/fuzz/run.sh
	bash tests/fuzz/pack.sh build-fuzz-pack

# the flags tests/fuzz/run.sh compiles its targets with
print-cflags:
	@echo $(CFLAGS)
print-ldlibs:
	@echo $(LDLIBS)

clean:
	rm -rf build build-asan build-fuzz build-cuda build-nompi build-gpu build-gpu-emu build-gpu-pack build-fuzz-pack

$(DEP_FILES):
-include $(wildcard $(DEP_FILES))
