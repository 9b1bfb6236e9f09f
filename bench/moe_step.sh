#!/usr/bin/env bash
# A mixture-of-experts step against the dense model with the same active
# parameters, in the same run, alternating (this machine's second core is at
# times shared): L 4, C 192, 6 heads / 2 kv heads, T 64, batch 16, one
# thread, fp32, AdamW; 8 experts of width 128 with top-2 routing (dropless,
# aux and z losses on) against one SwiGLU MLP of width 256 (2 x 128: the
# same active MLP parameters; the router's 8 x 192 come on top). Prints the
# median ms/step and tokens/s of each over ROUNDS alternations and their
# ratio. Then the MoE model on two processes, data parallel (--dp 2) and
# expert parallel (--dp 2 --ep 2: 4 experts per rank, tokens exchanged by
# all-to-all), alternating: tokens/s of each and, from rank 0's --profile
# summary, the share of the ep2 step spent inside the all-to-alls (the
# exchanges' own time plus the wait for the other rank to arrive). EP=0
# skips the two-process part.
# Usage: bash bench/moe_step.sh [ROUNDS] (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
M=${MT_BUILD:-build}/meshtrain
ROUNDS=${1:-3}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
bash tests/corpus.sh $W/corpus.txt
$M tokenize --tokenizer byte --out $W/text $W/corpus.txt >/dev/null
RUN="--train $W/text_train.bin --family llama --layers 4 --dim 192 --heads 6 --kv-heads 2 --seq-len 64 --batch 16
     --steps 12 --log-every 0"
: >$W/dense.txt; : >$W/moe.txt
for r in $(seq $ROUNDS); do
    $M train $RUN --ffn-dim 256 --metrics $W/d.jsonl >/dev/null &&
        grep -o '"ms":[0-9.]*' $W/d.jsonl | tail -10 | cut -d: -f2 >>$W/dense.txt
    $M train $RUN --moe-experts 8 --moe-top-k 2 --moe-ffn-dim 128 --moe-aux-coef 0.01 --moe-z-coef 0.001 \
        --metrics $W/m.jsonl >/dev/null && grep -o '"ms":[0-9.]*' $W/m.jsonl | tail -10 | cut -d: -f2 >>$W/moe.txt
    rm -f $W/d.jsonl $W/m.jsonl
done
/usr/bin/python3 - $W/dense.txt $W/moe.txt <<'PY'
import statistics, sys
d = statistics.median(float(x) for x in open(sys.argv[1]))
m = statistics.median(float(x) for x in open(sys.argv[2]))
tok = 16 * 64
print(f"dense SwiGLU 256: {d:.1f} ms/step ({tok / d * 1e3:.0f} tok/s); 8 experts x 128 top-2: {m:.1f} ms/step "
      f"({tok / m * 1e3:.0f} tok/s); ratio {m / d:.3f}")
PY
[ "${EP:-1}" = 0 ] && exit 0
MOE="--moe-experts 8 --moe-top-k 2 --moe-ffn-dim 128 --moe-aux-coef 0.01 --moe-z-coef 0.001"
: >$W/dp2.txt; : >$W/ep2.txt; : >$W/share.txt
for r in $(seq $ROUNDS); do
    mpirun -np 2 $M train $RUN $MOE --dp 2 --metrics $W/d.jsonl >/dev/null &&
        grep -o '"ms":[0-9.]*' $W/d.jsonl | tail -10 | cut -d: -f2 >>$W/dp2.txt
    mpirun -np 2 $M train $RUN $MOE --dp 2 --ep 2 --profile --metrics $W/e.jsonl >$W/e.out &&
        grep -o '"ms":[0-9.]*' $W/e.jsonl | tail -10 | cut -d: -f2 >>$W/ep2.txt
    /usr/bin/python3 - $W/e.out >>$W/share.txt <<'PY'
import re, sys
t = open(sys.argv[1]).read()
step = float(re.search(r"profile, mean of \d+ steps: ([0-9.]+) ms", t).group(1))
a2a = float(re.search(r"^\s*alltoall\s+([0-9.]+)", t, re.M).group(1))
print(a2a / step)
PY
    rm -f $W/d.jsonl $W/e.jsonl
done
/usr/bin/python3 - $W/dp2.txt $W/ep2.txt $W/share.txt <<'PY'
import statistics, sys
d, e, s = (statistics.median(float(x) for x in open(f)) for f in sys.argv[1:4])
tok = 16 * 64
print(f"2 processes, MoE 8 x 128 top-2: dp2 {d:.1f} ms/step ({tok / d * 1e3:.0f} tok/s); dp2 x ep2 {e:.1f} ms/step "
      f"({tok / e * 1e3:.0f} tok/s), all-to-all {100 * s:.1f}% of the ep2 step (rank 0's profile)")
PY
