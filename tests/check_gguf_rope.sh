#!/usr/bin/env bash
# RoPE scalings in GGUF, checked by llama.cpp itself (libllama of npm
# @node-llama-cpp/linux-x64 through tests/gguf_consumer.c): llama.cpp's
# logits on the f32 GGUF equal meshtrain's within 1e-4 (64 held-out
# positions, the whole vocabulary) for
#  - linear (factor 4), Llama shape;
#  - YaRN (factor 4, original context 4096: the ramp spans dims 2..6 of the
#    8 pairs), Llama shape, and (factor 8, original 1024) Qwen2 shape;
#  - YaRN with a given attention_factor 1.3 and with DeepSeek's mscale /
#    mscale_all_dim (set in config.json, imported back);
# and the scaling is what makes them equal: the YaRN file with its
# rope.scaling.type turned to "none" is off by more than 1e-2.
# Refused in one line, no file left: dynamic NTK (llama.cpp has none),
# YaRN with beta_fast/beta_slow other than 32/1 (this llama.cpp reads them
# for a few other architectures only) or truncate false (llama.cpp rounds
# the ramp's ends).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
llama_cpp_consumer # LIB, C
G="$PY tests/gguf_check.py"
corpus d
$G window $W/d_val.bin 1000 64 >$W/prompt.txt

# same FAMILY_FLAGS NAME: meshtrain's and llama.cpp's logits of checkpoint $W/NAME
same() {
    $M export --ckpt $W/$1 --format gguf --out $W/$1.gguf >/dev/null
    $M eval --ckpt $W/$1 --dump-logits $W/mt_$1.bin --ids $W/prompt.txt
    $C $W/$1.gguf logits $W/prompt.txt $W/lc.bin
    $G close $W/mt_$1.bin $W/lc.bin 256 1e-4 "$2"
}
MODEL="--layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 --vocab 256 --seq-len 64 --batch 8 --lr 3e-3 --log-every 0"
declare -A X=(
    [linear]="--family llama --rope-scaling linear --rope-factor 4"
    [yarn]="--family llama --rope-scaling yarn --rope-factor 4 --rope-original-max-pos 4096"
    [yarn_qwen2]="--family llama --qkv-bias 1 --tie-embeddings 1 --rope-theta 1000000 --rope-scaling yarn --rope-factor 8 --rope-original-max-pos 1024"
)
for s in linear yarn yarn_qwen2; do
    nice $M train --train $W/d_train.bin $MODEL ${X[$s]} --steps 60 --ckpt-dir $W/$s >/dev/null
    same $s "$s (${X[$s]#--family llama })"
done
# without its scaling, llama.cpp computes another model
$PY - $W/yarn.gguf $W/none.gguf <<'PY'
import sys
b = open(sys.argv[1], "rb").read()
k = b"llama.rope.scaling.type"
i = b.index(k) + len(k) + 4 + 8  # value type u32, string length u64
assert b[i:i + 4] == b"yarn"
open(sys.argv[2], "wb").write(b[:i] + b"none" + b[i + 4:])
PY
$C $W/none.gguf logits $W/prompt.txt $W/lc.bin
if $G close $W/mt_yarn.bin $W/lc.bin 256 1e-2 "" >/dev/null 2>&1; then echo "yarn: the scaling keys change nothing"; exit 1; fi
echo "yarn: the same GGUF with rope.scaling.type none is off by more than 1e-2"

# rescale NAME PYTHON_DICT: $W/NAME from the yarn checkpoint with config.json's rope_scaling updated
rescale() {
    rm -rf $W/hf_$1
    $M export --ckpt $W/yarn --format hf --out $W/hf_$1 >/dev/null
    $PY - $W/hf_$1/config.json "$2" <<'PY'
import ast, json, sys
c = json.load(open(sys.argv[1]))
c["rope_scaling"].update(ast.literal_eval(sys.argv[2]))
json.dump(c, open(sys.argv[1], "w"))
PY
    $M import --format hf --in $W/hf_$1 --out $W/$1 >/dev/null
}
rescale attn "{'attention_factor': 1.3}"
same attn "yarn, attention_factor 1.3"
rescale mscale "{'mscale': 1.0, 'mscale_all_dim': 0.5}"
same mscale "yarn, mscale 1 / mscale_all_dim 0.5"
if $G close $W/mt_attn.bin $W/mt_yarn.bin 256 1e-2 "" >/dev/null 2>&1; then echo "attention_factor changes nothing"; exit 1; fi

echo "== what llama.cpp cannot compute: one line, no file =="
mkdir $W/bad
none_left() { [ -z "$(ls -A $W/bad)" ] || { echo "left behind: $(ls -A $W/bad)"; exit 1; }; }
$M train --train $W/d_train.bin $MODEL --family llama --rope-scaling dynamic --rope-factor 2 --rope-original-max-pos 32 \
    --steps 0 --ckpt-dir $W/dynamic >/dev/null
expect_failure "dynamic NTK.* has no counterpart in llama.cpp" $M export --ckpt $W/dynamic --format gguf --out $W/bad/x.gguf
none_left
rescale beta "{'beta_fast': 16.0}"
expect_failure "beta_fast 16, beta_slow 1; llama.cpp's llama and qwen2 architectures use 32 and 1" \
    $M export --ckpt $W/beta --format gguf --out $W/bad/x.gguf
none_left
rescale trunc "{'truncate': False}"
expect_failure "truncate false.* cannot be exported to GGUF exactly" $M export --ckpt $W/trunc --format gguf --out $W/bad/x.gguf
none_left
echo "rope scalings in GGUF OK"
