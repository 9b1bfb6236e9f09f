# The shared preamble of the scripted tests (sourced, not run). Each
# tests/check_*.sh starts with its own shell options, then sources this:
#     set -euo pipefail
#     . "$(dirname "$0")/lib.sh"
# It sets no shell options itself. What it gives the script:
#  - the working directory: the repository root;
#  - the environment tests/run_all.sh gives (Open MPI as root, oversubscribed;
#    one thread per process unless the caller says otherwise), so a script run
#    on its own runs as it does in the suite; one_thread makes it one thread
#    whatever the caller says;
#  - BUILD (the build directory: $MT_BUILD, default build), M (its meshtrain),
#    PY (the system python3, with numpy and torch), MPI (mpirun with
#    --oversubscribe; a script may append to it, e.g. MPI="$MPI -np 4");
#  - W, a temporary directory removed on exit; on_exit 'COMMAND' adds a
#    command run on exit before that (the last added first), for what else a
#    script must undo (stop a process, unmount);
#  - corpus [NAME]: the test corpus;
#  - the comparisons the training-equivalence scripts share (losses_within,
#    check_run, step_losses, step_val_losses), expect_failure, and a failure
#    counter (fail, $fails).
# A script may define a function of the same name after sourcing this; its
# own then stands (check_hf_interop's expect_failure wants a single line of
# combined output, for example).

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
one_thread() { export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1; }

BUILD=${MT_BUILD:-build}
M=$BUILD/meshtrain
PY=/usr/bin/python3
MPI="mpirun --oversubscribe"

W=$(mktemp -d) || { echo "tests/lib.sh: mktemp -d failed" >&2; exit 1; }
_lib_on_exit=()
on_exit() { _lib_on_exit+=("$1"); }
_lib_exit() {
    local i
    for ((i = ${#_lib_on_exit[@]} - 1; i >= 0; i--)); do eval "${_lib_on_exit[i]}" || true; done
    rm -rf "$W"
}
trap _lib_exit EXIT

# corpus [NAME]: the byte-level training corpus of tests/corpus.sh at
# $W/corpus.txt; with NAME also its byte-tokenized shards $W/NAME_train.bin
# and $W/NAME_val.bin.
corpus() {
    bash tests/corpus.sh $W/corpus.txt || return
    if [ $# -gt 0 ]; then $M tokenize --tokenizer byte --out $W/$1 $W/corpus.txt >/dev/null; fi
}

# losses_within REF.jsonl GOT.jsonl NAME: the per-step losses of GOT equal
# REF's (same count) within 1e-5 relative; prints "NAME: n losses within x; ".
losses_within() {
    $PY - "$1" "$2" "$3" <<'PY'
import json, sys
ref = [json.loads(l)["loss"] for l in open(sys.argv[1])]
got = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(got) == len(ref), f"{sys.argv[3]}: {len(got)} steps, expected {len(ref)}"
worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
assert worst <= 1e-5, f"{sys.argv[3]}: loss differs by {worst:.3g} relative"
print(f"{sys.argv[3]}: {len(got)} losses within {worst:.2g} relative", end="; ")
PY
}

# check_run NAME REF [TOL]: $W/NAME.jsonl against $W/REF.jsonl (losses_within),
# and NAME's final checkpoint (exported) against $W/REF.safetensors with
# compare_tensors.py at TOL (default 1e-5); removes NAME's checkpoint.
check_run() {
    local name=$1 ref=$2 tol=${3:-1e-5}
    losses_within "$W/$ref.jsonl" "$W/$name.jsonl" "$name"
    $M export --ckpt $W/$name --format safetensors --out $W/$name.safetensors >/dev/null
    $PY tests/compare_tensors.py $W/$name.safetensors $W/$ref.safetensors --tol $tol
    rm -rf $W/$name $W/$name.safetensors
}

# step_losses METRICS.jsonl: every step's "loss","lr","grad_norm" fields as
# written, one line each (cmp two runs' for bitwise equality).
step_losses() { grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$1"; }
# step_val_losses METRICS.jsonl: the same and every "val_loss".
step_val_losses() { grep -o '"\(loss\|val_loss\)":[^,}]*\(,"lr":[^,]*,"grad_norm":[^,]*\)\?' "$1"; }

# expect_failure WANT COMMAND...: COMMAND must fail with exactly one
# "error:" line on stderr, containing WANT (a grep pattern).
expect_failure() {
    local want=$1; shift
    if "$@" >$W/out.txt 2>$W/err.txt; then echo "accepted: $*"; exit 1; fi
    grep -q "$want" $W/err.txt || { echo "expected '$want' for: $*"; cat $W/err.txt; exit 1; }
    [ "$(grep -c 'error:' $W/err.txt)" = 1 ] || { echo "expected one error line: $*"; cat $W/err.txt; exit 1; }
    echo "ok: $want"
}

# resume_from CKPT FIRST.jsonl NAME NP TRAIN-ARGS...: trains on from a copy of checkpoint CKPT
# ($W/ck_NAME) on NP ranks (`$MPI -np NP $M train TRAIN-ARGS --resume`) and writes FIRST's metrics
# followed by the resumed run's to $W/resumed_NAME.jsonl (the resume-across-layouts checks).
resume_from() {
    local ck=$1 first=$2 name=$3 np=$4
    shift 4
    rm -rf $W/ck_$name
    cp -r $ck $W/ck_$name
    $MPI -np $np $M train "$@" --ckpt-dir $W/ck_$name --resume --metrics $W/second_$name.jsonl >/dev/null
    cat $first $W/second_$name.jsonl >$W/resumed_$name.jsonl
}

# fail MESSAGE: prints "FAIL: MESSAGE" and counts it in $fails (for the
# scripts that go on after a failure and exit non-zero at the end).
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# llama.cpp's prebuilt library (npm @node-llama-cpp/linux-x64, installed into deps/ by
# scripts/setup.sh) as LIB, and tests/gguf_consumer.c built against it: C="consumer LIB"
llama_cpp_consumer() {
    LIB=$(ls deps/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libllama*.so 2>/dev/null | head -1 || true)
    if [ -z "$LIB" ]; then
        echo "llama.cpp's library is not installed: run scripts/setup.sh (npm package @node-llama-cpp/linux-x64 into deps/)"
        exit 77
    fi
    cc -O2 -Wall -Wextra -Werror -o $W/consumer tests/gguf_consumer.c -ldl
    C="$W/consumer $LIB"
}
