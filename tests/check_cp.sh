#!/usr/bin/env bash
# Context parallelism in the trainer ({cp} N, {cp-mode} ring): each sequence
# cut into 2N chunks, cp rank i holding chunks i and 2N-1-i, attention over
# the ring, gradients reduced over dp x cp. Against one process, 10 steps,
# every loss within 1e-5 relative: GPT-2 with dropout 0.1 (embedding,
# attention-probability and residual masks from global coordinates) at cp2,
# cp4, dp2 x cp2 ZeRO-3, cp2 x tp2 + sp and cp2 x pp2; Llama (GQA, 4 heads /
# 2 kv heads, RoPE at the chunks' positions) at cp2, cp4 and dp2 x cp2
# ZeRO-3. cp1 is the one-process path itself (bitwise: every other layout
# test). Then the bad inputs, one line each.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
G="--train $W/d_train.bin --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 4 --steps 10 --lr 2e-3 --log-every 0
   --dropout 0.1"
L="--train $W/d_train.bin --family llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 --seq-len 32
   --batch 4 --steps 10 --lr 2e-3 --log-every 0"
run() { # NAME NP FLAGS...
    local name=$1 n=$2; shift 2
    $MPI -np $n $M train "$@" --metrics $W/$name.jsonl >$W/$name.out 2>&1 || { cat $W/$name.out; exit 1; }
}
run g_one 1 $G
run g_cp2 2 $G --cp 2;                                   losses_within $W/g_one.jsonl $W/g_cp2.jsonl gpt2_cp2
grep -q "cp 2 (ring)" $W/g_cp2.out || { echo "the model line does not name cp"; cat $W/g_cp2.out; exit 1; }
run g_cp4 4 $G --cp 4;                                   losses_within $W/g_one.jsonl $W/g_cp4.jsonl gpt2_cp4
run g_dp2cp2 4 $G --dp 2 --cp 2 --zero 3;                losses_within $W/g_one.jsonl $W/g_dp2cp2.jsonl gpt2_dp2_cp2_zero3
run g_cp2tp2 4 $G --cp 2 --tp 2 --sequence-parallel;     losses_within $W/g_one.jsonl $W/g_cp2tp2.jsonl gpt2_cp2_tp2_sp
run g_cp2pp2 4 $G --cp 2 --pp 2 --micro-batch 2;         losses_within $W/g_one.jsonl $W/g_cp2pp2.jsonl gpt2_cp2_pp2
echo
run l_one 1 $L
run l_cp2 2 $L --cp 2;                                   losses_within $W/l_one.jsonl $W/l_cp2.jsonl llama_cp2
run l_cp4 4 $L --cp 4;                                   losses_within $W/l_one.jsonl $W/l_cp4.jsonl llama_cp4
run l_dp2cp2 4 $L --dp 2 --cp 2 --zero 3;                losses_within $W/l_one.jsonl $W/l_dp2cp2.jsonl llama_dp2_cp2_zero3
echo

# bad input: one line each, on every rank's clean exit
expect_failure "cp 4 cuts each sequence into 2 x 4 = 8 chunks.*seq-len 36" $MPI -np 4 $M train $G --seq-len 36 --cp 4
expect_failure "cp 2 x pp 1 x tp 1 = 2 processes, but the job has 4" $MPI -np 4 $M train $G --cp 2
expect_failure "unknown --cp-mode 'ringg'" $M train $G --cp-mode ringg
expect_failure "cp-mode alltoall is not implemented" $MPI -np 2 $M train $G --cp 2 --cp-mode alltoall
echo "context parallelism OK"
