#!/usr/bin/env bash
# meshtrain plot: two generated --metrics runs (a long and a short one, with
# validation lines and a fp16-style extra field) drawn into a PNG whose
# IHDR says the asked size and whose pixels are neither blank nor solid
# (1-30% differ from the white background: four panels of axes, labels and
# two curves each); --labels; and one-line errors for a missing file, a
# line that is not JSON, a file without steps, a wrong --labels count. A
# mixture-of-experts run's metrics add the load-balance panels (against the
# same run with its moe_ fields removed: more ink, and the summary line's
# max/mean and aux loss equal to those computed from the file); expert arrays
# that change length are one error line.
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
# ink FILE.png W H [X0 Y0 X1 Y1]: asserts a W x H PNG and prints the fraction of its pixels (of the box
# [X0, X1) x [Y0, Y1) when given) that differ from white
ink() {
    $PY - "$@" <<'PY'
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
w, h, depth, ctype = struct.unpack(">IIBB", b[16:26])
assert (w, h) == (int(sys.argv[2]), int(sys.argv[3])), (w, h)
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
x0, y0, x1, y1 = map(int, sys.argv[4:8]) if len(sys.argv) > 4 else (0, 0, w, h)
ink = sum(1 for r in rows[y0:y1] for x in range(x0 * bpp, x1 * bpp, bpp) if r[x:x + 3] != b"\xff\xff\xff")
print(f"{ink / ((x1 - x0) * (y1 - y0)):.4f}")
PY
}
frac=$(ink $W/c.png 900 700)
$PY -c "import sys; f = float(sys.argv[1]); assert 0.01 <= f <= 0.30, f'{f:.3f} of the pixels differ from the background'" $frac
echo "ok   plot: 900x700 PNG, $frac of the pixels drawn (4 panels, 2 runs, legend)"
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

echo "== a mixture-of-experts run: the load balance =="
# 4 layers x 4 experts top-2, 6 steps with the aux loss on: the metrics carry moe_aux and moe_load; plot adds
# the aux loss, each layer's max/mean expert load and the rows per expert. The same run with the MoE fields
# removed plots as a dense run: four panels, no load-balance line, and less ink
$M train --train $W/text_train.bin --family llama --layers 4 --dim 64 --heads 4 --kv-heads 2 --seq-len 32 --batch 8 \
    --steps 6 --log-every 0 --moe-experts 4 --moe-top-k 2 --moe-ffn-dim 32 --moe-aux-coef 0.02 \
    --metrics $W/moe.jsonl >/dev/null
$PY - $W/moe.jsonl $W/dense.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "loss" in r]
assert len(steps) == 6 and all(len(r["moe_load"]) == 4 and all(len(l) == 4 for l in r["moe_load"]) for r in steps)
# every token row routes to top-k = 2 experts in each layer: 8 x 32 x 2 rows per layer and step
assert all(sum(l) == 8 * 32 * 2 for r in steps for l in r["moe_load"]), steps[0]["moe_load"]
with open(sys.argv[2], "w") as f:
    for r in rows:
        f.write(json.dumps({k: v for k, v in r.items() if not k.startswith("moe_")}) + "\n")
PY
$PY - $W/moe.jsonl > $W/want.txt <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
last = steps[-1]["moe_load"]
r = [max(l) / (sum(l) / len(l)) for l in last]
w = max(range(len(r)), key=lambda i: (r[i], -i))
print(f"max/mean at step {steps[-1]['step']}: {r[w]:.3f} (layer {w}); aux loss {steps[-1]['moe_aux']:.6g}")
PY
$M plot $W/moe.jsonl --out $W/moe.png --width 900 --height 1000 >$W/moe.out
$M plot $W/dense.jsonl --out $W/dense.png --width 900 --height 1000 >$W/dense.out
grep -qF "plot: moe.jsonl: load balance of 4 layers x 4 experts over 6 steps; $(cat $W/want.txt)" $W/moe.out \
    || { echo "FAIL: the load-balance line is not $(cat $W/want.txt):"; cat $W/moe.out; exit 1; }
if grep -q "load balance" $W/dense.out; then echo "FAIL: a run without MoE fields has a load balance"; exit 1; fi
moe=$(ink $W/moe.png 900 1000); dense=$(ink $W/dense.png 900 1000)
# 7 panels (2 x 4) against 4 (2 x 2) on the same page: the three MoE panels add ink (axes, labels, 4 layers'
# lines; 1.31 times when written), the last row's left panel (the rows per expert) is drawn, its right is blank
last=$(ink $W/moe.png 900 1000 0 760 450 1000); blank=$(ink $W/moe.png 900 1000 460 760 900 1000)
$PY -c "import sys; m, d, l, b = map(float, sys.argv[1:]); assert 0.01 <= d and 1.15 * d <= m <= 0.4 and l >= 0.02 and b == 0, (m, d, l, b)" \
    $moe $dense $last $blank
echo "ok   $(sed -n 2p $W/moe.out); PNG 900x1000, $moe of the pixels drawn (the same run without MoE fields: $dense)"
# the load balance of two runs overlaid (run by colour, layer by line style)
$M plot $W/moe.jsonl $W/moe.jsonl --labels "a,b" --out $W/moe2.png >$W/moe2.out
[ "$(grep -c "load balance of 4 layers" $W/moe2.out)" = 2 ]
# bad input: the expert arrays change length, or are not arrays of row counts
$PY - $W/moe.jsonl $W/grow.jsonl $W/notcounts.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
rows[3]["moe_load"] = [l + [0] for l in rows[3]["moe_load"]]
open(sys.argv[2], "w").write("".join(json.dumps(r) + "\n" for r in rows))
rows[3]["moe_load"] = [1, 2, 3]
open(sys.argv[3], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
err "$W/grow.jsonl line 4: moe_load has 4 layers x 5 experts, but line 1 had 4 x 4" $W/grow.jsonl --out $W/x.png
err "$W/notcounts.jsonl line 4: moe_load is not a list of layers' row counts per expert" $W/notcounts.jsonl --out $W/x.png
[ ! -e $W/x.png ] || { echo "FAIL: a plot of bad input left $W/x.png"; exit 1; }
