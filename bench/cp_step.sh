#!/usr/bin/env bash
# Context parallelism on a long sequence: GPT-2 L 2, C 128, 4 heads,
# T = 8192 (default), batch 1, fp32, one thread per rank, dropout off,
# trained STEPS steps at cp 1 (one process), cp 2 and cp 4, ring and
# all-to-all, ROUNDS alternations; prints per layout the median ms/step and
# tokens/s over the rounds (the first step of each run left out), the
# median time the ranks spent waiting in communication per step (rank_wait_ms:
# the ring's or all-to-all's waits plus the gradient all-reduce: transfers
# compute did not hide and peers still computing), and the activation bytes a rank holds (--report-json).
# Then the ring's overlap: cp 2 and cp 4 ring trained again with --profile
# (each ring step's messages exchanged again alone after the pass, the
# fastest of 3: the communication time; docs/usage.md, "Context parallelism"), printing per
# step, summed over the ranks and pooled over the rounds (every step), the
# ring's communication, the part hidden behind the block compute and its
# share, the exposed part, the time waited in the ring's calls and the
# overlapped compute.
# On a machine with fewer cores than ranks the cp runs share them: read
# tokens/s against the core count printed.
# Usage: bash bench/cp_step.sh [ROUNDS] [T] [STEPS] (default 2, 8192, 4).
set -euo pipefail
cd "$(dirname "$0")/.."
M=${MT_BUILD:-build}/meshtrain
ROUNDS=${1:-2}; T=${2:-8192}; STEPS=${3:-4}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bash tests/corpus.sh $W/corpus.txt
$M tokenize --tokenizer byte --out $W/text $W/corpus.txt >/dev/null
RUN="--train $W/text_train.bin --layers 2 --dim 128 --heads 4 --seq-len $T --batch 1 --steps $STEPS --log-every 0"
LAYOUTS="cp1:1: cp2_ring:2:--cp_2 cp4_ring:4:--cp_4 cp2_alltoall:2:--cp_2_--cp-mode_alltoall cp4_alltoall:4:--cp_4_--cp-mode_alltoall"
for r in $(seq $ROUNDS); do
    for spec in $LAYOUTS; do
        IFS=: read -r name np flags <<<"$spec"
        mpirun --oversubscribe -np $np $M train $RUN ${flags//_/ } --metrics $W/$name.jsonl \
            --report-json $W/$name.json >/dev/null
        /usr/bin/python3 - $W/$name.jsonl >>$W/$name.txt <<'PY'
import json, sys
for l in list(open(sys.argv[1]))[1:]:
    j = json.loads(l)
    if "ms" in j:
        print(j["ms"], max(j.get("rank_wait_ms", [0.0])))
PY
        rm -f $W/$name.jsonl
    done
    for spec in cp2_ring:2 cp4_ring:4; do
        IFS=: read -r name np <<<"$spec"
        mpirun --oversubscribe -np $np $M train $RUN --cp $np --profile --report-json $W/${name}_prof$r.json >$W/${name}_prof.out
    done
done
/usr/bin/python3 - $W "$LAYOUTS" $T "$(grep -c ^processor /proc/cpuinfo)" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, statistics, sys
w, layouts, T, cores, load = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), sys.argv[4], sys.argv[5]
print(f"T = {T}, batch 1, GPT-2 L2 C128 H4, fp32, 1 thread per rank, {cores} cores, load average {load} at the end")
print(f"{'layout':<14} {'ms/step':>9} {'tok/s':>8} {'wait ms':>8} {'wait %':>7} {'acts MiB/rank':>14}")
for spec in layouts:
    name = spec.split(":")[0]
    rows = [tuple(map(float, l.split())) for l in open(f"{w}/{name}.txt")]
    ms = statistics.median(r[0] for r in rows)
    wait = statistics.median(r[1] for r in rows)
    acts = json.load(open(f"{w}/{name}.json"))["memory"]["activations"] / 2**20
    print(f"{name:<14} {ms:9.1f} {T / ms * 1e3:8.0f} {wait:8.1f} {100 * wait / ms:6.1f}% {acts:14.2f}")
print("ring overlap (--profile runs; ms per step summed over the ranks, every step, pooled over the rounds):")
print(f"{'layout':<10} {'ms/step':>9} {'comm':>8} {'hidden':>8} {'hidden %':>9} {'exposed':>8} {'waited':>8} "
      f"{'compute':>9} {'probe':>8}")
import glob
for name in ("cp2_ring", "cp4_ring"):
    reps = [json.load(open(f)) for f in sorted(glob.glob(f"{w}/{name}_prof*.json"))]
    tot = {k: sum(r["ring_overlap"][k + "_ms"] for j in reps for r in j["ranks"]) / len(reps)
           for k in ("comm", "hidden", "exposed", "wait", "compute", "probe")}
    ms = statistics.median(j["time_per_step_s"]["step"] * 1e3 for j in reps)
    print(f"{name:<10} {ms:9.1f} {tot['comm']:8.1f} {tot['hidden']:8.1f} {100 * tot['hidden'] / tot['comm']:8.1f}% "
          f"{tot['exposed']:8.1f} {tot['wait']:8.1f} {tot['compute']:9.1f} {tot['probe']:8.1f}")
PY
