#!/usr/bin/env bash
# QLoRA and IA3 on the experts under expert parallelism (--ep N): the frozen
# base of a MoE (4 experts top-2, aux and z losses on) held quantized
# (--quantize-base nf4; int8 below), LoRA on every expert's w1/w3/w2 and on
# q_proj. An ep rank quantizes, holds and dequantizes only its own experts'
# weights, and an expert's adapters (LoRA's A and B, IA3's vectors) live with
# it. Against one process at the same micro-batch (moe_compare.py: losses and
# aux losses within 1e-5 relative over 10 AdamW steps, the same expert loads):
# ep2 (ZeRO 0), dp2 x ep2 (ZeRO 3), an ep2 checkpoint resumed in one process;
# each ep2 rank's quantized store holds the dense matrices and its 2 experts'
# only: its frozen bytes (report-json) are one process's less the other rank's
# experts' NF4 bytes, and equal plan --ep 2's. IA3 (w1, w3, w2 of every expert
# and k_proj, w2 scaled on its input) on the NF4 base: ep2 and an ep2
# checkpoint resumed in one process as above, each rank holding its experts'
# vectors only, and the PEFT export of the ep2 checkpoint equal to one
# process's (same keys and config, every vector within 1e-5 of its largest
# element). --freeze (attention and expert 1) with an int8 base under ep2
# ZeRO-1 as above. Then bad input: LLM.int8()'s outlier decomposition under
# --ep is one clear line.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
B="--train $W/d_train.bin --family llama --layers 4 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 --seq-len 32
   --batch 8 --steps 10 --log-every 0 --moe-experts 4 --moe-top-k 2 --moe-ffn-dim 32
   --moe-aux-coef 0.02 --moe-z-coef 0.001"
$M train $B --steps 0 --ckpt-dir $W/base >/dev/null
Q="--init-from $W/base --peft lora --lora-r 4 --lora-alpha 8 --lora-targets w1,w3,w2,q_proj --quantize-base nf4 --lr 1e-2"
IA="--init-from $W/base --peft ia3 --ia3-targets w1,w3,w2,k_proj --ia3-feedforward w2 --quantize-base nf4
    --peft-train lm_head --lr 3e-2"
compare() { $PY tests/moe_compare.py $W/$1.jsonl $W/$2.jsonl $2 --train 0.95; } # REF RUN
run() { local name=$1 n=$2; shift 2; $MPI -np $n $M train $B "$@" --metrics $W/$name.jsonl >/dev/null; }
# an ep2 checkpoint after 5 steps resumed in one process (the adapters and their optimizer state; the base by
# reference, quantized again) against the uninterrupted one-process run REF
resume_one() { # REF NAME TRAIN-ARGS...
    local ref=$1 name=$2
    shift 2
    $MPI -np 2 $M train $B "$@" --steps 5 --dp 2 --ep 2 --ckpt-dir $W/half_$name --metrics $W/first_$name.jsonl >/dev/null
    resume_from $W/half_$name $W/first_$name.jsonl $name 1 $B --micro-batch 4
    compare $ref resumed_$name
}
echo "== QLoRA (NF4 base) =="
run one 1 $Q --micro-batch 4 --report-json $W/one.report.json
run ep2 2 $Q --dp 2 --ep 2 --report-json $W/ep2.report.json;           compare one ep2
run one_mb2 1 $Q --micro-batch 2
run dp2_ep2 4 $Q --dp 4 --ep 2 --zero 3;                               compare one_mb2 dp2_ep2
resume_one one qlora $Q
# the bytes: an NF4 matrix of n weights (no double quantization) is n/2 bytes of codes and an fp32 absmax per
# block of 64; the other rank's experts are 4 layers x 2 experts x 3 matrices of 64 x 32
P="--cpu --cpu-gflops 10 --cpu-bw 1 --global-batch 8 --family llama --layers 4 --dim 64 --heads 4 --kv-heads 2
   --ffn-dim 96 --seq-len 32 --vocab 256 --moe-experts 4 --moe-top-k 2 --moe-ffn-dim 32 --micro-batch 4 --zero 0
   --recompute none --precision fp32 --all --json --peft lora --lora-r 4 --lora-targets w1,w3,w2,q_proj
   --quantize-base nf4"
$M plan $P --gpus 1 --dp 1 > $W/plan_one.json
$M plan $P --gpus 2 --dp 2 --ep 2 > $W/plan_ep2.json
$PY - $W/one.report.json $W/ep2.report.json $W/plan_one.json $W/plan_ep2.json <<'PY'
import json, sys
one, ep2, p1, p2 = (json.load(open(p)) for p in sys.argv[1:])
n = 64 * 32
other = 4 * 2 * 3 * (n // 2 + 4 * (n // 64))
f1 = one["ranks"][0]["memory"]["frozen"]
assert p1["layouts"][0]["bytes"]["frozen"] == f1, (p1["layouts"][0]["bytes"], f1)
for r in ep2["ranks"]:
    f = r["memory"]["frozen"]
    assert f == f1 - other, (f, f1, other)
    assert p2["layouts"][0]["bytes"]["frozen"] == f, (p2["layouts"][0]["bytes"], f)
# the trained adapters: the other rank's experts' A [4, in] and B [out, 4] (w1, w3: 64 -> 32, w2: 32 -> 64)
held = ep2["params"] - 4 * 2 * 3 * (4 * 64 + 32 * 4)
assert all(r["memory"]["params"] == 4 * held for r in ep2["ranks"]), (ep2["ranks"], held)
print(f"ep2: each rank's frozen store {f1 - other} of one process's {f1} bytes (the other rank's experts' NF4: "
      f"{other}), as plan --ep 2; {held} of {ep2['params']} trained parameters")
PY
echo "== IA3 (NF4 base) =="
run ia3_one 1 $IA --micro-batch 4 --ckpt-dir $W/ck_ia3_one
run ia3_ep2 2 $IA --dp 2 --ep 2 --ckpt-dir $W/ck_ia3_ep2 --report-json $W/ia3_ep2.report.json; compare ia3_one ia3_ep2
resume_one ia3_one ia3 $IA
for r in ia3_one ia3_ep2; do $M export --format peft --ckpt $W/ck_$r --out $W/peft_$r >/dev/null; done
$PY - $W/peft_ia3_one $W/peft_ia3_ep2 $W/ia3_ep2.report.json <<'PY'
import json, sys
sys.path.insert(0, "tests")
from parity import read_peft_adapter
(a, ca), (b, cb) = read_peft_adapter(sys.argv[1]), read_peft_adapter(sys.argv[2])
assert ca == cb, (ca, cb)
assert sorted(a) == sorted(b), set(a) ^ set(b)
experts = [k for k in a if ".experts." in k]
assert len(experts) == 4 * 4 * 3, len(experts)
worst = max(max(abs(x - y) for x, y in zip(a[k], b[k])) / max(map(abs, a[k])) for k in a)
assert all(any(x != 1.0 for x in a[k]) for k in a), "a vector left at ones"
assert worst <= 1e-5, worst
# each rank: the dense vectors and its 2 experts' (the other's: 4 layers x 2 experts x (32 + 32 + 32))
rep = json.load(open(sys.argv[3]))
held = rep["params"] - 4 * 2 * 96
assert all(r["memory"]["params"] == 4 * held for r in rep["ranks"]), (rep["ranks"], held)
print(f"IA3 PEFT export of ep2: {len(a)} tensors ({len(experts)} experts' vectors) within {worst:.2g} of one process's; "
      f"each rank holds {held} of {rep['params']} trained parameters")
PY
echo "== --freeze on an int8 base =="
F="--freeze self_attn|experts\\.1\\. --quantize-base int8 --lr 2e-3"
run freeze_one 1 $F --micro-batch 4
run freeze_ep2 2 $F --dp 2 --ep 2 --zero 1;                            compare freeze_one freeze_ep2
echo "== bad input =="
expect_failure "int8-threshold 6 is not supported with --ep 2" \
    $MPI -np 2 $M train $B $Q --quantize-base int8 --int8-threshold 6 --dp 2 --ep 2
echo "moe ep qlora OK"
# GPTQ / RTN of a MoE checkpoint: one line (it ended in a fatal "more than 16 linear layers" with 8 experts)
expect_failure "method gptq does not quantize mixture-of-experts models" \
    $M quantize --ckpt $W/base --out $W/gptq_moe --method gptq --calib $W/d_train.bin
expect_failure "method rtn does not quantize mixture-of-experts models" $M quantize --ckpt $W/base --out $W/rtn_moe --method rtn
[ ! -e $W/gptq_moe ] && [ ! -e $W/rtn_moe ] || { echo "a refused quantize left an output directory"; exit 1; }
