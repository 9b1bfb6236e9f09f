#!/usr/bin/env bash
# K-quants in GGUF (export --dtype q4_k | q6_k: every matrix of the type),
# checked by llama.cpp itself (libllama of npm @node-llama-cpp/linux-x64
# through tests/gguf_consumer.c):
#  - for a Llama (GQA) and a GPT-2 with rows of 256 and more (dim 256),
#    briefly trained: every tensor of meshtrain's q4_k and q6_k files is byte
#    for byte what llama.cpp's own quantizer (llama_model_quantize, pure:
#    ftype Q4_K_S / Q6_K with every matrix of the type) makes of the f32
#    file;
#  - llama.cpp's mean NLL on 8 x 64 held-out tokens of the q6_k / q4_k files
#    is within 1% / 5% of the f32 file's;
#  - rows that are not a multiple of 256 are refused in one line, no file.
# llama.cpp's q4_k_m mix (some matrices Q6_K by layer and role) is not
# written.
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
for k in $(seq 0 7); do $G window $W/d_val.bin $((5000 + 64 * k)) 64; done >$W/windows.txt
nll() { $C $1 logits $W/windows.txt $W/l.bin && $G nll $W/l.bin $W/windows.txt 256; }

MODEL="--layers 2 --dim 256 --heads 4 --vocab 256 --seq-len 64 --batch 8 --lr 2e-3 --log-every 0"
declare -A X=([llama]="--family llama --kv-heads 2 --ffn-dim 512" [gpt2]="--family gpt2")
for fam in llama gpt2; do
    nice $M train --train $W/d_train.bin $MODEL ${X[$fam]} --steps 40 --ckpt-dir $W/$fam >/dev/null
    for dt in f32 q4_k q6_k; do $M export --ckpt $W/$fam --format gguf --dtype $dt --out $W/$fam.$dt.gguf >/dev/null; done
    ref=$(nll $W/$fam.f32.gguf)
    for q in q6_k:0.01 q4_k:0.05; do
        dt=${q%:*}
        $C $W/$fam.f32.gguf quantize $W/$fam.lc.$dt.gguf $dt
        echo -n "$fam $dt: llama.cpp's quantizer: "
        $G tensors $W/$fam.$dt.gguf $W/$fam.lc.$dt.gguf
        $G nll_within $ref $(nll $W/$fam.$dt.gguf) ${q#*:} "$fam $dt"
    done
done

mkdir $W/bad
$M train --train $W/d_train.bin --family llama --layers 1 --dim 64 --heads 4 --vocab 256 --seq-len 16 --steps 0 \
    --log-every 0 --ckpt-dir $W/d64 >/dev/null
expect_failure "rows of 64 values, which q4_k cannot store" $M export --ckpt $W/d64 --format gguf --dtype q4_k --out $W/bad/x.gguf
[ -z "$(ls -A $W/bad)" ] || { echo "left behind: $(ls -A $W/bad)"; exit 1; }
echo "K-quants in GGUF OK"
