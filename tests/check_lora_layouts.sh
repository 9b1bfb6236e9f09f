#!/usr/bin/env bash
# LoRA (and IA3) compose with every parallelism: 20 steps of a LoRA fine-tune (all
# linear layers, r 4, LoRA dropout 0.1, fp32 base) give the one-process
# loss curve to 1e-5 relative under dp2 ZeRO-3, dp2 x tp2, tp2 with sequence
# parallelism, pp2, and dp2 x tp2 x pp2 (GPT-2); and for a Llama base with one
# kv head (k/v adapters' B rows on tp/kv ranks each) under tp2 and dp2 ZeRO-2.
# Also --freeze without adapters (the embeddings and the first block) under
# dp2 x tp2 against one process.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus text
$M train --train $W/text_train.bin --layers 2 --dim 64 --heads 4 --seq-len 32 --steps 0 --ckpt-dir $W/gpt2 --log-every 0 >/dev/null
$M train --train $W/text_train.bin --family llama --layers 2 --dim 64 --heads 4 --kv-heads 1 --seq-len 32 --steps 0 \
    --ckpt-dir $W/llama --log-every 0 >/dev/null
COMMON="--train $W/text_train.bin --batch 8 --micro-batch 2 --steps 20 --lr 3e-3 --data-order sequential --log-every 0"
LORA="--peft lora --lora-r 4 --lora-alpha 8 --lora-dropout 0.1 --lora-targets all-linear"
run() { # name ranks base extra-flags...
    local name=$1 n=$2 base=$3; shift 3
    mpirun -n $n $M train $COMMON --init-from $W/$base "$@" --metrics $W/$name.jsonl >$W/$name.log 2>&1 ||
        { echo "$name failed:"; tail -5 $W/$name.log; exit 1; }
}
compare() { # reference name...
    local ref=$1; shift
    for name in "$@"; do
        /usr/bin/python3 - $W/$ref.jsonl $W/$name.jsonl $name ${TOL:-1e-5} <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
assert len(a) == len(b) == 20, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"{sys.argv[3]:24s} loss {a[0]:.6f} -> {b[-1]:.6f}, worst relative difference to one process {worst:.1e}")
assert worst <= float(sys.argv[4]), "differs from the one-process curve"
PY
    done
}
run g1 1 gpt2 $LORA
run g_zero3 2 gpt2 $LORA --dp 2 --zero 3
run g_dp2tp2 4 gpt2 $LORA --dp 2 --tp 2
run g_tp2sp 2 gpt2 $LORA --tp 2 --sequence-parallel
run g_pp2 2 gpt2 $LORA --pp 2
run g_dp2tp2pp2 8 gpt2 $LORA --dp 2 --tp 2 --pp 2
compare g1 g_zero3 g_dp2tp2 g_tp2sp g_pp2 g_dp2tp2pp2
grep -q "trained: .* parameters (lora adapters); frozen: " $W/g1.log
# adapters plus the tied embedding trained in full (--peft-train; wpe stays frozen)
run t1 1 gpt2 $LORA --peft-train '^wte' --ckpt-dir $W/tck
run t_dp2tp2 4 gpt2 $LORA --peft-train '^wte' --dp 2 --tp 2 --zero 3
compare t1 t_dp2tp2
$M export --ckpt $W/tck --format peft --out $W/te1 >/dev/null
grep -q '"modules_to_save":\["wte"\]' $W/te1/adapter_config.json
$M import --format peft --in $W/te1 --base $W/gpt2 --out $W/tck2 >/dev/null
$M export --ckpt $W/tck2 --format peft --out $W/te2 >/dev/null
cmp $W/te1/adapter_model.safetensors $W/te2/adapter_model.safetensors && cmp $W/te1/adapter_config.json $W/te2/adapter_config.json
echo "--peft-train: modules_to_save [wte]; export -> import -> export byte-identical"
run i1 1 gpt2 --peft ia3
run i_dp2tp2 4 gpt2 --peft ia3 --dp 2 --tp 2 --zero 3
run i_tp2sp_pp2 4 gpt2 --peft ia3 --tp 2 --sequence-parallel --pp 2
compare i1 i_dp2tp2 i_tp2sp_pp2
run l1 1 llama $LORA
run l_tp2 2 llama $LORA --tp 2
run l_zero2 2 llama $LORA --dp 2 --zero 2
compare l1 l_tp2 l_zero2
run li1 1 llama --peft ia3
run li_tp2 2 llama --peft ia3 --tp 2
compare li1 li_tp2
FREEZE=(--freeze '^(wte|wpe|h\.0\.)')
run f1 1 gpt2 "${FREEZE[@]}"
run f_dp2tp2 4 gpt2 "${FREEZE[@]}" --dp 2 --tp 2 --zero 1
compare f1 f_dp2tp2
# a LoRA run resumed from its checkpoint (adapters and their optimizer state only; the base by
# reference) continues bitwise: 10 steps, then `train --resume DIR --steps 20` alone
mpirun -n 2 $M train --train $W/text_train.bin --batch 8 --micro-batch 2 --steps 10 --lr 3e-3 --data-order sequential \
    --log-every 0 --init-from $W/gpt2 $LORA --dp 2 --zero 3 --ckpt-dir $W/rck >/dev/null
/usr/bin/python3 - $W/rck/manifest.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
names = [t["name"] for t in m["tensors"]]
assert names and all(".lora_" in n for n in names), names[:5]   # adapters and their AdamW moments, nothing of the base
assert m["state"]["base"].endswith("/gpt2"), m["state"].get("base")
print(f"checkpoint: {len(names)} tensors, all adapters; base {m['state']['base']}")
PY
mpirun -n 2 $M train --resume $W/rck --steps 20 --metrics $W/resumed.jsonl >$W/resumed.log 2>&1 || { tail -5 $W/resumed.log; exit 1; }
/usr/bin/python3 - $W/g_zero3.jsonl $W/resumed.jsonl <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
assert a[10:] == b[-10:], (a[10:], b[-10:])
print("resumed LoRA run: steps 11-20 bitwise equal to the uninterrupted run")
PY
# QLoRA (NF4 base with double quantization): every rank holds the whole quantized matrix (a tp rank
# dequantizes its slice), so every layout computes with the same base and gives the one-process
# curve; merge folds the adapters into the dequantized base (logits as the QLoRA model's)
QLORA="--peft lora --lora-r 4 --lora-alpha 8 --lora-targets all-linear --quantize-base nf4 --double-quant"
run q1 1 gpt2 $QLORA --ckpt-dir $W/qck
run q_zero3 2 gpt2 $QLORA --dp 2 --zero 3
run q_pp2 2 gpt2 $QLORA --pp 2
run q_dp2tp2 4 gpt2 $QLORA --dp 2 --tp 2
run q_dp2tp2pp2 8 gpt2 $QLORA --dp 2 --tp 2 --pp 2 --sequence-parallel
compare q1 q_zero3 q_pp2 q_dp2tp2 q_dp2tp2pp2
# bf16 QLoRA (tiles dequantized into bf16 operands): the layouts round gradients to bf16 in different
# places (the dp reduction), so within 1e-4 rather than 1e-5
run qb1 1 gpt2 $QLORA --precision bf16
run qb_dp2tp2 4 gpt2 $QLORA --precision bf16 --dp 2 --tp 2 --zero 3
TOL=1e-4 compare qb1 qb_dp2tp2
run q8l1 1 llama $LORA --quantize-base int8
run q8l_tp2 2 llama $LORA --quantize-base int8 --tp 2
compare q8l1 q8l_tp2
$M merge --ckpt $W/qck --out $W/qmerged --data $W/text_train.bin | tee $W/qmerge.txt
/usr/bin/python3 - $W/qmerge.txt <<'PY'
import re, sys
d = float(re.search(r"largest logit difference ([0-9.e+-]+)", open(sys.argv[1]).read()).group(1))
assert d <= 1e-5, f"merged QLoRA logits differ by {d}"
PY
# a --freeze pattern that matches every tensor is one clear line, not a run that trains nothing
if $M train --train $W/text_train.bin --init-from $W/gpt2 --steps 2 --freeze '.*' --log-every 0 >$W/out.txt 2>$W/err.txt; then
    echo "--freeze '.*' was accepted"; exit 1
fi
[ "$(wc -l <$W/err.txt)" = 1 ] && grep -q "nothing is left to train" $W/err.txt || { cat $W/err.txt; exit 1; }
echo "freeze everything: $(cat $W/err.txt)"
