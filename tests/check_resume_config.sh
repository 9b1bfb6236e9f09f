#!/usr/bin/env bash
# train --resume DIR needs only the directory: every checkpoint stores the
# run's settings (config-<step>.yaml, the --print-config YAML, checksummed in
# the manifest):
#  (a) a run with non-default flags for 6 steps (checkpoints every 3), then
#      `train --resume DIR --steps 10` and nothing else: losses, grad norms
#      and val losses bitwise equal to the uninterrupted 10-step run; the
#      stored file is --print-config's text; `ckpt verify` covers it;
#  (b) flags still override: --log-every and --metrics on resume; under
#      mpirun -np 2 the one-process checkpoint resumes as --dp 2, and that
#      run's checkpoint resumes in its dp2 layout with no flags at all;
#  (c) a checkpoint without a stored config (as an older meshtrain saved it:
#      run_config dropped from the resealed manifest, the file deleted) is
#      valid and resumes with the flags, bitwise, saying so;
#  (d) a changed stored config: `train --resume` (1 process and mpirun -q -np 2)
#      and `ckpt verify` fail with one error line; --ignore-stored-config
#      resumes with the flags.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus d
fail() { echo "FAIL: $*"; exit 1; }
F="--train $W/d_train.bin --val $W/d_val.bin --layers 2 --dim 32 --heads 4 --seq-len 32 --batch 8 --micro-batch 4
   --lr 1e-3 --warmup 2 --min-lr 1e-4 --weight-decay 0.05 --beta2 0.99 --grad-clip 0.5 --dropout 0.1 --seed 7
   --data-order sequential --eval-every 3 --eval-batches 2 --log-every 0"
after() { grep -E "\"step\":([$1-9]|[1-9][0-9])," "$2" | step_val_losses /dev/stdin; } # lines of steps >= $1 (one digit)

# (a)
$M train $F --steps 10 --metrics $W/straight.jsonl >/dev/null
$M train $F --steps 6 --ckpt-dir $W/ck --ckpt-every 3 --metrics $W/run.jsonl >/dev/null
[ "$(ls $W/ck)" = "$(printf 'config-000006.yaml\nmanifest.json\ntensors-000006-r00000.bin')" ] || fail "files: $(ls $W/ck)"
# the stored text is --print-config's, less its header and the settings of one invocation
diff <(tail -n +2 $W/ck/config-000006.yaml) \
     <($M train $F --steps 6 --ckpt-dir $W/ck --ckpt-every 3 --metrics $W/run.jsonl --print-config | tail -n +2 |
       grep -v '^  \(resume\|allow-schedule-change\|init-from\):') || fail "the stored config is not --print-config's"
grep -q ", the run config; every checksum matches" <<<"$($M ckpt verify $W/ck)" || fail "ckpt verify"
for c in b c old bad; do cp -r $W/ck $W/ck_$c; done
$M train --resume $W/ck --steps 10 --metrics $W/run.jsonl > $W/a.out # output paths never come from the checkpoint
grep -q "^settings from $W/ck/config-000006.yaml, the run config stored in the checkpoint" $W/a.out || fail "no settings line: $(cat $W/a.out)"
grep -q "^resumed from $W/ck at step 6" $W/a.out || fail "no resume line"
cmp <(step_val_losses $W/straight.jsonl) <(step_val_losses $W/run.jsonl) || fail "the resumed run differs from the uninterrupted one"
[ "$(ls $W/ck | tr '\n' ' ')" = "config-000010.yaml manifest.json tensors-000010-r00000.bin " ] || fail "after the resume: $(ls $W/ck)"
grep -q '^  steps: 10$' $W/ck/config-000010.yaml || fail "the new checkpoint's config does not say steps 10"
echo "ok   (a) --resume DIR --steps 10 (and --metrics) alone: $(step_val_losses $W/run.jsonl | wc -l) losses bitwise equal to the uninterrupted run; the stored config is --print-config's and verified"

# (b)
$M train --resume $W/ck_b --steps 10 --log-every 2 --metrics $W/b.jsonl > $W/b.out
[ "$(grep -c '^step  *[0-9]*/10 | loss' $W/b.out)" = 2 ] || fail "--log-every 2 on resume: $(cat $W/b.out)"
cmp <(after 7 $W/straight.jsonl) <(step_val_losses $W/b.jsonl) || fail "--log-every/--metrics override changed the losses"
mpirun -np 2 $M train --resume $W/ck_c --steps 8 --dp 2 --metrics $W/c.jsonl > $W/c.out
grep -q "dp 2 | tp 1" $W/c.out && grep -q "^resumed from $W/ck_c at step 6" $W/c.out || fail "--dp 2: $(cat $W/c.out)"
grep -q "the layout is the one the flags give" $W/c.out || fail "no layout note: $(cat $W/c.out)"
mpirun -np 2 $M train --resume $W/ck_c --steps 10 > $W/c2.out
grep -q "dp 2 | tp 1" $W/c2.out && grep -q "^resumed from $W/ck_c at step 8" $W/c2.out || fail "dp2 layout: $(cat $W/c2.out)"
! grep -q "layout" $W/c2.out || fail "the stored dp2 layout was not used: $(cat $W/c2.out)"
echo "ok   (b) --log-every 2 --metrics override on resume (losses unchanged); mpirun -np 2 --dp 2 from a one-process checkpoint, then its dp2 checkpoint resumed with no flags"

# (c)
rm $W/ck_old/config-000006.yaml
$PY tests/ckpt_tamper.py drop $W/ck_old/manifest.json run_config
$M ckpt verify $W/ck_old >/dev/null || fail "a checkpoint without a run config does not verify"
grep -q "^run config: (not stored" <<<"$($M ckpt info $W/ck_old)" || fail "ckpt info"
set +e; o=$($M train --resume $W/ck_old --steps 10 2>&1); rc=$?; set -e
[ $rc -ne 0 ] && grep -q "train FILE is required" <<<"$o" || fail "no stored config, no flags: $o"
$M train $F --steps 10 --ckpt-dir $W/ck_old --resume --metrics $W/old.jsonl > $W/old.out
grep -q "^checkpoint $W/ck_old stores no run config (saved by an older meshtrain): the flags given decide the run" $W/old.out ||
    fail "no 'stores no run config' line: $(cat $W/old.out)"
cmp <(after 7 $W/straight.jsonl) <(step_val_losses $W/old.jsonl) || fail "the resume without a stored config differs"
echo "ok   (c) without a stored config: verify ok, --resume with the flags as before, bitwise"

# (d)
sed -i 's/^  lr: 0.001$/  lr: 0.002/' $W/ck_bad/config-000006.yaml
one_error() { # WANT COMMAND...: fails with exactly one stderr line containing WANT, no MPI abort banner
    local want=$1; shift
    set +e; "$@" >/dev/null 2>$W/err; local rc=$?; set -e
    [ $rc -ne 0 ] && [ "$(wc -l < $W/err)" = 1 ] && grep -qF -- "$want" $W/err && ! grep -q MPI_ABORT $W/err ||
        fail "$* -> rc $rc: $(cat $W/err)"
    echo "ok   (d) $(cut -c1-220 $W/err)"
}
WANT="error: $W/ck_bad/config-000006.yaml (the checkpoint's run config) was changed after the save"
one_error "$WANT" $M train --resume $W/ck_bad --steps 10
one_error "$WANT" mpirun -q -np 2 $M train --resume $W/ck_bad --steps 10
one_error "$WANT" $M ckpt verify $W/ck_bad
$M train $F --steps 10 --resume $W/ck_bad --ignore-stored-config --metrics $W/bad.jsonl >/dev/null
cmp <(after 7 $W/straight.jsonl) <(step_val_losses $W/bad.jsonl) || fail "--ignore-stored-config"
echo "ok   (d) --ignore-stored-config resumes with the flags, bitwise"
