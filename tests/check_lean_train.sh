#!/usr/bin/env bash
# The memory-lean optimizers in training (--optimizer adafactor | adamw8bit):
#  - Adafactor's factored statistics are summed over the ranks sharing a
#    unit, so dp=3 with ZeRO-1 and ZeRO-3 (shards cut through matrix rows)
#    gives the single-process losses within 1e-5 over 20 steps, also with
#    the relative step (its per-tensor RMS(W) is summed over the shards);
#  - a checkpoint (3 steps) resumed to 5 gives the straight run's losses
#    bitwise, for both optimizers (8-bit moments are saved dequantised and
#    re-quantised to the same codes);
#  - optimizer-state bytes (--report-json): 8-bit AdamW about 2 per parameter
#    (codes + one fp32 absmax per 2048-block per moment), Adafactor under 5%
#    of AdamW's 8 per parameter.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus text
T="--train $W/text_train.bin --layers 2 --dim 65 --heads 5 --seq-len 32 --batch 12 --micro-batch 4 --steps 20 --log-every 0 --lr 1e-3 --dropout 0.1"
$M train $T --optimizer adafactor --metrics $W/af.jsonl --report-json $W/af.json >/dev/null
for z in 1 3; do
    $MPI -np 3 $M train $T --optimizer adafactor --dp 3 --zero $z --metrics $W/af$z.jsonl >/dev/null
    losses_within $W/af.jsonl $W/af$z.jsonl "adafactor dp=3 zero $z"; echo
done
R="--optimizer adafactor --adafactor-scale-parameter --adafactor-clip 1.5 --lr 3e-2"
$M train $T $R --metrics $W/afr.jsonl >/dev/null
$MPI -np 3 $M train $T $R --dp 3 --zero 3 --metrics $W/afr3.jsonl >/dev/null
losses_within $W/afr.jsonl $W/afr3.jsonl "adafactor relative step dp=3 zero 3"; echo
S="${T/--steps 20/--steps 5}"
for opt in adafactor adamw8bit; do
    $M train $S --optimizer $opt --metrics $W/s_$opt.jsonl --report-json $W/$opt.json >/dev/null
    $M train ${S/--steps 5/--steps 3} --optimizer $opt --ckpt-dir $W/ck_$opt --metrics $W/r_$opt.jsonl >/dev/null
    $M train $S --optimizer $opt --ckpt-dir $W/ck_$opt --resume --metrics $W/r_$opt.jsonl >/dev/null
    cmp <(cut -d, -f1-2 $W/s_$opt.jsonl) <(cut -d, -f1-2 $W/r_$opt.jsonl) || { echo "$opt: resumed losses differ"; exit 1; }
    echo "$opt: 3 steps + resume 2 = 5 straight steps, bitwise"
done
$M train $S --optimizer adamw --report-json $W/adamw.json >/dev/null
$PY - $W <<'PY'
import json, sys
w = sys.argv[1]
r = {k: json.load(open(f"{w}/{k}.json")) for k in ("adamw", "adamw8bit", "adafactor")}
psi = r["adamw"]["params"]
per = {k: v["memory"]["optimizer"] / psi for k, v in r.items()}
assert abs(per["adamw"] - 8) < 0.01, per
assert 2.0 <= per["adamw8bit"] <= 2.1, f"8-bit AdamW holds {per['adamw8bit']:.3f} bytes per parameter"
assert per["adafactor"] < 0.05 * 8, f"Adafactor holds {per['adafactor']:.3f} bytes per parameter"
print("optimizer-state bytes per parameter: " + ", ".join(f"{k} {v:.3f}" for k, v in per.items()))
PY
echo OK
