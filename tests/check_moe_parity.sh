#!/usr/bin/env bash
# PyTorch parity of the Llama family's mixture-of-experts blocks
# (tests/torch_moe.py as the reference): random weights written as a Mixtral
# or a Qwen2-MoE directory by the reference, `meshtrain import --format hf`,
# then `train --init-from` and the reference run the same batches with AdamW
# + clipping + warmup/cosine and the load-balancing and z losses on:
#   step-0 loss to 1e-6 relative, every gradient tensor (routers included)
#   to 1e-5 (max abs diff / max abs), 10 losses to 1e-5 relative, the
#   reported aux loss to 1e-5.
# Cases: Mixtral routing (softmax over the top-2 logits), Qwen-MoE routing
# (softmax then top-2) with and without norm_topk_prob, OLMoE (Qwen-MoE's
# routing without norm_topk_prob, QK-norm before RoPE), and a capacity factor
# that drops tokens (their count equals the reference's). Then greedy
# generation with the KV cache equals the reference's greedy decoding.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
L=2; C=64; H=4; KV=2; E=4; K=2; FE=32; V=300; T=32; B=4; STEPS=10
OPT="--batch $B --steps $STEPS --lr 1e-3 --warmup 3 --lr-schedule cosine --min-lr 1e-4 --grad-clip 0.5 --weight-decay 0.1
     --beta1 0.9 --beta2 0.95 --eps 1e-8"
declare -A INIT=(
    [mixtral]="--type mixtral"
    [qwen]="--type qwen2_moe --norm-topk 0"
    [qwen_norm]="--type qwen2_moe --norm-topk 1"
    [capacity]="--type mixtral"
    [olmoe]="--type olmoe --norm-topk 0"
)
declare -A LOSS=(
    [mixtral]="--aux-coef 0.05 --z-coef 0.01"
    [qwen]="--aux-coef 0.05 --z-coef 0.01"
    [qwen_norm]="--aux-coef 0.05"
    [capacity]="--aux-coef 0.05 --z-coef 0.01 --capacity-factor 0.75"
    [olmoe]="--aux-coef 0.05 --z-coef 0.01"
)
for c in mixtral qwen qwen_norm capacity olmoe; do
    $PY tests/torch_moe.py init --out $W/hf_$c --layers $L --dim $C --heads $H --kv-heads $KV --experts $E --top-k $K \
        --moe-ffn $FE --vocab $V --max-pos $T --seed 11 ${INIT[$c]}
    $M import --format hf --in $W/hf_$c --out $W/ck_$c >/dev/null
    mtloss=$(echo "${LOSS[$c]}" | sed 's/--aux-coef/--moe-aux-coef/; s/--z-coef/--moe-z-coef/; s/--capacity-factor/--moe-capacity-factor/')
    $M train --train $W/d_train.bin --init-from $W/ck_$c $OPT $mtloss --data-order sequential --dump-grads $W/mt_$c.bin \
        --metrics $W/mt_$c.jsonl --log-every 0 >/dev/null
    $PY tests/torch_moe.py train --model $W/hf_$c --data $W/d_train.bin --seq-len $T $OPT ${LOSS[$c]} \
        --out-json $W/ref_$c.json --out-grads $W/ref_$c.bin --grad-vocab-rows $(( (V + 127) / 128 * 128 ))
    $PY - $W $c $L $C $H $KV 0 $V $E $FE "${INIT[$c]}" <<'PY'
import json, sys
sys.path.insert(0, "tests")
import parity
w, c = sys.argv[1], sys.argv[2]
L, C, H, KV, _, V, E, FE = map(int, sys.argv[3:11])
bias = "qwen2_moe" in sys.argv[11]
qk_norm = "olmoe" in sys.argv[11]
Vp, hd = (V + 127) // 128 * 128, C // H
QW, KW = H * hd, KV * hd
parity.compare_losses(f"{w}/mt_{c}.jsonl", f"{w}/ref_{c}.json", 10, 1e-5, step0_tol=1e-6, label=f"{c} losses")
mt = [json.loads(l) for l in open(f"{w}/mt_{c}.jsonl") if '"loss"' in l]
ref = json.load(open(f"{w}/ref_{c}.json"))
worst = max(abs(m["moe_aux"] - r) / abs(r) for m, r in zip(mt, ref["aux"]))
print(f"{c} aux loss: meshtrain {mt[0]['moe_aux']:.8f} vs torch {ref['aux'][0]:.8f}; worst relative {worst:.2e}")
assert worst <= 1e-5, f"{c}: aux losses differ by {worst:.2e}"
drops = [m["moe_dropped"] for m in mt]
assert drops == ref["dropped"], f"{c}: dropped slots {drops} vs the reference's {ref['dropped']}"
print(f"{c} dropped slots per step: {drops}")
sizes = [("model.embed_tokens.weight", Vp * C)]
for l in range(L):
    p = f"model.layers.{l}."
    sizes += [(p + "input_layernorm.weight", C), (p + "q_proj.weight", QW * C), (p + "k_proj.weight", KW * C),
              (p + "v_proj.weight", KW * C)]
    if bias:
        sizes += [(p + "q_proj.bias", QW), (p + "k_proj.bias", KW), (p + "v_proj.bias", KW)]
    if qk_norm:
        sizes += [(p + "q_norm.weight", QW), (p + "k_norm.weight", KW)]
    sizes += [(p + "o_proj.weight", C * QW), (p + "post_attention_layernorm.weight", C), (p + "router", E * C)]
    for e in range(E):
        sizes += [(p + f"experts.{e}.gate_proj", FE * C), (p + f"experts.{e}.up_proj", FE * C),
                  (p + f"experts.{e}.down_proj", C * FE)]
sizes += [("model.norm.weight", C), ("lm_head.weight", Vp * C)]
parity.compare_grads(f"{w}/mt_{c}.bin", f"{w}/ref_{c}.bin", sizes, 1e-5, label=f"{c} gradients")
PY
done
echo "== generate =="
# greedy KV-cache decoding (models/llama/decode.c's MoE step) against the reference's full forward per token
for t in "mixtral --norm-topk 0" "qwen2_moe --norm-topk 1" "olmoe --norm-topk 0"; do
    $PY tests/torch_moe.py init --out $W/gen --type $t --layers $L --dim $C --heads $H --kv-heads $KV --experts $E \
        --top-k $K --moe-ffn $FE --vocab 256 --max-pos $T --seed 5
    rm -rf $W/gen_ck
    $M import --format hf --in $W/gen --out $W/gen_ck >/dev/null
    $M generate --ckpt $W/gen_ck --prompt "The " --tokens 16 --temperature 0 > $W/gen.txt
    $PY tests/torch_moe.py generate --model $W/gen --prompt-ids 84,104,101,32 --tokens 16 > $W/gen_ref.txt
    $PY - $W/gen.txt $W/gen_ref.txt "$t" <<'PY'
import sys
d = open(sys.argv[1], "rb").read()
got = list((d[:-1] if d.endswith(b"\n") else d)[4:])  # generate ends its text with one newline
ref = [int(x) for x in open(sys.argv[2]).read().split(",")]
assert got == ref, f"{sys.argv[3]}: generated {got}, the reference {ref}"
print(f"{sys.argv[3].split()[0]}: 16 greedy tokens equal the reference's")
PY
    rm -rf $W/gen
done
echo "moe parity OK"
