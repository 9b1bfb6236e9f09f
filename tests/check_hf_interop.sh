#!/usr/bin/env bash
# Hugging Face model directories, both families:
#  - export -> import -> export is byte-identical (config.json and weights);
#  - a sharded export (forced with a small --shard-mb: several files and
#    model.safetensors.index.json) imports to the same model;
#  - bf16 export -> import gives the weights rounded to bf16 (the exports
#    of both then equal);
#  - meshtrain's Llama export, read by the independent PyTorch reference
#    (tests/torch_llama.py), gives meshtrain's step-0 loss (1e-6 relative);
#  - a config.json missing a required key, a tensor of the wrong shape and
#    an unsupported model_type each give one clear line.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
same_dir() { # A B: the same files with the same bytes
    diff <(cd $1 && ls) <(cd $2 && ls) >/dev/null || { echo "file lists differ: $(ls $1) vs $(ls $2)"; exit 1; }
    for f in $(cd $1 && ls); do cmp -s $1/$f $2/$f || { echo "$1/$f and $2/$f differ"; exit 1; }; done
}
for fam in gpt2 llama; do
    B="--train $W/d_train.bin --family $fam --layers 2 --dim 64 --heads 4 --vocab 300 --seq-len 32 --batch 4 --log-every 0"
    [ $fam = llama ] && B="$B --kv-heads 2 --ffn-dim 96 --qkv-bias 1 --rope-scaling llama3 --rope-original-max-pos 16"
    $M train $B --steps 3 --ckpt-dir $W/${fam}_ck >/dev/null          # trained weights, not the init
    $M export --ckpt $W/${fam}_ck --format hf --out $W/${fam}_hf1 >/dev/null
    $M import --format hf --in $W/${fam}_hf1 --out $W/${fam}_ck2 >/dev/null
    $M export --ckpt $W/${fam}_ck2 --format hf --out $W/${fam}_hf2 >/dev/null
    same_dir $W/${fam}_hf1 $W/${fam}_hf2
    echo "$fam: export -> import -> export byte-identical ($(ls $W/${fam}_hf1 | tr '\n' ' '))"
    $M export --ckpt $W/${fam}_ck --format hf --shard-mb 0.05 --out $W/${fam}_sharded >/dev/null
    n=$(ls $W/${fam}_sharded | grep -c '^model-.*-of-.*\.safetensors$')
    [ -f $W/${fam}_sharded/model.safetensors.index.json ] && [ "$n" -ge 3 ] || { echo "$fam: expected >= 3 shards + index"; exit 1; }
    $M import --format hf --in $W/${fam}_sharded --out $W/${fam}_ck3 >/dev/null
    $M export --ckpt $W/${fam}_ck3 --format hf --out $W/${fam}_hf3 >/dev/null
    same_dir $W/${fam}_hf1 $W/${fam}_hf3
    echo "$fam: $n shards + index import to the same model"
    $M export --ckpt $W/${fam}_ck --format hf --dtype bf16 --out $W/${fam}_bf16 >/dev/null
    grep -q '"torch_dtype":"bfloat16"' $W/${fam}_bf16/config.json || { echo "$fam: torch_dtype"; exit 1; }
    $M import --format hf --in $W/${fam}_bf16 --out $W/${fam}_ck4 >/dev/null
    $M export --ckpt $W/${fam}_ck4 --format hf --dtype bf16 --out $W/${fam}_bf16b >/dev/null
    same_dir $W/${fam}_bf16 $W/${fam}_bf16b
    echo "$fam: bf16 export -> import -> export byte-identical"
done

echo "== meshtrain's Llama export read by the PyTorch reference =="
$M train --train $W/d_train.bin --init-from $W/llama_ck --batch 4 --steps 1 --data-order sequential \
    --metrics $W/mt.jsonl --log-every 0 >/dev/null
$PY tests/torch_llama.py train --model $W/llama_hf1 --data $W/d_train.bin --seq-len 32 --batch 4 --steps 1 \
    --out-json $W/ref.json
$PY - $W <<'PY'
import json, sys
w = sys.argv[1]
mt = [json.loads(l)["loss"] for l in open(f"{w}/mt.jsonl") if '"loss"' in l][0]
ref = json.load(open(f"{w}/ref.json"))["losses"][0]
rel = abs(mt - ref) / ref
print(f"step-0 loss meshtrain {mt:.8f}, PyTorch on the export {ref:.8f} (rel {rel:.2e})")
assert rel <= 1e-6
PY

echo "== bad directories =="
expect_failure() { # PATTERN CMD...
    local pat=$1; shift
    if "$@" >$W/err.txt 2>&1; then echo "expected failure: $*"; exit 1; fi
    [ "$(grep -c . $W/err.txt)" -eq 1 ] || { echo "expected one line, got:"; cat $W/err.txt; exit 1; }
    grep -q -- "$pat" $W/err.txt || { echo "expected '$pat' in:"; cat $W/err.txt; exit 1; }
    echo "refused: $(cat $W/err.txt)"
}
cp -r $W/llama_hf1 $W/nokey; sed -i 's/"hidden_size":64,//' $W/nokey/config.json
expect_failure "hidden_size" $M import --format hf --in $W/nokey --out $W/x1
cp -r $W/llama_hf1 $W/shape; sed -i 's/"intermediate_size":96/"intermediate_size":80/' $W/shape/config.json
expect_failure "has shape \[96, 64\], config.json implies \[80, 64\]" $M import --format hf --in $W/shape --out $W/x2
cp -r $W/llama_hf1 $W/t5; sed -i 's/"model_type":"qwen2"/"model_type":"t5"/' $W/t5/config.json
expect_failure "model_type 't5' is not supported" $M import --format hf --in $W/t5 --out $W/x3
expect_failure "holds GPT-2 models" $M export --ckpt $W/llama_ck --format safetensors --out $W/x4.safetensors
echo OK
