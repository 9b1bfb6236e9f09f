#!/usr/bin/env bash
# Expert parallelism (--ep N): the experts of every MoE block spread over N of
# the dp ranks, tokens exchanged by all-to-all. Against one process at the same
# micro-batch (routing, the aux losses and the capacity are per microbatch, as
# in check_moe_layouts.sh), 12 steps with the aux and z losses on, 4 experts
# top-2: ep2 (ZeRO 0), ep4 (ZeRO 1), dp2 x ep2 ZeRO-3, ep2 x tp2 with sequence
# parallelism, ep2 x pp2, dp2 x ep2 x pp2, ep2 with full recomputation, with
# a capacity factor and with evaluation (an uneven last round) give the same
# losses, aux losses, drops, per-layer expert loads and validation losses to
# 1e-5 relative; with int8 activation compression ep2 equals dp2 to 1e-5; bf16
# ep2 ZeRO-2 tracks bf16 in one process to 1e-3 (aux 1e-2). The all-to-all bytes
# each rank's comm layer
# counted (report-json, group "ep", kind alltoallv) equal the closed form from
# the routing's row counts (the metrics' moe_ep_rows, checked against moe_load):
# C x 4 bytes per row, each row sent to another rank twice forward (to the
# expert and back) and twice backward. A checkpoint written at ep4 ZeRO-3
# resumes at ep2 and in one process to the uninterrupted run's losses. Then
# bad input: one line each. Each ep2 rank holds the parameters, gradients and
# AdamW state of the dense tensors and its 2 experts only; plan --ep counts
# rank 0's experts and the all-to-all bytes of balanced routing (within 10% of
# the measured).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
B="--train $W/d_train.bin --family llama --layers 4 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 --seq-len 32
   --batch 8 --steps 12 --lr 2e-3 --log-every 0 --moe-experts 4 --moe-top-k 2 --moe-ffn-dim 32
   --moe-aux-coef 0.02 --moe-z-coef 0.001"
compare() { # REF RUN [BOUND] (tests/moe_compare.py)
    $PY tests/moe_compare.py $W/$1.jsonl $W/$2.jsonl $2 --bound ${3:-1e-5}
}
# the all-to-all bytes of RUN (EP ranks; world ranks ordered as the mesh: rank = dp index, ep index = dp / (dp / EP))
a2a_bytes() { # RUN EP
    $PY - $W/$1.jsonl $W/$1.report.json $2 <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
rep = json.load(open(sys.argv[2]))
P, C, L, E = int(sys.argv[3]), 64, 4, 4
steps = rep["steps"]
assert steps == len(rows), (steps, len(rows))
R = [[sum(r["moe_ep_rows"][i][j] for r in rows) for j in range(P)] for i in range(P)]
# every row an ep rank received went to one of its experts: column sums are the experts' loads
for j in range(P):
    load = sum(r["moe_load"][l][e] for r in rows for l in range(L) for e in range(j * E // P, (j + 1) * E // P))
    assert sum(R[i][j] for i in range(P)) == load, (j, R, load)
ranks = rep["ranks"]
G = len(ranks) // P  # expert-data-parallel groups' size; the matrix sums them
got = [r["comm_per_step"]["ep"]["alltoallv"]["bytes_sent"] * steps for r in ranks]
if G == 1:  # one ep group: each rank's bytes from its own row and column
    for i in range(P):
        want = 2 * 4 * C * (sum(R[i][j] for j in range(P) if j != i) + sum(R[j][i] for j in range(P) if j != i))
        assert abs(got[i] - want) <= 0.1 * steps, (i, got[i], want)
want = 2 * 2 * 4 * C * sum(R[i][j] for i in range(P) for j in range(P) if i != j)
assert abs(sum(got) - want) <= 0.1 * steps * len(ranks), (sum(got), want)
counts = sum(r["comm_per_step"]["ep"]["alltoall"]["bytes_sent"] for r in ranks) * steps
# the counts first: per block and microbatch (one per step here) E/P integers to each other rank
assert abs(counts - len(ranks) * L * (P - 1) * (E // P) * 4 * steps) <= 0.1 * steps * len(ranks), counts
print(f"all-to-all bytes: {sum(got) / steps:.0f} per step over {len(ranks)} ranks = the closed form "
      f"(rows to other ranks {sum(R[i][j] for i in range(P) for j in range(P) if i != j)}); counts {counts / steps:.0f} B/step")
PY
}
run() { local name=$1 n=$2; shift 2; $MPI -np $n $M train $B "$@" --metrics $W/$name.jsonl >/dev/null; }
run one 1 --micro-batch 4
run one_mb2 1 --micro-batch 2
run ep2 2 --dp 2 --ep 2 --report-json $W/ep2.report.json;          compare one ep2; a2a_bytes ep2 2
# the planner's ep2 layout: rank 0 holds 2 experts' 3 matrices per layer; its all-to-all bytes (balanced routing)
# within 10% of what the ranks sent
$M plan --cpu --cpu-gflops 10 --cpu-bw 1 --gpus 2 --global-batch 8 --family llama --layers 4 --dim 64 --heads 4 \
    --kv-heads 2 --ffn-dim 96 --seq-len 32 --vocab 256 --moe-experts 4 --moe-top-k 2 --moe-ffn-dim 32 --ep 2 --dp 2 \
    --micro-batch 4 --zero 0 --recompute none --precision fp32 --all --json > $W/plan.json
$PY - $W/plan.json $W/ep2.report.json <<'PY'
import json, sys
y = json.load(open(sys.argv[1]))["layouts"][0]
rep = json.load(open(sys.argv[2]))
assert y["ep"] == 2 and y["expert_params_rank"] == 4 * 2 * 3 * 32 * 64, y
# what each rank held (ZeRO 0): the model less the other rank's 2 experts x 3 matrices x 4 layers, in fp32,
# and AdamW's two moments of it
held = rep["params"] - 4 * 2 * 3 * 32 * 64
for r in rep["ranks"]:
    mem = r["memory"]
    assert mem["params"] == mem["grads"] == 4 * held and mem["optimizer"] == 8 * held, (mem, held)
got = sum(r["comm_per_step"]["ep"]["alltoallv"]["bytes_sent"] + r["comm_per_step"]["ep"]["alltoall"]["bytes_sent"]
          for r in rep["ranks"]) / len(rep["ranks"])
assert abs(y["comm_ep"] - got) <= 0.1 * got, (y["comm_ep"], got)
print(f"plan --ep 2: expert parameters per rank {y['expert_params_rank']}, all-to-all {y['comm_ep']:.0f} B/step "
      f"(measured {got:.0f})")
PY
run ep4 4 --dp 4 --ep 4 --zero 1 --report-json $W/ep4.report.json; compare one_mb2 ep4; a2a_bytes ep4 4
run dp2_ep2 4 --dp 4 --ep 2 --zero 3 --report-json $W/dp2_ep2.report.json; compare one_mb2 dp2_ep2; a2a_bytes dp2_ep2 2
run ep2_tp2 4 --dp 2 --ep 2 --tp 2 --sequence-parallel --zero 2;   compare one ep2_tp2
run ep2_pp2 4 --dp 2 --ep 2 --pp 2 --micro-batch 2 --zero 1;       compare one_mb2 ep2_pp2
run one_mb1 1 --micro-batch 1
run dp2_ep2_pp2 8 --dp 4 --ep 2 --pp 2 --micro-batch 1 --zero 1;   compare one_mb1 dp2_ep2_pp2
run ep2_full 2 --dp 2 --ep 2 --recompute full;                     compare one ep2_full
# ZeRO-R's partitioned activation checkpoints (tp, full recompute): bitwise the run without them
run ep2_tp2_full 4 --dp 2 --ep 2 --tp 2 --recompute full;           compare one ep2_tp2_full
run ep2_tp2_part 4 --dp 2 --ep 2 --tp 2 --recompute full --partition-activations; compare ep2_tp2_full ep2_tp2_part 0
run cap_one 1 --micro-batch 4 --moe-capacity-factor 0.8
run cap_ep2 2 --dp 2 --ep 2 --moe-capacity-factor 0.8 --zero 2;    compare cap_one cap_ep2
run bf16_one 1 --micro-batch 4 --precision bf16
run bf16_ep2 2 --dp 2 --ep 2 --precision bf16 --zero 2;           compare bf16_one bf16_ep2 1e-3
# activation compression: int8 rows (one scale per row) whatever rank a row's expert runs on -- against dp2
# with the same microbatches (int8 dp2 itself is ~2.5e-5 from one process: lossy codes move by a step on a
# last-bit difference)
run int8_dp2 2 --dp 2 --compress-activations int8
run int8_ep2 2 --dp 2 --ep 2 --compress-activations int8;         compare int8_dp2 int8_ep2
# evaluation: 3 chunks of the micro-batch over 2 ranks -- the rank without one in the last round still
# takes part in its token exchanges (a forward whose loss it drops)
V="--val $W/d_val.bin --eval-every 6 --eval-batches 1 --eval-batch 12"
run val_one 1 --micro-batch 4 $V
run val_ep2 2 --dp 2 --ep 2 $V;                                    compare val_one val_ep2

echo "== a checkpoint written at ep4 resumes at ep2 and in one process =="
$MPI -np 4 $M train $B --steps 6 --dp 4 --ep 4 --zero 3 --ckpt-dir $W/ck --metrics $W/first.jsonl >/dev/null
$M ckpt verify $W/ck >/dev/null
resume() { # NAME NP LAYOUT...
    # shellcheck disable=SC2086
    resume_from $W/ck $W/first.jsonl $1 $2 $B --micro-batch 2 "${@:3}"
    compare one_mb2 resumed_$1
}
resume ep2 2 --dp 2 --ep 2 --zero 1
resume one_process 1

echo "== bad input =="
expect_failure "does not divide the 4 experts" $MPI -np 3 $M train $B --dp 3 --ep 3 --batch 6
expect_failure "does not divide the data-parallel size" $MPI -np 2 $M train $B --dp 2 --ep 4
expect_failure "must be in 1..4" $MPI -np 2 $M train $B --dp 2 --ep 2 --moe-top-k 5
expect_failure "must be > 0" $MPI -np 2 $M train $B --dp 2 --ep 2 --moe-capacity-factor 0
expect_failure "must be > 0\|finite number > 0" $M train $B --moe-capacity-factor -1
expect_failure "this model has none" $MPI -np 2 $M train ${B%%--moe-experts*} --dp 2 --ep 2
expect_failure "drop {shard-group}\|drop --shard-group" $MPI -np 4 $M train $B --dp 4 --ep 2 --shard-group 4 --zero 2
expect_failure "int8-threshold 6 is not supported with --ep" $MPI -np 2 $M train $B --dp 2 --ep 2 --peft lora --quantize-base int8 --int8-threshold 6
expect_failure "expert and context parallelism do not combine" $MPI -np 4 $M train $B --dp 2 --cp 2 --ep 2
expect_failure "expert and context parallelism do not combine" $M plan --gpu h100 --gpus 8 --global-batch 8 --family llama --layers 4 --dim 64 --heads 4 --seq-len 32 --vocab 256 --moe-experts 4 --ep 2 --cp 2
expect_failure "must be >= 1 and divide" $M plan --gpu h100 --gpus 8 --global-batch 8 --family llama --layers 4 --dim 64 --heads 4 --seq-len 32 --vocab 256 --moe-experts 4 --ep 3
echo "moe ep OK"
