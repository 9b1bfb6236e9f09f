#!/usr/bin/env bash
# Parameter-efficient fine-tuning, after the main job (scripts/demo.sh): take
# the model it trained on Debian's fortunes, QLoRA-fine-tune it on a second
# Debian corpus -- the license texts every Debian system ships in
# /usr/share/common-licenses -- as 2 data-parallel processes
# (configs/lora.yaml: NF4 base with double quantization, rank-16 LoRA on every
# linear layer, the tied embedding trained too), and show the validation loss on that corpus before and
# after; then fine-tune the whole model for the same steps for comparison,
# export the adapter as a Hugging Face peft directory, fold it into the
# base, export the merged model as a q8_0 GGUF for llama.cpp, and print a
# sample.
# Environment: BASE (default runs/demo/ckpt), STEPS (default 120), RANKS (2),
# FULL=0 skips the full fine-tuning comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:-runs/demo/ckpt}
STEPS=${STEPS:-120}
RANKS=${RANKS:-2}
[ -f "$BASE/manifest.json" ] || { echo "finetune: no model in $BASE: run scripts/demo.sh first (or set BASE)" >&2; exit 1; }
make -s
O=runs/finetune
rm -rf $O/qlora $O/full $O/adapter $O/merged $O/qlora.jsonl $O/full.jsonl
mkdir -p $O/corpus
for f in $(find /usr/share/common-licenses -maxdepth 1 -type f | sort); do cp "$f" "$O/corpus/$(basename "$f").txt"; done
build/meshtrain tokenize --tokenizer gpt2 --val-fraction 0.1 --out $O/licenses $O/corpus/*.txt
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MPIRUN="mpirun -np $RANKS"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
before=$(build/meshtrain eval --ckpt "$BASE" --val $O/licenses_val.bin --batches 8 | awk '{print $2}')
$MPIRUN build/meshtrain train --config configs/lora.yaml --init-from "$BASE" --dp "$RANKS" --steps "$STEPS"
after=$(build/meshtrain eval --ckpt $O/qlora --val $O/licenses_val.bin --batches 8 | awk '{print $2}')
echo "validation loss on the licenses: before $before, after QLoRA $after"
if [ "${FULL:-1}" != 0 ]; then
    $MPIRUN build/meshtrain train --config configs/lora.yaml --init-from "$BASE" --dp "$RANKS" --steps "$STEPS" \
        --peft none --lora-r 8 --lora-alpha 16 --lora-dropout 0 --lora-targets= --quantize-base none --double-quant=false --peft-train= \
        --lr 5e-4 --weight-decay 0.1 --ckpt-dir $O/full --metrics $O/full.jsonl
    full=$(build/meshtrain eval --ckpt $O/full --val $O/licenses_val.bin --batches 8 | awk '{print $2}')
    echo "validation loss on the licenses after $STEPS steps: QLoRA r16 $after, full fine-tuning $full" \
         "(QLoRA / full = $(awk -v a=$after -v b=$full 'BEGIN{printf "%.4f", a/b}'))"
    build/meshtrain plot $O/qlora.jsonl $O/full.jsonl --labels "QLoRA r16 (NF4 base),full fine-tuning" --out $O/curves.png
fi
build/meshtrain export --ckpt $O/qlora --format peft --out $O/adapter
build/meshtrain merge --ckpt $O/qlora --out $O/merged --data $O/licenses_val.bin
build/meshtrain export --ckpt $O/qlora --format gguf --dtype q8_0 --out $O/model.q8_0.gguf
echo "for llama.cpp (the QLoRA run merged, q8_0): llama-cli -m $O/model.q8_0.gguf -p 'This program is free software'"
echo "---- sample of the fine-tuned model ----"
build/meshtrain generate --ckpt $O/qlora --prompt "This program is free software" --tokens 60 --temperature 0.8 \
    --top-k 40 --seed 7
