#!/usr/bin/env bash
# This machine's rates for `meshtrain plan --cpu`, measured on the model you
# plan (docs/usage.md "Planning for this CPU engine"):
#   usage: scripts/cpu_rates.sh --train SHARD.bin [--ranks "2 4 8"] [--batch 8] [--steps 12] MODEL FLAGS...
#   e.g.   scripts/cpu_rates.sh --train data/text_train.bin --layers 4 --dim 256 --heads 4 --seq-len 64 --vocab 256
# MODEL FLAGS are train's and plan's model flags (--vocab included: the shard's tokenizer's).
# Prints one line of plan flags that do not depend on the rank count
#   --cpu-gflops G --cpu-gflops-bf16 G --cpu-microbatch-ms MS --cpu-microbatch-ms-bf16 MS --cpu-bw GBS --cpu-cores C
# and a line "latency RANKS US" for each rank count of --ranks (plan's --cpu-latency-us for that many ranks
# on a node; default: the number of cores).
# How: one process on one core trains the model (fp32 and bf16, micro-batch 1 and 2, --batch sequences);
# the median step of steps 2.. gives t(mb), and t(mb) = FLOPs / rate + (batch / mb) x a microbatch's own cost
# solves for both (FLOPs per step: plan's count for the same model). bench-comm gives the bandwidth (4 MiB
# all-reduce on 2 ranks; the median of 5 runs: two ranks here get 2 or 4.5 GB/s by where the scheduler puts
# them) and the latency (8-byte all-reduce with that many ranks).
set -euo pipefail
cd "$(dirname "$0")/.."
M=${MT_BUILD:-build}/meshtrain
PY=${PYTHON:-python3}
CORES=$(getconf _NPROCESSORS_ONLN) # (nproc would answer OMP_NUM_THREADS)
TRAIN="" RANKS="$CORES" BATCH=8 STEPS=12 MODEL=()
while [ $# -gt 0 ]; do
    case "$1" in
    --train) TRAIN=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    *) MODEL+=("$1"); shift ;;
    esac
done
[[ " ${MODEL[*]} " == *" --vocab "* ]] || { echo "cpu_rates: give the model's --vocab (the shard's tokenizer's: 256 for byte, 50257 for gpt2)" >&2; exit 1; }
[ -n "$TRAIN" ] || { echo "cpu_rates: give --train SHARD.bin (a tokenized shard: meshtrain tokenize)" >&2; exit 1; }
[ "$STEPS" -ge 3 ] || { echo "cpu_rates: --steps must be >= 3 (step 1 is left out), got $STEPS" >&2; exit 1; }
[ $((BATCH % 2)) -eq 0 ] || { echo "cpu_rates: --batch must be even (micro-batch 2), got $BATCH" >&2; exit 1; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MPIRUN="mpirun --oversubscribe"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT

median_step() { $PY -c "import json,statistics,sys; r=[json.loads(l)['ms'] for l in open(sys.argv[1]) if '\"loss\"' in l]; print(statistics.median(r[1:])/1e3)" "$1"; }

FLOPS=$($M plan --cpu --cpu-gflops 1 --cpu-bw 1 --mem-gb 1000 --gpus 1 --gpus-per-node 1 "${MODEL[@]}" \
    --global-batch "$BATCH" --micro-batch 2 --zero 0 --recompute none --precision fp32 --top 1 --json |
    $PY -c "import json,sys; print(json.load(sys.stdin)['layouts'][0]['flops_step'])")
out=""
for prec in fp32 bf16; do
    for mb in 1 2; do
        $M train --train "$TRAIN" "${MODEL[@]}" --batch "$BATCH" --micro-batch $mb --steps "$STEPS" --log-every 0 \
            --precision $prec --metrics $W/$prec.$mb.jsonl >/dev/null
    done
    t1=$(median_step $W/$prec.1.jsonl) t2=$(median_step $W/$prec.2.jsonl)
    sfx=$([ $prec = bf16 ] && echo -bf16 || true)
    out+=$($PY -c "
b, t1, t2 = $BATCH, $t1, $t2
c = max((t1 - t2) / (b - b / 2), 0.0)  # b microbatches at mb 1, b/2 at mb 2
print(f' --cpu-gflops$sfx {$FLOPS / (t2 - b / 2 * c) / 1e9:.4g} --cpu-microbatch-ms$sfx {c * 1e3:.4g}')")
done
BW=$(for i in 1 2 3 4 5; do $MPIRUN -np 2 $M bench-comm --min-bytes 4M --max-bytes 4M --ops allreduce --iters 20 </dev/null |
    awk '$1=="allreduce"{print $6}'; done | sort -g | sed -n 3p)
echo "${out# } --cpu-bw $BW --cpu-cores $CORES"
for n in $RANKS; do
    lat=$($MPIRUN -np "$n" $M bench-comm --min-bytes 8 --max-bytes 8 --ops allreduce --iters 50 </dev/null |
        awk '$1=="allreduce"{print $4}')
    echo "latency $n $lat"
done
