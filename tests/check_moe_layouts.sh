#!/usr/bin/env bash
# Mixture-of-experts blocks on every layout of the generic machinery (the
# aux and z losses on, 12 steps, 4 experts top-2): dp2 ZeRO-3, tp2 (each
# expert cut over tp like the dense MLP, the router whole on every rank)
# with sequence parallelism, pp2 with 2 microbatches, dp2 x pp2 ZeRO-1,
# full and selective recomputation, and a capacity factor under dp2 give one
# process's losses (aux included; at the same micro-batch size, since the
# aux losses and the capacity are per microbatch) to 1e-5 relative and the same aux losses
# and dropped counts and per-layer expert loads; bf16 dp2 ZeRO-2 tracks bf16 in one process to 1e-3.
# LoRA on every expert (and q_proj) of a frozen base: dp2 ZeRO-2 and tp2
# equal one process. A checkpoint written under tp2 x pp2 resumes in one process and under dp2
# ZeRO-3 to the uninterrupted run's losses. Then the MoE checks refuse bad
# input with one line each.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
B="--train $W/d_train.bin --family llama --layers 4 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 --seq-len 32
   --batch 8 --steps 12 --lr 2e-3 --log-every 0 --moe-experts 4 --moe-top-k 2 --moe-ffn-dim 32
   --moe-aux-coef 0.02 --moe-z-coef 0.001"
compare() { # REF RUN BOUND
    $PY - $W/$1.jsonl $W/$2.jsonl $2 $3 <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l]
bound = float(sys.argv[4])
assert len(a) == len(b) >= 10, (len(a), len(b))
worst = max(abs(x["loss"] - y["loss"]) / y["loss"] for x, y in zip(a, b))
waux = max(abs(x["moe_aux"] - y["moe_aux"]) / y["moe_aux"] for x, y in zip(a, b))
assert worst <= bound, f"{sys.argv[3]}: losses {worst:.3g} relative apart (bound {bound})"
assert waux <= bound, f"{sys.argv[3]}: aux losses {waux:.3g} relative apart (bound {bound})"
if bound <= 1e-5:
    assert [x["moe_dropped"] for x in a] == [y["moe_dropped"] for y in b], f"{sys.argv[3]}: dropped counts differ"
    assert [x["moe_load"] for x in a] == [y["moe_load"] for y in b], f"{sys.argv[3]}: expert loads differ"
for y in b:  # every choice of the step's 8 x 32 tokens (top-2, 4 layers) is kept or dropped
    assert len(y["moe_load"]) == 4 and all(len(r) == 4 for r in y["moe_load"]), y["moe_load"]
    assert sum(map(sum, y["moe_load"])) + y["moe_dropped"] == 4 * 8 * 32 * 2, (y["moe_load"], y["moe_dropped"])
    assert max(map(max, y["moe_load"])) <= y["moe_max_load"] * 8, y["moe_max_load"]
assert b[-1]["loss"] < 0.9 * b[0]["loss"], f"{sys.argv[3]}: not training"
print(f"{sys.argv[3]}: {b[0]['loss']:.4f} -> {b[-1]['loss']:.4f}, within {worst:.2g} of one process (aux {waux:.2g}, "
      f"dropped {sum(y['moe_dropped'] for y in b)})")
PY
}
run() { local name=$1 n=$2; shift 2; $MPI -np $n $M train $B "$@" --metrics $W/$name.jsonl >/dev/null; }
# The aux losses and the capacity are per microbatch (as routing is): layouts compare at equal micro-batch sizes.
run one 1 --micro-batch 4
run dp2_zero3 2 --dp 2 --zero 3;                               compare one dp2_zero3 1e-5
run tp2_sp 2 --tp 2 --sequence-parallel --micro-batch 4;       compare one tp2_sp 1e-5
run tp2 2 --tp 2 --zero 1 --micro-batch 4;                     compare one tp2 1e-5
run pp2 2 --pp 2 --micro-batch 4;                              compare one pp2 1e-5
run full 1 --recompute full --micro-batch 4;                   compare one full 1e-5
run selective 1 --recompute selective --micro-batch 4;         compare one selective 1e-5
run one_mb2 1 --micro-batch 2
run dp2_pp2 4 --dp 2 --pp 2 --micro-batch 2 --zero 1;          compare one_mb2 dp2_pp2 1e-5
run cap_one 1 --moe-capacity-factor 0.8 --micro-batch 4
run cap_dp2 2 --moe-capacity-factor 0.8 --dp 2 --zero 2;       compare cap_one cap_dp2 1e-5
run bf16_one 1 --precision bf16 --micro-batch 4
run bf16_dp2 2 --precision bf16 --dp 2 --zero 2;               compare bf16_one bf16_dp2 1e-3

echo "== resume across layouts =="
# 6 steps under tp2 x pp2, the next 6 in one process and under dp2 ZeRO-3: the uninterrupted run's losses
$MPI -np 4 $M train $B --steps 6 --tp 2 --pp 2 --micro-batch 4 --ckpt-dir $W/ck --metrics $W/first.jsonl >/dev/null
resume() { # NAME NP LAYOUT...: the second 6 steps from a copy of the checkpoint
    # shellcheck disable=SC2086
    resume_from $W/ck $W/first.jsonl $1 $2 $B --micro-batch 4 "${@:3}"
    compare one resumed_$1 1e-5
}
resume one_process 1
resume dp2_zero3 2 --dp 2 --zero 3

echo "== LoRA on the experts =="
# adapters on every expert's w1/w3/w2 (Mixtral's module names) and q_proj of a frozen MoE base (lm_head trained too)
$M train $B --steps 0 --ckpt-dir $W/base >/dev/null
LORA="--init-from $W/base --peft lora --lora-r 4 --lora-alpha 8 --lora-targets w1,w3,w2,q_proj --peft-train lm_head --lr 1e-2"
run lora_one 1 $LORA --micro-batch 4
run lora_dp2 2 $LORA --dp 2 --zero 2;                          compare lora_one lora_dp2 1e-5
run lora_tp2 2 $LORA --tp 2 --micro-batch 4;                   compare lora_one lora_tp2 1e-5

echo "== bad input =="
expect_failure "must be in 1..4" $M train $B --moe-top-k 5
expect_failure "must be > 0" $M train $B --moe-capacity-factor 0
expect_failure "must be > 0" $M train $B --moe-capacity-factor -1
expect_failure "apply to a mixture-of-experts" $M train ${B%%--moe-experts*} --moe-aux-coef 0.1
expect_failure "does not divide the experts' width" \
    $MPI -np 3 $M train $B --tp 3 --heads 3 --kv-heads 3 --dim 48
echo "moe layouts OK"
