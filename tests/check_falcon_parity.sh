#!/usr/bin/env bash
# PyTorch parity for the Falcon family (tests/torch_falcon.py, plain torch
# after transformers' FalconForCausalLM): random weights written as a
# Hugging Face directory of the real Falcon form, `meshtrain import --format
# hf`, then `train --init-from` and the reference run the same batches
# (sequential order) with AdamW + clipping + warmup/cosine:
#   step-0 loss to 1e-6 relative, every gradient tensor to 1e-5 (max abs
#   diff / max abs), 10 losses to 1e-5 relative.
# Six models: multi_query with one LayerNorm (Falcon-7B), tied;
# new_decoder_architecture with 2 kv groups and ln_attn/ln_mlp (Falcon-40B),
# untied; neither (per-head q,k,v groups), tied, with ffn_hidden_size;
# multi_query with bias: true (every linear with a bias); grouped with one
# LayerNorm (num_ln_in_parallel_attn 1); grouped on packed documents with a
# loss mask (answers only).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
L=2; C=64; H=4; V=300; T=32; B=4; STEPS=10
OPT="--batch $B --steps $STEPS --lr 1e-3 --warmup 3 --lr-schedule cosine --min-lr 1e-4 --grad-clip 0.5 --weight-decay 0.1
     --beta1 0.9 --beta2 0.95 --eps 1e-8"
declare -A CASES=([mq]="--form mq --tie 1" [gqa]="--form gqa --kv-heads 2 --tie 0" [mha]="--form mha --tie 1 --ffn 160"
                  [mq_bias]="--form mq --tie 1 --bias 1" [gqa_one_norm]="--form gqa --kv-heads 2 --norms 1 --tie 1")
# packed documents with a loss mask (tokenize --format jsonl --packing): positions restart at each
# document, attention stays inside it, the loss counts the answers only
$PY - $W/chat.jsonl <<'PY'
import json, random, sys
r = random.Random(3)
words = ["cat", "dog", "sun", "a", "is", "the", "red", "go", "up", "no"]
with open(sys.argv[1], "w") as f:
    for i in range(200):
        p, c = (" ".join(r.choice(words) for _ in range(r.randint(1, 3))) for _ in range(2))
        f.write(json.dumps({"prompt": p + " ->", "completion": " " + c}) + "\n")
PY
$M tokenize --format jsonl --tokenizer byte --seq-len $T --packing --out $W/p $W/chat.jsonl >/dev/null
CASES[gqa_packed]="--form gqa --kv-heads 2 --tie 1"
for c in mq gqa mha mq_bias gqa_one_norm gqa_packed; do
    data=$W/d_train.bin; [ $c = gqa_packed ] && data=$W/p_train.bin
    $PY tests/torch_falcon.py init --out $W/hf_$c --layers $L --dim $C --heads $H --vocab $V --max-pos $T --seed 7 ${CASES[$c]}
    $M import --format hf --in $W/hf_$c --out $W/ck_$c >/dev/null
    $M train --train $data --init-from $W/ck_$c $OPT --data-order sequential --dump-grads $W/mt_$c.bin \
        --metrics $W/mt_$c.jsonl --log-every 0 >/dev/null
    $PY tests/torch_falcon.py train --model $W/hf_$c --data $data --seq-len $T $OPT --out-json $W/ref_$c.json \
        --out-grads $W/ref_$c.bin --grad-vocab-rows $(( (V + 127) / 128 * 128 ))
    $PY - $W $c <<'PY'
import json, sys
sys.path.insert(0, "tests")
import parity, torch_falcon as tf
w, c = sys.argv[1], sys.argv[2]
cfg = tf.Cfg(json.load(open(f"{w}/hf_{c}/config.json")))
Vp = (cfg.V + 127) // 128 * 128
sizes = []
for n, shape in tf.tensor_specs(cfg):
    rows = Vp if n in ("transformer.word_embeddings.weight", "lm_head.weight") else shape[0]
    sizes.append((n, rows * (shape[1] if len(shape) == 2 else 1)))
parity.compare_losses(f"{w}/mt_{c}.jsonl", f"{w}/ref_{c}.json", 10, 1e-5, step0_tol=1e-6, label=f"falcon {c} losses")
parity.compare_grads(f"{w}/mt_{c}.bin", f"{w}/ref_{c}.bin", sizes, 1e-5, label=f"falcon {c} gradients")
PY
done
echo "falcon parity OK"
