#!/usr/bin/env bash
# meshtrain plot: two generated --metrics runs (a long and a short one, with
# validation lines and a fp16-style extra field) drawn into a PNG whose
# IHDR says the asked size and whose pixels are neither blank nor solid
# (1-30% differ from the white background: four panels of axes, labels and
# two curves each); --labels; and one-line errors for a missing file, a
# line that is not JSON, a file without steps, a wrong --labels count.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
$PY - $W <<'PY'
import json, math, sys
W = sys.argv[1]
for name, n, scale in [("a", 300, 1.0), ("b", 120, 1.3)]:
    with open(f"{W}/{name}.jsonl", "w") as f:
        for s in range(1, n + 1):
            f.write(json.dumps({"step": s, "loss": scale * (2 + 3 * math.exp(-s / 60)), "lr": 6e-4 * min(1, s / 20),
                                "grad_norm": 1.0, "ms": 10, "tokens_per_s": 5e4 + 1e3 * math.sin(s / 7), "gflops": 1,
                                "loss_scale": 65536}) + "\n")
            if s % 50 == 0:
                f.write(json.dumps({"step": s, "val_loss": scale * (2.2 + 3 * math.exp(-s / 60))}) + "\n")
PY
$M plot $W/a.jsonl $W/b.jsonl --out $W/c.png --width 900 --height 700 --labels "dp2 ZeRO-3,one process" >$W/plot.out
grep -qF "wrote $W/c.png (900x700; 2 runs)" $W/plot.out
$PY - $W/c.png <<'PY'
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
w, h, depth, ctype = struct.unpack(">IIBB", b[16:26])
assert (w, h) == (900, 700), (w, h)
data, i = b"", 8
while i < len(b):
    n, kind = struct.unpack(">I4s", b[i:i + 8]); 
    if kind == b"IDAT": data += b[i + 8:i + 8 + n]
    i += 12 + n
raw = zlib.decompress(data)
bpp = {2: 3, 6: 4}[ctype]
stride = w * bpp
rows, prev = [], bytearray(stride)
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0; up = prev[x]; c = prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + up) & 255
        elif f == 3: line[x] = (line[x] + (a + up) // 2) & 255
        elif f == 4:
            p = a + up - c; pa, pb, pc = abs(p - a), abs(p - up), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else up if pb <= pc else c)) & 255
    rows.append(line); prev = line
ink = sum(1 for r in rows for x in range(0, stride, bpp) if r[x:x + 3] != b"\xff\xff\xff")
frac = ink / (w * h)
assert 0.01 <= frac <= 0.30, f"{frac:.3f} of the pixels differ from the background"
print(f"ok   plot: {w}x{h} PNG, {frac * 100:.1f}% of the pixels drawn (4 panels, 2 runs, legend)")
PY
err() { # WANT ARGS...
    local want=$1; shift
    set +e; out=$($M plot "$@" 2>&1); rc=$?; set -e
    [ $rc -ne 0 ] && [ "$(echo "$out" | wc -l)" = 1 ] && grep -qF -- "$want" <<<"$out" || { echo "FAIL: plot $* -> $out"; exit 1; }
    echo "ok   $out"
}
err "cannot open $W/none.jsonl" $W/none.jsonl --out $W/x.png
printf '{"step":1,"loss":2}\nnot json\n' > $W/bad.jsonl
err "$W/bad.jsonl line 2 is not JSON" $W/bad.jsonl --out $W/x.png
echo '{"tokens":3}' > $W/nostep.jsonl
err "has no step lines" $W/nostep.jsonl --out $W/x.png
err "--labels names 1 runs but 2 files were given" $W/a.jsonl $W/b.jsonl --labels one --out $W/x.png
# MFU: train --peak-gflops puts it in the metrics (model GFLOP/s over the ranks' peak); plot then
# draws a fifth panel
corpus text
$M train --train $W/text_train.bin --layers 2 --dim 64 --heads 4 --seq-len 32 --steps 5 --log-every 0 \
    --peak-gflops 50 --metrics $W/m.jsonl >/dev/null
$PY - $W/m.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
# gflops is printed to 3 decimals, mfu to 6: equal up to those roundings (0.0005 / 50 + 5e-7)
assert len(rows) == 5 and all(abs(r["mfu"] - r["gflops"] / 50) <= 0.0005 / 50 + 1e-6 for r in rows), rows[0]
print(f"mfu in the metrics: {rows[-1]['mfu']:.4f} (= {rows[-1]['gflops']} GFLOP/s / 50)")
PY
$M plot $W/m.jsonl --out $W/mfu.png >$W/plot.out
grep -qF "wrote $W/mfu.png" $W/plot.out
[ -s $W/mfu.png ] && echo "plot with the MFU panel written"
