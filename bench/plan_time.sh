#!/usr/bin/env bash
# `make bench` (bench/run_bench.sh): plan --cpu's predicted step time against the measured one, on the
# layouts whose bytes tests/check_plan.sh checks (tests/plan_layouts.txt). Calibrated for this machine
# by scripts/cpu_rates.sh (one process's fp32/bf16 rate, bench-comm's bandwidth and per-rank-count
# latency, the cores); each layout trains STEPS steps and its median step (steps 2..) is compared with
# the prediction. A report, not a test: step times on a shared or loaded machine move (a loaded run
# once measured 0.67 of the prediction), so nothing is asserted; only a failed run stops it.
#   BENCH_QUICK=1: 5 steps (a smoke test; its ratios are not measurements)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
M=${MT_BUILD:-build}/meshtrain; PY=/usr/bin/python3
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
bash tests/corpus.sh $W/corpus.txt
$M tokenize --tokenizer byte --out $W/text $W/corpus.txt >/dev/null
# A model whose step is GEMM work (~110 ms on one core), not per-call overhead.
MODEL="--layers 4 --dim 256 --heads 4 --seq-len 64"
STEPS=$([ "${BENCH_QUICK:-0}" = 1 ] && echo 5 || echo 20)
LAYOUTS=$(grep -v '^#' tests/plan_layouts.txt)
# Step time: the median of steps 2..STEPS (step 1 first-touches every buffer).
median_step() { $PY -c "import json,statistics,sys; r=[json.loads(l)['ms'] for l in open(sys.argv[1]) if '\"loss\"' in l]; print(statistics.median(r[1:])/1e3)" "$1"; }
bash scripts/cpu_rates.sh --train $W/text_train.bin --ranks "2 4 8" --steps $STEPS $MODEL --vocab 256 >$W/rates.txt
RATES=$(head -1 $W/rates.txt)
declare -A LAT
for n in 2 4 8; do LAT[$n]=$(awk -v n=$n '$1=="latency" && $2==n {print $3}' $W/rates.txt); done
echo "plan --cpu step time against measurement ($STEPS steps a layout); calibration (scripts/cpu_rates.sh): $RATES;" \
     "latency ${LAT[2]} / ${LAT[4]} / ${LAT[8]} us at 2 / 4 / 8 ranks"
for spec in $LAYOUTS; do
    IFS=: read -r name n dp tp pp z G B b sp rc prec <<<"$spec"
    spf=""; [ "$sp" = 1 ] && spf="--sequence-parallel"
    mpirun --oversubscribe -np "$n" $M train --train $W/text_train.bin $MODEL --batch "$B" --micro-batch "$b" \
        --dp "$dp" --tp "$tp" --pp "$pp" --zero "$z" $( [ "$z" != 0 ] && echo "--shard-group $G" ) $spf \
        --recompute "$rc" --precision "$prec" --steps $STEPS --log-every 0 --timeout 120 --metrics $W/m_$name.jsonl \
        </dev/null >/dev/null || { echo "meshtrain train failed on layout $name"; exit 1; }
    $M plan --cpu $RATES --cpu-latency-us "${LAT[$n]}" --mem-gb 1000 --gpus "$n" --gpus-per-node "$n" $MODEL --vocab 256 \
        --global-batch "$B" --micro-batch "$b" --dp "$dp" --tp "$tp" --pp "$pp" --zero "$z" --shard-group \
        "$( [ "$z" != 0 ] && echo "$G" || echo "$dp" )" --sequence-parallel "$sp" --recompute "$rc" --precision "$prec" \
        --pp-chunks 1 --top 1 --json >$W/p_$name.json || { echo "meshtrain plan failed on layout $name"; exit 1; }
    median_step $W/m_$name.jsonl >$W/t_$name.txt
done
$PY - "$W" "$LAYOUTS" <<'PY'
import json, sys
w, layouts = sys.argv[1], sys.argv[2].split()
print(f"{'layout':<12} {'measured s':>10} {'planned s':>10} {'ratio':>6}")
ratios = []
for spec in layouts:
    name = spec.split(":")[0]
    tm = float(open(f"{w}/t_{name}.txt").read())
    tp = json.load(open(f"{w}/p_{name}.json"))["layouts"][0]["t_step"]
    ratios.append(tp / tm)
    print(f"{name:<12} {tm:>10.4f} {tp:>10.4f} {tp / tm:>6.2f}")
inside = sum(0.75 <= r <= 1.25 for r in ratios)
print(f"step time predicted / measured: {min(ratios):.2f} - {max(ratios):.2f} over {len(ratios)} layouts, "
      f"{inside} within 25% (a report: timing on this machine, not asserted)")
PY
