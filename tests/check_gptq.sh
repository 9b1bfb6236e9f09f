#!/usr/bin/env bash
# GPTQ (quant/gptq.h, `meshtrain quantize --method gptq`):
#  - one layer against tests/gptq_ref.py, a PyTorch float64 re-implementation
#    of the published algorithm on the same Hessian (4 and 8 bits, groups of
#    32..256, act order on and off, symmetric and asymmetric grids): codes
#    equal except at rounding ties (counted; none on this data), scales within
#    1e-6, order and g_idx equal; test_gptq itself checks GPTQ's layer output
#    error below round-to-nearest's on the same grid;
#  - a model (GPT-2 and Llama, 2 layers): `quantize --method gptq` under
#    mpirun -np 2 (calibration samples split, Hessians summed) writes the
#    same bytes as one process (the sums' order differs, ~1e-16 relative in
#    H: a code would flip only for a weight that close to a rounding tie); tests/gptq_unpack.py, a reference unpacker of
#    the Hugging Face GPTQ layout, decodes every layer to exactly the weights
#    `meshtrain import` reads from the directory (the other tensors byte for
#    byte); `meshtrain eval` on the imported model stays within 2% of the
#    fp32 model's loss;
#  - bad input (no --calib, --bits 3, a group size not dividing a layer's
#    columns): one error line each, nothing written.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
$BUILD/tests/test_gptq --dump "$W/layer.bin"
$PY tests/gptq_ref.py "$W/layer.bin"

corpus text
for fam in gpt2 llama; do
    F="--layers 2 --dim 64 --heads 4 --seq-len 32"
    [ $fam = llama ] && F="--family llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --seq-len 32"
    $M train --train $W/text_train.bin $F --batch 8 --steps 60 --lr 3e-3 --log-every 0 --ckpt-dir $W/$fam >/dev/null
    Q="--ckpt $W/$fam --method gptq --bits 4 --group-size 32 --act-order --calib $W/text_train.bin --calib-samples 16"
    $M quantize $Q --out $W/${fam}_g1 >/dev/null
    $MPI -np 2 $M quantize $Q --out $W/${fam}_g2 >/dev/null
    cmp $W/${fam}_g1/model.safetensors $W/${fam}_g2/model.safetensors
    cmp $W/${fam}_g1/config.json $W/${fam}_g2/config.json
    echo "$fam: GPTQ on 2 ranks (Hessians summed) = 1 process, byte for byte"
    $M import --format hf --in $W/${fam}_g1 --out $W/${fam}_gck >/dev/null
    $M export --ckpt $W/${fam}_gck --format hf --out $W/${fam}_gfp >/dev/null
    $PY tests/gptq_unpack.py $W/${fam}_g1 $W/${fam}_gfp
    $M eval --ckpt $W/$fam --val $W/text_val.bin --batches 10 >$W/fp.txt
    $M eval --ckpt $W/${fam}_gck --val $W/text_val.bin --batches 10 >$W/q.txt
    $PY - $W/fp.txt $W/q.txt $fam <<'PY'
import sys
fp, q = (float(open(p).read().split()[1]) for p in sys.argv[1:3])
assert abs(q - fp) <= 0.02 * fp, f"GPTQ val loss {q} vs fp32 {fp}"
print(f"{sys.argv[3]}: val_loss fp32 {fp:.5f}, 4-bit GPTQ {q:.5f} ({(q - fp) / fp * 100:+.2f}%)")
PY
done
C="--ckpt $W/gpt2 --out $W/bad"
expect_failure "needs calibration data: --calib" $M quantize $C --method gptq
expect_failure "bits must be 4 or 8" $M quantize $C --method gptq --calib $W/text_train.bin --bits 3
expect_failure "group-size 48 does not divide" $M quantize $C --method gptq --calib $W/text_train.bin --group-size 48
[ ! -e $W/bad ] || { echo "a failed quantize left $W/bad behind"; exit 1; }
echo OK
