#!/usr/bin/env bash
# Hostile data files get one clear line and a clean exit, never a crash, a
# hang or a run on garbage: token shards whose ids exceed the model's
# vocabulary (uint16 and uint32 shards, ids >= 2^31 included) in train (its
# data and validation, on one rank and on two), eval and merge. And valid
# tokenizer.json files that used to crash or crawl: an empty merges list
# (tokenize and generate), and 60k added tokens sharing a first byte (100 KB
# tokenized in well under 5 s, the ids a Python reference's).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
# expect_error "words..." -- command...: a non-zero exit that is no crash
# or timeout, and stderr one line holding every word
expect_error() {
    local words=()
    while [ "$1" != "--" ]; do words+=("$1"); shift; done; shift
    timeout 60 "$@" >"$W/out" 2>"$W/err"
    local rc=$?
    if [ $rc -eq 0 ]; then fail "exit 0: $*"; return; fi
    if [ $rc -ge 124 ]; then fail "crash/timeout rc=$rc: $*"; head -5 "$W/err"; return; fi
    local w
    for w in "${words[@]}"; do
        grep -qF -- "$w" "$W/err" || { fail "message lacks '$w': $*"; cat "$W/err"; return; }
    done
    [ "$(wc -l <"$W/err")" -eq 1 ] || { fail "more than one line on stderr: $*"; cat "$W/err"; return; }
    echo "ok: $(cat "$W/err")"
}
expect_ok() {
    timeout 60 "$@" >"$W/out" 2>"$W/err" || { fail "rc=$?: $*"; head -5 "$W/err"; return 1; }
}
# shard OUT WIDTH N [POS=ID ...]: an llm.c shard of N pseudo-random byte ids
# (uint16 or uint32 layout), with the given ids put at the given positions
shard() {
    $PY - "$@" <<'EOF'
import random, struct, sys
out, width, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(7)
tok = [rng.randrange(256) for _ in range(n)]
for a in sys.argv[4:]:
    p, v = a.split("=")
    tok[int(p)] = int(v)
hdr = [20240801, 7] if width == 32 else [20240520, 1]
with open(out, "wb") as f:
    f.write(struct.pack("<256i", *(hdr + [n] + [0] * 253)))
    f.write(struct.pack("<%d%s" % (n, "I" if width == 32 else "H"), *tok))
EOF
}
MODEL="--layers 1 --dim 16 --heads 2 --seq-len 8 --batch 2 --log-every 0"

# ---- token ids outside the vocabulary ----
shard $W/ok16.bin 16 3000
shard $W/ok32.bin 32 3000
shard $W/big31.bin 32 3000 1234=2147483648          # 2^31: negative as an int
shard $W/bigmax.bin 32 3000 2999=4294967295         # the last token, 2^32-1: -1 as an int
shard $W/over32.bin 32 3000 17=70000                # a real Llama 3-size id, beyond a byte model
shard $W/over16.bin 16 3000 5=300
expect_ok $M train --train $W/ok32.bin --vocab 256 $MODEL --steps 2 && echo "ok: a uint32 shard within the vocabulary trains"
expect_error "big31.bin" "token 1234" "id 2147483648" "vocabulary of 256" -- $M train --train $W/big31.bin --vocab 256 $MODEL --steps 2
expect_error "bigmax.bin" "token 2999" "id 4294967295" "vocabulary of 256" -- $M train --train $W/bigmax.bin --vocab 256 $MODEL --steps 2
expect_error "over32.bin" "token 17" "id 70000" "vocabulary of 256" -- $M train --train $W/over32.bin --vocab 256 $MODEL --steps 2
expect_error "over16.bin" "token 5" "id 300" "vocabulary of 256" -- $M train --train $W/over16.bin --vocab 256 $MODEL --steps 2
expect_error "big31.bin" "token 1234" "vocabulary of 256" -- $M train --train $W/ok16.bin --val $W/big31.bin --eval-every 1 --vocab 256 $MODEL --steps 2
expect_ok $M train --train $W/ok16.bin --vocab 256 $MODEL --steps 0 --ckpt-dir $W/ck
expect_error "big31.bin" "token 1234" "vocabulary of 256" -- $M eval --ckpt $W/ck --val $W/big31.bin
expect_error "bigmax.bin" "token 2999" "vocabulary of 256" -- $M eval --ckpt $W/ck --val $W/bigmax.bin
# two ranks: every rank exits, the line is said once
timeout 120 mpirun -np 2 $M train --train $W/big31.bin --vocab 256 $MODEL --steps 2 --dp 2 >"$W/out" 2>"$W/err"
rc=$?
if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then fail "dp2 on big31.bin: rc=$rc"; head -5 "$W/err"
elif [ "$(grep -c 'big31.bin: token 1234 has id 2147483648' "$W/err")" -ne 1 ]; then fail "dp2: the line is not there once"; cat "$W/err"
elif grep -q "fatal\|signal" "$W/err"; then fail "dp2: a crash"; cat "$W/err"
else echo "ok: dp2: $(grep -m1 big31.bin "$W/err")"; fi
# merge measures on the first batch of --data: its ids are checked as train's are (an id in that batch
# reached the loss, a fatal; one >= 2^31 the embedding, a crash)
shard $W/early31.bin 32 3000 3=2147483648
expect_ok $M train --train $W/ok16.bin --init-from $W/ck --peft lora --steps 1 --ckpt-dir $W/lora $MODEL
expect_ok $M merge --ckpt $W/lora --out $W/merged --data $W/ok32.bin && echo "ok: merge with good data"
expect_error "over16.bin" "token 5" "id 300" "vocabulary of 256" -- $M merge --ckpt $W/lora --out $W/m2 --data $W/over16.bin
expect_error "early31.bin" "token 3" "id 2147483648" "vocabulary of 256" -- $M merge --ckpt $W/lora --out $W/m3 --data $W/early31.bin
expect_error "bigmax.bin" "token 2999" "vocabulary of 256" -- $M merge --ckpt $W/lora --out $W/m4 --data $W/bigmax.bin

# ---- tokenizer.json files ----
# tokjson OUT N_ADDED MERGES: a byte-level BPE tokenizer.json, ids 0..255 the
# bytes, MERGES "he" (one merge, id 256) or "none" (an empty list), then N_ADDED
# added tokens "<t0>", "<t1>", ... and three that nest: "<t", "<t7", "<t7>!!"
# (the odd ones, "<t" and "<t7" normalized: matched in the gaps the others
# leave, as the library does; on small texts its ids are these)
tokjson() {
    $PY - "$@" <<'EOF'
import json, sys
out, n_added, merges = sys.argv[1], int(sys.argv[2]), sys.argv[3]
bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, k = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + k); k += 1
ch = dict(zip(bs, cs))
vocab = {chr(ch[b]): b for b in range(256)}
ml = []
if merges == "he":
    vocab[chr(ch[ord("h")]) + chr(ch[ord("e")])] = 256
    ml = ["h e"]
names = [("<t%d>" % i, i % 2 == 1) for i in range(n_added)]
names += [("<t", True), ("<t7", True), ("<t7>!!", False)] if n_added else []
added = [{"id": len(vocab) + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": nz, "special": True} for i, (c, nz) in enumerate(names)]
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
json.dump({"version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": bl,
           "post_processor": None, "decoder": bl,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
                     "ignore_merges": False, "vocab": vocab, "merges": ml}}, open(out, "w"))
EOF
}
# expect_ids JSON TEXT PREFIX: the ids tokenize wrote to PREFIX_{train,val}.bin
# are the reference's: the added tokens not normalized found leftmost-longest in
# the text, the normalized ones the same way in the gaps, bytes for the rest
# (with the merge, the text must hold no "he": it never applies)
expect_ids() {
    $PY - "$@" <<'EOF'
import json, struct, sys
js, text, prefix = sys.argv[1:]
t = json.load(open(js))
s = open(text, "rb").read()
assert not t["model"]["merges"] or b"he" not in s
got = []
for part in ("_train.bin", "_val.bin"):
    d = open(prefix + part, "rb").read()
    n = struct.unpack("<i", d[8:12])[0]
    got += struct.unpack("<%d%s" % (n, "H" if struct.unpack("<i", d[:4])[0] == 20240520 else "I"), d[1024:])
kinds = [{a["content"].encode(): a["id"] for a in t["added_tokens"] if a["normalized"] == k} for k in (False, True)]
def split(s, kind, rest):
    toks = kinds[kind]
    lens = sorted({len(c) for c in toks}, reverse=True)
    out, i, gap = [], 0, 0
    while i < len(s):
        hit = next((L for L in lens if s[i:i + L] in toks), 0)
        if not hit:
            i += 1
            continue
        out += rest(s[gap:i]) + [toks[s[i:i + hit]]]
        i = gap = i + hit
    return out + rest(s[gap:])
want = split(s, False, lambda g: split(g, True, list))
if got != want:
    k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    sys.exit("ids differ from the reference at token %d of %d/%d: %s vs %s" % (k, len(got), len(want), got[k:k + 5], want[k:k + 5]))
print("%d tokens (%d of them added tokens) equal to the reference" % (len(got), sum(1 for i in want if i > 256)))
EOF
}
printf 'hello world <t1> x<t2><t10> <t <t7 <t7>!! <t7>! <<t0>>\n' > $W/small.txt
tokjson $W/nomerge.json 0 none
tokjson $W/nomerge3.json 3 none
for j in nomerge nomerge3; do
    if expect_ok $M tokenize --tokenizer hf:$W/$j.json --val-fraction 0.5 --out $W/$j $W/small.txt; then
        r=$(expect_ids $W/$j.json $W/small.txt $W/$j) && echo "ok: $j.json (empty merges): tokenize: $r" || fail "$j.json: $r"
    fi
done
if expect_ok $M train --train $W/ok16.bin --vocab 262 $MODEL --steps 0 --ckpt-dir $W/ck262 &&
    expect_ok $M generate --ckpt $W/ck262 --tokenizer hf:$W/nomerge3.json --prompt "hello <t1>" --tokens 4 --temperature 0; then
    grep -q '^hello <t1>' $W/out && echo "ok: nomerge3.json (empty merges): generate continues 'hello <t1>'" || fail "generate: $(cat $W/out)"
fi
# 60k added tokens sharing their first byte (and "<t"): matching them cost text x
# added tokens (13 s per 100 KB) where it should cost the text's length; 100 KB
# of '<' runs (the costly case), near misses and added tokens
tokjson $W/many.json 60000 he
$PY - $W/many.txt <<'EOF'
import random, sys
rng = random.Random(3)
out, n = [], 0
while n < 100000:
    r = rng.randrange(60000)
    p = rng.choice(["<" * rng.randrange(1, 9)] * 6 + ["<t%d" % r, "<t%d>" % r, "<t7>!!", "<t7", " ", "<<t"])
    out.append(p)
    n += len(p)
open(sys.argv[1], "w").write("".join(out)[:100000])
EOF
t0=$(date +%s.%N)
if expect_ok $M tokenize --tokenizer hf:$W/many.json --val-fraction 0.5 --out $W/many $W/many.txt; then
    wall=$(echo "$(date +%s.%N) - $t0" | bc)
    enc=$(grep -o 'tokens in [0-9.]* s' $W/out | grep -o '[0-9.]*')
    r=$(expect_ids $W/many.json $W/many.txt $W/many) || fail "many.json: $r"
    if [ -z "$enc" ] || [ "$(echo "$enc >= 5" | bc)" = 1 ]; then fail "many.json: 100 KB took '$enc' s to tokenize (want < 5 s)"
    else echo "ok: many.json (60003 added tokens): 100 KB tokenized in $enc s ($wall s with loading): $r"; fi
fi

echo
[ $fails -eq 0 ] && echo "all bad data rejected with one clear line" || { echo "$fails case(s) failed"; exit 1; }
