#!/usr/bin/env bash
# Vocabulary padding per layout: --tp 3 on a 256-token vocabulary (3 does
# not divide 256: the embedding and head are padded to 384 rows for that
# layout) trains GPT-2 and Llama to one process's losses (1e-5 relative,
# 20 steps), and a checkpoint written under tp 3 holds the 256 rows and
# resumes in one process on the uninterrupted run's losses.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
compare() { # REF RUN
    $PY - $W/$1.jsonl $W/$2.jsonl $2 <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
worst = max(abs(x - y) / y for x, y in zip(a, b))
assert len(a) == len(b) == 20, (len(a), len(b))
assert worst <= 1e-5, f"{sys.argv[3]}: losses {worst:.3g} relative apart"
print(f"{sys.argv[3]}: {b[0]:.4f} -> {b[-1]:.4f}, within {worst:.2g} of one process")
PY
}
for fam in gpt2 llama; do
    B="--train $W/d_train.bin --family $fam --layers 2 --dim 96 --heads 6 --vocab 256 --seq-len 32 --batch 8
       --steps 20 --lr 1e-3 --log-every 0"
    [ $fam = llama ] && B="$B --kv-heads 3 --ffn-dim 96"
    $M train $B --metrics $W/${fam}_one.jsonl --ckpt-dir $W/${fam}_one_ck >/dev/null
    $MPI -np 3 $M train $B --tp 3 --metrics $W/${fam}_tp3.jsonl >/dev/null
    compare ${fam}_one ${fam}_tp3
    $MPI -np 3 $M train $B --tp 3 --steps 10 --ckpt-dir $W/${fam}_ck --metrics $W/${fam}_resumed.jsonl >/dev/null
    grep -q '"shape": *\[256, *96\]\|"shape":\[256,96\]' $W/${fam}_ck/manifest.json \
        || { echo "$fam: the tp-3 checkpoint does not hold 256 embedding rows"; grep -o '"shape":[^]]*]' $W/${fam}_ck/manifest.json | head -3; exit 1; }
    $M train $B --ckpt-dir $W/${fam}_ck --resume --metrics $W/${fam}_resumed.jsonl >/dev/null
    compare ${fam}_one ${fam}_resumed
done
echo OK
