#!/usr/bin/env bash
# A checkpoint cannot lie (tiny GPT-2 saved by dp2 ZeRO-1, two rank files):
#  - a manifest byte changed (a piece offset moved by one) is caught by the
#    manifest's own checksum: `ckpt verify`, --resume and eval fail with one
#    clear line;
#  - with the checksum recomputed (tests/ckpt_tamper.py), the structure
#    checks catch: an offset moved by one (alignment), a piece pointed at
#    another's bytes (overlap), a piece past its file's end, a shape with the
#    same element count but transposed (shape vs model);
#  - a flipped data byte: `ckpt verify` and --resume fail naming the tensor
#    (never a silent NaN);
#  - files whose headers claim huge sizes are refused before anything is
#    allocated (under a 2 GB address-space limit): a 1 KB llm.c file
#    claiming ~49 G parameters, a 512 KB safetensors header naming 4000
#    layers, a manifest whose config claims 4000 layers of width 8192.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
M=$PWD/$M; TAMPER="$PY tests/ckpt_tamper.py"
corpus d
T="--train $W/d_train.bin --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --lr 1e-3 --log-every 0"
# (a resume in one process says --dp 1: the checkpoint's stored settings say dp 2)
$MPI -np 2 $M train $T --steps 3 --dp 2 --zero 1 --ckpt-dir $W/good >/dev/null
$M ckpt verify $W/good >/dev/null
expect_failure() { # WANT COMMAND...: fails with one error line containing WANT
    local want=$1; shift
    if "$@" >$W/out.txt 2>$W/err.txt; then echo "accepted: $*"; exit 1; fi
    grep -q -- "$want" $W/err.txt || { echo "expected '$want' for: $*"; cat $W/err.txt; exit 1; }
    [ "$(grep -c 'error:' $W/err.txt)" = 1 ] || { echo "expected one error line: $*"; cat $W/err.txt; exit 1; }
    echo "ok: $(grep -m1 'error:' $W/err.txt | cut -c1-200)"
}
fresh() { rm -rf $W/bad; cp -r $W/good $W/bad; }
MAN=$W/bad/manifest.json
H=model/h.0.attn.c_attn.weight

# a piece offset moved by one, no resealing: the manifest checksum
fresh; $PY - $MAN <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
k = s.index('"offset":', s.index('"model/h.0.attn.c_attn.weight"')) + len('"offset":')
j = k
while s[j].isdigit(): j += 1
open(p, "w").write(s[:k] + str(int(s[k:j]) + 1) + s[j:])
PY
expect_failure "manifest checksum mismatch" $M ckpt verify $W/bad
expect_failure "manifest checksum mismatch" $M train $T --steps 4 --ckpt-dir $W/bad --resume
expect_failure "manifest checksum mismatch" $M eval --ckpt $W/bad --val $W/d_val.bin

# resealed edits: the structure checks
fresh; $TAMPER piece $MAN $H 0 offset +1
expect_failure "is not a multiple of 64" $M ckpt verify $W/bad
expect_failure "is not a multiple of 64" $M train $T --steps 4 --ckpt-dir $W/bad --resume
fresh; $TAMPER piece $MAN $H 0 offset 0
expect_failure "overlap in tensors-000003-r0000" $M ckpt verify $W/bad
expect_failure "overlap in tensors-000003-r0000" $M train $T --steps 4 --ckpt-dir $W/bad --resume
fresh; $TAMPER piece $MAN $H 0 offset 1048576
expect_failure "lie outside tensors-000003-r0000" $M ckpt verify $W/bad
fresh; $TAMPER shape $MAN $H 64,192
expect_failure "tensor 'model/h.0.attn.c_attn.weight' has shape \[64, 192\], the model needs \[192, 64\]" \
    $M train $T --steps 4 --ckpt-dir $W/bad --resume --dp 1
expect_failure "has shape \[64, 192\], the model needs \[192, 64\]" $M eval --ckpt $W/bad --val $W/d_val.bin
expect_failure "has shape \[64, 192\] but the checkpoint's config implies \[192, 64\]" \
    $M export --ckpt $W/bad --format safetensors --out $W/x.safetensors

# a flipped data byte (inside rank 1's first piece)
fresh; $PY - $W/bad <<'PY'
import glob, sys
f = sorted(glob.glob(sys.argv[1] + "/tensors-*-r00001.bin"))[0]
b = bytearray(open(f, "rb").read()); b[4 * 10 + 3] ^= 0x40; open(f, "wb").write(bytes(b))
PY
expect_failure "checksum mismatch in checkpoint data file" $M ckpt verify $W/bad
expect_failure "checksum mismatch in checkpoint .*tensor '" $MPI -np 2 $M train $T --steps 4 --dp 2 --zero 1 \
    --ckpt-dir $W/bad --resume

# headers claiming huge sizes (llm.c, safetensors, a manifest's config, an
# HF config.json), under a 2 GB address-space limit (under
# AddressSanitizer, which reserves terabytes of shadow memory, the same
# 2 GB bound is its largest allowed allocation instead)
$TAMPER llmc $W/big.bin
$TAMPER safetensors $W/big.safetensors
[ "$(stat -c %s $W/big.bin)" = 1024 ] && [ "$(stat -c %s $W/big.safetensors)" -gt 524288 ]
( if [[ "$M" == *build-asan* ]]; then export ASAN_OPTIONS="${ASAN_OPTIONS:-}:max_allocation_size_mb=2000:allocator_may_return_null=1"
  else ulimit -v 2000000; fi
  # (the wte and layer matrices alone: 197543854080 + the 1024-byte header, of the 197604680704 exact)
  expect_failure "file is 1024 bytes but its header .* implies at least 197543855104 (truncated?)" \
      $M import --format llmc --in $W/big.bin --out $W/imp1
  expect_failure "tensor 'h.0.ln_1.weight' has wrong shape \[0\], expected \[8192\]" \
      $M import --format safetensors --heads 16 --in $W/big.safetensors --out $W/imp2
  # a manifest whose config claims 4000 layers of width 8192 (~3 T parameters)
  fresh; $TAMPER config $MAN n_layer 4000; $TAMPER config $MAN n_embd 8192
  expect_failure "tensor 'model/wte.weight' has shape \[256, 64\], the model needs \[256, 8192\]" \
      $M eval --ckpt $W/bad --val $W/d_val.bin
  expect_failure "tensor 'model/wte.weight' has shape \[256, 64\], the model needs \[256, 8192\]" \
      $M train $T --steps 4 --ckpt-dir $W/bad --resume --dp 1
  expect_failure "has shape \[256, 64\] but the checkpoint's config implies \[256, 8192\]" \
      $M export --ckpt $W/bad --format safetensors --out $W/x.safetensors
  # a Hugging Face directory whose config.json claims 4000 layers of width 8192
  $M export --ckpt $W/good --format hf --out $W/hfbig >/dev/null
  $PY -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c.update(n_layer=4000, n_embd=8192); json.dump(c, open(p, 'w'))" \
      $W/hfbig/config.json
  expect_failure "tensor 'wte.weight' has shape \[256, 64\], config.json implies \[256, 8192\]" \
      $M import --format hf --in $W/hfbig --out $W/imp3 )
echo "check_ckpt_integrity: ok"
