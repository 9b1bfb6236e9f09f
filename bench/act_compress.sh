#!/usr/bin/env bash
# Activation compression on the demo's run (configs/demo.yaml: GPT-2 BPE on
# Debian's fortunes, L 4, C 192, 6 heads, T 64, batch 16, lr 2e-3 cosine with
# 30 warmup steps), STEPS steps (default 200) in one process: --compress-activations
# off, int8 and bf16. Prints each run's last training loss (and the mean of the
# last 10), the validation loss at the end, their relative difference from off,
# the activation bytes and ms/step. tests/check_act_compress.sh runs the same
# comparison on a byte-level model small enough for the test suite.
# Usage: bash bench/act_compress.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
M=${MT_BUILD:-build}/meshtrain
STEPS=${1:-200}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mkdir -p $W/corpus
for f in $(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort); do
    sed 's/^%$//' "$f" > "$W/corpus/$(basename "$f").txt"
done
$M tokenize --tokenizer gpt2 --val-fraction 0.05 --out $W/fortunes $W/corpus/*.txt >/dev/null
for c in off int8 bf16; do
    $M train --config configs/demo.yaml --dp 1 --zero 0 --steps $STEPS --train $W/fortunes_train.bin \
        --val $W/fortunes_val.bin --ckpt-dir $W/ck-$c --ckpt-every 0 --eval-every $STEPS --log-every 0 \
        --compress-activations $c --metrics $W/$c.jsonl --report-json $W/$c.json >/dev/null
done
/usr/bin/python3 - $W <<'PY'
import json, statistics, sys
w = sys.argv[1]
def run(c):
    rows = [json.loads(l) for l in open(f"{w}/{c}.jsonl")]
    steps = [r for r in rows if "loss" in r]
    val = [r["val_loss"] for r in rows if "val_loss" in r][-1]
    acts = json.load(open(f"{w}/{c}.json"))["memory"]["activations"]
    return steps[-1]["loss"], statistics.mean(r["loss"] for r in steps[-10:]), val, acts, statistics.median(r["ms"] for r in steps[1:])
ref = run("off")
print(f"{'compress':<8} {'last loss':>10} {'rel':>9} {'mean10':>9} {'rel':>9} {'val loss':>9} {'rel':>9} {'act bytes':>10} {'ms/step':>8}")
for c in ("off", "int8", "bf16"):
    r = run(c)
    print(f"{c:<8} {r[0]:>10.5f} {(r[0] - ref[0]) / ref[0]:>9.2e} {r[1]:>9.5f} {(r[1] - ref[1]) / ref[1]:>9.2e} "
          f"{r[2]:>9.5f} {(r[2] - ref[2]) / ref[2]:>9.2e} {r[3]:>10} {r[4]:>8.1f}")
PY
