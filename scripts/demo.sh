#!/usr/bin/env bash
# The main job: set up, tokenize the fortune-cookie corpus that Debian's
# `fortunes` package ships with the GPT-2 tokenizer, train a small GPT-2 for a
# few minutes on 2 cores as 2 data-parallel MPI processes (ZeRO-1: optimizer
# state sharded), evaluate, plot the curves (runs/demo/curves.png) and print
# a generated sample.
# Override with environment variables: STEPS, RANKS, ZERO.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p runs/demo
# Each fortune file is one document; the "%" lines that separate fortunes
# become blank lines.
mkdir -p runs/demo/corpus
for f in $(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort); do
    sed 's/^%$//' "$f" > "runs/demo/corpus/$(basename "$f").txt"
done
build/meshtrain tokenize --tokenizer gpt2 --val-fraction 0.05 --out runs/demo/fortunes runs/demo/corpus/*.txt
STEPS=${STEPS:-250}
RANKS=${RANKS:-2}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MPIRUN="mpirun -np $RANKS"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
# configs/demo.yaml holds the run; flags given here override it
$MPIRUN build/meshtrain train --config configs/demo.yaml --dp "$RANKS" --zero "${ZERO:-1}" --steps "$STEPS"
build/meshtrain eval --ckpt runs/demo/ckpt --val runs/demo/fortunes_val.bin --batches 16
build/meshtrain plot runs/demo/metrics.jsonl --labels "demo: dp$RANKS ZeRO-${ZERO:-1}" --out runs/demo/curves.png
echo "---- sample ----"
build/meshtrain generate --ckpt runs/demo/ckpt --prompt "The meaning of life is" --tokens 80 \
    --temperature 0.8 --top-k 40 --seed 7
