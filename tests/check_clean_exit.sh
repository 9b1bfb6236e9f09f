#!/usr/bin/env bash
# Errors every rank knows end the job cleanly (issue: run management):
# under `mpirun -np 2` each case below exits non-zero with exactly one line
# on stderr -- rank 0's error -- and no Open MPI MPI_ABORT banner: all ranks
# agree they failed and leave through MPI_Finalize (src/cli/main.c).
# (`mpirun -q` keeps mpirun's own note that a process exited non-zero out
# of stderr; without -q that note follows the one error line.)
# Also: range checks name the flag; tokenize creates its output directory;
# a pipeline with one microbatch per step prints a hint.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus
$M tokenize --tokenizer byte --out $W/new/dir/d $W/corpus.txt >/dev/null
[ -f $W/new/dir/d_train.bin ] || { echo "FAIL: tokenize did not create its output directory"; exit 1; }
echo "ok   tokenize --out new/dir/d created new/dir"
T="--train $W/new/dir/d_train.bin --layers 2 --dim 12 --heads 3 --seq-len 16 --batch 4 --steps 2 --log-every 0 --timeout 20"
fails=0
case_() { # WANT FLAGS...: mpirun -np 2 train fails with one stderr line containing WANT
    local want=$1; shift
    set +e; timeout 120 mpirun -q --oversubscribe -np 2 $M train $T "$@" >$W/out 2>$W/err; local rc=$?; set -e
    local lines; lines=$(wc -l < $W/err)
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$lines" = 1 ] && grep -q -- "$want" $W/err && ! grep -q MPI_ABORT $W/err; then
        echo "ok   $*: exit $rc, one line: $(cat $W/err)"
    else
        echo "FAIL $*: exit $rc, $lines stderr lines (want 1 containing '$want', no MPI_ABORT):"; sed 's/^/    /' $W/err
        fails=$((fails + 1))
    fi
}
case_ "--beta2 must be in \[0, 1), got 1.5" --dp 2 --beta2 1.5
case_ "--eps must be a finite number > 0, got -1" --dp 2 --eps -1
case_ "--grad-clip must be a finite number >= 0" --dp 2 --grad-clip -1
case_ "--weight-decay must be a finite number >= 0" --dp 2 --weight-decay -1
case_ "--dropout must be in \[0, 1)" --dp 2 --dropout 1
case_ "--momentum must be in \[0, 1)" --dp 2 --optimizer sgd --momentum 1
case_ "unknown flag" --dp 2 --no-such-flag 3
case_ "cannot open token shard" --dp 2 --train $W/missing.bin
case_ "= 3 processes, but the job has 2" --dp 3
case_ "heads" --tp 2
case_ "--resume needs --ckpt-dir" --dp 2 --resume
[ $fails = 0 ] || exit 1
out=$(mpirun --oversubscribe -np 2 $M train $T --pp 2 --log-every 1 2>&1)
echo "$out" | grep -q "^hint: --pp 2 runs one microbatch per step" || { echo "FAIL: no pipeline hint: $out"; exit 1; }
echo "ok   --pp 2 with one microbatch: $(echo "$out" | grep -m1 '^hint:' | cut -c1-90)..."
