#!/usr/bin/env bash
# The README's "Using it" block runs end to end, as written: it is cut out
# of README.md, its MODEL= and STEPS= lines are replaced by a tiny model and
# 12 steps (heads kept at 6: the import line names them), `make` is a no-op (the build exists), and it runs under `set -e`
# in an empty directory holding two text files (Debian fortunes) and a link
# to the build.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
ROOT=$PWD
awk '/^## Using it/{u=1} u && /^```sh/{f=1; next} f && /^```/{exit} f' README.md > $W/block.sh
[ "$(grep -c '^MODEL=' $W/block.sh)" = 1 ] && [ "$(grep -c '^STEPS=' $W/block.sh)" = 1 ] ||
    { echo "FAIL: the README block lost its MODEL= or STEPS= line"; exit 1; }
sed -i 's/^MODEL=.*/MODEL="--layers 4 --dim 48 --heads 6 --seq-len 32"/; s/^STEPS=.*/STEPS=12/' $W/block.sh
# the rest of the block must use the small sizes: no other model size in it
grep -n -- '--layers 6\|--dim 384' $W/block.sh && { echo "FAIL: the block has sizes outside MODEL="; exit 1; }
sed -i 's/--layers 4 --dim 256 --heads 8 --kv-heads 2 --seq-len 256/--layers 2 --dim 32 --heads 4 --kv-heads 2 --seq-len 32/' $W/block.sh
corpus
head -c 300000 $W/corpus.txt > $W/a.txt; tail -c 100000 $W/corpus.txt > $W/b.txt
ln -s "$ROOT/$BUILD" $W/build
[ "$BUILD" = build ] || ln -s "$ROOT/$BUILD" $W/build # MT_BUILD: the block says build/
ln -s "$ROOT/deps" $W/deps 2>/dev/null || true
cd $W
{ echo 'set -euo pipefail'; echo 'make() { :; }'; cat block.sh; } > run.sh
if ! bash run.sh > out.txt 2> err.txt; then
    echo "FAIL: the README block stopped; last lines:"; tail -n 15 out.txt err.txt; exit 1
fi
for f in data/mytext_train.bin run.jsonl run.log ckpt/manifest.json t.json model.safetensors model.gguf ckpt-hf/manifest.json hfdir/config.json curves.png; do
    [ -s $f ] || { echo "FAIL: the block did not write $f"; exit 1; }
done
echo "ok   README 'Using it' ran end to end ($(grep -c . block.sh) lines; $(grep -c '^step' run.log) progress lines in run.log)"
