#!/usr/bin/env bash
# train --config FILE.yaml and --print-config:
#  - a YAML config gives the same run as the same flags, bitwise (losses,
#    grad norms, val losses), on 1 process and under mpirun -np 2 (dp2 ZeRO-1);
#  - --print-config prints YAML that --config reads back to the same
#    configuration (printed again: identical bytes);
#  - a flag on the command line overrides the file; --flag=value works;
#  - every example under configs/ parses;
#  - an unknown section, an unknown key, a key in the wrong section and
#    invalid YAML are one error line naming the file and line.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus d
F="--train $W/d_train.bin --val $W/d_val.bin --layers 2 --dim 32 --heads 4 --seq-len 32 --batch 8 --steps 6 --lr 1e-3 --warmup 2 --lr-schedule cosine --min-lr 1e-4 --dropout 0.1 --eval-every 3 --log-every 0"
cat > $W/run.yaml <<YAML
# the same run as \$F
model: {layers: 2, dim: 32, heads: 4, seq-len: 32, dropout: 0.1}
data:
  train: $W/d_train.bin
  val: $W/d_val.bin
optimizer:
  lr: 1e-3
schedule:
  steps: 6
  batch: 8
  warmup: 2
  lr-schedule: cosine
  min-lr: 1e-4
logging:
  eval-every: 3
  log-every: 0
YAML
$M train $F --metrics $W/flags.jsonl >/dev/null
$M train --config $W/run.yaml --metrics $W/conf.jsonl >/dev/null
cmp <(step_val_losses $W/flags.jsonl) <(step_val_losses $W/conf.jsonl) || { echo "FAIL: the config run differs from the flag run"; exit 1; }
mpirun -np 2 $M train $F --dp 2 --zero 1 --metrics $W/flags2.jsonl >/dev/null
mpirun -np 2 $M train --config=$W/run.yaml --dp=2 --zero=1 --metrics $W/conf2.jsonl >/dev/null
cmp <(step_val_losses $W/flags2.jsonl) <(step_val_losses $W/conf2.jsonl) || { echo "FAIL: dp2: the config run differs"; exit 1; }
echo "ok   --config run.yaml = the same flags, bitwise ($(step_val_losses $W/conf.jsonl | wc -l) losses; also dp2 ZeRO-1 with --config= and --dp=2)"
$M train --config $W/run.yaml --print-config > $W/p1.yaml
$M train --config $W/p1.yaml --print-config > $W/p2.yaml
cmp $W/p1.yaml $W/p2.yaml || { echo "FAIL: --print-config does not round-trip"; diff $W/p1.yaml $W/p2.yaml; exit 1; }
$M train $F --print-config > $W/p3.yaml
cmp $W/p1.yaml $W/p3.yaml || { echo "FAIL: the file's configuration differs from the flags'"; diff $W/p1.yaml $W/p3.yaml; exit 1; }
echo "ok   --print-config reads back identically ($(wc -l < $W/p1.yaml) lines) and equals the flags' configuration"
$M train --config $W/run.yaml --lr 5e-4 --print-config > $W/p4.yaml
grep -q '^  lr: 0.0005$' $W/p4.yaml || { echo "FAIL: --lr did not override the file"; exit 1; }
echo "ok   a command-line flag overrides the file"
for c in configs/*.yaml; do
    $M train --config $c --print-config >/dev/null || { echo "FAIL: $c"; exit 1; }
done
echo "ok   configs/*.yaml parse"
err() { # FILE-CONTENT WANT
    printf '%s\n' "$1" > $W/bad.yaml
    set +e; out=$($M train --config $W/bad.yaml 2>&1); rc=$?; set -e
    [ $rc -ne 0 ] && [ "$(echo "$out" | wc -l)" = 1 ] && grep -qF -- "$2" <<<"$out" || { echo "FAIL: '$1' -> $out"; exit 1; }
    echo "ok   $out"
}
err $'model:\n  layers: 2\nmodle:\n  dim: 3' "bad.yaml line 3: unknown section 'modle'"
err $'optimizer:\n  lr: 1e-3\n  learning-rate: 3' "bad.yaml line 3: unknown key 'learning-rate' in section 'optimizer'"
err $'model:\n  lr: 1e-3' "bad.yaml line 2: key 'lr' belongs in section 'optimizer', not 'model'"
err $'model:\n  layers: [2' "bad.yaml line 3: not valid YAML"
err $'optimizer:\n  lr: fast' "--lr expects a number, got 'fast'"
set +e; out=$($M train --config $W/none.yaml 2>&1); rc=$?; set -e
[ $rc -ne 0 ] && grep -q "cannot open --config file $W/none.yaml" <<<"$out" || { echo "FAIL: missing file: $out"; exit 1; }
echo "ok   $out"
