#!/usr/bin/env bash
# hf_prepare.sh MESHTRAIN DIR: the inputs of issue 31's point 5, checked on the GPU machine (which
# has transformers and peft; tests/gpu/hf_check.py there): for each case a briefly trained model
# exported as a Hugging Face directory (DIR/CASE/model), for the adapter cases also the base as a
# Hugging Face directory and the adapter as a peft directory (DIR/CASE/base, DIR/CASE/adapter),
# the token sequences (DIR/ids.txt, one held-out window per line) and meshtrain's own logits over
# them (DIR/CASE/mt.bin, float32 [tokens, vocab], eval --dump-logits; an adapter run merged).
# pack.sh runs it into the gpu-pack folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
m=${1:?usage: hf_prepare.sh MESHTRAIN DIR} out=${2:?usage: hf_prepare.sh MESHTRAIN DIR}
m=$(readlink -f "$m")
[ -x "$m" ] || { echo "hf_prepare.sh: $m is not built (make)"; exit 1; }
rm -rf "$out" && mkdir -p "$out"
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
bash tests/corpus.sh "$tmp/corpus.txt"
"$m" tokenize --tokenizer byte --out "$tmp/d" "$tmp/corpus.txt" >/dev/null
for k in 0 1 2 3; do /usr/bin/python3 tests/gguf_check.py window "$tmp/d_val.bin" $((3000 + 200 * k)) 48; done >"$out/ids.txt"
export OMP_NUM_THREADS=2
common="--train $tmp/d_train.bin --vocab 256 --seq-len 64 --batch 8 --lr 3e-3 --log-every 0 --layers 2 --dim 64 --heads 4"
declare -A X=(
    [gpt2]="--family gpt2"
    [llama]="--family llama --kv-heads 2 --ffn-dim 96 --rope-theta 50000 --rope-scaling llama3 --rope-original-max-pos 16"
    [qwen2]="--family llama --kv-heads 2 --ffn-dim 96 --qkv-bias 1 --tie-embeddings 1 --rope-theta 1000000"
    [falcon]="--family falcon --kv-heads 1"
    [mixtral]="--family llama --kv-heads 2 --ffn-dim 64 --moe-experts 4 --moe-top-k 2"
)
for c in gpt2 llama qwen2 falcon mixtral; do
    # shellcheck disable=SC2086
    "$m" train $common ${X[$c]} --steps 60 --ckpt-dir "$tmp/$c" >/dev/null
    mkdir -p "$out/$c"
    "$m" export --ckpt "$tmp/$c" --format hf --out "$out/$c/model" >/dev/null
    "$m" eval --ckpt "$tmp/$c" --dump-logits "$out/$c/mt.bin" --ids "$out/ids.txt" >/dev/null
done
# adapters on the trained bases: LoRA (GPT-2's c_attn; every Llama linear), IA3 (Llama)
declare -A A=(
    [gpt2_lora]="gpt2 --peft lora --lora-r 4 --lora-alpha 8"
    [llama_lora]="llama --peft lora --lora-r 4 --lora-alpha 8 --lora-targets all-linear"
    [llama_ia3]="llama --peft ia3"
)
for c in gpt2_lora llama_lora llama_ia3; do
    read -r base flags <<<"${A[$c]}"
    # shellcheck disable=SC2086
    "$m" train $common ${X[$base]} --init-from "$tmp/$base" $flags --steps 40 --lr 1e-2 --ckpt-dir "$tmp/$c" >/dev/null
    mkdir -p "$out/$c"
    "$m" export --ckpt "$tmp/$base" --format hf --out "$out/$c/base" >/dev/null
    "$m" export --ckpt "$tmp/$c" --format peft --out "$out/$c/adapter" >/dev/null
    "$m" eval --ckpt "$tmp/$c" --dump-logits "$out/$c/mt.bin" --ids "$out/ids.txt" >/dev/null
    "$m" eval --ckpt "$tmp/$base" --dump-logits "$out/$c/base_mt.bin" --ids "$out/ids.txt" >/dev/null
done
echo "hf_prepare: $(du -sh "$out" | cut -f1) in $out"
