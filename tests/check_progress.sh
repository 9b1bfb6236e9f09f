#!/usr/bin/env bash
# Progress output of train (rank 0):
#  - every step line carries elapsed time and ETA; a checkpoint line says
#    where it was saved and how long it took; --log-file holds exactly the
#    lines printed (in a pipe: plain lines);
#  - --metrics lines carry elapsed_s (non-decreasing) and eta_s (0 at the end);
#  - on a terminal (script(1) gives one) the step lines replace each other
#    with '\r' and the last one ends in a newline;
#  - a --log-file that cannot be opened is one clear error.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus d
T="--train $W/d_train.bin --val $W/d_val.bin --layers 2 --dim 32 --heads 4 --seq-len 32 --batch 8 --steps 6"
$M train $T --log-every 2 --eval-every 3 --ckpt-dir $W/ck --ckpt-every 3 --log-file $W/run.log --metrics $W/m.jsonl > $W/out
grep -E '^step ' $W/out > $W/steps.out
cmp $W/steps.out $W/run.log || { echo "FAIL: --log-file differs from the printed lines"; diff $W/steps.out $W/run.log; exit 1; }
grep -qE '^step +6/6 \| .* \| elapsed [0-9]+s \| eta 0s$' $W/run.log || { echo "FAIL: no elapsed/eta on the last step line"; cat $W/run.log; exit 1; }
[ "$(grep -cE "^step +[36] \| checkpoint saved to $W/ck in [0-9.]+ s$" $W/run.log)" = 2 ] || { echo "FAIL: checkpoint lines"; cat $W/run.log; exit 1; }
echo "ok   step lines with elapsed/eta, two checkpoint lines, --log-file equal to stdout ($(wc -l < $W/run.log) lines)"
$PY - $W/m.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
el = [r["elapsed_s"] for r in rows]
assert len(rows) == 6 and el == sorted(el) and all(r["eta_s"] >= 0 for r in rows) and rows[-1]["eta_s"] == 0, rows
print(f"ok   metrics: elapsed_s non-decreasing {el[0]:.3f} .. {el[-1]:.3f}, eta_s 0 at step 6")
PY
script -qec "$M train $T --log-every 1" /dev/null > $W/tty.out
$PY - $W/tty.out <<'PY'
import sys
t = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
first = t.index("step     1/6")
assert t[first - 1] == "\r" and "step     2/6" in t.split("\n")[t[:first].count("\n")], "steps 1 and 2 not on one line"
last = t.index("step     6/6")
assert t[last - 1] == "\r" and t[last:].split("\n")[0].rstrip("\r").replace("\x1b[K", "").endswith("eta 0s"), "last step line"
print("ok   terminal: step lines rewritten in place with \\r, the last one ends the line")
PY
set +e; out=$($M train $T --log-file $W/no/such/dir/run.log 2>&1); rc=$?; set -e
[ $rc -ne 0 ] && echo "$out" | grep -q "cannot open --log-file '$W/no/such/dir/run.log' for writing" || { echo "FAIL: $out"; exit 1; }
echo "ok   unwritable --log-file refused"
