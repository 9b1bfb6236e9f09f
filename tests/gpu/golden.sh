#!/usr/bin/env bash
# golden.sh MESHTRAIN DIR: the inputs of the device run's whole-step parity -- the byte-level
# corpus tokens DIR/data/d_train.bin and, trained by the CPU build MESHTRAIN on them, the losses
# of every run of tests/gpu/parity_runs.txt in DIR/golden/NAME.jsonl and step 1's gradients in NAME.grads (pack.sh; run.sh from the
# repository).
set -euo pipefail
cd "$(dirname "$0")/../.."
m=${1:?usage: golden.sh MESHTRAIN DIR} out=${2:?usage: golden.sh MESHTRAIN DIR}
[ -x "$m" ] || { echo "golden.sh: $m is not built (make)"; exit 1; }
mkdir -p "$out/data" "$out/golden"
bash tests/corpus.sh "$out/data/corpus.txt"
"$m" tokenize --tokenizer byte --out "$out/data/d" "$out/data/corpus.txt" >/dev/null
# the demo's data (scripts/demo.sh: the same fortunes, GPT-2 tokens), cut to what 200 steps of
# the demo's batch read (16 x 64 tokens a step), so the pack stays small
head -c 1000000 "$out/data/corpus.txt" > "$out/data/demo.txt"
"$m" tokenize --tokenizer gpt2 --out "$out/data/demo" "$out/data/demo.txt" >/dev/null
rm -f "$out/data/corpus.txt" "$out/data/d_val.bin" "$out/data/demo.txt" "$out/data/demo_val.bin"
common=$(awk '$1 == "COMMON" {$1 = ""; print}' tests/gpu/parity_runs.txt)
grep -v '^#\|^COMMON' tests/gpu/parity_runs.txt | while read -r name flags; do
    flags=${flags//@DATA@/$out/data}
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 "$m" train --train "$out/data/d_train.bin" $common $flags --metrics "$out/golden/$name.jsonl" \
        $(case $name in *bf16*) ;; *) echo --dump-grads "$out/golden/$name.grads" ;; esac) >/dev/null
done
