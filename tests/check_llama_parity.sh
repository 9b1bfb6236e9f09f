#!/usr/bin/env bash
# PyTorch parity for the Llama family (Debian python3-torch as the oracle,
# tests/torch_llama.py as the reference model): random weights written as a
# Hugging Face directory by the reference, `meshtrain import --format hf`,
# then `train --init-from` and the reference run the same batches
# (sequential order) with AdamW + clipping + warmup/cosine:
#   step-0 loss to 1e-6 relative, every gradient tensor to 1e-5
#   (max abs diff / max abs), 10 losses to 1e-5 relative.
# Four models, all with grouped-query attention (4 heads, 2 kv heads) and
# random norm weights: untied; Llama 3.1 rope scaling; q/k/v biases
# (Qwen2); a tied head.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
L=2; C=64; H=4; KV=2; F=96; V=300; T=32; B=4; STEPS=10
OPT="--batch $B --steps $STEPS --lr 1e-3 --warmup 3 --lr-schedule cosine --min-lr 1e-4 --grad-clip 0.5 --weight-decay 0.1
     --beta1 0.9 --beta2 0.95 --eps 1e-8"
declare -A CASES=(
    [untied]="--tie 0"
    [rope_llama3]="--tie 0 --rope-scaling llama3 --rope-factor 8 --rope-low 1 --rope-high 4 --rope-orig 16 --rope-theta 500000"
    [qkv_bias]="--tie 0 --qkv-bias 1"
    [tied]="--tie 1"
)
for c in untied rope_llama3 qkv_bias tied; do
    $PY tests/torch_llama.py init --out $W/hf_$c --layers $L --dim $C --heads $H --kv-heads $KV --ffn $F --vocab $V \
        --max-pos $T --seed 7 ${CASES[$c]}
    $M import --format hf --in $W/hf_$c --out $W/ck_$c >/dev/null
    $M train --train $W/d_train.bin --init-from $W/ck_$c $OPT --data-order sequential --dump-grads $W/mt_$c.bin \
        --metrics $W/mt_$c.jsonl --log-every 0 >/dev/null
    $PY tests/torch_llama.py train --model $W/hf_$c --data $W/d_train.bin --seq-len $T $OPT --out-json $W/ref_$c.json \
        --out-grads $W/ref_$c.bin --grad-vocab-rows $(( (V + 127) / 128 * 128 ))
    $PY - $W $c $L $C $H $KV $F $V "${CASES[$c]}" <<'PY'
import sys
sys.path.insert(0, "tests")
import parity
w, c = sys.argv[1], sys.argv[2]
L, C, H, KV, F, V = map(int, sys.argv[3:9])
flags = sys.argv[9]
tied, bias = "--tie 1" in flags, "--qkv-bias 1" in flags
Vp, hd = (V + 127) // 128 * 128, C // H
QW, KW = H * hd, KV * hd
parity.compare_losses(f"{w}/mt_{c}.jsonl", f"{w}/ref_{c}.json", 10, 1e-5, step0_tol=1e-6, label=f"{c} losses")
sizes = [("model.embed_tokens.weight", Vp * C)]
for l in range(L):
    p = f"model.layers.{l}."
    sizes += [(p + "input_layernorm.weight", C), (p + "q_proj.weight", QW * C), (p + "k_proj.weight", KW * C),
              (p + "v_proj.weight", KW * C)]
    if bias:
        sizes += [(p + "q_proj.bias", QW), (p + "k_proj.bias", KW), (p + "v_proj.bias", KW)]
    sizes += [(p + "o_proj.weight", C * QW), (p + "post_attention_layernorm.weight", C), (p + "gate_proj.weight", F * C),
              (p + "up_proj.weight", F * C), (p + "down_proj.weight", C * F)]
sizes += [("model.norm.weight", C)] + ([] if tied else [("lm_head.weight", Vp * C)])
parity.compare_grads(f"{w}/mt_{c}.bin", f"{w}/ref_{c}.bin", sizes, 1e-5, label=f"{c} gradients")
PY
done
echo "parity OK"
