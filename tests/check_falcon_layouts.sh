#!/usr/bin/env bash
# The Falcon family on the layouts (20 steps, dropout off) against one
# process, losses to 1e-5 relative: grouped attention with two LayerNorms
# (4 heads, 2 kv groups; new_decoder_architecture) under tp2 with sequence
# parallelism, tp4 (each group on 2 ranks), pp2, dp2 ZeRO-3, dp2 x tp2
# (untied head), full and selective recomputation; multi-query with one
# LayerNorm (Falcon-7B's form) under dp2 ZeRO-3, pp2 with full
# recomputation, tp2 with sequence parallelism and tp4 (its one kv group
# replicated on every rank); with linear biases (bias: true) under tp2 with
# and without sequence parallelism. Then a tp2 x pp2 checkpoint
# resumes in one process, `generate` decodes from it, the activation bytes
# per block equal the planner's closed form (mt_falcon_plan_act_floats) in
# every recompute mode, and tp that cuts a kv group is refused with its message.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
B="--train $W/d_train.bin --family falcon --layers 4 --dim 64 --heads 4 --ffn-dim 128 --seq-len 32
   --batch 8 --steps 20 --lr 2e-3 --log-every 0"
GQA="--kv-heads 2 --block-norms 2"
MQ="--kv-heads 1 --block-norms 1"
compare() { # REF RUN BOUND
    $PY - $W/$1.jsonl $W/$2.jsonl $2 $3 <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
bound = float(sys.argv[4])
worst = max(abs(x - y) / y for x, y in zip(a, b))
assert len(a) == len(b) >= 10, (len(a), len(b))
assert worst <= bound, f"{sys.argv[3]}: losses {worst:.3g} relative apart (bound {bound})"
assert b[-1] < 0.9 * b[0], f"{sys.argv[3]}: loss {b[0]:.4f} -> {b[-1]:.4f}: not training"
print(f"{sys.argv[3]}: {b[0]:.4f} -> {b[-1]:.4f}, within {worst:.2g} of one process")
PY
}
run() { local name=$1 n=$2; shift 2; nice $MPI -np $n $M train $B "$@" --metrics $W/$name.jsonl >/dev/null; }
run gqa_one 1 $GQA
run gqa_tp2_sp 2 $GQA --tp 2 --sequence-parallel;             compare gqa_one gqa_tp2_sp 1e-5
run gqa_pp2 2 $GQA --pp 2 --micro-batch 2;                    compare gqa_one gqa_pp2 1e-5
run gqa_dp2_zero3 2 $GQA --dp 2 --zero 3;                     compare gqa_one gqa_dp2_zero3 1e-5
run gqa_full 1 $GQA --recompute full;                         compare gqa_one gqa_full 1e-5
run gqa_selective 1 $GQA --recompute selective;               compare gqa_one gqa_selective 1e-5
run gqa_untied 1 $GQA --tie-embeddings 0
run gqa_untied_dp2_tp2 4 $GQA --tie-embeddings 0 --dp 2 --tp 2 --zero 1;  compare gqa_untied gqa_untied_dp2_tp2 1e-5
run mq_one 1 $MQ
run mq_dp2_zero3 2 $MQ --dp 2 --zero 3;                       compare mq_one mq_dp2_zero3 1e-5
run mq_pp2 2 $MQ --pp 2 --micro-batch 2 --recompute full;     compare mq_one mq_pp2 1e-5
# tp beyond the kv heads: the one kv group (multi-query) on 2 and 4 ranks, the two groups on 4
run mq_tp2_sp 2 $MQ --tp 2 --sequence-parallel;               compare mq_one mq_tp2_sp 1e-5
run mq_tp4 4 $MQ --tp 4 --zero 1;                             compare mq_one mq_tp4 1e-5
run gqa_tp4 4 $GQA --tp 4 --sequence-parallel;                compare gqa_one gqa_tp4 1e-5
# every linear with a bias: the row-parallel ones added once, their gradients from the rows held
run bias_one 1 $MQ --linear-bias 1
run bias_tp2_sp 2 $MQ --linear-bias 1 --tp 2 --sequence-parallel;  compare bias_one bias_tp2_sp 1e-5
run bias_gqa_one 1 $GQA --linear-bias 1
run bias_gqa_tp2 2 $GQA --linear-bias 1 --tp 2 --zero 1;      compare bias_gqa_one bias_gqa_tp2 1e-5

echo "== resume across layouts, generate =="
nice $MPI -np 4 $M train $B $GQA --steps 10 --tp 2 --pp 2 --micro-batch 2 --ckpt-dir $W/ck --metrics $W/resumed.jsonl >/dev/null
nice $M train $B $GQA --ckpt-dir $W/ck --resume --metrics $W/resumed.jsonl >/dev/null
compare gqa_one resumed 1e-5
$M generate --ckpt $W/ck --prompt "The " --tokens 16 --temperature 0 > $W/gen.txt
cat $W/gen.txt
[ "$(wc -c < $W/gen.txt)" -gt 10 ] || { echo "generate printed too little"; exit 1; }

echo "== activation bytes per block: the closed form of mt_falcon_plan_act_floats =="
for norms in 1 2; do for r in none selective full; do for L in 2 4; do
    $M train --train $W/d_train.bin --family falcon --layers $L --dim 64 --heads 4 --kv-heads 2 --block-norms $norms \
        --ffn-dim 96 --seq-len 16 --batch 6 --micro-batch 3 --recompute $r --steps 0 --log-every 0 \
        --report-json $W/act-$norms-$r-$L.json >/dev/null
done; done; done
$PY - $W <<'PY'
import json, sys
w = sys.argv[1]
N = n = 3 * 16; C, a, hd, kv, F = 64, 4, 16, 2, 96
Q, Wq = a * hd, (a + 2 * kv) * hd
for k in (1, 2):
    kept = k * (n * C + 2 * n) + n * C
    want = {"none": kept + N * (Wq + Q + a + 2 * F), "selective": kept + N * (Wq + 2 * F), "full": n * C}
    for r, f in want.items():
        acts = [json.load(open(f"{w}/act-{k}-{r}-{L}.json"))["memory"]["activations"] for L in (2, 4)]
        got = (acts[1] - acts[0]) / 2
        print(f"block norms {k}, recompute {r}: {got:.0f} bytes per block, closed form {4 * f}")
        assert got == 4 * f
PY
echo "== constraints =="
expect_failure() { # PATTERN CMD...
    local pat=$1; shift
    if "$@" >$W/err.txt 2>&1; then echo "expected failure: $*"; exit 1; fi
    grep -q -- "$pat" $W/err.txt || { echo "expected '$pat' in:"; cat $W/err.txt; exit 1; }
    echo "refused: $(grep -m1 -- "$pat" $W/err.txt)"
}
expect_failure "tp must divide the kv heads or be a multiple" $MPI -np 2 $M train $B --heads 6 --dim 96 --kv-heads 3 --tp 2 --steps 1
expect_failure "block-norms applies to --family falcon" $M train --train $W/d_train.bin --block-norms 2 --steps 1
expect_failure "block-norms must be 1" $M train $B --block-norms 3 --steps 1
expect_failure "dropout} is not supported\|dropout is not supported" $M train $B --dropout 0.1 --steps 1
echo OK
