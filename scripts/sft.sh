#!/usr/bin/env bash
# Supervised fine-tuning on conversations, after the main job
# (scripts/demo.sh): build a chat JSONL from a Debian corpus -- the short
# fortunes of the `fortunes` package, each the answer to "Tell me a fortune
# about WORD." with WORD one of its own words -- render it with the
# zephyr-endoftext chat template (<|user|>\n...<|endoftext|>\n<|assistant|>\n
# ...<|endoftext|>\n: zephyr's turns ended by GPT-2's end-of-text token, one
# token), pack it into the demo model's 64-token windows, and QLoRA-fine-tune
# the demo's GPT-2 (configs/lora.yaml: NF4 base, rank-16 LoRA) twice as 2
# data-parallel processes: training on the answers only (--train-on
# assistant, the default) and on every token (--train-on all). Both are
# evaluated on the answers of held-out conversations (the validation shard's
# mask), and both answer a question through the template (`generate --chat`).
# Then the answers-only fine-tune is exported merged as a q8_0 GGUF for
# llama.cpp (runs/sft/assistant.q8_0.gguf) with the template
# (configs/chat/zephyr-endoftext.jinja, which llama.cpp applies as its
# built-in zephyr) and EOS <|endoftext|>; when llama.cpp's library is
# installed (npm @node-llama-cpp/linux-x64 in deps/, scripts/setup.sh;
# optional), it answers the same question through tests/gguf_consumer.c chat:
# template applied from the GGUF, generation stopped at the end-of-generation
# token (tests/check_chat_gguf.sh checks this path).
# Environment: BASE (default runs/demo/ckpt), STEPS (default 150), RANKS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:-runs/demo/ckpt}
STEPS=${STEPS:-150}
RANKS=${RANKS:-2}
[ -f "$BASE/manifest.json" ] || { echo "sft: no model in $BASE: run scripts/demo.sh first (or set BASE)" >&2; exit 1; }
[ -d /usr/share/games/fortunes ] || { echo "sft: /usr/share/games/fortunes is missing (apt-get install fortunes)" >&2; exit 1; }
make -s
O=runs/sft
rm -rf $O
mkdir -p $O
python3 - $O/chat.jsonl <<'PY'
import glob, json, random, re, sys
r = random.Random(1)
convs = []
for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
    if path.endswith((".dat", ".u8")):
        continue
    text = open(path, encoding="utf-8", errors="replace").read()
    for f in text.split("\n%\n"):
        f = " ".join(f.split())
        words = [w for w in re.findall(r"[A-Za-z]{5,}", f)]
        if not words or not 20 <= len(f) <= 80:
            continue
        convs.append({"messages": [{"role": "user", "content": f"Tell me a fortune about {r.choice(words).lower()}."},
                                   {"role": "assistant", "content": f}]})
r.shuffle(convs)
with open(sys.argv[1], "w") as out:
    for c in convs:
        out.write(json.dumps(c) + "\n")
print(f"sft: {len(convs)} conversations")
PY
for on in assistant all; do
    build/meshtrain tokenize --format jsonl --tokenizer gpt2 --chat-template zephyr-endoftext --seq-len 64 --packing \
        --train-on $on --val-fraction 0.05 --out $O/chat_$on $O/chat.jsonl
done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MPIRUN="mpirun -np $RANKS"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
# the answers of the held-out conversations (the assistant-only mask)
VAL=$O/chat_assistant_val.bin
before=$(build/meshtrain eval --ckpt "$BASE" --val $VAL | awk '{print $2}')
for on in assistant all; do
    $MPIRUN build/meshtrain train --config configs/lora.yaml --init-from "$BASE" --dp "$RANKS" --steps "$STEPS" \
        --train $O/chat_${on}_train.bin --val $VAL --ckpt-dir $O/$on --metrics $O/$on.jsonl --eval-every 50
done
a=$(build/meshtrain eval --ckpt $O/assistant --val $VAL | awk '{print $2}')
b=$(build/meshtrain eval --ckpt $O/all --val $VAL | awk '{print $2}')
echo "loss on the held-out answers: base model $before; QLoRA on the answers only $a, on every token $b"
build/meshtrain plot $O/assistant.jsonl $O/all.jsonl --labels "answers only,every token" --out $O/curves.png
for on in assistant all; do
    echo "---- $on: Tell me a fortune about money. ----"
    build/meshtrain generate --ckpt $O/$on --chat --chat-template zephyr-endoftext --prompt "Tell me a fortune about money." \
        --tokens 60 --temperature 0.7 --top-k 40 --seed 3
done

# the fine-tune for llama.cpp: merged (NF4 base dequantized, adapters and wte folded in), q8_0, with the template
build/meshtrain export --ckpt $O/assistant --format gguf --dtype q8_0 --chat-template configs/chat/zephyr-endoftext.jinja \
    --out $O/assistant.q8_0.gguf
LIB=$(ls deps/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libllama*.so 2>/dev/null | head -1 || true)
if [ -n "$LIB" ]; then
    # the prompt and the answer within the model's 64 positions (llama.cpp does not slide the window)
    echo "Tell me a fortune about money." >$O/question.txt
    if cc -O2 -o $O/gguf_consumer tests/gguf_consumer.c -ldl &&
        $O/gguf_consumer "$LIB" $O/assistant.q8_0.gguf chat $O/question.txt 40 >$O/llama_cpp.txt 2>$O/llama_cpp.log; then
        mt=$(build/meshtrain generate --ckpt $O/assistant --chat --chat-template zephyr-endoftext \
            --prompt "Tell me a fortune about money." --tokens 40 --temperature 0)
        lc=$(python3 -c 'import sys; t = open(sys.argv[1]).read()
print(t.split("answer: ", 1)[1].rsplit("\nstop: ", 1)[0])' $O/llama_cpp.txt)
        echo "---- greedy, llama.cpp on the q8_0 GGUF, its chat template applied ($(sed -n 's/^stop: //p' $O/llama_cpp.txt)):"
        echo "$lc"
        echo "---- greedy, meshtrain generate --chat:"
        echo "$mt"
        [ "$lc" = "$mt" ] && echo "---- the same answer" || echo "---- the answers differ (q8_0's rounding can change a greedy choice)"
    else
        echo "sft: llama.cpp did not run the GGUF (optional step; see $O/llama_cpp.log)"
    fi
else
    echo "sft: $O/assistant.q8_0.gguf is for llama.cpp (llama-cli -m ...); scripts/setup.sh installs its library to try it here"
fi
