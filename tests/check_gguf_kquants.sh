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
#  - q4_k_m: llama.cpp's mix (Q6_K for the head -- a tied embedding -- and
#    for attn_v and ffn_down in the layers it gives more bits, Q4_K for the
#    rest) for an 8-layer Llama and a tied Qwen2 shape: every tensor, type
#    and bytes, is what llama.cpp's quantizer makes of the f32 file with
#    ftype Q4_K_M (not pure); NLL within 5% of f32's. GPT-2 is refused:
#    the mix gives its fused attn_qkv Q5_K, which is not written.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
llama_cpp_consumer # LIB, C
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

# llama.cpp's q4_k_m mix: Q6_K for the head (a tied embedding) and for attn_v and ffn_down in the layers
# it gives more bits (of 8 layers: 0, 3, 6, 7), Q4_K for the rest -- against its quantizer's own choice
declare -A Y=([llama8]="--family llama --layers 8 --kv-heads 2 --ffn-dim 512"
    [qwen2]="--family llama --kv-heads 2 --ffn-dim 512 --qkv-bias 1 --tie-embeddings 1")
for m in llama8 qwen2; do
    nice $M train --train $W/d_train.bin $MODEL ${Y[$m]} --steps 20 --ckpt-dir $W/$m >/dev/null
    for dt in f32 q4_k_m; do $M export --ckpt $W/$m --format gguf --dtype $dt --out $W/$m.$dt.gguf >/dev/null; done
    $C $W/$m.f32.gguf quantize $W/$m.lc.q4_k_m.gguf q4_k_m
    echo -n "$m q4_k_m ($($PY - $W/$m.q4_k_m.gguf <<'PY'
import sys
sys.path.insert(0, "tests")
from gguf_check import gguf_tensors
t = gguf_tensors(sys.argv[1])
print("Q6_K: " + " ".join(sorted(k for k in t if t[k][0] == 14)))
PY
)): llama.cpp's quantizer: "
    $G tensors $W/$m.q4_k_m.gguf $W/$m.lc.q4_k_m.gguf
    $G nll_within $(nll $W/$m.f32.gguf) $(nll $W/$m.q4_k_m.gguf) 0.05 "$m q4_k_m"
done

mkdir $W/bad
expect_failure "q4_k_m mix gives GPT-2's fused attn_qkv Q5_K, which is not written" \
    $M export --ckpt $W/gpt2 --format gguf --dtype q4_k_m --out $W/bad/x.gguf
$M train --train $W/d_train.bin --family llama --layers 1 --dim 64 --heads 4 --vocab 256 --seq-len 16 --steps 0 \
    --log-every 0 --ckpt-dir $W/d64 >/dev/null
expect_failure "rows of 64 values, which q4_k cannot store" $M export --ckpt $W/d64 --format gguf --dtype q4_k --out $W/bad/x.gguf
[ -z "$(ls -A $W/bad)" ] || { echo "left behind: $(ls -A $W/bad)"; exit 1; }
echo "K-quants in GGUF OK"
