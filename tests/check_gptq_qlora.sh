#!/usr/bin/env bash
# QLoRA on a GPTQ base (`train --init-from CKPT --peft lora --quantize-base gptq`, CKPT imported
# from a GPTQ directory): the frozen base is the directory's packed codes, dequantized per GEMM tile
# by op_gptq_dequant_rows. On GPT-2 (4 bits, groups of 32, act order) and Llama (8 bits, groups of
# 64, asymmetric grid), each 2 layers:
#  - LoRA on the GPTQ base against LoRA on the dequantized fp32 import (the same numbers): step-0
#    loss within 1e-6, step 1's adapter gradients within 1e-6 (max-abs difference / max-abs), 10 AdamW
#    steps within 1e-5, the merged models (adapters folded into the
#    dequantized base, exported to Hugging Face) within 1e-5 (GPT-2; Llama 5e-4, see below), and the
#    merged model's eval equal to the adapted run's; under {precision} bf16 10 steps within 1e-4;
#  - the frozen memory is the closed form: fp32 embeddings/norms/biases plus per quantized matrix
#    [out, in] at b bits, G groups: out*in*b/8 (qweight) + G*out*b/8 (qzeros) + 2*G*out (fp16
#    scales) + 4*in (g_idx), and `meshtrain plan` counts the same bytes;
#  - dp2 ZeRO-3, tp2 and pp2 equal one process (1e-5); a run resumed at step 5 equals the straight
#    run bitwise;
#  - a directory as other tools write it (tests/gptq_external.py: group_size -1, asymmetric, no
#    checkpoint_format key): the same step-0 and 10-step checks, and its frozen bytes;
#  - bad input, one line each: 3 bits or gptq_v2 in config.json, {quantize-base} gptq on a base
#    not imported from GPTQ or without {init-from}, {init-from} the GPTQ directory itself (import it
#    first), a GPTQ directory changed or moved after its import.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus text
for fam in gpt2 llama; do
    F="--layers 2 --dim 64 --heads 4 --seq-len 32"
    Q="--bits 4 --group-size 32 --act-order"
    if [ $fam = llama ]; then
        F="--family llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --seq-len 32"
        Q="--bits 8 --group-size 64 --asym"
    fi
    $M train --train $W/text_train.bin $F --batch 8 --steps 60 --lr 3e-3 --log-every 0 --ckpt-dir $W/$fam >/dev/null
    $M quantize --ckpt $W/$fam --method gptq $Q --calib $W/text_train.bin --calib-samples 16 --out $W/${fam}_g >/dev/null
    $M import --format hf --in $W/${fam}_g --out $W/${fam}_gck >/dev/null
    L="--train $W/text_train.bin --init-from $W/${fam}_gck --peft lora --lora-r 4 --lora-targets all-linear --batch 8
       --micro-batch 4 --steps 10 --lr 3e-3 --log-every 0"
    $M train $L --metrics $W/fp.jsonl --ckpt-dir $W/run_fp >/dev/null
    $M train $L --quantize-base gptq --metrics $W/q.jsonl --report-json $W/q.json --ckpt-dir $W/run_q >/dev/null
    $PY - $W/fp.jsonl $W/q.jsonl $fam <<'PY'
import json, sys
fp, q = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
assert len(fp) == len(q) == 10, (len(fp), len(q))
d0, dmax = abs(q[0] - fp[0]), max(abs(a - b) for a, b in zip(q, fp))
print(f"{sys.argv[3]}: step-0 loss GPTQ base {q[0]:.9f}, dequantized fp32 base {fp[0]:.9f} (diff {d0:.3g}); "
      f"10 LoRA steps: largest loss diff {dmax:.3g}, last {q[-1]:.6f}")
assert d0 <= 1e-6 and dmax <= 1e-5
PY
    # the adapters' gradients of step 1 (every LoRA A and B): forward and input gradient through the codes
    $M train ${L/--steps 10/--steps 1} --dump-grads $W/g_fp.bin >/dev/null
    $M train ${L/--steps 10/--steps 1} --quantize-base gptq --dump-grads $W/g_q.bin >/dev/null
    $PY - $W/g_fp.bin $W/g_q.bin $fam <<'PY'
import sys
import numpy as np
a, b = (np.fromfile(p, dtype=np.float32) for p in sys.argv[1:3])
rel = float(np.abs(a - b).max() / np.abs(a).max())
print(f"{sys.argv[3]}: step 1's {a.size} adapter gradients on the GPTQ base within {rel:.2g} (max-abs diff / max-abs)")
assert a.size == b.size and rel <= 1e-6
PY
    # bf16: the GPTQ tile rounded to bf16 is the fp32 base's bf16 copy; the input gradients' sums
    # differ in order as in fp32 (Llama: 1.3e-5 relative after 10 steps, against bf16's 3.9e-3 unit)
    $M train $L --precision bf16 --metrics $W/fp16b.jsonl >/dev/null
    $M train $L --precision bf16 --quantize-base gptq --metrics $W/q16b.jsonl >/dev/null
    $PY - $W/fp16b.jsonl $W/q16b.jsonl $fam <<'PY'
import json, sys
fp, q = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
assert len(fp) == len(q) == 10, (len(fp), len(q))
worst = max(abs(a - b) / abs(b) for a, b in zip(q, fp))
print(f"{sys.argv[3]} bf16: 10 LoRA steps on the GPTQ base within {worst:.2g} relative of the dequantized fp32 base's")
assert worst <= 1e-4
PY
    # the adapters folded into the dequantized base, exported to Hugging Face: the same model
    for r in fp q; do
        $M merge --ckpt $W/run_$r --out $W/merged_$r >/dev/null
        $M export --ckpt $W/merged_$r --format hf --out $W/hf_$r >/dev/null
    done
    # GPT-2's runs are bitwise equal. Llama's are not: the quantized path's input-gradient GEMMs go a
    # tensor (and row tile) at a time through its fused q|k|v and gate|up rows, the fp32 path's in one
    # GEMM, so the sums' order differs (~1e-7 in the losses); Adam's first, normalized steps turn that
    # into up to lr-sized differences in adapter elements of near-zero gradient (~1.5e-4 of the largest
    # merged weight here, lr 3e-3)
    tol=1e-5
    [ $fam = llama ] && tol=5e-4
    $PY tests/compare_tensors.py $W/hf_q/model.safetensors $W/hf_fp/model.safetensors --tol $tol
    $M eval --ckpt $W/run_q --val $W/text_val.bin --batches 4 >$W/e_run.txt
    $M eval --ckpt $W/merged_q --val $W/text_val.bin --batches 4 >$W/e_merged.txt
    $PY - $W/e_run.txt $W/e_merged.txt <<'PY'
import sys
a, b = (float(open(p).read().split()[1]) for p in sys.argv[1:3])
print(f"  eval: LoRA run on the GPTQ base {a:.6f}, merged {b:.6f}")
assert abs(a - b) <= 1e-5 * abs(a), (a, b)
PY
    # memory: the packed base, and the planner's count of it
    P=(--layers 2 --dim 64 --heads 4 --seq-len 32 --vocab 256)
    [ $fam = llama ] && P=(--family llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --seq-len 32 --vocab 256)
    QB=(--gptq-bits 4 --gptq-group-size 32)
    [ $fam = llama ] && QB=(--gptq-bits 8 --gptq-group-size 64)
    $M plan --cpu --cpu-gflops 10 --cpu-bw 1 --mem-gb 1000 --gpus 1 "${P[@]}" --global-batch 8 --micro-batch 4 --dp 1 \
        --tp 1 --pp 1 --zero 0 --recompute none --precision fp32 --pp-chunks 1 --sequence-parallel 0 --top 1 \
        --peft lora --lora-r 4 --lora-targets all-linear --quantize-base gptq "${QB[@]}" --json >$W/plan.json
    $PY - $W/q.json $W/plan.json $fam <<'PY'
import json, sys
mem = json.load(open(sys.argv[1]))["memory"]
plan = json.load(open(sys.argv[2]))["layouts"][0]["bytes"]
fam, L, C, V, T = sys.argv[3], 2, 64, 256, 32
if fam == "gpt2":
    b, G = 4, 32
    mats = [(3 * C, C), (C, C), (4 * C, C), (C, 4 * C)] * L
    other = V * C + T * C + L * (4 * C + 3 * C + C + 4 * C + C) + 2 * C  # wte, wpe, LayerNorms, biases
else:
    b, G, F, kv = 8, 64, 192, 32  # the Llama preset's FFN for dim 64 (8/3 C, rounded to 64); 2 kv heads of 16
    mats = [(C, C), (kv, C), (kv, C), (C, C), (F, C), (F, C), (C, F)] * L
    other = 2 * V * C + L * 2 * C + C                                     # embedding, untied head, RMSNorms
packed = sum(o * i * b // 8 + (i // G) * o * b // 8 + 2 * (i // G) * o + 4 * i for o, i in mats)
want = 4 * other + packed
n = sum(o * i for o, i in mats)
print(f"  frozen bytes {mem['frozen']} = {4 * other} fp32 + {packed} packed for {n} weights "
      f"({8 * packed / n:.3f} bits each; fp32 {32}); plan {plan['frozen']:.0f}")
assert mem["frozen"] == want, (mem["frozen"], want)
assert plan["frozen"] == want, (plan["frozen"], want)
PY
    # layouts: dp2 and tp2 against one process; resume bitwise
    $MPI -np 2 $M train $L --quantize-base gptq --dp 2 --zero 3 --metrics $W/dp2.jsonl >/dev/null
    $MPI -np 2 $M train $L --quantize-base gptq --tp 2 --metrics $W/tp2.jsonl >/dev/null
    $MPI -np 2 $M train $L --quantize-base gptq --pp 2 --metrics $W/pp2.jsonl >/dev/null
    losses_within $W/q.jsonl $W/dp2.jsonl "$fam dp2 ZeRO-3"
    losses_within $W/q.jsonl $W/tp2.jsonl "$fam tp2"
    losses_within $W/q.jsonl $W/pp2.jsonl "$fam pp2"
    echo
    $M train ${L/--steps 10/--steps 5} --quantize-base gptq --metrics $W/r1.jsonl --ckpt-dir $W/run_r >/dev/null
    $M train --resume $W/run_r --steps 10 --metrics $W/r2.jsonl >/dev/null
    cat $W/r1.jsonl $W/r2.jsonl >$W/r.jsonl
    cmp <(step_losses $W/q.jsonl) <(step_losses $W/r.jsonl)
    echo "$fam: a run resumed at step 5 (the base's codes read again) = the straight run, bitwise"
    rm -rf $W/run_fp $W/run_q $W/run_r $W/merged_fp $W/merged_q $W/hf_fp $W/hf_q $W/r1.jsonl $W/r2.jsonl
done

# a directory as other tools write it (tests/gptq_external.py: random codes, group_size -1, an
# asymmetric grid, optimum's quantization_config without checkpoint_format) on GPT-2's shapes
$PY tests/gptq_external.py $W/gpt2_g $W/ext >/dev/null
$M import --format hf --in $W/ext --out $W/ext_ck >/dev/null
E="--train $W/text_train.bin --init-from $W/ext_ck --peft lora --lora-r 4 --lora-targets all-linear --batch 8
   --micro-batch 4 --steps 10 --lr 3e-3 --log-every 0"
$M train $E --metrics $W/efp.jsonl >/dev/null
$M train $E --quantize-base gptq --metrics $W/eq.jsonl --report-json $W/eq.json >/dev/null
$M plan --cpu --cpu-gflops 10 --cpu-bw 1 --mem-gb 1000 --gpus 1 --layers 2 --dim 64 --heads 4 --seq-len 32 --vocab 256 \
    --global-batch 8 --micro-batch 4 --dp 1 --tp 1 --pp 1 --zero 0 --recompute none --precision fp32 --pp-chunks 1 \
    --sequence-parallel 0 --top 1 --peft lora --lora-r 4 --lora-targets all-linear --quantize-base gptq \
    --gptq-bits 4 --gptq-group-size -1 --json >$W/eplan.json
$PY - $W/efp.jsonl $W/eq.jsonl $W/eq.json $W/eplan.json <<'PY'
import json, sys
fp, q = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
mem, plan = json.load(open(sys.argv[3]))["memory"], json.load(open(sys.argv[4]))["layouts"][0]["bytes"]
C, L = 64, 2
mats = [(3 * C, C), (C, C), (4 * C, C), (C, 4 * C)] * L
other = 256 * C + 32 * C + L * (4 * C + 3 * C + C + 4 * C + C) + 2 * C
want = 4 * other + sum(o * i // 2 + o // 2 + 2 * o + 4 * i for o, i in mats)  # 4 bits, one group
d0, dmax = abs(q[0] - fp[0]), max(abs(a - b) for a, b in zip(q, fp))
print(f"external-style directory (one group, asymmetric): step-0 loss diff {d0:.3g}, 10 steps {dmax:.3g}; "
      f"frozen {mem['frozen']} B (closed form {want}, plan {plan['frozen']:.0f})")
assert len(q) == len(fp) == 10 and d0 <= 1e-6 and dmax <= 1e-5
assert mem["frozen"] == want == plan["frozen"]
PY

# bad input, one line each
B="--train $W/text_train.bin --peft lora --batch 8 --steps 1 --log-every 0 --quantize-base gptq"
expect_failure "was not imported from one" $M train $B --init-from $W/gpt2
expect_failure "is a Hugging Face directory, not a checkpoint: import it first" $M train $B --init-from $W/gpt2_g
expect_failure "it needs --init-from a checkpoint imported from one" $M train $B --layers 2 --dim 64 --heads 4 --seq-len 32
cp -r $W/gpt2_g $W/bad3
sed -i 's/"bits":4/"bits":3/' $W/bad3/config.json
expect_failure "GPTQ with 3 bits; meshtrain reads 4 and 8" $M import --format hf --in $W/bad3 --out $W/bad3ck
cp -r $W/gpt2_g $W/badv2
sed -i 's/"checkpoint_format":"gptq"/"checkpoint_format":"gptq_v2"/' $W/badv2/config.json
expect_failure "checkpoint_format 'gptq_v2'" $M import --format hf --in $W/badv2 --out $W/badv2ck
# the directory re-quantized (other damping: same shapes, other codes) after its import
cp -r $W/gpt2_g $W/moved
$M import --format hf --in $W/moved --out $W/moved_ck >/dev/null
$M quantize --ckpt $W/gpt2 --method gptq --bits 4 --group-size 32 --act-order --damp 0.2 --calib $W/text_train.bin \
    --calib-samples 16 --out $W/other >/dev/null
cp $W/other/model.safetensors $W/moved/model.safetensors
expect_failure "no longer holds the weights its import holds" $M train $B --init-from $W/moved_ck
mv $W/moved $W/moved_away
expect_failure "the GPTQ directory .*/moved that base .* was imported from: .* has no config.json" \
    $M train $B --init-from $W/moved_ck
for d in bad3ck badv2ck; do [ ! -e $W/$d ] || { echo "a failed import left $W/$d behind"; exit 1; }; done
echo OK
