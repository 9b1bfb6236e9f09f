#!/usr/bin/env bash
# IA3 (--peft ia3: c_attn's output and mlp.c_proj's input scaled by learned
# vectors, peft's GPT-2 defaults). With vectors of ones the model is bitwise
# the base (eval, and merge gives the base's tensors byte for byte). Against
# plain PyTorch (tests/torch_ref.py --ia3) with random vectors from one peft
# IA3 directory imported onto the base: step-0 gradients of every vector to
# 1e-5, 10 AdamW steps to 1e-5 on the loss; merge within 1e-5 of the
# adapted logits; export -> import -> export byte-identical.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus text
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
import sys
import numpy as np
sys.path.insert(0, "tests")
import parity
d, L, C = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(11)
t = {}
for l in range(L):
    t[f"base_model.model.transformer.h.{l}.attn.c_attn.ia3_l"] = rng.uniform(0.5, 1.5, (3 * C, 1)).astype(np.float32)
    t[f"base_model.model.transformer.h.{l}.mlp.c_proj.ia3_l"] = rng.uniform(0.5, 1.5, (1, 4 * C)).astype(np.float32)
parity.write_peft_adapter(d, t, {"peft_type": "IA3", "target_modules": ["c_attn", "mlp.c_proj"],
                                 "feedforward_modules": ["mlp.c_proj"], "fan_in_fan_out": True, "init_ia3_weights": True})
PY
$M import --format peft --in $W/adapter --base $W/base --out $W/ia3 >/dev/null
$M train --train $W/text_train.bin --init-from $W/ia3 $OPT --data-order sequential --dump-grads $W/mt_grads.bin \
    --metrics $W/mt.jsonl --log-every 0 >/dev/null
$PY tests/torch_ref.py --weights $W/base.safetensors --ia3 $W/adapter --data $W/text_train.bin --out-json $W/ref.json \
    --out-grads $W/ref_grads.bin --layers $L --heads $H --vocab $V --seq-len $T --batch $B --steps $STEPS \
    --lr 1e-2 --warmup 3 --lr-schedule cosine --min-lr 1e-3 --grad-clip 0.5 --weight-decay 0.1
$PY - "$W" $L $C <<'PY'
import sys
sys.path.insert(0, "tests")
import parity
w, L, C = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
parity.compare_losses(f"{w}/mt.jsonl", f"{w}/ref.json", 10, 1e-5, label="IA3 losses")
sizes = [(f"h.{l}.{m}.ia3_l", n) for l in range(L) for m, n in (("attn.c_attn", 3 * C), ("mlp.c_proj", 4 * C))]
parity.compare_grads(f"{w}/mt_grads.bin", f"{w}/ref_grads.bin", sizes, 1e-5, label="IA3 vector gradients")
PY
$M merge --ckpt $W/ia3 --out $W/merged --data $W/text_train.bin | tee $W/merge.txt
$PY -c "import re,sys; d=float(re.search(r'difference ([0-9.e+-]+)', open(sys.argv[1]).read()).group(1)); assert d <= 1e-5, d" $W/merge.txt
$M export --ckpt $W/ia3 --format peft --out $W/e1 >/dev/null
$M import --format peft --in $W/e1 --base $W/base --out $W/ia3b >/dev/null
$M export --ckpt $W/ia3b --format peft --out $W/e2 >/dev/null
cmp $W/e1/adapter_model.safetensors $W/e2/adapter_model.safetensors && cmp $W/e1/adapter_config.json $W/e2/adapter_config.json
echo "IA3 export -> import -> export: byte-identical"
# a feedforward_modules / target_modules list longer than meshtrain keeps (256 bytes): one clear
# line, not a write or a pointer past the list's buffer (UBSan found the pointer, fuzz_peft_config)
mkdir -p $W/long
cp $W/adapter/adapter_model.safetensors $W/long/
$PY - $W/long/adapter_config.json <<'PY'
import json, sys
json.dump({"peft_type": "IA3", "target_modules": ["c_attn", "mlp.c_proj"],
           "feedforward_modules": ["mlp.c_proj%d" % i for i in range(40)]}, open(sys.argv[1], "w"))
PY
expect_failure "feedforward_modules is too long" $M import --format peft --in $W/long --base $W/base --out $W/long_ck
$PY - $W/long/adapter_config.json <<'PY'
import json, sys
json.dump({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["c_attn%d" % i for i in range(40)]}, open(sys.argv[1], "w"))
PY
expect_failure "too long" $M import --format peft --in $W/long --base $W/base --out $W/long_ck
# a modules_to_save list past the 256-byte pattern: one line (its escape loop wrote a byte past the
# pattern's buffer; UBSan, fuzz_peft_config)
$PY - $W/long/adapter_config.json <<'PY'
import json, sys
json.dump({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["c_attn"],
           "modules_to_save": ["lm.head%d" % i for i in range(30)]}, open(sys.argv[1], "w"))
PY
expect_failure "modules_to_save is too long" $M import --format peft --in $W/long --base $W/base --out $W/long_ck
