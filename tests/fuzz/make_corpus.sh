#!/usr/bin/env bash
# Regenerates the kept seed corpus tests/fuzz/corpus/<target>/ from a tiny
# model meshtrain trains here (one file or a few per target, a few KB each).
# Run from the repository root after `make`; commit what changes.
set -euo pipefail
cd "$(dirname "$0")/../.."
M=build/meshtrain; C=tests/fuzz/corpus
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
rm -rf $C; mkdir -p $C/{json,shard,safetensors,llmc,hf_config,bpe,hf_tokenizer,manifest,peft_config,run_config,metrics,chat_jsonl}
printf 'It was the best of times, it was the worst of times.\n' > $W/a.txt
$M tokenize --tokenizer byte --out $W/d $W/a.txt >/dev/null
cp $W/d_train.bin $C/shard/byte_u16
$M train --train $W/d_train.bin --layers 1 --dim 8 --heads 2 --seq-len 8 --vocab 128 --batch 2 --steps 2 \
    --log-every 0 --ckpt-dir $W/ck >/dev/null
# the manifest body: everything before its checksum, with mode byte 1 (seal it)
{ printf '\001'; sed 's/,"manifest_checksum":.*//' $W/ck/manifest.json | tr -d '\n'; } > $C/manifest/sealed
{ printf '\000'; cat $W/ck/manifest.json; } > $C/manifest/raw
$M export --ckpt $W/ck --format safetensors --out $W/m.safetensors >/dev/null
cp $W/m.safetensors $C/safetensors/gpt2_tiny
$M export --ckpt $W/ck --format llmc --out $W/m.bin >/dev/null
cp $W/m.bin $C/llmc/gpt2_tiny
$M export --ckpt $W/ck --format hf --out $W/hf >/dev/null
cp $W/hf/config.json $C/hf_config/gpt2
$M train --train $W/d_train.bin --family llama --layers 1 --dim 8 --heads 2 --kv-heads 1 --seq-len 8 --vocab 128 \
    --batch 2 --steps 1 --log-every 0 --ckpt-dir $W/lk >/dev/null
$M export --ckpt $W/lk --format hf --out $W/lhf >/dev/null
cp $W/lhf/config.json $C/hf_config/llama
cp $W/hf/config.json $C/json/config
sed 's/,"manifest_checksum":.*/}/' $W/ck/manifest.json > $C/json/manifest
# a tiny GPT-2 style vocabulary: the 256 byte tokens, two merges, <|endoftext|>
/usr/bin/python3 - $W <<'PY'
import json, sys
W = sys.argv[1]
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
sym = [chr(c) for c in cs]
enc = {s: i for i, s in enumerate(sym)}
enc["he"] = 256; enc["\u0120t"] = 257; enc["<|endoftext|>"] = 258
merges = "#version: 0.2\nh e\n\u0120 t\n"
open(f"{W}/bpe", "wb").write(json.dumps(enc).encode() + b"\0" + merges.encode())
tok = {"version": "1.0", "added_tokens": [{"id": 258, "content": "<|endoftext|>", "special": True}],
       "normalizer": None,
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
       "model": {"type": "BPE", "vocab": enc, "merges": ["h e", "\u0120 t"]}}
open(f"{W}/tok", "w").write(json.dumps(tok))
PY
cp $W/bpe $C/bpe/tiny
cp $W/tok $C/hf_tokenizer/tiny
# peft adapter configs: a LoRA one and an IA3 one
printf '%s' '{"peft_type":"LORA","r":4,"lora_alpha":8,"lora_dropout":0.05,"target_modules":["c_attn","q_proj","down_proj"],"use_rslora":false,"bias":"none"}' > $C/peft_config/lora
printf '%s' '{"peft_type":"IA3","target_modules":"all-linear","feedforward_modules":["mlp.c_proj","down_proj"]}' > $C/peft_config/ia3
# train's run configs: the example files, a checkpoint's stored one and the metrics of that
# run (validation, MFU and per-step profile lines), and --print-config with strings the
# writer must quote and escape (a tab, a newline, quotes, a backslash, U+2028, "~", "null").
# The scratch directory's name is replaced by runs/tiny: the same bytes on every regeneration.
for f in configs/*.yaml; do cp $f $C/run_config/example_$(basename $f .yaml); done
$M train --train $W/d_train.bin --val $W/d_train.bin --layers 1 --dim 8 --heads 2 --seq-len 8 --vocab 128 --batch 2 \
    --steps 4 --eval-every 2 --eval-batches 1 --peak-gflops 10 --profile --log-every 0 --ckpt-dir $W/rc \
    --metrics $W/m.jsonl >/dev/null
sed "s|$W|runs/tiny|g" $W/rc/config-000004.yaml > $C/run_config/checkpoint
cp $W/m.jsonl $C/metrics/profile_val_mfu
$M train --print-config --family llama --layers 2 --dim 32 --heads 4 --kv-heads 2 --rope-scaling llama3 --peft lora \
    --lora-targets q_proj,v_proj --peft-train '^wte' --micro-batch 1 --lr-schedule cosine --min-lr 3e-5 --warmup 2 \
    --zero 2 --dp 2 --precision bf16 --train $'runs/a b\tc\nd "\xc3\xa9" \\x\xe2\x80\xa8' --metrics 'runs/m: 1.jsonl' \
    --log-file '~' --trace null > $C/run_config/print_config_quoted
printf -- '---\nschedule: {steps: 2}\n---\nschedule: {steps: 3}\n...\n' > $C/run_config/two_documents
# chat JSONL (fuzz_chat_jsonl): two setting bytes, then the file
printf '\x00\x40{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"}]}\n{"prompt":"2+2=","completion":"4"}\n{"text":"plain text sample"}\n' >$C/chat_jsonl/mixed
printf '\x2b\x10{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"},{"role":"assistant","content":"d"}]}\n{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}]}\n' >$C/chat_jsonl/packed
du -sh $C
