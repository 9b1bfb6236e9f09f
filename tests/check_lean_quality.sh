#!/usr/bin/env bash
# Issue 5, acceptance 6: the memory-lean optimizers against AdamW on a real
# task. A GPT of 4 layers, width 256, 4 heads on the fortunes corpus of
# tests/corpus.sh (all of it, ~2.6 MB; byte tokens; validation = its last
# 10%), T=64, B=8, 300 steps (warm-up 20, cosine decay to lr/10, weight
# decay 0.1, grad clip 1); final validation loss on 16 batches of 8 x 64
# tokens. Two MPI ranks (dp=2, one thread each): the same samples as one
# process, and unlike two OpenMP threads it does not slow down several-fold
# when the second vCPU is busy. ~22 s a run on 2 quiet cores, 13 runs.
#
# AdamW and Adafactor are compared by their MEAN over seeds 1-5 (init and
# data order): one seed's loss moves by a few % (AdamW 2.493-2.586 over these
# seeds on fortunes, 2.310-2.364 on tinyshakespeare), as much as the 3%
# allowed, so one seed would decide by its luck. 8-bit AdamW, Adafactor with
# momentum and plain Adafactor (the absolute --lr) run seed 1 only, against
# AdamW's seed-1 run.
# Measured on fortunes: Adafactor -1.24% on the means (2.5141 vs 2.5456); per
# seed -0.95, -2.90, +0.47, -0.63, -2.12%; seed 1: 8-bit AdamW -0.02%,
# Adafactor with momentum -0.58%, plain Adafactor +0.28% (reported only).
# Until the test moved to fortunes it ran on tinyshakespeare (1.1 MB, no
# longer read): Adafactor +2.58% on the means (2.3962 vs 2.3360), per seed
# +2.82, +3.06, +1.77, +3.58, +1.68%; 8-bit AdamW -0.72%, with momentum
# -1.93%, plain +4.03%. The first 1.1 MB of fortunes instead of all of it
# gave AdamW 2.514-2.627 over the seeds, Adafactor -1.70% on the means.
#
# Learning rates and settings, each the best of a sweep of the final
# validation loss on tinyshakespeare (seed 1337 unless said; not re-swept on
# fortunes):
#   adamw            lr 2e-3  (seeds 1-5 means: 1.4e-3 2.347, 2e-3 2.336,
#                             2.8e-3 2.505)
#   adafactor        the paper's relative step (--adafactor-scale-parameter:
#                    step lr * max(1e-3, RMS(W)) per tensor), update clipping
#                    d = 1.5, lr 3.5e-2 (seeds 1-5 means: 2.5e-2 2.401,
#                    3.5e-2 2.396, 5e-2 2.407; d = 1 at 3.5e-2: 2.405;
#                    seed 1337: d = 2: 2.387, 3: 2.396, none: 2.396)
#   adafactor plain  absolute lr 1e-3 (5e-4 .. 2e-3 swept), d = 1: 2.418;
#                    seeds 1-5 mean 2.421 (+3.6% over AdamW's mean): without
#                    momentum the attention matrices limit the step (their
#                    lr doubled alone: 2.50-2.52), and neither smaller lr
#                    on them, a slower or faster beta2 decay (-0.5 .. -1.0),
#                    other d (0.5 .. off), min-lr 0 nor warm-up 50 went
#                    below 2.40; the relative step is what got under 3%
#   adamw8bit        lr 2e-3 (AdamW's; its state differs only by rounding)
#   adafactor_m      --adafactor-beta1 0.9, absolute lr 2e-3
#
# Asserts
#  - Adafactor (relative step, no momentum: the factored state only) has a
#    mean validation loss over seeds 1-5 within 3% of AdamW's mean;
#  - adamw8bit's validation loss is within 3% of AdamW's (seed 1);
#  - Adafactor with --adafactor-beta1 0.9 is within 3% of AdamW (seed 1);
#  - optimizer-state bytes (--report-json, memory.optimizer of rank 0, which
#    holds the whole state with --zero 0), exactly:
#      adamw8bit: per unit 2 bytes per parameter (m and v codes) + 8 per
#        2048-element block (an fp32 absmax each for m and v); over all
#        parameters in [1.9, 2.2] bytes each;
#      adafactor (either step rule): 4 (rows + cols) bytes per matrix, i.e.
#        the matrices' state is sum (rows+cols)/(rows*cols)*4 per matrix
#        parameter, plus 4 bytes per element of the unfactored tensors
#        (biases, LayerNorm: a full second moment), no momentum;
#      adafactor with momentum: that plus 4 bytes per parameter.
# LEAN_QUALITY_SEEDS="1 2 3" runs fewer seeds (a quicker look).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
MPI="$MPI -np 2"
SEEDS=${LEAN_QUALITY_SEEDS:-1 2 3 4 5}
corpus text
L=4; C=256; T=64
RUN="--train $W/text_train.bin --val $W/text_val.bin --layers $L --dim $C --heads 4 --seq-len $T --batch 8
     --steps 300 --warmup 20 --lr-schedule cosine --eval-every 300 --eval-batches 16 --log-every 0 --dp 2 --zero 0"
train() { # NAME SEED OPTIMIZER LR [flags]
    local name=$1 seed=$2 opt=$3 lr=$4; shift 4
    local start=$SECONDS
    $MPI $M train $RUN --seed $seed --optimizer $opt --lr $lr --min-lr "$($PY -c "print($lr / 10)")" "$@" \
        --metrics $W/$name.s$seed.jsonl --report-json $W/$name.s$seed.json >/dev/null
    echo "$name seed $seed: $opt lr $lr $* ($((SECONDS - start)) s)"
}
AF_RELATIVE="--adafactor-scale-parameter --adafactor-clip 1.5"
for s in $SEEDS; do
    train adamw $s adamw 2e-3
    train adafactor $s adafactor 3.5e-2 $AF_RELATIVE
done
train adamw8bit 1 adamw8bit 2e-3
train adafactor_m 1 adafactor 2e-3 --adafactor-beta1 0.9
train adafactor_abs 1 adafactor 1e-3
$PY - "$W" "$L" "$C" "$T" "$SEEDS" <<'PY'
import json, math, sys
w, L, C, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
seeds = [int(s) for s in sys.argv[5].split()]
V = 256  # byte vocabulary, already a multiple of 128 (no padded rows)
def val_loss(name, seed):
    v = [json.loads(l)["val_loss"] for l in open(f"{w}/{name}.s{seed}.jsonl") if '"val_loss"' in l]
    assert v, f"{name} seed {seed}: no validation loss"
    return v[-1]
def opt_bytes(name):  # the seed-1 runs, or the first seed of adamw/adafactor's list
    seed = seeds[0] if name in ("adamw", "adafactor") else 1
    r = json.load(open(f"{w}/{name}.s{seed}.json"))
    return r["memory"]["optimizer"], r["params"]
# the model's tensors per unit (src/model/layout.c): (rows, cols) of matrices, numel of the rest
units = [{"mat": [(V, C), (T, C)], "vec": []}]
units += [{"mat": [(3 * C, C), (C, C), (4 * C, C), (C, 4 * C)], "vec": [C, C, 3 * C, C, C, C, 4 * C, C]}] * L
units += [{"mat": [], "vec": [C, C]}]
numel = [sum(r * c for r, c in u["mat"]) + sum(u["vec"]) for u in units]
psi = sum(numel)
fail = []

aw = {s: val_loss("adamw", s) for s in seeds}
af = {s: val_loss("adafactor", s) for s in seeds}
for s in seeds:
    print(f"seed {s}: adamw {aw[s]:.4f}, adafactor (relative step) {af[s]:.4f} ({100 * (af[s] / aw[s] - 1):+.2f}%)")
aw_mean, af_mean = sum(aw.values()) / len(seeds), sum(af.values()) / len(seeds)
gap = af_mean / aw_mean - 1
print(f"mean over seeds {seeds}: adamw {aw_mean:.4f}, adafactor {af_mean:.4f} ({100 * gap:+.2f}%; need <= +3%)")
if gap > 0.03:
    fail.append(f"adafactor's mean validation loss {af_mean:.4f} is {100 * gap:.2f}% over AdamW's {aw_mean:.4f}")

base = val_loss("adamw", 1) if 1 in seeds else aw_mean
for name, what in (("adamw8bit", "8-bit AdamW"), ("adafactor_m", "adafactor with momentum"),
                   ("adafactor_abs", "adafactor with the absolute lr (reported only)")):
    v = val_loss(name, 1)
    g = v / base - 1
    print(f"seed 1: {what} {v:.4f} ({100 * g:+.2f}% over AdamW's {base:.4f})")
    if name != "adafactor_abs" and g > 0.03:
        fail.append(f"{what} {v:.4f} is {100 * g:.2f}% over AdamW's {base:.4f}")

b8, p8 = opt_bytes("adamw8bit")
assert p8 == psi, f"report says {p8} parameters, the layout {psi}"
want8 = sum(2 * n + 8 * math.ceil(n / 2048) for n in numel)
print(f"adamw8bit state: {b8:.0f} bytes = {b8 / psi:.4f} per parameter (formula {want8})")
if b8 != want8: fail.append(f"adamw8bit holds {b8:.0f} optimizer bytes, expected {want8}")
if not 1.9 <= b8 / psi <= 2.2: fail.append(f"adamw8bit: {b8 / psi:.4f} bytes per parameter, outside [1.9, 2.2]")

mats = [m for u in units for m in u["mat"]]
mat_bytes = sum(4 * (r + c) for r, c in mats)
mat_params = sum(r * c for r, c in mats)
vec_bytes = 4 * sum(n for u in units for n in u["vec"])
for name in ("adafactor", "adafactor_abs"):
    baf, _ = opt_bytes(name)
    print(f"{name} state: {baf:.0f} bytes = {mat_bytes} for {len(mats)} matrices "
          f"({mat_bytes / mat_params:.5f} per matrix parameter = sum (rows+cols)/(rows*cols)*4 weighted by size) "
          f"+ {vec_bytes} for {psi - mat_params} vector elements; {baf / psi:.5f} per parameter (AdamW: 8)")
    if baf != mat_bytes + vec_bytes: fail.append(f"{name} holds {baf:.0f} optimizer bytes, expected {mat_bytes + vec_bytes}")
bm, _ = opt_bytes("adafactor_m")
print(f"adafactor with momentum: {bm:.0f} bytes = {bm / psi:.5f} per parameter (factored state + 4 per parameter)")
if bm != mat_bytes + vec_bytes + 4 * psi: fail.append(f"adafactor with momentum holds {bm:.0f} optimizer bytes, expected {mat_bytes + vec_bytes + 4 * psi}")
ba, _ = opt_bytes("adamw")
if ba != 8 * psi: fail.append(f"adamw holds {ba:.0f} optimizer bytes, expected 8 per parameter ({8 * psi})")
assert not fail, "; ".join(fail)
PY
echo OK
