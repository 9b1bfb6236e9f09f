#!/usr/bin/env bash
# `make fuzz FUZZ_S=N`: builds the library with clang (libFuzzer
# instrumentation, ASan, UBSan) into build-fuzz/, links every target
# tests/fuzz/fuzz_*.c (json, shard, safetensors, llmc, hf_config, bpe,
# hf_tokenizer, manifest, peft_config; run_config: train's YAML run config
# and its writers; metrics: the --metrics files plot reads; chat_jsonl:
# tokenize's instruction/chat JSONL), and runs each
# for N seconds (default 60) starting from its kept corpus
# tests/fuzz/corpus/<target>/ (new inputs go to a scratch directory; the
# kept corpus is not changed). Prints executions per target; exits 1 if
# any target crashed, leaked, hit UB, timed out or ran out of memory (its
# reproducer is kept under build-fuzz/crashes/).
# FUZZ_TARGETS="json shard" limits the targets. FUZZ_RUNS=N stops each
# target after N executions in all (split over the FUZZ_JOBS workers, each
# with its own seed), FUZZ_S then being only the upper bound on the time:
# the long run (FUZZ_RUNS=10000000) reaches its count whatever the load. A parser that lives in
# src/cli/ (not in the library) is compiled into its target from the
# sources that cli_extra names, with the libraries it names (libyaml is the
# CLI's alone). tests/fuzz/<target>.dict, where there is one, is the
# target's libFuzzer dictionary.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
S=${FUZZ_S:-60}
J=${FUZZ_JOBS:-1}
RUNS=${FUZZ_RUNS:-}
runs_flag=()
[ -z "$RUNS" ] || runs_flag=(-runs=$(( (RUNS + J - 1) / J )))
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ -d "$here/bin" ]; then # a fuzz-pack folder: prebuilt targets
    B=${OUT:-$PWD/fuzz-report} bins=$here/bin corpus=$here/corpus dicts=$here supp=$here/lsan.supp
    mkdir -p "$B"
    [ -d "$here/lib" ] && export LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
    cd "$here/../.."
    B=$PWD/build-fuzz bins=$PWD/build-fuzz/fuzz corpus=$PWD/tests/fuzz/corpus dicts=$PWD/tests/fuzz supp=$PWD/tests/asan/lsan.supp
    command -v clang >/dev/null || { echo "tests/fuzz/run.sh: clang is missing: run scripts/setup.sh (Debian packages clang, libclang-rt-14-dev)" >&2; exit 1; }
    mkdir -p $B
    OMPI_CC=clang make -s BUILD=build-fuzz OPT=-O1 EXTRA_CFLAGS="-fsanitize=fuzzer-no-link $SAN -Wno-unused-command-line-argument -Wno-pass-failed" \
        build-fuzz/libmeshtrain.a > $B/build.log 2>&1 || { cat $B/build.log; exit 1; }
    CFLAGS=$(make -s --no-print-directory print-cflags)
    LDLIBS=$(make -s --no-print-directory print-ldlibs)
fi
if [ -d "$here/bin" ]; then all=$(ls $bins/fuzz_*); else all=$(ls tests/fuzz/fuzz_*.c); fi
targets=${FUZZ_TARGETS:-$(echo "$all" | sed 's|.*/fuzz_||; s|\.c$||' | tr '\n' ' ')}
mkdir -p $B/fuzz $B/crashes
export LSAN_OPTIONS=suppressions=$supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# scratch files the targets write per input: in memory where there is /dev/shm (2-4x the executions)
tmpbase=/tmp
[ -d /dev/shm ] && [ -w /dev/shm ] && tmpbase=/dev/shm
# target -> the src/cli/ sources and -l libraries it needs beyond libmeshtrain.a
declare -A cli_extra=(
    [run_config]="src/cli/config_file.c src/cli/args.c src/cli/model_flags.c -lyaml"
    [metrics]="src/cli/metrics_read.c"
)
failed=()
for t in $targets; do
    bin=$bins/fuzz_$t
    if [ ! -d "$here/bin" ]; then
        srcs=(); libs=()
        for w in ${cli_extra[$t]:-}; do
            case $w in *.c) srcs+=("$w") ;; *) libs+=("$w") ;; esac
        done
        stale=0 deps=(tests/fuzz/fuzz_$t.c $B/libmeshtrain.a)
        [ ${#srcs[@]} -eq 0 ] || deps+=("${srcs[@]}" src/cli/*.h)
        for f in "${deps[@]}"; do
            [ "$f" -nt $bin ] && stale=1
        done
        if [ ! -x $bin ] || [ $stale = 1 ]; then
            OMPI_CC=clang mpicc $CFLAGS -O1 -fsanitize=fuzzer $SAN -Wno-unused-command-line-argument -Itests/fuzz \
                -o $bin tests/fuzz/fuzz_$t.c ${srcs[@]+"${srcs[@]}"} $B/libmeshtrain.a -fopenmp $LDLIBS ${libs[@]+"${libs[@]}"}
        fi
    fi
    [ -x "$bin" ] || { failed+=("$t"); echo "FAIL fuzz_$t: no target binary $bin"; continue; }
    [ "$S" != 0 ] || continue # FUZZ_S=0: build only (make fuzz-pack)
    dict=() # tokens of a grammar the fuzzer cannot see into (an uninstrumented library's)
    [ -f $dicts/$t.dict ] && dict=(-dict=$dicts/$t.dict)
    mkdir -p $B/crashes/$t
    pids=() dirs=()
    for j in $(seq 1 "$J"); do
        work=$(mktemp -d -p $tmpbase); scratch=$(mktemp -d -p $tmpbase)
        dirs+=("$work" "$scratch")
        log=$B/fuzz/$t.log
        [ "$J" = 1 ] || log=$B/fuzz/$t.$j.log
        ( cd $B/crashes/$t && MT_FUZZ_TMP=$scratch "$bin" -seed=$j -max_total_time=$S -rss_limit_mb=2048 -timeout=20 -max_len=262144 \
            -print_final_stats=1 ${runs_flag[@]+"${runs_flag[@]}"} ${dict[@]+"${dict[@]}"} "$work" "$corpus/$t" ) > $log 2>&1 &
        pids+=($!)
    done
    bad=0 runs=0 t0=$SECONDS
    for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
    took=$((SECONDS - t0))
    rm -rf "${dirs[@]}"
    for j in $(seq 1 "$J"); do
        log=$B/fuzz/$t.log
        [ "$J" = 1 ] || log=$B/fuzz/$t.$j.log
        n=$(grep -o 'stat::number_of_executed_units: *[0-9]*' $log | grep -o '[0-9]*$' || echo 0)
        runs=$((runs + n))
    done
    if [ $bad -ne 0 ]; then
        failed+=("$t")
        echo "FAIL fuzz_$t: $bad of $J workers failed after $runs executions in ${took}s; logs $B/fuzz/$t*.log, reproducer under $B/crashes/$t/"
        cat $B/fuzz/$t*.log | grep -m3 -E "ERROR|SUMMARY|runtime error" | sed 's/^/    /'
    else
        short=""
        [ -z "$RUNS" ] || [ $runs -ge $RUNS ] || short=" (short of FUZZ_RUNS=$RUNS: the ${S}s bound came first)"
        echo "ok   fuzz_$t: $runs executions in ${took}s ($J worker(s)), no crash$short"
    fi
done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz: failed: ${failed[*]}"; exit 1; }
