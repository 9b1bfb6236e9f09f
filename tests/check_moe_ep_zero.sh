#!/usr/bin/env bash
# ZeRO under expert parallelism (--ep N, fp32): the dense parameters are sharded
# over all dp ranks, each unit's experts over the dp/N ranks holding the same
# experts. dp4 x ep2 (4 ranks) and dp2 x ep2 (2 ranks) at ZeRO 1, 2 and 3 give
# one process's losses, aux losses, drops and expert loads to 1e-5 relative
# over 12 steps (the bound check_moe_ep.sh uses); each rank holds 1/dp of the
# model's AdamW state (ZeRO 1-3), gradients (2-3) and parameters (3) -- the
# dense tensors over dp and its ep group's experts over dp/N, as a dense run at
# the same dp -- up to each part's padding, and exactly what `plan` predicts
# for the layout. A checkpoint written under dp2 x ep2 ZeRO-3 resumes in one
# process and at dp2 without ep (resharding) to the uninterrupted losses.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
B="--train $W/d_train.bin --family llama --layers 4 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 --seq-len 32
   --batch 8 --steps 12 --lr 2e-3 --log-every 0 --moe-experts 4 --moe-top-k 2 --moe-ffn-dim 32
   --moe-aux-coef 0.02 --moe-z-coef 0.001"
P="--cpu --cpu-gflops 10 --cpu-bw 1 --global-batch 8 --family llama --layers 4 --dim 64 --heads 4 --kv-heads 2
   --ffn-dim 96 --seq-len 32 --vocab 256 --moe-experts 4 --moe-top-k 2 --moe-ffn-dim 32 --recompute none
   --precision fp32 --all --json"
compare() { # REF RUN
    $PY - $W/$1.jsonl $W/$2.jsonl $2 <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l]
name, bound = sys.argv[3], 1e-5
assert len(a) == len(b) >= 10, (len(a), len(b))
worst = max(abs(x["loss"] - y["loss"]) / y["loss"] for x, y in zip(a, b))
waux = max(abs(x["moe_aux"] - y["moe_aux"]) / y["moe_aux"] for x, y in zip(a, b))
assert worst <= bound, f"{name}: losses {worst:.3g} relative apart (bound {bound})"
assert waux <= bound, f"{name}: aux losses {waux:.3g} relative apart (bound {bound})"
assert [x["moe_dropped"] for x in a] == [y["moe_dropped"] for y in b], f"{name}: dropped counts differ"
assert [x["moe_load"] for x in a] == [y["moe_load"] for y in b], f"{name}: expert loads differ"
assert b[-1]["loss"] < 0.9 * b[0]["loss"], f"{name}: not training"
ref = sys.argv[1].rsplit("/", 1)[-1][:-6]
print(f"{name}: {b[0]['loss']:.4f} -> {b[-1]['loss']:.4f}, within {worst:.2g} of {ref} (aux {waux:.2g})")
PY
}
# memory per rank of RUN (DP ranks, ZeRO Z): 1/dp of the model per sharded category, and plan's bytes
accounting() { # RUN DP Z
    $M plan $P --gpus $2 --dp $2 --ep 2 --micro-batch $((8 / $2)) --zero $3 > $W/$1.plan.json
    $PY - $W/$1.report.json $W/$1.plan.json $2 $3 $1 <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
y = json.load(open(sys.argv[2]))["layouts"][0]
dp, z, name = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
assert y["dp"] == dp and y["ep"] == 2 and y["zero"] == z, y
n = rep["params"]  # the whole model's parameters
units = 4 + 2      # embedding, 4 blocks, head: each part pads to at most dp - 1 elements
want = {"optimizer": 8 * n / dp}
if z >= 2: want["grads"] = 4 * n / dp
if z == 3: want["params"] = 4 * n / dp
for rank, r in enumerate(rep["ranks"]):
    mem = r["memory"]
    for cat in ("params", "grads", "optimizer"):
        assert mem[cat] == y["bytes"][cat], f"{name} rank {rank}: {cat} {mem[cat]} B, plan says {y['bytes'][cat]}"
    for cat, w in want.items():
        per = 8 if cat == "optimizer" else 4
        assert w <= mem[cat] <= w + per * 2 * units * dp, f"{name} rank {rank}: {cat} {mem[cat]} B, not 1/{dp} of the model ({w:.0f})"
print(f"{name}: per rank " + ", ".join(f"{c} {rep['ranks'][0]['memory'][c]} B" for c in ("params", "grads", "optimizer"))
      + f" = plan; the model's {n} parameters / {dp} per sharded category")
PY
}
run() { local name=$1 n=$2; shift 2; $MPI -np $n $M train $B "$@" --metrics $W/$name.jsonl >/dev/null; }
run one 1 --micro-batch 4
run one_mb2 1 --micro-batch 2
for z in 1 2 3; do
    run dp4_ep2_z$z 4 --dp 4 --ep 2 --zero $z --report-json $W/dp4_ep2_z$z.report.json
    compare one_mb2 dp4_ep2_z$z; accounting dp4_ep2_z$z 4 $z
    run dp2_ep2_z$z 2 --dp 2 --ep 2 --zero $z --report-json $W/dp2_ep2_z$z.report.json
    compare one dp2_ep2_z$z; accounting dp2_ep2_z$z 2 $z
done

echo "== a checkpoint written at dp2 x ep2 ZeRO-3 resumes in one process and at dp2 without ep =="
$MPI -np 2 $M train $B --steps 6 --dp 2 --ep 2 --zero 3 --ckpt-dir $W/ck --metrics $W/first.jsonl >/dev/null
$M ckpt verify $W/ck >/dev/null
resume() { # NAME NP LAYOUT...
    # shellcheck disable=SC2086
    resume_from $W/ck $W/first.jsonl $1 $2 $B --micro-batch 4 "${@:3}"
    compare one resumed_$1
}
resume one_process 1
resume dp2 2 --dp 2 --ep 1 --zero 3
echo "moe ep zero OK"
