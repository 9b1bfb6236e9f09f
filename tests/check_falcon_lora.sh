#!/usr/bin/env bash
# LoRA on Falcon (grouped form, two LayerNorms) against the PyTorch
# reference (tests/torch_falcon.py --lora: W x + s B A x on a frozen base):
# a peft adapter on the four linears (query_key_value, dense,
# dense_h_to_4h, dense_4h_to_h) with random A and non-zero B, imported onto
# the imported base: step-0 adapter gradients to 1e-5, 10 AdamW steps to
# 1e-5 relative. Then LoRA trained by meshtrain from the base (the family's
# default target query_key_value, and all-linear under tp2) exports a peft
# adapter whose keys and target_modules name Falcon's modules, and
# export -> import -> export is byte-identical; multi-query LoRA under tp2
# equals one process.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
L=2; C=64; H=4; KV=2; V=300; T=32; R=4; F=256
OPT="--batch 4 --steps 10 --lr 1e-3 --warmup 3 --lr-schedule cosine --min-lr 1e-4 --grad-clip 0.5 --weight-decay 0.1
     --beta1 0.9 --beta2 0.95 --eps 1e-8"
$PY tests/torch_falcon.py init --out $W/hf --form gqa --layers $L --dim $C --heads $H --kv-heads $KV --vocab $V \
    --max-pos $T --tie 1 --seed 11
$M import --format hf --in $W/hf --out $W/base >/dev/null
$PY - $W/adapter $L $C $H $KV $R $F <<'PY'
import sys
import numpy as np
sys.path.insert(0, "tests")
import parity
d, L, C, H, KV, r, F = sys.argv[1], *map(int, sys.argv[2:])
hd = C // H
rng = np.random.default_rng(5)
shapes = {"self_attention.query_key_value": ((H + 2 * KV) * hd, C), "self_attention.dense": (C, H * hd),
          "mlp.dense_h_to_4h": (F, C), "mlp.dense_4h_to_h": (C, F)}
t = {}
for l in range(L):
    for mod, (o, i) in shapes.items():
        k = f"base_model.model.transformer.h.{l}.{mod}"
        t[k + ".lora_A.weight"] = rng.uniform(-1, 1, (r, i)).astype(np.float32) / np.sqrt(i)
        t[k + ".lora_B.weight"] = rng.normal(0, 0.05, (o, r)).astype(np.float32)
parity.write_peft_adapter(d, t, {"peft_type": "LORA", "r": r, "lora_alpha": 8, "lora_dropout": 0.0,
                                 "target_modules": ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
                                 "bias": "none", "use_rslora": False})
PY
$M import --format peft --in $W/adapter --base $W/base --out $W/lora >/dev/null
$M train --train $W/d_train.bin --init-from $W/lora $OPT --data-order sequential --dump-grads $W/mt_grads.bin \
    --metrics $W/mt.jsonl --log-every 0 >/dev/null
$PY tests/torch_falcon.py train --model $W/hf --lora $W/adapter --data $W/d_train.bin --seq-len $T $OPT \
    --out-json $W/ref.json --out-grads $W/ref_grads.bin
$PY - $W $L $C $H $KV $R $F <<'PY'
import sys
sys.path.insert(0, "tests")
import parity
w, L, C, H, KV, r, F = sys.argv[1], *map(int, sys.argv[2:])
hd = C // H
parity.compare_losses(f"{w}/mt.jsonl", f"{w}/ref.json", 10, 1e-5, label="falcon LoRA losses")
shapes = [("query_key_value", (H + 2 * KV) * hd, C), ("dense", C, H * hd), ("dense_h_to_4h", F, C), ("dense_4h_to_h", C, F)]
sizes = [(f"h.{l}.{m}.lora_{ab}", n) for l in range(L) for m, o, i in shapes for ab, n in (("A", r * i), ("B", o * r))]
parity.compare_grads(f"{w}/mt_grads.bin", f"{w}/ref_grads.bin", sizes, 1e-5, label="falcon LoRA adapter gradients")
PY

echo "== LoRA trained by meshtrain, exported as peft =="
check_adapter() { # DIR TARGETS...
    $PY - "$@" <<'PY'
import json, sys
sys.path.insert(0, "tests")
from torch_llama import read_safetensors
d, targets = sys.argv[1], sys.argv[2:]
cfg = json.load(open(d + "/adapter_config.json"))
t = read_safetensors(d + "/adapter_model.safetensors")
got = sorted(set(k.split(".")[-3] for k in t))
tm = cfg["target_modules"]  # as given: a list, or peft's "all-linear"
assert (tm == "all-linear" or sorted(tm) == sorted(targets)) and got == sorted(targets), (tm, got, targets)
assert all(k.startswith("base_model.model.transformer.h.") for k in t), list(t)[:3]
print(f"{d.split('/')[-1]}: {len(t)} tensors, target_modules {cfg['target_modules']}")
PY
}
LORA="--peft lora --lora-r 4 --lora-alpha 8"
$M train --train $W/d_train.bin --init-from $W/base $LORA --batch 4 --steps 10 --lr 2e-3 --ckpt-dir $W/own \
    --metrics $W/own.jsonl --log-every 0 >/dev/null
$MPI -np 2 $M train --train $W/d_train.bin --init-from $W/base $LORA --lora-targets all-linear --tp 2 --batch 4 \
    --steps 10 --lr 2e-3 --ckpt-dir $W/all --metrics $W/all.jsonl --log-every 0 >/dev/null
$M train --train $W/d_train.bin --init-from $W/base $LORA --lora-targets all-linear --batch 4 --steps 10 --lr 2e-3 \
    --ckpt-dir $W/all1 --metrics $W/all1.jsonl --log-every 0 >/dev/null
$PY - $W/own.jsonl $W/all.jsonl $W/all1.jsonl <<'PY'
import json, sys
ls = [[json.loads(x)["loss"] for x in open(f) if '"loss"' in x] for f in sys.argv[1:]]
for f, l in zip(sys.argv[1:], ls):
    assert l[-1] < l[0], (f, l[0], l[-1])
    print(f"{f.split('/')[-1]}: loss {l[0]:.4f} -> {l[-1]:.4f}")
worst = max(abs(a - b) / b for a, b in zip(ls[1], ls[2]))
print(f"all-linear LoRA under tp2 within {worst:.2g} of one process")
assert worst <= 1e-5
PY
$M export --ckpt $W/own --format peft --out $W/own_peft >/dev/null
$M export --ckpt $W/all --format peft --out $W/all_peft >/dev/null
$M export --ckpt $W/all1 --format peft --out $W/all1_peft >/dev/null
$PY - $W/all_peft $W/all1_peft <<'PY'
import sys
sys.path.insert(0, "tests")
from torch_llama import read_safetensors
a, b = (read_safetensors(d + "/adapter_model.safetensors") for d in sys.argv[1:])
worst = max(float((a[k] - b[k]).abs().max() / b[k].abs().max()) for k in b)
print(f"tp2 and one-process peft exports: {len(b)} tensors, max|diff|/max within {worst:.2g}")
assert sorted(a) == sorted(b) and worst <= 1e-4
PY
check_adapter $W/own_peft query_key_value
check_adapter $W/all_peft query_key_value dense dense_h_to_4h dense_4h_to_h
$M import --format peft --in $W/all_peft --base $W/base --out $W/all2 >/dev/null
$M export --ckpt $W/all2 --format peft --out $W/all_peft2 >/dev/null
cmp $W/all_peft/adapter_model.safetensors $W/all_peft2/adapter_model.safetensors
cmp $W/all_peft/adapter_config.json $W/all_peft2/adapter_config.json
echo "peft export -> import -> export byte-identical"
# multi-query under tp2: the one kv group, and LoRA's pair on query_key_value, on both ranks
MQ="--train $W/d_train.bin --family falcon --layers 2 --dim 64 --heads 4 --kv-heads 1 --seq-len 32 --batch 4 --steps 10
    --lr 2e-3 --log-every 0 $LORA --lora-targets all-linear"
$M train $MQ --metrics $W/mq1.jsonl >/dev/null
$MPI -np 2 $M train $MQ --tp 2 --metrics $W/mq2.jsonl >/dev/null
$PY - $W/mq1.jsonl $W/mq2.jsonl <<'PY'
import json, sys
a, b = ([json.loads(x)["loss"] for x in open(f) if '"loss"' in x] for f in sys.argv[1:])
worst = max(abs(x - y) / y for x, y in zip(a, b))
print(f"multi-query LoRA all-linear: {a[0]:.4f} -> {a[-1]:.4f}, tp2 within {worst:.2g} of one process")
assert len(a) == len(b) == 10 and worst <= 1e-5 and a[-1] < a[0]
PY
echo OK
