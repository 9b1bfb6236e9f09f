#!/usr/bin/env bash
# LoRA against plain PyTorch (tests/torch_ref.py --lora: W x + b + s B A x on
# a frozen base, no peft library). A and a non-zero B come from one peft
# adapter directory written here, which meshtrain imports (import --format
# peft) onto the same base: step-0 gradients of every adapter tensor to
# 1e-5 (max abs diff / max abs), no base gradient on either side, 10 AdamW
# steps with clipping and a cosine schedule to 1e-5 relative on the loss.
# Then the adapter files: export -> import -> export is byte-identical, and
# a target the model lacks, a rank mismatch and an unknown peft_type are
# one clear line each.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus text
L=2; C=64; H=4; V=300; T=32; B=4; STEPS=10; R=4; ALPHA=8
MODEL="--layers $L --dim $C --heads $H --vocab $V --seq-len $T"
OPT="--batch $B --steps $STEPS --lr 1e-3 --warmup 3 --lr-schedule cosine --min-lr 1e-4 --grad-clip 0.5 --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8"
$M train --train $W/text_train.bin $MODEL --steps 0 --seed 5 --ckpt-dir $W/base --log-every 0 >/dev/null
$M export --ckpt $W/base --format safetensors --out $W/base.safetensors >/dev/null
# the adapter: every linear of every block, A and B drawn at random (B non-zero)
$PY - $W/adapter $L $C $R $ALPHA <<'PY'
import sys
import numpy as np
sys.path.insert(0, "tests")
import parity
d, L, C, r, alpha = sys.argv[1], *map(int, sys.argv[2:])
rng = np.random.default_rng(7)
shapes = {"attn.c_attn": (3 * C, C), "attn.c_proj": (C, C), "mlp.c_fc": (4 * C, C), "mlp.c_proj": (C, 4 * C)}
tensors = {}
for l in range(L):
    for mod, (out, inp) in shapes.items():
        k = f"base_model.model.transformer.h.{l}.{mod}"
        tensors[k + ".lora_A.weight"] = rng.uniform(-1, 1, (r, inp)).astype(np.float32) / np.sqrt(inp)
        tensors[k + ".lora_B.weight"] = rng.normal(0, 0.05, (out, r)).astype(np.float32)
parity.write_peft_adapter(d, tensors, {"peft_type": "LORA", "r": r, "lora_alpha": alpha, "lora_dropout": 0.0,
                                       "fan_in_fan_out": True, "target_modules": ["c_attn", "c_proj", "c_fc"],
                                       "bias": "none", "use_rslora": False})
PY
$M import --format peft --in $W/adapter --base $W/base --out $W/lora >/dev/null
$M train --train $W/text_train.bin --init-from $W/lora $OPT --data-order sequential \
    --dump-grads $W/mt_grads.bin --metrics $W/mt.jsonl --log-every 0 >/dev/null
$PY tests/torch_ref.py --weights $W/base.safetensors --lora $W/adapter --data $W/text_train.bin --out-json $W/ref.json \
    --out-grads $W/ref_grads.bin --layers $L --heads $H --vocab $V --seq-len $T --batch $B --steps $STEPS \
    --lr 1e-3 --warmup 3 --lr-schedule cosine --min-lr 1e-4 --grad-clip 0.5 --weight-decay 0.1
$PY - "$W" $L $C $R <<'PY'
import sys
sys.path.insert(0, "tests")
import parity
w, L, C, r = sys.argv[1], *map(int, sys.argv[2:])
parity.compare_losses(f"{w}/mt.jsonl", f"{w}/ref.json", 10, 1e-5, label="LoRA losses")
sizes = []
for l in range(L):
    for mod, (out, inp) in [("attn.c_attn", (3 * C, C)), ("attn.c_proj", (C, C)), ("mlp.c_fc", (4 * C, C)), ("mlp.c_proj", (C, 4 * C))]:
        sizes += [(f"h.{l}.{mod}.lora_A", r * inp), (f"h.{l}.{mod}.lora_B", out * r)]
# meshtrain dumps the trainable tensors only: their sizes are the adapters' and nothing of the base
parity.compare_grads(f"{w}/mt_grads.bin", f"{w}/ref_grads.bin", sizes, 1e-5, label="LoRA adapter gradients")
print("LoRA parity OK")
PY
# export -> import -> export: the same bytes
$M export --ckpt $W/lora --format peft --out $W/e1 >/dev/null
$M import --format peft --in $W/e1 --base $W/base --out $W/lora2 >/dev/null
$M export --ckpt $W/lora2 --format peft --out $W/e2 >/dev/null
cmp $W/e1/adapter_model.safetensors $W/e2/adapter_model.safetensors
cmp $W/e1/adapter_config.json $W/e2/adapter_config.json
echo "export -> import -> export: byte-identical"
# bad adapters: one clear line each
bad() { # name, sed expression on adapter_config.json, expected text
    rm -rf $W/bad && cp -r $W/e1 $W/bad && sed -i "$2" $W/bad/adapter_config.json
    if $M import --format peft --in $W/bad --base $W/base --out $W/badck 2>$W/err; then echo "$1: accepted"; exit 1; fi
    [ "$(wc -l < $W/err)" -eq 1 ] && grep -q "$3" $W/err || { echo "$1:"; cat $W/err; exit 1; }
    echo "$1: $(cat $W/err)"
}
bad "missing target" 's/"c_attn"/"q_proj"/' "names no linear module"
bad "rank mismatch" 's/"r":4/"r":8/' "rank"
bad "unknown peft_type" 's/"LORA"/"PREFIX_TUNING"/' "not supported"
# merge: the folded model's logits equal the adapted model's, and eval agrees
$M merge --ckpt $W/lora --out $W/merged --data $W/text_train.bin | tee $W/merge.txt
/usr/bin/python3 - $W/merge.txt <<'PY'
import re, sys
d = float(re.search(r"largest logit difference ([0-9.e+-]+)", open(sys.argv[1]).read()).group(1))
assert d <= 1e-5, f"merged logits differ by {d}"
PY
a=$($M eval --ckpt $W/lora --val $W/text_val.bin --batches 4 | awk '{print $2}')
b=$($M eval --ckpt $W/merged --val $W/text_val.bin --batches 4 | awk '{print $2}')
echo "eval: adapted $a, merged $b"
/usr/bin/python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); assert abs(a - b) <= 1e-6 * abs(a), (a, b)" $a $b
# Llama (grouped-query attention, q/k/v biases: the fused q|k|v GEMM holds three targets) against
# tests/torch_llama.py --lora: an adapter on every linear with random A and B
$PY tests/torch_llama.py init --out $W/hf_llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 96 --vocab $V \
    --max-pos $T --seed 7 --qkv-bias 1
$M import --format hf --in $W/hf_llama --out $W/llama >/dev/null
$PY - $W/ladapter <<'PY'
import sys
import numpy as np
sys.path.insert(0, "tests")
import parity
rng = np.random.default_rng(3)
r, C, hd, H, KV, F = 4, 64, 16, 4, 2, 96
shapes = {"self_attn.q_proj": (H * hd, C), "self_attn.k_proj": (KV * hd, C), "self_attn.v_proj": (KV * hd, C),
          "self_attn.o_proj": (C, H * hd), "mlp.gate_proj": (F, C), "mlp.up_proj": (F, C), "mlp.down_proj": (C, F)}
t = {}
for l in range(2):
    for mod, (o, i) in shapes.items():
        k = f"base_model.model.model.layers.{l}.{mod}"
        t[k + ".lora_A.weight"] = rng.uniform(-1, 1, (r, i)).astype(np.float32) / np.sqrt(i)
        t[k + ".lora_B.weight"] = rng.normal(0, 0.05, (o, r)).astype(np.float32)
parity.write_peft_adapter(sys.argv[1], t, {"peft_type": "LORA", "r": r, "lora_alpha": 8, "lora_dropout": 0.0,
                                           "target_modules": "all-linear", "bias": "none", "use_rslora": True})
PY
$M import --format peft --in $W/ladapter --base $W/llama --out $W/llora >/dev/null
$M train --train $W/text_train.bin --init-from $W/llora $OPT --data-order sequential \
    --dump-grads $W/lmt_grads.bin --metrics $W/lmt.jsonl --log-every 0 >/dev/null
$PY tests/torch_llama.py train --model $W/hf_llama --lora $W/ladapter --data $W/text_train.bin --seq-len $T $OPT \
    --out-json $W/lref.json --out-grads $W/lref_grads.bin
$PY - "$W" <<'PY'
import sys
sys.path.insert(0, "tests")
import parity
w = sys.argv[1]
parity.compare_losses(f"{w}/lmt.jsonl", f"{w}/lref.json", 10, 1e-5, label="Llama LoRA (rslora, all-linear) losses")
r, C, hd, H, KV, F = 4, 64, 16, 4, 2, 96
mods = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
shapes = [(H * hd, C), (KV * hd, C), (KV * hd, C), (C, H * hd), (F, C), (F, C), (C, F)]
sizes = [(f"layers.{l}.{m}.lora_{ab}", n) for l in range(2) for m, (o, i) in zip(mods, shapes)
         for ab, n in (("A", r * i), ("B", o * r))]
parity.compare_grads(f"{w}/lmt_grads.bin", f"{w}/lref_grads.bin", sizes, 1e-5, label="Llama LoRA adapter gradients")
PY
