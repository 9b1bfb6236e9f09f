#!/usr/bin/env bash
# Training with loss masks (extended shards from `tokenize --format jsonl`):
#  1. against PyTorch with ignored targets (cross_entropy's ignore_index: the
#     mean over the counted targets of the batch), same weights and batches:
#     Llama (GQA, untied) and GPT-2, 10 AdamW steps with clipping and a
#     schedule: step-0 loss to 1e-6 / 1e-5, 10 losses to 1e-5 / 1e-4, every
#     gradient tensor to 1e-5 / 1e-4 (the families' parity bounds);
#  2. the loss is the mean over the counted targets of the whole global
#     batch, so every layout equals one process to 1e-5: micro-batches 1, 2
#     and 4 (accumulation), dp2 ZeRO-3, dp2 x tp2 with sequence parallelism,
#     pp2 1F1B, dp2 x tp2 x pp2 (Llama); dp2 x tp2 with sequence
#     parallelism and pp2 (GPT-2);
#  3. masks really mask: a random prompt and an answer of one repeated
#     byte: answer-only training drives the loss near 0, all-token training
#     cannot (the prompt is unpredictable).
#  4. generate --chat renders a prompt with the template, answers as trained
#     and stops at the end of turn.
# 1 and 2 run twice: one sample per window, and packed (--packing: several
# samples a window; the references attend through the explicit
# block-diagonal causal mask with positions restarting at each sample).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
T=64
# short samples (byte tokenizer): prompt/completion pairs and conversations (zephyr template)
$PY - $W/chat.jsonl <<'PY'
import json, random, sys
r = random.Random(11)
words = ["cat", "dog", "sun", "a", "is", "the", "red", "go", "up", "no", "yes", "two"]
with open(sys.argv[1], "w") as f:
    for i in range(400):
        p = " ".join(r.choice(words) for _ in range(r.randint(1, 3)))
        c = " ".join(r.choice(words) for _ in range(r.randint(1, 3)))
        if i % 3 == 0:
            f.write(json.dumps({"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": c}]}) + "\n")
        else:
            f.write(json.dumps({"prompt": p + " ->", "completion": " " + c}) + "\n")
PY
for PACK in "" --packing; do
rm -rf $W/hf $W/ck $W/g0 $W/g0.safetensors
$M tokenize --format jsonl --tokenizer byte --chat-template zephyr --seq-len $T --overlong truncate $PACK \
    --out $W/m $W/chat.jsonl >$W/tok.log
grep -q "counted targets" $W/tok.log || { cat $W/tok.log; exit 1; }
sed -n '2,3p' $W/tok.log

echo "== 1. PyTorch with ignored targets ${PACK:+(packed)} =="
L=2; C=64; H=4; KV=2; F=96; V=300; B=4
OPT="--batch $B --steps 10 --lr 1e-3 --warmup 3 --lr-schedule cosine --min-lr 1e-4 --grad-clip 0.5 --weight-decay 0.1
     --beta1 0.9 --beta2 0.95 --eps 1e-8"
$PY tests/torch_llama.py init --out $W/hf --layers $L --dim $C --heads $H --kv-heads $KV --ffn $F --vocab $V \
    --max-pos $T --seed 7 --tie 0
$M import --format hf --in $W/hf --out $W/ck >/dev/null
$M train --train $W/m_train.bin --init-from $W/ck $OPT --data-order sequential --dump-grads $W/mt.bin \
    --metrics $W/mt.jsonl --log-every 0 >/dev/null
$PY tests/torch_llama.py train --model $W/hf --data $W/m_train.bin --seq-len $T $OPT --out-json $W/ref.json \
    --out-grads $W/ref.bin --grad-vocab-rows $(( (V + 127) / 128 * 128 ))
$PY - $W $L $C $H $KV $F $V <<'PY'
import sys
sys.path.insert(0, "tests")
import parity
w = sys.argv[1]
L, C, H, KV, F, V = map(int, sys.argv[2:8])
Vp, hd = (V + 127) // 128 * 128, C // H
QW, KW = H * hd, KV * hd
parity.compare_losses(f"{w}/mt.jsonl", f"{w}/ref.json", 10, 1e-5, step0_tol=1e-6, label="llama masked losses")
sizes = [("model.embed_tokens.weight", Vp * C)]
for l in range(L):
    p = f"model.layers.{l}."
    sizes += [(p + "input_layernorm.weight", C), (p + "q_proj.weight", QW * C), (p + "k_proj.weight", KW * C),
              (p + "v_proj.weight", KW * C), (p + "o_proj.weight", C * QW), (p + "post_attention_layernorm.weight", C),
              (p + "gate_proj.weight", F * C), (p + "up_proj.weight", F * C), (p + "down_proj.weight", C * F)]
sizes += [("model.norm.weight", C), ("lm_head.weight", Vp * C)]
parity.compare_grads(f"{w}/mt.bin", f"{w}/ref.bin", sizes, 1e-5, label="llama masked gradients")
PY
MODEL="--layers $L --dim $C --heads $H --vocab $V --seq-len $T"
$M train --train $W/m_train.bin $MODEL --steps 0 --seed 5 --ckpt-dir $W/g0 --log-every 0 >/dev/null
$M export --ckpt $W/g0 --format safetensors --out $W/g0.safetensors >/dev/null
$M train --train $W/m_train.bin --init-from $W/g0 $OPT --data-order sequential --dump-grads $W/gmt.bin \
    --metrics $W/gmt.jsonl --log-every 0 >/dev/null
$PY tests/torch_ref.py --weights $W/g0.safetensors --data $W/m_train.bin --out-json $W/gref.json \
    --out-grads $W/gref.bin --layers $L --heads $H --vocab $V --seq-len $T --batch $B --steps 10 \
    --lr 1e-3 --warmup 3 --lr-schedule cosine --min-lr 1e-4 --grad-clip 0.5 --weight-decay 0.1
$PY - "$W" $L $C $V $T <<'PY'
import sys
sys.path.insert(0, "tests")
import parity
w, L, C, V, T = sys.argv[1], *map(int, sys.argv[2:])
Vp = (V + 127) // 128 * 128
parity.compare_losses(f"{w}/gmt.jsonl", f"{w}/gref.json", 10, 1e-4, step0_tol=1e-5, label="gpt2 masked losses")
sizes = [("wte", Vp * C), ("wpe", T * C)]
for l in range(L):
    sizes += [(f"h.{l}.ln_1.weight", C), (f"h.{l}.ln_1.bias", C), (f"h.{l}.attn.c_attn.weight", 3 * C * C),
              (f"h.{l}.attn.c_attn.bias", 3 * C), (f"h.{l}.attn.c_proj.weight", C * C), (f"h.{l}.attn.c_proj.bias", C),
              (f"h.{l}.ln_2.weight", C), (f"h.{l}.ln_2.bias", C), (f"h.{l}.mlp.c_fc.weight", 4 * C * C),
              (f"h.{l}.mlp.c_fc.bias", 4 * C), (f"h.{l}.mlp.c_proj.weight", 4 * C * C), (f"h.{l}.mlp.c_proj.bias", C)]
sizes += [("ln_f.weight", C), ("ln_f.bias", C)]
parity.compare_grads(f"{w}/gmt.bin", f"{w}/gref.bin", sizes, 1e-4, label="gpt2 masked gradients")
PY

echo "== 2. layouts ${PACK:+(packed)} =="
LB="--train $W/m_train.bin --val $W/m_val.bin --family llama --layers 4 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96
    --seq-len $T --batch 8 --steps 12 --lr 2e-3 --log-every 0 --eval-every 6 --eval-batches 2"
run() { local name=$1 n=$2; shift 2; $MPI -np $n $M train $LB "$@" --metrics $W/$name.jsonl >/dev/null; }
run one 1
for lay in "mb1 1 --micro-batch 1" "mb2 1 --micro-batch 2" "mb4 1 --micro-batch 4" "dp2_zero3 2 --dp 2 --zero 3" \
           "dp2_tp2_sp 4 --dp 2 --tp 2 --sequence-parallel" "pp2_1f1b 2 --pp 2 --pp-schedule 1f1b --micro-batch 2" \
           "dp2_tp2_pp2 8 --dp 2 --tp 2 --pp 2 --zero 1 --micro-batch 2"; do
    set -- $lay
    name=$1 n=$2; shift 2
    run $name $n "$@"
    $PY - $W/one.jsonl $W/$name.jsonl $name <<'PY'
import json, sys
def get(p, k):
    return [json.loads(l)[k] for l in open(p) if f'"{k}"' in l]
out = []
for k, n in (("loss", 12), ("val_loss", 2)):
    a, b = get(sys.argv[1], k), get(sys.argv[2], k)
    worst = max(abs(x - y) / y for x, y in zip(a, b))
    assert len(a) == len(b) == n and worst <= 1e-5, f"{sys.argv[3]}: {k} {a} vs {b}"
    out.append(f"{n} {k}es within {worst:.2g}")
print(f"{sys.argv[3]}: " + ", ".join(out) + " of one process")
PY
done
# GPT-2 (learned positions, its embedding under tp and sequence parallelism)
GB="--train $W/m_train.bin --layers 2 --dim 64 --heads 4 --seq-len $T --vocab 256 --batch 8 --steps 8 --lr 2e-3 --log-every 0"
$MPI -np 1 $M train $GB --metrics $W/g_one.jsonl >/dev/null
for lay in "gpt2_dp2_tp2_sp 4 --dp 2 --tp 2 --sequence-parallel" "gpt2_pp2 2 --pp 2 --micro-batch 2"; do
    set -- $lay
    name=$1 n=$2; shift 2
    $MPI -np $n $M train $GB "$@" --metrics $W/$name.jsonl >/dev/null
    grep -v val_loss $W/g_one.jsonl >$W/a.jsonl
    grep -v val_loss $W/$name.jsonl >$W/b.jsonl
    losses_within $W/a.jsonl $W/b.jsonl $name
    echo
done
done

echo "== 3. masks mask =="
$PY - $W/rep.jsonl <<'PY'
import json, random, sys
r = random.Random(3)
with open(sys.argv[1], "w") as f:
    for _ in range(256):
        prompt = "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(16))
        f.write(json.dumps({"prompt": prompt, "completion": "zzzzzzzzzzzz"}) + "\n")
PY
for on in assistant all; do
    $M tokenize --format jsonl --tokenizer byte --seq-len $T --train-on $on --out $W/rep_$on $W/rep.jsonl >/dev/null
    $M train --train $W/rep_${on}_train.bin --family llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 \
        --seq-len $T --vocab 256 --batch 16 --steps 60 --lr 3e-3 --log-every 0 --metrics $W/rep_$on.jsonl >/dev/null
done
$PY - $W/rep_assistant.jsonl $W/rep_all.jsonl <<'PY'
import json, sys
last = lambda p: [json.loads(l)["loss"] for l in open(p) if '"loss"' in l][-5:]
a, b = sum(last(sys.argv[1])) / 5, sum(last(sys.argv[2])) / 5
assert a < 0.05, f"answer-only training ends at loss {a:.4f}, not near 0"
assert b > 1.0, f"all-token training ends at loss {b:.4f}: the random prompt cannot be learnt"
print(f"answer-only training: loss {a:.4f} (last 5 steps); all tokens: {b:.4f}")
PY

echo "== 4. generate --chat =="
# "say D" -> "DDD" in zephyr's template: the trained model answers through
# the template and stops at the end-of-turn text (</s>, several byte tokens)
$PY - $W/say.jsonl <<'PY'
import json, random, sys
r = random.Random(5)
with open(sys.argv[1], "w") as f:
    for _ in range(512):
        a = r.randint(0, 9)
        f.write(json.dumps({"messages": [{"role": "user", "content": f"say {a}"},
                                         {"role": "assistant", "content": f"{a}{a}{a}"}]}) + "\n")
PY
$M tokenize --format jsonl --tokenizer byte --chat-template zephyr --seq-len $T --out $W/say $W/say.jsonl >/dev/null
$M train --train $W/say_train.bin --family llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 \
    --seq-len $T --vocab 256 --batch 16 --steps 150 --lr 3e-3 --log-every 0 --ckpt-dir $W/say_ck >/dev/null
for a in 3 7; do
    $M generate --ckpt $W/say_ck --chat --chat-template zephyr --prompt "say $a" --temperature 0 --tokens 30 >$W/ans.txt
    [ "$(cat $W/ans.txt)" = "$a$a$a" ] || { echo "generate --chat 'say $a' answered: $(od -c $W/ans.txt | head -3)"; exit 1; }
    echo "say $a -> $(cat $W/ans.txt) (stopped at </s>)"
done
expect_failure "chat needs a chat template: name one with --chat-template" \
    $M generate --ckpt $W/say_ck --chat --prompt "say 1" --tokens 5
echo "masked loss OK"
