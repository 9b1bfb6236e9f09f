#!/usr/bin/env bash
# No silent failure (issue 17, items 4-6), on a tiny model:
#  - non-finite state: --lr 1e39 refused; parameters that become inf after a
#    step, or a non-finite gradient, stop the run with the step number and no
#    checkpoint, a NaN validation loss too; --on-nonfinite skip leaves the step out (parameters equal to
#    the run without it, agreed by 2 ranks of which one found the inf) and
#    counts it; imported tensors with NaN (safetensors, llm.c) refused by name;
#    a checkpoint holding a NaN refused by train --init-from, eval, generate;
#  - writes: a full disk under --metrics / --report-json / --trace fails with a clear
#    line and leaves no empty report; a symlink planted at a temporary name
#    is not followed;
#  - signals: SIGTERM to one rank mid-run under mpirun -np 2: exit 0 with a
#    line and a checkpoint; --resume gives the losses of the uninterrupted run;
#  - resume: a --layers that differs from the checkpoint names both values; a
#    different --optimizer is refused with "trained with --optimizer".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
MPI="$MPI -np 2"
on_exit 'mountpoint -q "$W/full" 2>/dev/null && umount "$W/full"'
expect_error() { # expect_error "words" command...: non-zero exit, words on stderr, no crash or hang
    local words=$1; shift
    if timeout 120 "$@" >"$W/out" 2>"$W/err"; then fail "exit 0: $*"; return 1; fi
    local rc=$?
    if [ $rc -ge 124 ]; then fail "crash/timeout rc=$rc: $*"; cat "$W/err"; return 1; fi
    if ! grep -q -- "$words" "$W/err"; then fail "message lacks '$words': $*"; cat "$W/err"; return 1; fi
    echo "ok: $(grep -m1 -- "$words" "$W/err")"
}
corpus
head -c 300000 $W/corpus.txt > $W/small.txt
$M tokenize --tokenizer byte --out $W/d $W/small.txt >/dev/null
D="--train $W/d_train.bin --layers 1 --dim 16 --heads 2 --seq-len 16 --batch 4 --log-every 0"

echo "== non-finite state =="
expect_error "--lr is not finite as a 32-bit float" $M train $D --steps 1 --lr 1e39
# lr x weight decay overflows: every 2-D weight is inf after step 1
expect_error "step 1: parameters are not finite after the update" \
    $M train $D --steps 1 --lr 1e37 --weight-decay 1e3 --ckpt-dir $W/nan1
[ -e $W/nan1/manifest.json ] && fail "a checkpoint was written from non-finite parameters"
expect_error "step 2: the loss .* or the gradient norm (inf) is not finite" \
    $MPI $M train $D --dp 2 --zero 1 --steps 3 --test-nonfinite-step 2 --ckpt-dir $W/nan2
[ -e $W/nan2/manifest.json ] && fail "a checkpoint was written after a non-finite gradient"
# parameters of about 1e37 are finite, but the forward overflows: the validation loss is NaN
expect_error "step 1: the validation loss is -*nan (not finite)" \
    $M train $D --val $W/d_val.bin --eval-every 1 --steps 2 --lr 1e37 --weight-decay 0 --ckpt-dir $W/nanval
[ -e $W/nanval/manifest.json ] && fail "a checkpoint was written after a non-finite validation loss"
# skip: the step is left out on both ranks, so 2 steps with step 2 skipped
# leave the parameters of 1 step; the run goes on and counts it
$MPI $M train $D --dp 2 --zero 1 --steps 1 --ckpt-dir $W/s1 >/dev/null || fail "1-step run"
$MPI $M train $D --dp 2 --zero 1 --steps 2 --test-nonfinite-step 2 --on-nonfinite skip --ckpt-dir $W/s2 \
    >/dev/null || fail "--on-nonfinite skip did not go on"
$MPI $M train $D --dp 2 --zero 1 --steps 4 --test-nonfinite-step 2 --on-nonfinite skip --metrics $W/skip.jsonl \
    >/dev/null || fail "--on-nonfinite skip did not go on"
# resume after a skipped step: the count is in the checkpoint, the losses are the straight run's
# (Adam's bias correction of step 4's update shows in step 5's loss)
$MPI $M train $D --dp 2 --zero 1 --steps 5 --test-nonfinite-step 2 --on-nonfinite skip --metrics $W/skip5.jsonl \
    >/dev/null || fail "skip run to 5"
$MPI $M train $D --dp 2 --zero 1 --steps 3 --test-nonfinite-step 2 --on-nonfinite skip --metrics $W/skipr.jsonl \
    --ckpt-dir $W/skr >/dev/null || fail "skip run to 3"
$MPI $M train $D --dp 2 --zero 1 --steps 5 --on-nonfinite skip --metrics $W/skipr.jsonl --ckpt-dir $W/skr --resume \
    >/dev/null || fail "resume after a skip"
cmp -s <(cut -d, -f1,2 $W/skip5.jsonl) <(cut -d, -f1,2 $W/skipr.jsonl) && echo "ok: resumed after a skipped step, same losses" \
    || fail "resume after a skipped step changed the losses"
for k in 1 2; do $M export --ckpt $W/s$k --format llmc --out $W/s$k.bin >/dev/null || fail "export s$k"; done
cmp -s $W/s1.bin $W/s2.bin && echo "ok: a skipped step leaves the parameters unchanged" \
    || fail "the skipped step changed the parameters"
$PY - $W/skip.jsonl <<'PY' || fail "skipped steps not counted"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 4, rows
assert [r["skipped_steps"] for r in rows] == [0, 1, 1, 1], rows
assert all(r["loss"] is None or r["loss"] == r["loss"] for r in rows)
print("ok: 4 steps, step 2 skipped, skipped_steps", rows[-1]["skipped_steps"])
PY
grep -qiE "nan|inf" $W/skip.jsonl && fail "metrics hold nan/inf"

echo "== imported tensors with NaN =="
$M train $D --steps 0 --ckpt-dir $W/init >/dev/null || fail "init checkpoint"
$M export --ckpt $W/init --format safetensors --out $W/m.safetensors >/dev/null || fail "export safetensors"
$M export --ckpt $W/init --format llmc --out $W/m.llmc >/dev/null || fail "export llmc"
$PY - $W/m.safetensors $W/m.llmc <<'PY'
import json, struct, sys
st, lc = sys.argv[1], sys.argv[2]
b = bytearray(open(st, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
hdr = json.loads(b[8:8 + n])
off = 8 + n + hdr["wte.weight"]["data_offsets"][0] + 4 * 5
b[off:off + 4] = struct.pack("<f", float("nan"))
open(st, "wb").write(b)
b = bytearray(open(lc, "rb").read())
b[1024 + 4 * 7:1024 + 4 * 8] = struct.pack("<f", float("inf"))  # after the 256-int header: wte first
open(lc, "wb").write(b)
PY
expect_error "tensor wte.weight holds a non-finite value" $M import --format safetensors --in $W/m.safetensors --heads 2 --out $W/imp1
expect_error "tensor wte.weight holds a non-finite value" $M import --format llmc --in $W/m.llmc --heads 2 --out $W/imp2

# a checkpoint holding a NaN (written by the test program through the checkpoint API)
$BUILD/tests/test_nonfinite_ckpt $W/nanck || fail "writing the NaN checkpoint"
expect_error "holds inf/NaN values in tensor ln_f.weight" $M train --train $W/d_train.bin --log-every 0 --steps 1 --init-from $W/nanck
expect_error "the loss of batch 0 of .* is nan (not finite)" $M eval --ckpt $W/nanck --val $W/d_val.bin
expect_error "the logits of generated token 1 are not finite" $M generate --ckpt $W/nanck --tokens 5

echo "== a full disk =="
mkdir -p $W/full
if mount -t tmpfs -o size=64k tmpfs $W/full 2>/dev/null; then
    dd if=/dev/zero of=$W/full/fill bs=4k 2>/dev/null # no space left
    MET=$W/full/m.jsonl; REP=$W/full/report.json
else
    echo "(mount failed: /dev/full stands for the full disk)"
    MET=/dev/full; REP=
fi
expect_error "writing --metrics file .* failed: No space left on device" $MPI $M train $D --dp 2 --steps 3 --metrics $MET
if [ -n "$REP" ]; then
    expect_error "cannot write --report-json file" $M train $D --steps 1 --report-json $REP
    [ -e $REP ] && fail "an empty --report-json file was left"
    expect_error "cannot write trace file" $M train $D --steps 1 --trace $W/full/t.json
    [ -e $W/full/t.json ] && fail "an empty --trace file was left"
    ls $W/full | grep -q tmp && fail "a temporary file was left on the full disk"
fi

echo "== a planted symlink at a temporary name =="
echo "precious" > $W/victim
ln -s $W/victim $W/out.safetensors.tmp
ln -s $W/victim $W/out.llmc.tmp
$M export --ckpt $W/init --format safetensors --out $W/out.safetensors >/dev/null || fail "export with a planted link"
$M export --ckpt $W/init --format llmc --out $W/out.llmc >/dev/null || fail "export with a planted link"
[ "$(cat $W/victim)" = precious ] && echo "ok: the link's target is untouched" || fail "the write followed the symlink"
[ -L $W/out.safetensors ] && fail "the output is a link"
$M export --ckpt $W/init --format llmc --out $W/init.llmc >/dev/null
cmp -s $W/out.llmc $W/init.llmc && echo "ok: the export is complete" || fail "the export differs"

echo "== SIGTERM mid-run, then --resume =="
S="$D --dp 2 --zero 1 --steps 2000 --ckpt-every 100000"
$MPI $M train $S --metrics $W/straight.jsonl >/dev/null || fail "uninterrupted run"
$MPI $M train $S --metrics $W/cut.jsonl --ckpt-dir $W/sig >$W/sig.out 2>&1 &
job=$!
for _ in $(seq 3000); do [ -f $W/cut.jsonl ] && [ "$(wc -l < $W/cut.jsonl)" -ge 20 ] && break; sleep 0.02; done
pid=$(pgrep -f "meshtrain train .*$W/cut.jsonl" | tail -n 1) # one rank only
[ -n "$pid" ] && kill -TERM $pid
wait $job && echo "ok: exit 0" || fail "exit $? after SIGTERM"
grep -q "stopped by a signal after step" $W/sig.out && grep "stopped by a signal" $W/sig.out || fail "no line"
n=$(wc -l < $W/cut.jsonl)
[ "$n" -lt 2000 ] || fail "the run ended before the signal (raise --steps)"
$MPI $M train $S --metrics $W/cut.jsonl --ckpt-dir $W/sig --resume >/dev/null || fail "resume"
$PY - $W/straight.jsonl $W/cut.jsonl <<'PY' || fail "resumed losses differ"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, 2001)), (len(a), len(b))
assert [r["loss"] for r in a] == [r["loss"] for r in b]
print("ok: 2000 losses bitwise equal to the uninterrupted run")
PY
echo "(stopped after step $n of 2000)"

echo "== resume means the same model =="
$M train $D --steps 2 --ckpt-dir $W/ck >/dev/null || fail "checkpoint"
expect_error "--layers 3 differs from the checkpoint .* --layers 1" $M train $D --layers 3 --steps 3 --ckpt-dir $W/ck --resume
expect_error "--dim 32 differs from the checkpoint .* --dim 16" $M train $D --dim 32 --steps 3 --init-from $W/ck
expect_error "trained with --optimizer adamw, this run uses sgd" $M train $D --optimizer sgd --steps 3 --ckpt-dir $W/ck --resume

[ $fails -eq 0 ] && echo "all robustness checks passed" || { echo "$fails failed"; exit 1; }
