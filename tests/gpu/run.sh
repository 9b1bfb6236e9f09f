#!/usr/bin/env bash
# The device run (docs/usage.md, "GPU kernels"): on a machine with an NVIDIA GPU,
#  1. probe: nvidia-smi, the test binary's libraries (ldd), compute-sanitizer;
#  2. every CUDA kernel against its CPU reference (test_kernels), and 10 training steps of a
#     1-layer GPT-2 and Llama composed of the kernels against the CPU ops (test_step);
#  3. whole-step parity through the CLI: `meshtrain train --device cuda` (build-gpu/meshtrain) on
#     every run of parity_runs.txt (GPT-2 and Llama GQA, GPT-2 QLoRA, fp32, 10 AdamW steps), each step's loss
#     and gradient norm within 1e-5 relative of the CPU build's (golden/, made by golden.sh);
#     3b. two ranks sharing the GPU (dp2 ZeRO-3, tp2 + sp; build-gpu/meshtrain-mpi under the Open
#     MPI the pack carries, ompi.tar.xz) against the one-process GPU curve, 1e-5 relative;
#  3c. our HF and peft exports loaded by transformers and peft, logits against meshtrain's (hf_check.py);
#  4. the speed of `meshtrain train --device cuda`: GPT-2 124M, bf16, T=1024 (tokens/s, MFU over
#     989 TFLOP/s), unless MT_GPU_BENCH is 0; MT_GPU_BENCH_AB="MT_CUDA_NO_LT=1 --flag=value ..." repeats it under
#     each setting (here: every bias a pass of its own instead of cuBLASLt's epilogue) for the comparison
#     (default: --compress-activations=lossless);
#  5. compute-sanitizer memcheck on the kernel and step tests, racecheck on the kernel tests (one log);
#  6. tests/gpu/torch_bench.py (PyTorch GPT-2 124M, eager and compiled) if PyTorch sees the GPU
#     and MT_GPU_BENCH is not 0;
# and writes a compact report: $OUT/gpu-report.txt plus one log per step (8 files), or
# ./gpu-report/ when OUT is unset. Runs from a `make gpu-pack` folder (bin.tar.xz or bin/, lib.tar.xz) or from
# the repository (build-gpu/tests, built by `make gpu` if missing). Without a GPU it prints one
# line and exits 77 (skipped, never passed); exit 1 when a step failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no NVIDIA GPU here (nvidia-smi absent or lists none): the CUDA kernel tests did not run"
    exit 77
fi
unpack() { # an .tar.xz into a folder, with xz or else python3
    tar -C "$2" -xJf "$1" 2>/dev/null ||
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2" ||
        { echo "FAIL: cannot unpack $1 (no xz, no python3)"; exit 1; }
}
if [ -d "$here/bin" ] || [ -s "$here/bin.tar.xz" ]; then # a gpu-pack folder
    bin=$here/bin bench=$here/torch_bench.py gold=$here ompi_tar=$here/ompi.tar.xz
    libdir=$(mktemp -d)
    trap 'rm -rf "$libdir"' EXIT
    unpack "$here/lib.tar.xz" "$libdir"
    if [ ! -d "$bin" ]; then # the binaries, unpacked beside the libraries
        bin=$libdir/bin && mkdir -p "$bin" && unpack "$here/bin.tar.xz" "$bin"
    fi
    export LD_LIBRARY_PATH=$libdir:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
else # the repository
    root=$(cd "$here/../.." && pwd)
    bin=$root/build-gpu/tests bench=$here/torch_bench.py
    [ -x "$bin/test_kernels" ] && [ -x "$root/build-gpu/meshtrain" ] || make -C "$root" -s gpu || { echo "FAIL: make gpu"; exit 1; }
    cp "$root/build-gpu/meshtrain" "$bin/"
    if [ -x "$root/build-gpu/meshtrain-mpi" ]; then cp "$root/build-gpu/meshtrain-mpi" "$bin/"; fi
    ompi_tar=${MT_OMPI_TAR:-}
    gold=$(mktemp -d)
    trap 'rm -rf "$gold"' EXIT
    bash "$here/golden.sh" "$root/build/meshtrain" "$gold" || { echo "FAIL: the golden CPU losses (make; golden.sh)"; exit 1; }
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
fi
tmp=$(mktemp -d)
out=${OUT:-$PWD/gpu-report}
mkdir -p "$out"
rep=$out/gpu-report.txt
: > "$rep"
say() { echo "$*" | tee -a "$rep"; }
rc=0
step() { # step NAME LIMIT_S [+]LOG CMD...: runs CMD with a time limit (+LOG: appended to LOG), the last lines into the report
    local name=$1 limit=$2 log=$3 start=$SECONDS r
    shift 3
    if [ "${log#+}" != "$log" ]; then
        log=${log#+}
        timeout "$limit" "$@" >> "$out/$log" 2>&1
    else
        timeout "$limit" "$@" > "$out/$log" 2>&1
    fi
    r=$?
    say "== $name: exit $r, $((SECONDS - start)) s (log $log)"
    tail -n 4 "$out/$log" | sed 's/^/   /' | tee -a "$rep"
    [ $r -eq 0 ] || rc=1
    return $r
}
# MT_GPU_ONLY="kernels steps parity hf nccl dist bench sanitizer torch profile fuzz": run only these parts (default:
# all but profile and fuzz (the fuzz targets on the idle CPU cores, below), an ncu per-kernel time summary of two GPT-2 124M bf16 steps, profile.log)
want() { case " ${MT_GPU_ONLY:-kernels steps parity hf nccl dist bench sanitizer torch} " in *" $1 "*) return 0 ;; esac; return 1; }
say "gpu run $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu: /' | tee -a "$rep"
missing=$(ldd "$bin/test_kernels" | grep 'not found' || true)
if [ -n "$missing" ]; then
    say "FAIL probe: libraries not found:"; say "$missing"; exit 1
fi
missing=$(ldd "$bin/meshtrain" | grep 'not found' || true)
if [ -n "$missing" ]; then
    say "FAIL probe: libraries of meshtrain not found:"; say "$missing"; exit 1
fi
say "probe: every library of test_kernels ($(ldd "$bin/test_kernels" | grep -c '=>')) and meshtrain ($(ldd "$bin/meshtrain" | grep -c '=>')) found"
# the Open MPI of the pack (ompi.tar.xz), unpacked once and relocated: for the two-rank runs and the
# fuzz targets (linked with libmpi). Checked on the development machine with its own Open MPI, PMIx
# and hwloc folders hidden (unshare -m, bind mounts): a 2-rank run of the MPI build under this
# relocation (PMIx prints a help-file warning)
ompi_env() {
    [ -z "${OPAL_PREFIX:-}" ] || return 0
    ompi=$tmp/ompi && mkdir -p "$ompi" && tar -C "$ompi" -xJf "$ompi_tar" 2>/dev/null ||
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$ompi_tar" "$ompi"
    export OPAL_PREFIX=$ompi/usr OPAL_SYSCONFDIR=$ompi/etc PMIX_INSTALL_PREFIX=$ompi/usr/lib/x86_64-linux-gnu/pmix2
    export HWLOC_PLUGINS_PATH=$ompi/usr/lib/x86_64-linux-gnu/hwloc
    export MPIRUN=$ompi/usr/bin/orterun PATH=$ompi/usr/bin:$PATH LD_LIBRARY_PATH=$ompi/usr/lib/x86_64-linux-gnu:$ompi/usr/lib/x86_64-linux-gnu/openmpi/lib:$LD_LIBRARY_PATH
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
}
# issue 35: the fuzz targets (fuzz.tar.xz, from make fuzz-pack) on the CPU cores the GPU parts leave idle,
# at nice 19, MT_FUZZ_JOBS workers per target (default: all cores but 2) for MT_FUZZ_S seconds each
# (default 60), MT_FUZZ_TARGETS (default all), in the background; reported at the end (fuzz.log)
fuzz_pid=
if want fuzz && [ -s "$here/fuzz.tar.xz" ] && [ -s "${ompi_tar:-}" ]; then
    ompi_env
    mkdir -p "$tmp/fuzz" && tar -C "$tmp/fuzz" -xJf "$here/fuzz.tar.xz"
    jobs=${MT_FUZZ_JOBS:-$(($(nproc) > 3 ? $(nproc) - 2 : 1))}
    say "fuzz: started in the background, $jobs workers per target, ${MT_FUZZ_S:-60} s each, targets: ${MT_FUZZ_TARGETS:-all}"
    FUZZ_JOBS=$jobs FUZZ_S=${MT_FUZZ_S:-60} FUZZ_TARGETS=${MT_FUZZ_TARGETS:-} OUT=$out/fuzz \
        nice -n 19 bash "$tmp/fuzz/run.sh" > "$out/fuzz.log" 2>&1 &
    fuzz_pid=$!
elif want fuzz; then
    say "fuzz: not run (no fuzz.tar.xz or ompi.tar.xz in the pack: make fuzz-pack, then make gpu-pack)"
fi
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if want kernels; then
    step "kernel tests" 90 kernels.log "$bin/test_kernels"
    grep '^FAIL' "$out/kernels.log" | tee -a "$rep"
fi
want steps && step "training steps (GPT-2, Llama) vs the CPU ops" 90 steps.log "$bin/test_step"
# 3. whole-step parity through the CLI, against the CPU build's losses
parity() {
    local common name flags r=0
    common=$(awk '$1 == "COMMON" {$1 = ""; print}' "$here/parity_runs.txt")
    while read -r name flags; do
        flags=${flags//@DATA@/$gold/data}
        echo "== $name: train --device cuda $common $flags"
        # shellcheck disable=SC2086
        "$bin/meshtrain" train --train "$gold/data/d_train.bin" $common $flags --device cuda \
            --metrics "$tmp/$name.jsonl" $(case $name in *bf16*) ;; *) echo --dump-grads "$tmp/$name.grads" ;; esac) || { echo "FAIL $name: train exited $?"; r=1; continue; }
        case $name in # bf16: the loss curve (20-step means) within 1% of the CPU bf16 curve; fp32: loss and grad norm 1e-5, gradients 1e-4
        *bf16*) python3 "$here/compare_losses.py" "$gold/golden/$name.jsonl" "$tmp/$name.jsonl" "$name" 1e-2 loss 20 || r=1 ;;
        *) python3 "$here/compare_losses.py" "$gold/golden/$name.jsonl" "$tmp/$name.jsonl" "$name" 1e-5 || r=1
            python3 "$here/compare_grads.py" "$gold/golden/$name.grads" "$tmp/$name.grads" "$name" 1e-4 || r=1 ;;
        esac
    done < <(grep -v '^#\|^COMMON' "$here/parity_runs.txt")
    return $r
}
export bin gold tmp here
export -f parity # step runs it under timeout, in a child bash
if want parity; then
    step "whole-step parity, train --device cuda vs the CPU build (fp32 10 steps, bf16 200)" 150 parity.log bash -c parity
    grep -h '^ok\|^FAIL' "$out/parity.log" | tee -a "$rep"
fi
# 3c. issue 31, point 5: our Hugging Face and peft exports loaded by transformers (AutoModelForCausalLM)
# and peft (PeftModel), their logits against meshtrain's (hf/, made by hf_prepare.sh; hf_check.py)
if ! want hf; then
    :
elif [ -d "$gold/hf" ] && python3 -c 'import transformers, peft' 2>/dev/null; then
    step "HF and peft exports in transformers/peft vs meshtrain's logits" 120 +parity.log python3 "$here/hf_check.py" "$gold/hf"
    grep -h '^hf' "$out/parity.log" | tee -a "$rep"
else
    say "hf_check: not run (no hf/ folder from hf_prepare.sh, or no transformers/peft here)"
fi
# 3b. two ranks sharing the GPU (issue 29): dp2 ZeRO-3 and tp2 + sequence parallelism through
# build-gpu/meshtrain-mpi under the Open MPI carried in the pack (ompi.tar.xz: Debian's packages,
# dpkg -x, relocated with OPAL_PREFIX), their collectives host-staged, against the one-process GPU
# curve (fp32, 10 steps, 1e-5 relative)
dist() {
    local base r=0 name np flags
    base="--train $gold/data/d_train.bin --seq-len 16 --batch 4 --micro-batch 1 --steps 10 --lr 1e-3 --log-every 0 --layers 2 --dim 32 --heads 2 --timeout 60"
    echo "== probe: mpirun -np 2 hostname"
    "$MPIRUN" --oversubscribe -np 2 hostname </dev/null || { echo "FAIL dist: the carried Open MPI does not start 2 processes"; return 1; }
    # shellcheck disable=SC2086
    "$bin/meshtrain" train $base --device cuda --metrics "$tmp/dist_ref.jsonl" || { echo "FAIL dist: the one-process GPU run"; return 1; }
    while read -r name np flags; do
        echo "== $name: mpirun -np $np meshtrain-mpi train --device cuda $flags"
        # shellcheck disable=SC2086
        # mpirun reads stdin: without </dev/null it swallows the rest of this loop's list
        "$MPIRUN" --oversubscribe -np "$np" "$bin/meshtrain-mpi" train $base $flags --device cuda --metrics "$tmp/$name.jsonl" </dev/null ||
            { echo "FAIL $name: train exited $?"; r=1; continue; }
        python3 "$here/compare_losses.py" "$tmp/dist_ref.jsonl" "$tmp/$name.jsonl" "$name" 1e-5 || r=1
    done <<'RUNS'
dp2_zero3_1gpu 2 --dp 2 --zero 3
tp2_sp_1gpu 2 --tp 2 --sequence-parallel
RUNS
    # every run of the list compared (a run that silently did not happen is a failure)
    for name in dp2_zero3_1gpu tp2_sp_1gpu; do
        [ -s "$tmp/$name.jsonl" ] || { echo "FAIL $name: no metrics (the run did not happen)"; r=1; }
    done
    # NCCL (comm/nccl.c) needs a GPU per rank: only where the machine has two
    if [ "$(nvidia-smi -L | grep -c '^GPU')" -ge 2 ]; then
        echo "== dp2_zero3_nccl: mpirun -np 2 meshtrain-mpi train --device cuda --comm nccl --dp 2 --zero 3"
        # shellcheck disable=SC2086
        "$MPIRUN" --oversubscribe -np 2 "$bin/meshtrain-mpi" train $base --dp 2 --zero 3 --device cuda --comm nccl \
            --metrics "$tmp/dp2_zero3_nccl.jsonl" </dev/null || { echo "FAIL dp2_zero3_nccl: train exited $?"; r=1; }
        [ -s "$tmp/dp2_zero3_nccl.jsonl" ] &&
            { python3 "$here/compare_losses.py" "$tmp/dist_ref.jsonl" "$tmp/dp2_zero3_nccl.jsonl" dp2_zero3_nccl 1e-5 || r=1; }
    else
        echo "dp2_zero3_nccl: not run (one GPU: NCCL refuses two ranks on one GPU)"
    fi
    return $r
}
# 3a. comm/nccl.c's hooks on a one-rank communicator (test_nccl: every collective the identity, a
# send/recv to itself, in stream order); the machine may have libnccl only as PyTorch's wheel
if want nccl && [ -x "$bin/test_nccl" ]; then
    if ldd "$bin/test_nccl" | grep -q 'libnccl.*not found'; then
        nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
        [ -n "$nccl_lib" ] && export LD_LIBRARY_PATH=$nccl_lib:$LD_LIBRARY_PATH
    fi
    step "NCCL hooks on a one-rank communicator" 60 +steps.log "$bin/test_nccl"
elif want nccl; then
    say "nccl: not run (no bin/test_nccl: make gpu-mpi builds it)"
fi
if ! want dist; then
    :
elif [ -x "$bin/meshtrain-mpi" ] && [ -s "${ompi_tar:-}" ]; then
    ompi_env
    # meshtrain-mpi links libnccl (comm/nccl.c); the machine may have it only as PyTorch's wheel
    if ldd "$bin/meshtrain-mpi" | grep -q 'libnccl.*not found'; then
        nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
        [ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=$nccl_dir:$LD_LIBRARY_PATH
    fi
    export -f dist
    step "two ranks sharing the GPU, dp2 ZeRO-3 and tp2+sp vs the one-process GPU curve (fp32, 10 steps)" 180 dist.log bash -c dist
    grep -h '^ok\|^FAIL' "$out/dist.log" | tee -a "$rep"
else
    say "two ranks sharing the GPU: not run (no bin/meshtrain-mpi or ompi.tar.xz: make gpu-pack carries them)"
fi
# 4. the speed of train --device cuda: GPT-2 124M bf16 T=1024 on random tokens
bench_data() { # a GPT-2 token shard (data/shard.h: 256-int header, magic 20240520, version 1, count; uint16 tokens)
    python3 - "$tmp/bench.bin" <<'PY'
import random, struct, sys
n = 1 << 21
random.seed(1)
hdr = [20240520, 1, n] + [0] * 253
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *hdr))
    f.write(struct.pack(f"<{n}H", *(random.randrange(50257) for _ in range(n))))
PY
}
bench() {
    bench_data || return 1
    local b
    for b in ${MT_GPU_BENCH_BATCH:-16 8 4}; do
        echo "== batch $b"
        bench_train "$tmp/bench.jsonl" "$b" && break
        rm -f "$tmp/bench.jsonl"
    done
    [ -s "$tmp/bench.jsonl" ] || { echo "FAIL: no batch size trained"; return 1; }
    bench_report "$tmp/bench.jsonl" "$b" ""
    # MT_GPU_BENCH_AB="VAR=value --flag=value ...": the same run again under each of these settings, one at a
    # time (an A/B in one call): an environment variable, or a train flag and its value; by default the linear
    # layers' inputs kept in bf16 (--compress-activations lossless: bitwise the same training)
    local ab
    for ab in ${MT_GPU_BENCH_AB---compress-activations=lossless}; do
        rm -f "$tmp/bench_ab.jsonl"
        # shellcheck disable=SC2163 # (an entry VAR=value is exported as such)
        case $ab in
        --*) bench_train "$tmp/bench_ab.jsonl" "$b" "${ab%%=*}" "${ab#*=}" ;;
        *) (export "$ab" && bench_train "$tmp/bench_ab.jsonl" "$b") ;;
        esac && bench_report "$tmp/bench_ab.jsonl" "$b" " ($ab)"
    done
}
bench_train() { # METRICS BATCH [FLAGS...]: the speed run, 12 steps
    local metrics=$1 b=$2
    shift 2
    "$bin/meshtrain" train --model gpt2 --train "$tmp/bench.bin" --batch "$b" --precision bf16 --device cuda --steps 12 \
        --lr 3e-4 --log-every 1 --peak-gflops 989000 --metrics "$metrics" "$@"
}
bench_report() { # metrics file, batch, label
    python3 - "$1" "$2" "$3" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if "tokens_per_s" in r][2:]  # the first two steps warm up
tok = statistics.median(r["tokens_per_s"] for r in rows)
flops = 6 * 124.44e6 * tok + 6 * 12 * 768 * 1024 * tok  # 6N per token plus attention (12 L C T)
print(f"meshtrain GPT-2 124M bf16 T=1024 batch {sys.argv[2]}{sys.argv[3]}: {tok:.0f} tokens/s (median of {len(rows)} steps), "
      f"MFU {100 * flops / 989e12:.1f}% of 989 TFLOP/s" +
      (f"; its own mfu field {statistics.median(r['mfu'] for r in rows):.3f}" if all("mfu" in r for r in rows) else ""))
PY
}
export -f bench bench_data bench_report bench_train
if ! want bench; then
    :
elif [ "${MT_GPU_BENCH:-1}" != 0 ]; then
    step "meshtrain speed (GPT-2 124M bf16 T=1024, --device cuda)" 150 bench.log bash -c bench
    { grep -h '^meshtrain GPT-2' "$out/bench.log"; grep -h 'GPU memory' "$out/bench.log" | tail -n 1; } | tee -a "$rep"
else
    say "meshtrain speed: not run (MT_GPU_BENCH=0)"
fi
if ! want sanitizer; then
    :
elif [ -n "$san" ]; then
    step "memcheck" 150 sanitizer.log sh -c "'$san' --tool memcheck --error-exitcode 3 '$bin/test_kernels' &&
        '$san' --tool memcheck --error-exitcode 3 '$bin/test_step'"
    step "racecheck" 100 +sanitizer.log "$san" --tool racecheck --error-exitcode 3 "$bin/test_kernels"
else
    say "FAIL: no compute-sanitizer (memcheck and racecheck did not run)"; rc=1
fi
if ! want torch; then
    :
elif [ "${MT_GPU_BENCH:-1}" != 0 ] && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    step "torch_bench" 200 torch_bench.log python3 "$bench"
else
    say "torch_bench: not run (MT_GPU_BENCH=0 or no PyTorch with CUDA)"
fi
# the profile: each kernel's summed time over two GPT-2 124M bf16 steps at batch 4 (ncu, one metric, one pass)
profile() {
    local ncu
    [ -s "$tmp/bench.bin" ] || bench_data || return 1
    # each kernel of the step alone, timed with CUDA events (tests/gpu/bench_kernels.cu)
    echo "== bench_kernels"
    "$bin/bench_kernels" || return 1
    # meshtrain's own --profile with every launch synchronous: host time per category ~ device time
    echo "== CUDA_LAUNCH_BLOCKING=1 meshtrain train --profile (batch 16, 4 steps)"
    CUDA_LAUNCH_BLOCKING=1 "$bin/meshtrain" train --model gpt2 --train "$tmp/bench.bin" --batch 16 --precision bf16 \
        --device cuda --steps 4 --lr 3e-4 --log-every 1 --profile || return 1
    # MT_GPU_NCU_KERNELS="re1 re2": ncu's speed-of-light, occupancy and warp-stall sections for one launch of
    # each kernel whose name matches, within bench_kernels (a single kernel: seconds, not a whole step)
    for k in ${MT_GPU_NCU_KERNELS:-}; do
        ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null) || { echo "FAIL: no ncu"; return 1; }
        echo "== ncu: kernel $k"
        timeout 90 "$ncu" --kernel-name "regex:$k" --launch-skip 2 --launch-count 1 --section SpeedOfLight \
            --section Occupancy --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis \
            --section MemoryWorkloadAnalysis "$bin/bench_kernels" 2>&1 | grep -v '^matmul\|^gemm\|^layernorm\|^residual\|^bias\|^gelu\|^embed\|^convert\|^softmax' ||
            echo "ncu for $k: failed or timed out"
    done
    # ncu only when asked (MT_GPU_NCU=1): on the H200 of 2026-11-26 it once gave a table in ~45 s and once ran
    # into its 100 s limit without one
    [ "${MT_GPU_NCU:-0}" = 1 ] || { echo "ncu: not run (MT_GPU_NCU=1 runs it)"; return 0; }
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null) || { echo "FAIL: no ncu"; return 1; }
    timeout 100 "$ncu" --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel --csv \
        "$bin/meshtrain" train --model gpt2 --train "$tmp/bench.bin" --batch 4 --precision bf16 --device cuda --steps 2 \
        --lr 3e-4 --log-every 1 > "$out/ncu.csv" || { echo "ncu failed (no counters on this machine?)"; return 0; }
    python3 - "$out/ncu.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
hdr = next((r for r in rows if "Metric Name" in r), None)
if hdr is None or not any("Name" in h for h in hdr):
    sys.exit(print("ncu: no per-kernel table in ncu.csv; its first lines:\n" + "".join(open(sys.argv[1]).readlines()[:8])))
rows = rows[rows.index(hdr):]
kn = next(h for h in hdr if "Kernel Name" in h or h == "Name" or "Function Name" in h)
k, mn = hdr.index(kn), hdr.index("Metric Name")
inv = hdr.index("Invocations") if "Invocations" in hdr else None
av = hdr.index("Average") if "Average" in hdr else hdr.index("Metric Value")
tot = {}
for r in rows[1:]:
    if r[mn] != "gpu__time_duration.sum": continue
    n = int(r[inv]) if inv is not None else 1
    t = float(r[av].replace(",", "")) * n
    name = r[k].split("(")[0][:90]
    c = tot.setdefault(name, [0.0, 0]); c[0] += t; c[1] += n
s = sum(v[0] for v in tot.values())
print(f"profile: {s / 1e6:.1f} ms of kernel time over 2 steps (batch 4, T=1024), {sum(v[1] for v in tot.values())} launches")
for name, (t, n) in sorted(tot.items(), key=lambda x: -x[1][0])[:25]:
    print(f"  {100 * t / s:5.1f}%  {t / 1e6:8.2f} ms  {n:5d}x  {name}")
PY
}
if want profile; then
    export -f profile bench_data
    export MT_GPU_NCU=${MT_GPU_NCU:-0} MT_GPU_NCU_KERNELS=${MT_GPU_NCU_KERNELS:-}
    step "profile (ncu per-kernel time, GPT-2 124M bf16, 2 steps, batch 4)" 240 profile.log bash -c profile
    grep -h '^profile\|^  \|^matmul\|^attention\|^flash\|^layernorm\|^residual\|^bias\|^gelu\|^softmax\|^embed\|^convert\|^sum of\|^gemm' "$out/profile.log" | tee -a "$rep"
fi
if [ -n "$fuzz_pid" ]; then
    start=$SECONDS
    wait "$fuzz_pid"; r=$?
    say "== fuzz targets: exit $r, waited $((SECONDS - start)) s (log fuzz.log, per-worker logs fuzz/)"
    tee -a "$rep" < "$out/fuzz.log"
    [ $r -eq 0 ] || rc=1
    tar -C "$out" -cJf "$out/fuzz-logs.tar.xz" fuzz && rm -rf "$out/fuzz" # many small logs: one file back
fi
rm -rf "$tmp"
say "result: $([ $rc -eq 0 ] && echo all steps passed || echo a step FAILED)"
exit $rc
