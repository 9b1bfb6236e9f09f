#!/usr/bin/env bash
# --profile in training: every step writes a profile line to --metrics whose
# categories add up to the step's wall time (the unclaimed rest is "other"),
# the model's kernels (gemm, attention, layernorm, gelu, softmax_xent) and the
# trainer's optimizer are all timed, GEMM GFLOP/s is positive, and rank 0
# prints the mean table at the end; on dp=2 the gradient wait is a category.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus text
mpirun --oversubscribe -np 2 $M train --train $W/text_train.bin --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 \
    --steps 3 --log-every 0 --dp 2 --profile --metrics $W/m.jsonl >$W/out.txt
grep -q "profile, mean of 3 steps" $W/out.txt || { cat $W/out.txt; exit 1; }
$PY - $W/m.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
prof = [r for r in rows if "ms_by_category" in r]
assert len(prof) == 3, f"{len(prof)} profile lines, expected 3"
for r in prof:
    cats = r["ms_by_category"]
    total = sum(cats.values())
    assert abs(total - r["ms"]) <= 0.01 * r["ms"] + 1e-3, f"step {r['step']}: categories {total} ms, step {r['ms']} ms"
    for c in ("gemm", "attention", "layernorm", "gelu", "softmax_xent", "optimizer"):
        assert cats[c] > 0, f"step {r['step']}: no time in {c}"
    assert "wait" in cats and r["gemm_gflops"] > 0
print(f"3 profile lines; step 3: {prof[-1]['ms']:.2f} ms = sum of categories; GEMM {prof[-1]['gemm_gflops']:.1f} GFLOP/s")
PY
echo OK
