#!/usr/bin/env bash
# Trainer properties on a tiny model (byte-level fortunes corpus, tests/corpus.sh):
#  - gradient accumulation: B=8 as 1x8, 2x4, 8x1 gives equal losses and
#    equal parameters after 5 steps (1e-5), dropout on;
#  - resume: 20 steps straight vs 10 + --resume + 10: identical losses and
#    identical final parameters (bitwise);
#  - eval and generate run on the checkpoint.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus text
T="--train $W/text_train.bin --layers 2 --dim 64 --heads 4 --seq-len 32 --lr 1e-3 --dropout 0.1 --grad-clip 1.0 --log-every 0"

echo "== gradient accumulation =="
# Same global batch as 1x8, 2x4 and 8x1: first-step gradients, 5 AdamW losses
# and the parameters after 5 SGD steps agree to 1e-5. AdamW parameters are
# compared at 1e-3: Adam divides by sqrt(v), which turns round-off in
# gradients that are mathematically zero (the key bias: softmax ignores a
# per-row constant) into lr-sized steps of either sign.
for mb in 8 4 1; do
    $M train $T --batch 8 --micro-batch $mb --steps 5 --warmup 2 --ckpt-dir $W/acc$mb --metrics $W/acc$mb.jsonl \
        --dump-grads $W/acc$mb.grads >/dev/null
    $M export --ckpt $W/acc$mb --format safetensors --out $W/acc$mb.safetensors >/dev/null
    $M train $T --batch 8 --micro-batch $mb --steps 5 --optimizer sgd --lr 0.05 --ckpt-dir $W/sgd$mb >/dev/null
    $M export --ckpt $W/sgd$mb --format safetensors --out $W/sgd$mb.safetensors >/dev/null
done
$PY - "$W" <<'PY'
import json, sys
w = sys.argv[1]
L = {mb: [json.loads(l)["loss"] for l in open(f"{w}/acc{mb}.jsonl")] for mb in (8, 4, 1)}
for mb in (4, 1):
    for a, b in zip(L[mb], L[8]):
        assert abs(a - b) <= 1e-5 * abs(b), f"micro-batch {mb}: loss {a} vs {b}"
print("losses equal within 1e-5:", L[8])
PY
for mb in 4 1; do
    $PY tests/compare_tensors.py $W/acc$mb.grads $W/acc8.grads --tol 1e-5
    $PY tests/compare_tensors.py $W/sgd$mb.safetensors $W/sgd8.safetensors --tol 1e-5
    $PY tests/compare_tensors.py $W/acc$mb.safetensors $W/acc8.safetensors --tol 1e-3
done

echo "== resume =="
$M train $T --batch 8 --steps 20 --ckpt-dir $W/straight --ckpt-every 5 --metrics $W/straight.jsonl >/dev/null
$M train $T --batch 8 --steps 10 --ckpt-dir $W/resumed --metrics $W/resumed.jsonl >/dev/null
$M train $T --batch 8 --steps 20 --ckpt-dir $W/resumed --resume --metrics $W/resumed.jsonl >$W/resume.out
grep -q "resumed from" $W/resume.out
cut -d, -f1-2 $W/straight.jsonl > $W/s.txt; cut -d, -f1-2 $W/resumed.jsonl > $W/r.txt
[ "$(wc -l < $W/s.txt)" = 20 ] || { echo "expected 20 metric lines"; exit 1; }
diff $W/s.txt $W/r.txt && echo "losses bitwise identical over 20 steps"
$M export --ckpt $W/straight --format safetensors --out $W/s.safetensors >/dev/null
$M export --ckpt $W/resumed --format safetensors --out $W/r.safetensors >/dev/null
cmp $W/s.safetensors $W/r.safetensors && echo "final parameters bitwise identical"
# a resume with a different batch is refused
if $M train $T --batch 4 --steps 30 --ckpt-dir $W/resumed --resume 2>$W/err.txt; then echo "resume with another batch was accepted"; exit 1; fi
grep -q "resuming needs the same batch" $W/err.txt

echo "== eval / generate =="
$M eval --ckpt $W/straight --val $W/text_val.bin --batches 4 >$W/eval.out
grep -q "val_loss" $W/eval.out
$M generate --ckpt $W/straight --prompt "ROMEO:" --tokens 10 --seed 3 > $W/g1.txt
$M generate --ckpt $W/straight --prompt "ROMEO:" --tokens 10 --seed 3 > $W/g2.txt
cmp $W/g1.txt $W/g2.txt && head -c 6 $W/g1.txt | grep -q "ROMEO:" && echo "generation deterministic for a seed"
echo OK
