#!/usr/bin/env bash
# Adapters and quantized bases on `--device cuda` under the CUDA emulation
# (build-gpu-emu/meshtrain: LoRA's GEMMs through the GEMM wrapper, its input
# dropout and IA3's scalings in cuda/adapters.cu, the NF4 / int8 row tiles
# dequantized on the device by cuda/quant.cu from the codes models/model.c
# uploads) against the CPU build on the same data and flags, 10 AdamW steps:
#  - one process, fp32: GPT-2 LoRA on every linear with dropout; GPT-2 QLoRA
#    (NF4, double quantization); Llama QLoRA with grouped-query attention and
#    LoRA dropout; Llama LoRA on an int8 base; GPT-2 IA3: every step's loss and
#    gradient norm within 1e-5 relative;
#  - QLoRA under bf16 (the tiles dequantized straight into bf16): losses within
#    1e-3, gradient norms within 5e-3 (16-bit operands after sums in another order);
#  - QLoRA from a trained base (--init-from), checkpointed on the device and resumed
#    there: 10 + 5 steps within 1e-5 of the same on the CPU;
#  - QLoRA dp2 (2 MPI ranks, each an emulated device, host-staged collectives):
#    the one-process CPU curve within 1e-5 (issue 29's acceptance line), and
#    every rank's communication counters equal the CPU build's dp2 run's;
#  - what still has no CUDA kernel is refused before the run with one line:
#    a GPTQ base and LLM.int8()'s outlier product ({int8-threshold}).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
# the emulated runs with device memory closed to the host outside CUDA calls (src/cuda/emu/emu.h): a
# host read or write of a device buffer stops the run (a real GPU's is cudaMalloc memory)
export MT_EMU_GUARD_HOST=1
one_thread
E=build-gpu-emu/meshtrain
make -s -j2 all gpu-emu >"$W/build.log" 2>&1 || { tail -n 30 "$W/build.log"; echo "FAIL: make gpu-emu"; exit 1; }
[ -x $E ] || { echo "FAIL: $E was not built by make gpu-emu"; exit 1; }
corpus d
BASE="--train $W/d_train.bin --seq-len 16 --batch 4 --steps 10 --lr 1e-3 --log-every 0 --layers 2 --dim 32 --heads 2"
LLAMA="--family llama --kv-heads 1 --ffn-dim 48"
LORA="--peft lora --lora-targets all-linear"
QLORA="$LORA --quantize-base nf4 --double-quant"

# run NAME TOL FLAGS...: the same training on the CPU build and on the emulated CUDA build; TOL as
# LOSS/GRADNORM or one bound for both (tests/gpu/compare_losses.py)
run() {
    local name=$1 tol=$2; shift 2
    $M train "$@" --metrics "$W/$name.cpu.jsonl" >"$W/$name.cpu.out" 2>&1 ||
        { cat "$W/$name.cpu.out"; echo "FAIL: $name on the CPU"; exit 1; }
    $E train "$@" --device cuda --metrics "$W/$name.cuda.jsonl" >"$W/$name.cuda.out" 2>&1 ||
        { tail -n 20 "$W/$name.cuda.out"; echo "FAIL: $name on --device cuda (emulated)"; exit 1; }
    grep -q '| device cuda$' "$W/$name.cuda.out" || { head -n 3 "$W/$name.cuda.out"; echo "FAIL: $name: not on device cuda"; exit 1; }
    [ "$(grep -c '"loss"' "$W/$name.cpu.jsonl")" = 10 ] || { echo "FAIL: $name: not 10 steps on the CPU"; exit 1; }
    if [ "${tol#*/}" != "$tol" ]; then
        $PY tests/gpu/compare_losses.py "$W/$name.cpu.jsonl" "$W/$name.cuda.jsonl" "$name" "${tol%/*}" loss
        $PY tests/gpu/compare_losses.py "$W/$name.cpu.jsonl" "$W/$name.cuda.jsonl" "$name" "${tol#*/}" grad_norm
    else
        $PY tests/gpu/compare_losses.py "$W/$name.cpu.jsonl" "$W/$name.cuda.jsonl" "$name" "$tol"
    fi
}
# shellcheck disable=SC2086
{
    run lora_gpt2_fp32 1e-5 $BASE $LORA --lora-dropout 0.1
    run qlora_gpt2_fp32 1e-5 $BASE $QLORA
    run qlora_llama_fp32 1e-5 $BASE $LLAMA $QLORA --lora-dropout 0.05
    run lora_int8_llama_fp32 1e-5 $BASE $LLAMA $LORA --quantize-base int8
    run ia3_gpt2_fp32 1e-5 $BASE --peft ia3
    run qlora_gpt2_bf16 1e-3/5e-3 $BASE $QLORA --precision bf16
}

# QLoRA on a trained base (--init-from: each weight quantized again from the loaded fp32 and its device
# copy replaced), checkpointed on the device and resumed there for 5 more steps; the same on the CPU
# shellcheck disable=SC2086
$M train $BASE --steps 5 --ckpt-dir "$W/base" >"$W/base.out" 2>&1 || { cat "$W/base.out"; echo "FAIL: the base"; exit 1; }
for dev in cpu cuda; do
    [ $dev = cpu ] && bin=$M || bin=$E
    # shellcheck disable=SC2086
    $bin train $BASE $QLORA --init-from "$W/base" --device $dev --ckpt-dir "$W/ck.$dev" --metrics "$W/init.$dev.jsonl" \
        >"$W/init.$dev.out" 2>&1 || { tail -n 20 "$W/init.$dev.out"; echo "FAIL: QLoRA --init-from on $dev"; exit 1; }
done
[ "$(grep -c '"loss"' "$W/init.cpu.jsonl")" = 10 ] || { echo "FAIL: QLoRA --init-from: not 10 steps"; exit 1; }
$PY tests/gpu/compare_losses.py "$W/init.cpu.jsonl" "$W/init.cuda.jsonl" qlora_init_from 1e-5
$M train --steps 15 --resume --ckpt-dir "$W/ck.cpu" --metrics "$W/resumed.cpu.jsonl" >"$W/resumed.cpu.out" 2>&1 ||
    { cat "$W/resumed.cpu.out"; echo "FAIL: resume on the CPU"; exit 1; }
$E train --steps 15 --resume --ckpt-dir "$W/ck.cuda" --device cuda --metrics "$W/resumed.cuda.jsonl" >"$W/resumed.cuda.out" 2>&1 ||
    { cat "$W/resumed.cuda.out"; echo "FAIL: resume on --device cuda"; exit 1; }
[ "$(grep -c '"loss"' "$W/resumed.cuda.jsonl")" = 5 ] || { echo "FAIL: the resumed run: not 5 steps"; exit 1; }
$PY tests/gpu/compare_losses.py "$W/resumed.cpu.jsonl" "$W/resumed.cuda.jsonl" qlora_resumed 1e-5

# QLoRA dp2 on --device cuda against the one-process CPU curve (4 microbatches of 1 sequence a step)
DP="$BASE --micro-batch 1 --timeout 30 $QLORA --lora-dropout 0.1"
# shellcheck disable=SC2086
$M train $DP --metrics "$W/ref.jsonl" >"$W/ref.out" 2>&1 || { cat "$W/ref.out"; echo "FAIL: the CPU reference"; exit 1; }
# shellcheck disable=SC2086
$MPI -np 2 $M train $DP --dp 2 --metrics "$W/dp2.cpu.jsonl" --report-json "$W/dp2.cpu.json" >"$W/dp2.cpu.out" 2>&1 ||
    { tail -n 20 "$W/dp2.cpu.out"; echo "FAIL: QLoRA dp2 on the CPU"; exit 1; }
# shellcheck disable=SC2086
$MPI -np 2 $E train $DP --dp 2 --device cuda --metrics "$W/dp2.jsonl" --report-json "$W/dp2.cuda.json" >"$W/dp2.cuda.out" 2>&1 ||
    { tail -n 20 "$W/dp2.cuda.out"; echo "FAIL: QLoRA dp2 on --device cuda (emulated)"; exit 1; }
grep -q '| device cuda$' "$W/dp2.cuda.out" || { head -n 3 "$W/dp2.cuda.out"; echo "FAIL: QLoRA dp2: not on device cuda"; exit 1; }
[ "$(grep -c '"loss"' "$W/ref.jsonl")" = 10 ] || { echo "FAIL: the CPU reference: not 10 steps"; exit 1; }
$PY tests/gpu/compare_losses.py "$W/ref.jsonl" "$W/dp2.jsonl" qlora_dp2_vs_one_process_cpu 1e-5
$PY - "$W/dp2.cpu.json" "$W/dp2.cuda.json" <<'PY'
import json, sys
cpu, cuda = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert len(cpu["ranks"]) == len(cuda["ranks"]) == 2, "QLoRA dp2: rank counts"
n = 0
for r, (a, b) in enumerate(zip(cpu["ranks"], cuda["ranks"])):
    for axis, kinds in a["comm_per_step"].items():
        for kind, v in kinds.items():
            w = b["comm_per_step"][axis][kind]
            assert v == w, f"QLoRA dp2: rank {r} {axis} {kind}: cpu {v} vs cuda {w}"
            n += v["calls"] > 0
assert n > 0, "QLoRA dp2: no collective counted"
print(f"ok qlora_dp2: communication counters equal the CPU build's ({n} collective kinds with calls)")
PY

# what has no CUDA kernel yet: refused before the run, naming it
one="$BASE --steps 1"
# shellcheck disable=SC2086
{
    expect_failure "\-\-quantize-base gptq (no CUDA kernel for its row tiles yet) is not yet supported on --device cuda" \
        $E train $one --device cuda $LORA --quantize-base gptq
    expect_failure "\-\-int8-threshold (no CUDA kernel for LLM.int8()'s outlier product yet) is not yet supported on --device cuda" \
        $E train $one --device cuda $LORA --quantize-base int8 --int8-threshold 6
}
