#!/usr/bin/env bash
# LoRA on the experts under expert parallelism (--ep N): a frozen MoE base
# (4 experts top-2, aux and z losses on) adapted with LoRA on every expert's
# w1/w3/w2 and on q_proj, lm_head trained too. An expert's adapters live on
# that expert's ep rank and their gradients are summed over the ranks holding
# the same experts (as the expert weights'); the dense adapters' over all dp.
# ep2 (ZeRO 0) and dp2 x ep2 (ZeRO 3) against one process at the same
# micro-batch: 10 steps' losses, aux losses and per-layer expert loads within
# 1e-5 relative, and so do ep2 x tp2 and an ep2 checkpoint resumed in one
# process; each ep2 rank holds the dense adapters and its 2 experts'
# adapters only (report-json); and the PEFT export of the ep2 run's checkpoint
# equals the one-process run's: the same keys and config, every adapter tensor
# within 1e-5 of its largest element with SGD (within 1e-3 with AdamW, whose
# normalised steps magnify the sums' last-bit differences where a gradient
# nearly cancels). --freeze (attention and one expert frozen) under ep2 ZeRO-1
# against one process as above. (QLoRA and IA3 under --ep: check_moe_ep_qlora.sh.)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
B="--train $W/d_train.bin --family llama --layers 4 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 --seq-len 32
   --batch 8 --steps 10 --log-every 0 --moe-experts 4 --moe-top-k 2 --moe-ffn-dim 32
   --moe-aux-coef 0.02 --moe-z-coef 0.001"
$M train $B --steps 0 --ckpt-dir $W/base >/dev/null
LORA="--init-from $W/base --peft lora --lora-r 4 --lora-alpha 8 --lora-targets w1,w3,w2,q_proj --peft-train lm_head --lr 1e-2"
compare() { # REF RUN
    $PY - $W/$1.jsonl $W/$2.jsonl $2 <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l]
name = sys.argv[3]
assert len(a) == len(b) == 10, (len(a), len(b))
worst = max(abs(x["loss"] - y["loss"]) / y["loss"] for x, y in zip(a, b))
waux = max(abs(x["moe_aux"] - y["moe_aux"]) / y["moe_aux"] for x, y in zip(a, b))
assert worst <= 1e-5 and waux <= 1e-5, f"{name}: losses {worst:.3g}, aux losses {waux:.3g} relative apart (bound 1e-5)"
assert [x["moe_load"] for x in a] == [y["moe_load"] for y in b], f"{name}: expert loads differ"
assert b[-1]["loss"] < 0.95 * b[0]["loss"], f"{name}: not training ({b[0]['loss']} -> {b[-1]['loss']})"
print(f"{name}: {b[0]['loss']:.4f} -> {b[-1]['loss']:.4f}, within {worst:.2g} of one process (aux {waux:.2g})")
PY
}
run() { local name=$1 n=$2; shift 2; $MPI -np $n $M train $B $LORA "$@" --metrics $W/$name.jsonl >/dev/null; }
run one 1 --micro-batch 4 --ckpt-dir $W/ck_one --report-json $W/one.report.json
run ep2 2 --dp 2 --ep 2 --ckpt-dir $W/ck_ep2 --report-json $W/ep2.report.json; compare one ep2
run one_mb2 1 --micro-batch 2
run dp2_ep2 4 --dp 4 --ep 2 --zero 3;                                                compare one_mb2 dp2_ep2
run ep2_tp2 4 --dp 2 --ep 2 --tp 2;                                                  compare one ep2_tp2
# an ep2 LoRA checkpoint after 5 steps resumes in one process (adapters and their optimizer state; the base
# by reference) to the uninterrupted run's losses
$MPI -np 2 $M train $B $LORA --steps 5 --dp 2 --ep 2 --ckpt-dir $W/ck_half --metrics $W/first.jsonl >/dev/null
$M train --resume $W/ck_half --steps 10 --micro-batch 4 --metrics $W/second.jsonl >/dev/null
cat $W/first.jsonl $W/second.jsonl > $W/resumed.jsonl;                               compare one resumed
# what an ep2 rank holds: the trained tensors less the other rank's 2 experts' adapters (3 linears x A [4, in]
# and B [out, 4] x 4 layers; w1, w3: 64 -> 32, w2: 32 -> 64), and AdamW's two moments of it
$PY - $W/one.report.json $W/ep2.report.json <<'PY'
import json, sys
one, ep2 = (json.load(open(p)) for p in sys.argv[1:])
other = 4 * 2 * 3 * (4 * 64 + 32 * 4)
assert one["params"] == ep2["params"], (one["params"], ep2["params"])
held = ep2["params"] - other
for r in ep2["ranks"]:
    mem = r["memory"]
    assert mem["params"] == mem["grads"] == 4 * held and mem["optimizer"] == 8 * held, (mem, held)
print(f"ep2: each rank holds {held} of the {ep2['params']} trained parameters (the other rank's experts' "
      f"adapters: {other})")
PY
# the PEFT exports: the same keys and config, every tensor (the experts' B among them, zero at the start)
# trained and within 1e-4 of its largest element of the one-process run's
peft_diff() { # REF RUN BOUND
    $PY - $W/peft_$1 $W/peft_$2 $2 $3 <<'PY'
import sys
sys.path.insert(0, "tests")
from parity import read_peft_adapter
(a, ca), (b, cb) = read_peft_adapter(sys.argv[1]), read_peft_adapter(sys.argv[2])
assert ca == cb, (ca, cb)
assert sorted(a) == sorted(b), set(a) ^ set(b)
experts = [k for k in a if ".experts." in k and "lora_B" in k]
assert len(experts) == 4 * 4 * 3, len(experts)
worst, wk = 0, ""
for k in a:
    top = max(map(abs, a[k]))
    assert top > 0, k  # trained: the B matrices start at zero
    d = max(abs(x - y) for x, y in zip(a[k], b[k])) / top
    if d > worst: worst, wk = d, k
assert worst <= float(sys.argv[4]), (wk, worst, float(sys.argv[4]))
print(f"PEFT export of {sys.argv[3]}: {len(a)} tensors ({len(experts)} experts' lora_B) within {worst:.2g} of "
      f"each tensor's largest of the one-process run's (worst: {wk.split('model.model.')[-1]})")
PY
}
export() { for r in "$@"; do $M export --format peft --ckpt $W/ck_$r --out $W/peft_$r >/dev/null; done; }
# plain SGD: the weights move by the gradients themselves, so the exports agree as the gradients do (the runs
# sum in other orders: the token exchange, the reductions)
run sgd_one 1 --micro-batch 4 --optimizer sgd --lr 1e-1 --ckpt-dir $W/ck_sgd_one
run sgd_ep2 2 --dp 2 --ep 2 --optimizer sgd --lr 1e-1 --ckpt-dir $W/ck_sgd_ep2
export one ep2 sgd_one sgd_ep2
peft_diff sgd_one sgd_ep2 1e-5
# AdamW normalises each element's step: an element whose gradient nearly cancels (LoRA's A right after B left
# zero) turns those last-bit differences into ~1e-4 of a tensor's largest over 10 steps
peft_diff one ep2 1e-3
# {freeze} without adapters: the frozen store shards with the experts too (attention and expert 1 frozen,
# the rest trained in full)
F="--freeze self_attn|experts\\.1\\. --lr 2e-3"
$M train $B $F --micro-batch 4 --metrics $W/freeze_one.jsonl >/dev/null
$MPI -np 2 $M train $B $F --dp 2 --ep 2 --zero 1 --metrics $W/freeze_ep2.jsonl >/dev/null; compare freeze_one freeze_ep2
echo "moe ep lora OK"
