#!/usr/bin/env bash
# IA3 (--peft ia3: c_attn's output and mlp.c_proj's input scaled by learned
# vectors, peft's GPT-2 defaults). With vectors of ones the model is bitwise
# the base (eval, and merge gives the base's tensors byte for byte). Against
# plain PyTorch (tests/torch_ref.py --ia3) with random vectors from one peft
# IA3 directory imported onto the base: step-0 gradients of every vector to
# 1e-5, 10 AdamW steps to 1e-5 on the loss; merge within 1e-5 of the
# adapted logits; export -> import -> export byte-identical.
set -euo pipefail
cd "$(dirname "$0")/.."
M=${MT_BUILD:-build}/meshtrain; PY=/usr/bin/python3
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
bash tests/corpus.sh $W/corpus.txt
$M tokenize --tokenizer byte --out $W/text $W/corpus.txt >/dev/null
L=2; C=64; H=4; V=300; T=32; B=4; STEPS=10
MODEL="--layers $L --dim $C --heads $H --vocab $V --seq-len $T"
OPT="--batch $B --steps $STEPS --lr 1e-2 --warmup 3 --lr-schedule cosine --min-lr 1e-3 --grad-clip 0.5 --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8"
$M train --train $W/text_train.bin $MODEL --steps 0 --seed 5 --ckpt-dir $W/base --log-every 0 >/dev/null
$M export --ckpt $W/base --format safetensors --out $W/base.safetensors >/dev/null
# vectors of ones: the base itself
$M train --train $W/text_train.bin --init-from $W/base --steps 0 --peft ia3 --ckpt-dir $W/ones --log-every 0 >/dev/null
# the first step's loss (all 17 digits) of the base and of IA3 with ones on the same batch
$M train --train $W/text_train.bin --init-from $W/base --steps 1 --lr 0 --data-order sequential --metrics $W/b.jsonl --log-every 0 >/dev/null
$M train --train $W/text_train.bin --init-from $W/base --steps 1 --lr 0 --data-order sequential --peft ia3 --metrics $W/o.jsonl --log-every 0 >/dev/null
a=$(grep -o '"loss":[0-9.e+-]*' $W/b.jsonl); b=$(grep -o '"loss":[0-9.e+-]*' $W/o.jsonl)
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "IA3 with ones: $b is not the base's $a"; exit 1; }
$M merge --ckpt $W/ones --out $W/ones_merged >/dev/null
$M export --ckpt $W/ones_merged --format safetensors --out $W/ones.safetensors >/dev/null
cmp $W/base.safetensors $W/ones.safetensors
echo "IA3 with vectors of ones: loss bitwise the base's ($a); merged tensors byte-identical to the base"
$PY - $W/adapter $L $C <<'PY'
import json, os, struct, sys
import numpy as np
d, L, C = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(d)
rng = np.random.default_rng(11)
t = {}
for l in range(L):
    t[f"base_model.model.transformer.h.{l}.attn.c_attn.ia3_l"] = rng.uniform(0.5, 1.5, (3 * C, 1)).astype(np.float32)
    t[f"base_model.model.transformer.h.{l}.mlp.c_proj.ia3_l"] = rng.uniform(0.5, 1.5, (1, 4 * C)).astype(np.float32)
header, off = {}, 0
for k, v in t.items():
    header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + v.nbytes]}
    off += v.nbytes
h = json.dumps(header).encode()
with open(f"{d}/adapter_model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(v.tobytes() for v in t.values()))
json.dump({"peft_type": "IA3", "target_modules": ["c_attn", "mlp.c_proj"], "feedforward_modules": ["mlp.c_proj"],
           "fan_in_fan_out": True, "init_ia3_weights": True}, open(f"{d}/adapter_config.json", "w"))
PY
$M import --format peft --in $W/adapter --base $W/base --out $W/ia3 >/dev/null
$M train --train $W/text_train.bin --init-from $W/ia3 $OPT --data-order sequential --dump-grads $W/mt_grads.bin \
    --metrics $W/mt.jsonl --log-every 0 >/dev/null
$PY tests/torch_ref.py --weights $W/base.safetensors --ia3 $W/adapter --data $W/text_train.bin --out-json $W/ref.json \
    --out-grads $W/ref_grads.bin --layers $L --heads $H --vocab $V --seq-len $T --batch $B --steps $STEPS \
    --lr 1e-2 --warmup 3 --lr-schedule cosine --min-lr 1e-3 --grad-clip 0.5 --weight-decay 0.1
$PY - "$W" $L $C <<'PY'
import json, sys
import numpy as np
w, L, C = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
mt = [json.loads(l)["loss"] for l in open(f"{w}/mt.jsonl") if '"loss"' in l]
ref = json.load(open(f"{w}/ref.json"))["losses"]
worst = max(abs(a - b) / abs(b) for a, b in zip(mt, ref))
print(f"IA3 losses meshtrain {mt[0]:.7f} .. {mt[-1]:.7f}, torch {ref[0]:.7f} .. {ref[-1]:.7f}: worst relative {worst:.2e}")
assert len(mt) == len(ref) == 10 and worst <= 1e-5
g1 = np.fromfile(f"{w}/mt_grads.bin", dtype=np.float32).astype(np.float64)
g2 = np.fromfile(f"{w}/ref_grads.bin", dtype=np.float32).astype(np.float64)
sizes = [n for l in range(L) for n in (3 * C, 4 * C)]
assert g1.size == g2.size == sum(sizes), (g1.size, g2.size)
off, worst = 0, 0.0
for n in sizes:
    worst = max(worst, np.abs(g1[off:off + n] - g2[off:off + n]).max() / np.abs(g2[off:off + n]).max())
    off += n
print(f"{len(sizes)} IA3 vector gradients: worst max|diff|/max|ref| {worst:.2e}")
assert worst <= 1e-5
PY
$M merge --ckpt $W/ia3 --out $W/merged --data $W/text_train.bin | tee $W/merge.txt
$PY -c "import re,sys; d=float(re.search(r'difference ([0-9.e+-]+)', open(sys.argv[1]).read()).group(1)); assert d <= 1e-5, d" $W/merge.txt
$M export --ckpt $W/ia3 --format peft --out $W/e1 >/dev/null
$M import --format peft --in $W/e1 --base $W/base --out $W/ia3b >/dev/null
$M export --ckpt $W/ia3b --format peft --out $W/e2 >/dev/null
cmp $W/e1/adapter_model.safetensors $W/e2/adapter_model.safetensors && cmp $W/e1/adapter_config.json $W/e2/adapter_config.json
echo "IA3 export -> import -> export: byte-identical"
