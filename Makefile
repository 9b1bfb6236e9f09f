# meshtrain build. `make` builds build/libmeshtrain.a and build/meshtrain;
# `make test` builds and runs every test (see tests/run_all.sh).
CC      := mpicc
OPT     ?= -O2
CFLAGS  := -std=c11 $(OPT) -g -march=native -fopenmp -fno-math-errno \
           -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE -Isrc -Iinclude \
           -I/usr/include/x86_64-linux-gnu/openblas-openmp $(EXTRA_CFLAGS)
LDLIBS  := -L/usr/lib/x86_64-linux-gnu/openblas-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -ldnnl -lpcre2-8 -licuuc -lm
LDFLAGS := -fopenmp $(EXTRA_LDFLAGS)

LIB_SRC := $(shell find src -name '*.c' -not -path 'src/cli/*' | sort)
CLI_SRC := $(shell find src/cli -name '*.c' | sort)
TEST_SRC := $(wildcard tests/test_*.c)
LIB_OBJ := $(LIB_SRC:%.c=build/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=build/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=build/tests/%)
HEADERS := $(shell find src include -name '*.h')

.PHONY: all test bench clean
all: build/libmeshtrain.a build/meshtrain $(TEST_BIN)

build/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	@echo "CC $<"
	@$(CC) $(CFLAGS) -c $< -o $@

build/libmeshtrain.a: $(LIB_OBJ)
	@mkdir -p build
	@echo "AR $@"
	@rm -f $@ && ar rcs $@ $^

build/meshtrain: $(CLI_OBJ) build/libmeshtrain.a
	@echo "LD $@"
	@$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) build/libmeshtrain.a $(LDLIBS)

build/tests/%: tests/%.c build/libmeshtrain.a $(HEADERS)
	@mkdir -p build/tests
	@echo "LD $@"
	@$(CC) $(CFLAGS) -Itests -o $@ $< build/libmeshtrain.a $(LDFLAGS) $(LDLIBS)

test: all
	bash tests/run_all.sh

bench: all
	bash bench/run_bench.sh

clean:
	rm -rf build
