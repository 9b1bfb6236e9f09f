#!/usr/bin/env bash
# The step-time cost of a checkpoint save with and without --ckpt-async:
# L 6, C 384 (10.7M parameters, AdamW: a 128 MB checkpoint), batch 4 x T 64,
# one thread, a save every 4 steps, 40 steps; ROUNDS runs of each,
# alternating (this machine's second core is at times shared). A step's
# time is the wall time from one step's metrics line to the next's
# (elapsed_s), so a save (or a snapshot, or a commit) lands in the step after
# it. Prints the mean of steps that follow a save point, of the other
# steps, and the run's total. Usage: bash bench/ckpt_async.sh [ROUNDS] (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
M=${MT_BUILD:-build}/meshtrain
ROUNDS=${1:-2}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
bash tests/corpus.sh $W/corpus.txt
$M tokenize --tokenizer byte --out $W/text $W/corpus.txt >/dev/null
RUN="--train $W/text_train.bin --layers 6 --dim 384 --heads 6 --seq-len 64 --batch 4 --steps 40 --ckpt-every 4 --log-every 0"
for r in $(seq $ROUNDS); do
    rm -rf $W/c; $M train $RUN --ckpt-dir $W/c --metrics $W/sync$r.jsonl >/dev/null
    rm -rf $W/c; $M train $RUN --ckpt-dir $W/c --ckpt-async --metrics $W/async$r.jsonl >/dev/null
done
du -sh $W/c | cut -f1 | sed 's/^/checkpoint size: /'
/usr/bin/python3 - $W $ROUNDS <<'PY'
import json, sys, statistics
w, rounds = sys.argv[1], int(sys.argv[2])
for kind in ("sync", "async"):
    save, other, total = [], [], []
    for r in range(1, rounds + 1):
        e = {}
        for l in open(f"{w}/{kind}{r}.jsonl"):
            j = json.loads(l)
            if "elapsed_s" in j: e[j["step"]] = j["elapsed_s"]
        for s in range(2, 40):  # step s's time: elapsed(s) - elapsed(s - 1); a save at step s-1 lands in it
            (save if (s - 1) % 4 == 0 else other).append((e[s] - e[s - 1]) * 1e3)
        total.append(e[40])
    print(f"{kind:5s}: steps after a save point {statistics.mean(save):7.1f} ms (n={len(save)}), other steps "
          f"{statistics.mean(other):6.1f} ms, 40 steps {statistics.mean(total):.2f} s")
PY
