#!/usr/bin/env bash
# PyTorch parity (Debian python3-torch as the oracle, tests/torch_ref.py as
# the reference model). Same initial weights (through safetensors export),
# same batches (sequential order), AdamW + clipping + warmup/cosine:
#   step-0 loss to 1e-5 relative, every gradient tensor to 1e-4
#   (max abs diff / max abs), 10 losses to 1e-4 relative.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus text
L=2; C=64; H=4; V=300; T=32; B=4; STEPS=10
MODEL="--layers $L --dim $C --heads $H --vocab $V --seq-len $T"
OPT="--batch $B --steps $STEPS --lr 1e-3 --warmup 3 --lr-schedule cosine --min-lr 1e-4 --grad-clip 0.5 --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8"
$M train --train $W/text_train.bin $MODEL --steps 0 --seed 5 --ckpt-dir $W/init --log-every 0 >/dev/null
$M export --ckpt $W/init --format safetensors --out $W/init.safetensors >/dev/null
$M train --train $W/text_train.bin --init-from $W/init $OPT --data-order sequential \
    --dump-grads $W/mt_grads.bin --metrics $W/mt.jsonl --log-every 0 >/dev/null
$PY tests/torch_ref.py --weights $W/init.safetensors --data $W/text_train.bin --out-json $W/ref.json \
    --out-grads $W/ref_grads.bin --layers $L --heads $H --vocab $V --seq-len $T --batch $B --steps $STEPS \
    --lr 1e-3 --warmup 3 --lr-schedule cosine --min-lr 1e-4 --grad-clip 0.5 --weight-decay 0.1
$PY - "$W" $L $C $V $T <<'PY'
import sys
sys.path.insert(0, "tests")
import parity
w, L, C, V, T = sys.argv[1], *map(int, sys.argv[2:])
Vp = (V + 127) // 128 * 128
parity.compare_losses(f"{w}/mt.jsonl", f"{w}/ref.json", 10, 1e-4, step0_tol=1e-5)
sizes = [("wte", Vp * C), ("wpe", T * C)]
for l in range(L):
    sizes += [(f"h.{l}.ln_1.weight", C), (f"h.{l}.ln_1.bias", C), (f"h.{l}.attn.c_attn.weight", 3 * C * C),
              (f"h.{l}.attn.c_attn.bias", 3 * C), (f"h.{l}.attn.c_proj.weight", C * C), (f"h.{l}.attn.c_proj.bias", C),
              (f"h.{l}.ln_2.weight", C), (f"h.{l}.ln_2.bias", C), (f"h.{l}.mlp.c_fc.weight", 4 * C * C),
              (f"h.{l}.mlp.c_fc.bias", 4 * C), (f"h.{l}.mlp.c_proj.weight", 4 * C * C), (f"h.{l}.mlp.c_proj.bias", C)]
sizes += [("ln_f.weight", C), ("ln_f.bias", C)]
parity.compare_grads(f"{w}/mt_grads.bin", f"{w}/ref_grads.bin", sizes, 1e-4)
print("parity OK")
PY
