#!/usr/bin/env bash
# One LoRA step against one full fine-tuning step of the same model, in the
# same run, alternating (this machine's second core is at times shared):
# the demo's shape (L 4, C 192, 6 heads, T 64, batch 16), one thread, fp32,
# AdamW; LoRA r 16 on every linear. Prints the median ms/step of each over
# ROUNDS alternations and their ratio, for the byte vocabulary (256) and
# GPT-2's (50257). Usage: bash bench/lora_step.sh [ROUNDS] (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
M=${MT_BUILD:-build}/meshtrain
ROUNDS=${1:-3}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
bash tests/corpus.sh $W/corpus.txt
$M tokenize --tokenizer byte --out $W/text $W/corpus.txt >/dev/null
for V in 256 50257; do
    SHAPE="--layers 4 --dim 192 --heads 6 --seq-len 64 --vocab $V"
    $M train --train $W/text_train.bin $SHAPE --steps 0 --ckpt-dir $W/base$V --log-every 0 >/dev/null
    RUN="--train $W/text_train.bin --init-from $W/base$V --batch 16 --steps 12 --log-every 0"
    : >$W/full.txt; : >$W/lora.txt
    for r in $(seq $ROUNDS); do
        $M train $RUN --metrics $W/f.jsonl >/dev/null && grep -o '"ms":[0-9.]*' $W/f.jsonl | tail -10 | cut -d: -f2 >>$W/full.txt
        $M train $RUN --peft lora --lora-r 16 --lora-alpha 32 --lora-targets all-linear --metrics $W/l.jsonl >/dev/null &&
            grep -o '"ms":[0-9.]*' $W/l.jsonl | tail -10 | cut -d: -f2 >>$W/lora.txt
        rm -f $W/f.jsonl $W/l.jsonl
    done
    /usr/bin/python3 - $W/full.txt $W/lora.txt $V <<'PY'
import statistics, sys
f = [float(x) for x in open(sys.argv[1])]
l = [float(x) for x in open(sys.argv[2])]
mf, ml = statistics.median(f), statistics.median(l)
print(f"vocab {sys.argv[3]:>5}: full fine-tuning {mf:.1f} ms/step, LoRA r16 all-linear {ml:.1f} ms/step: ratio {ml / mf:.3f}")
PY
done
