#!/usr/bin/env bash
# Mixed precision (--precision bf16|fp16):
#  - 300 steps of a 4-layer, 256-wide model on the fortunes corpus of
#    tests/corpus.sh (byte tokenizer): the final validation loss of bf16 and
#    fp16 is within 2% of fp32's;
#  - fp16 dynamic loss scaling: --test-overflow-step K makes the last rank
#    find an inf gradient at step K of a dp2 ZeRO-1 run; every rank skips the
#    update (the parameters after K steps equal those after K-1 steps,
#    bitwise, on both shards), the scale halves, the skip is logged, and
#    training continues with finite losses at the halved scale;
#  - mixed precision composes with every layout: ZeRO 0-3 with gradient
#    accumulation, bf16 gradient reduction, hybrid sharding, tp and pp give
#    one process's losses (1e-3) and final master weights (1e-2 of each
#    tensor's largest value: bf16 keeps 8 significant bits);
#  - bad precision flags fail with one message.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
STEPS=${PRECISION_STEPS:-300}
corpus text

echo "== $STEPS steps, L4 C256: validation loss against fp32 =="
Q="--train $W/text_train.bin --val $W/text_val.bin --layers 4 --dim 256 --heads 4 --seq-len 64 --batch 8
   --optimizer adamw --lr 2e-3 --warmup 30 --lr-schedule cosine --min-lr 2e-4 --grad-clip 1.0 --dropout 0.0
   --steps $STEPS --eval-every $STEPS --eval-batches 16 --log-every 0"
for p in fp32 bf16 fp16; do
    # two runs at a time: one thread each on the two cores
    $M train $Q --precision $p --metrics $W/q_$p.jsonl >$W/q_$p.out &
    [ $p = bf16 ] && wait
done
wait
$PY - $W <<'PY'
import json, sys
w = sys.argv[1]
def val(p):
    v = [json.loads(l)["val_loss"] for l in open(f"{w}/q_{p}.jsonl") if "val_loss" in l]
    return v[-1]
ref = val("fp32")
for p in ("bf16", "fp16"):
    got = val(p)
    rel = abs(got - ref) / ref
    assert rel <= 0.02, f"{p}: validation loss {got:.4f} vs fp32 {ref:.4f} ({rel:.2%})"
    print(f"{p}: val loss {got:.4f} vs fp32 {ref:.4f} ({rel:.2%} apart, bound 2%)")
PY

echo "== fp16: a forced overflow is skipped on every rank =="
S="--train $W/text_train.bin --layers 2 --dim 32 --heads 4 --seq-len 32 --batch 8 --optimizer adamw --lr 1e-3
   --grad-clip 1.0 --dropout 0.1 --precision fp16 --log-every 1 --dp 2 --zero 1"
$MPI -np 2 $M train $S --steps 4 --ckpt-dir $W/k4 >/dev/null
$MPI -np 2 $M train $S --steps 5 --test-overflow-step 5 --ckpt-dir $W/k5 >$W/k5.out
grep -q "step 5: inf/NaN gradient (found first on rank . of 'world'): update skipped, loss scale 65536 -> 32768" $W/k5.out ||
    { echo "no skip line"; cat $W/k5.out; exit 1; }
for k in k4 k5; do $M export --ckpt $W/$k --format safetensors --out $W/$k.safetensors >/dev/null; done
cmp $W/k4.safetensors $W/k5.safetensors || { echo "the skipped step changed the parameters"; exit 1; }
echo "skipped step: parameters after 5 steps are bitwise those after 4 (both ZeRO-1 shards)"
$MPI -np 2 $M train $S --steps 9 --test-overflow-step 5 --metrics $W/k9.jsonl >/dev/null
$PY - $W/k9.jsonl <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
scale = {r["step"]: r["loss_scale"] for r in rows}
skips = {r["step"]: r["skipped_steps"] for r in rows}
assert scale[4] == 65536 and scale[5] == 32768 and all(scale[s] == 32768 for s in range(6, 10)), scale
assert skips[4] == 0 and all(skips[s] == 1 for s in range(5, 10)), skips
assert all(math.isfinite(r["loss"]) for r in rows)
assert rows[-1]["loss"] < rows[0]["loss"], [r["loss"] for r in rows]
print(f"scale 65536 -> 32768 at step 5, one skip, training goes on: loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}")
PY

echo "== mixed precision on every layout tracks one process =="
# 16-bit parameters and gradients, fp32 master of the owned shard: every
# ZeRO stage, gradient accumulation, bf16 gradient reduction, tp, pp and
# hybrid sharding give one process's losses (only fp32 summation orders
# differ) and its final fp32 master weights.
# SGD with momentum: the final weights are linear in the gradients, so they
# differ by what the 16-bit roundings of the gradient do (a layout changes
# where microbatch sums are rounded: ~2^-8 relative per element), not by
# Adam's normalisation of near-cancelling sums.
B="--train $W/text_train.bin --layers 4 --dim 64 --heads 4 --seq-len 32 --batch 8 --micro-batch 2 --optimizer sgd
   --momentum 0.9 --lr 0.05 --grad-clip 1.0 --dropout 0.1 --log-every 0 --steps 10"
for p in bf16 fp16; do
    $M train $B --precision $p --metrics $W/${p}_ref.jsonl --ckpt-dir $W/${p}_ref >/dev/null
    $M export --ckpt $W/${p}_ref --format safetensors --out $W/${p}_ref.safetensors >/dev/null
done
mixed_run() { # NAME PRECISION RANKS FLAGS...
    local name=$1 p=$2 n=$3; shift 3
    $MPI -np $n $M train $B --precision $p "$@" --metrics $W/$name.jsonl --ckpt-dir $W/$name >/dev/null
    $PY - $W/${p}_ref.jsonl $W/$name.jsonl $name <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
worst = max(abs(x - y) / y for x, y in zip(a, b))
assert len(a) == len(b) == 10 and worst <= 1e-3, f"{sys.argv[3]}: losses {worst:.3g} relative apart"
assert b[-1] < 0.9 * b[0], f"{sys.argv[3]}: loss {b[0]:.4f} -> {b[-1]:.4f}: not training"
print(f"{sys.argv[3]}: loss {b[0]:.3f} -> {b[-1]:.3f}, 10 losses within {worst:.2g} relative", end="; ")
PY
    $M export --ckpt $W/$name --format safetensors --out $W/$name.safetensors >/dev/null
    $PY tests/compare_tensors.py $W/$name.safetensors $W/${p}_ref.safetensors --tol 1e-2
    rm -rf $W/$name $W/$name.safetensors
}
for z in 0 1 2 3; do mixed_run bf16_dp2_zero$z bf16 2 --dp 2 --zero $z; done
mixed_run bf16_dp2_zero1_bf16reduce bf16 2 --dp 2 --zero 1 --grad-reduce-dtype bf16
mixed_run bf16_dp2_zero3_bf16reduce bf16 2 --dp 2 --zero 3 --grad-reduce-dtype bf16
mixed_run bf16_dp4_zero3_shard2 bf16 4 --dp 4 --zero 3 --shard-group 2
mixed_run bf16_dp2_tp2_zero1 bf16 4 --dp 2 --tp 2 --zero 1
mixed_run bf16_dp2_pp2_zero1 bf16 4 --dp 2 --pp 2 --zero 1
mixed_run fp16_dp2_zero3 fp16 2 --dp 2 --zero 3

echo "== bad precision flags =="
T="--train $W/text_train.bin --layers 2 --dim 32 --heads 4 --seq-len 32 --batch 4 --steps 1"
expect_failure "precision must be fp32, bf16 or fp16" $M train $T --precision fp8
expect_failure "needs --precision fp16" $M train $T --test-overflow-step 1
expect_failure "loss\|scale" $M train $T --precision fp16 --loss-scale 0
expect_failure "grad-reduce-dtype must be fp32 or bf16" $M train $T --precision fp16 --grad-reduce-dtype fp16
expect_failure "grad-reduce-dtype bf16 needs --precision bf16" $M train $T --grad-reduce-dtype bf16
expect_failure "bucket-mb needs --precision fp32" $M train $T --precision bf16 --bucket-mb 1
echo OK
