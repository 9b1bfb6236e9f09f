#!/usr/bin/env bash
# Mixed precision (--precision bf16|fp16):
#  - 300 steps of a 4-layer, 256-wide model on tinyshakespeare (byte
#    tokenizer): the final validation loss of bf16 and fp16 is within 2% of
#    fp32's;
#  - fp16 dynamic loss scaling: --test-overflow-step K makes the last rank
#    find an inf gradient at step K of a dp2 ZeRO-1 run; every rank skips the
#    update (the parameters after K steps equal those after K-1 steps,
#    bitwise, on both shards), the scale halves, the skip is logged, and
#    training continues with finite losses at the halved scale;
#  - bf16 composes with tensor parallelism (dp2 x tp2 tracks one process);
#  - bad precision flags fail with one message.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
M=build/meshtrain; PY=/usr/bin/python3
STEPS=${PRECISION_STEPS:-300}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
. tests/train_compare.sh
MPI="mpirun --oversubscribe"
$M tokenize --tokenizer byte --out $W/shk ../shared/data/tinyshakespeare.txt >/dev/null

echo "== $STEPS steps, L4 C256: validation loss against fp32 =="
Q="--train $W/shk_train.bin --val $W/shk_val.bin --layers 4 --dim 256 --heads 4 --seq-len 64 --batch 8
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
S="--train $W/shk_train.bin --layers 2 --dim 32 --heads 4 --seq-len 32 --batch 8 --optimizer adamw --lr 1e-3
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

echo "== bf16 with dp2 x tp2 tracks one process =="
B="--train $W/shk_train.bin --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --optimizer adamw --lr 1e-3
   --grad-clip 1.0 --dropout 0.1 --precision bf16 --log-every 0 --steps 10"
$M train $B --metrics $W/b1.jsonl >/dev/null
$MPI -np 4 $M train $B --dp 2 --tp 2 --zero 1 --metrics $W/b4.jsonl >/dev/null
$PY - $W/b1.jsonl $W/b4.jsonl <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
worst = max(abs(x - y) / y for x, y in zip(a, b))
# the bf16 operands are the same; only fp32 summation order differs
assert len(a) == len(b) == 10 and worst <= 1e-3, worst
print(f"bf16 dp2 x tp2: 10 losses within {worst:.2g} relative of one process")
PY

echo "== bad precision flags =="
T="--train $W/shk_train.bin --layers 2 --dim 32 --heads 4 --seq-len 32 --batch 4 --steps 1"
expect_failure "precision must be fp32, bf16 or fp16" $M train $T --precision fp8
expect_failure "needs --precision fp16" $M train $T --test-overflow-step 1
expect_failure "loss\|scale" $M train $T --precision fp16 --loss-scale 0
echo OK
