#!/usr/bin/env bash
# QK-norm (--qk-norm 1: OLMoE's q_norm and k_norm, RMSNorms of the whole q
# and k projections before RoPE) on a fresh OLMoE-shaped model (4 experts
# top-2, softmax then top-k, the aux and z losses on), 12 steps against one
# process at the same micro-batch, as check_moe_ep.sh bounds them: dp2,
# ep2, dp2 x ep2 ZeRO-3, ep2 x pp2, ep2 with full recomputation, tp2 (the
# norms' sums all-reduced over tp), tp2 with sequence parallelism, ep2 x tp2
# -- losses and aux losses to 1e-5 relative, the same per-layer expert
# loads; tp4 with 2 kv heads (each k head on 2 ranks) under SGD, and with
# only k_norm trained (its gradient alone moves the loss); a
# checkpoint written at ep2 resumes in one process to the uninterrupted run;
# it generates, exports as an olmoe directory (model_type olmoe, q_norm and
# k_norm tensors) that imports and exports again byte-identically. Then
# bad input, one line each: a value other than 0/1, a non-llama family, --device cuda (no kernel yet), exporting a dense QK-norm model.
# (Parity with PyTorch: check_moe_parity.sh's olmoe case.)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
B="--train $W/d_train.bin --family llama --layers 3 --dim 64 --heads 4 --kv-heads 2 --seq-len 32 --vocab 256
   --batch 8 --steps 12 --lr 2e-3 --log-every 0 --moe-experts 4 --moe-top-k 2 --moe-ffn-dim 32
   --moe-router softmax_topk --qk-norm 1 --moe-aux-coef 0.02 --moe-z-coef 0.001"
compare() { # REF RUN (tests/moe_compare.py; SGD at a small rate trains slower, k_norm alone moves the loss)
    local train=0.9
    case $2 in k_*) train=moves ;; sgd*) train=0.99 ;; esac
    $PY tests/moe_compare.py $W/$1.jsonl $W/$2.jsonl $2 --train $train
}
run() { local name=$1 n=$2; shift 2; $MPI -np $n $M train $B "$@" --metrics $W/$name.jsonl >/dev/null; }
run one 1 --micro-batch 4
run one_mb2 1 --micro-batch 2
run dp2 2 --dp 2;                                   compare one dp2
run ep2 2 --dp 2 --ep 2;                            compare one ep2
run dp2_ep2 4 --dp 4 --ep 2 --zero 3;               compare one_mb2 dp2_ep2
run ep2_pp2 4 --dp 2 --ep 2 --pp 2 --micro-batch 2; compare one_mb2 ep2_pp2
run ep2_full 2 --dp 2 --ep 2 --recompute full;      compare one ep2_full
run one_mb8 1
run tp2 2 --tp 2;                                   compare one_mb8 tp2
run tp2_sp 2 --tp 2 --sequence-parallel;            compare one_mb8 tp2_sp
run ep2_tp2 4 --dp 2 --ep 2 --tp 2 --zero 1;        compare one ep2_tp2
# tp 4 > 2 kv heads: k's columns (and their squares) on 2 ranks each. SGD (AdamW's sign-like steps on the
# norms' small gradients amplify the sums' rounding until a routing flip), then k_norm alone trained
SGD="--optimizer sgd --lr 0.5 --grad-clip 0"
run sgd_one 1 $SGD;                                 run sgd_tp4 4 --tp 4 $SGD;       compare sgd_one sgd_tp4
K="--optimizer sgd --lr 20 --grad-clip 0 --freeze ^(?!.*k_norm)"
run k_one 1 $K;                                     run k_tp4 4 --tp 4 $K;           compare k_one k_tp4

echo "== a checkpoint written at ep2 resumes in one process =="
$MPI -np 2 $M train $B --steps 6 --dp 2 --ep 2 --ckpt-dir $W/ck --metrics $W/first.jsonl >/dev/null
$M train $B --micro-batch 4 --ckpt-dir $W/ck --resume --metrics $W/second.jsonl >/dev/null
cat $W/first.jsonl $W/second.jsonl > $W/resumed.jsonl
compare one resumed
$M generate --ckpt $W/ck --prompt "The " --tokens 8 --temperature 0 > $W/gen.txt
[ "$(wc -c < $W/gen.txt)" -ge 12 ] || { echo "generate wrote $(wc -c < $W/gen.txt) bytes"; exit 1; }

echo "== export as olmoe =="
$M export --ckpt $W/ck --format hf --out $W/hf1 >/dev/null
$M import --format hf --in $W/hf1 --out $W/ck2 >/dev/null
$M export --ckpt $W/ck2 --format hf --out $W/hf2 >/dev/null
for f in config.json model.safetensors; do cmp $W/hf1/$f $W/hf2/$f; done
$PY - $W/hf1 <<'PY'
import json, sys
sys.path.insert(0, "tests")
from torch_llama import read_safetensors
j = json.load(open(sys.argv[1] + "/config.json"))
assert j["model_type"] == "olmoe" and j["architectures"] == ["OlmoeForCausalLM"] and j["intermediate_size"] == 32, j
t = read_safetensors(sys.argv[1] + "/model.safetensors")
assert t["model.layers.2.self_attn.q_norm.weight"].shape[0] == 64 and t["model.layers.2.self_attn.k_norm.weight"].shape[0] == 32
assert (t["model.layers.0.self_attn.q_norm.weight"] != 1).any(), "q_norm was not trained"
print("exported as olmoe: q_norm [64], k_norm [32] trained; export -> import -> export byte-identical")
PY

echo "== bad input =="
expect_failure "not yet supported on {device} cuda\|not yet supported on --device cuda" $M train $B --device cuda
expect_failure "must be 0 or 1, got 2" $M train $B --qk-norm 2
expect_failure "applies to --family llama" $M train --train $W/d_train.bin --layers 2 --dim 64 --heads 4 --qk-norm 1
$M train --train $W/d_train.bin --family llama --layers 1 --dim 64 --heads 4 --seq-len 32 --vocab 256 --steps 1 \
    --qk-norm 1 --log-every 0 --ckpt-dir $W/dense >/dev/null
expect_failure "the Hugging Face format that holds it is OLMoE" $M export --ckpt $W/dense --format hf --out $W/dense_hf
[ ! -e $W/dense_hf ] || { echo "a refused export left $W/dense_hf behind"; exit 1; }
echo "qk-norm OK"
