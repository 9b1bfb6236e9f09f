#!/usr/bin/env bash
# Elastic restart (scripts/elastic.sh, docs/usage.md "Elastic restart"):
#  - a GPT-2 job on 4 ranks (hosts a:2 b:2, dp 2 x tp 2) saving every 50 steps
#    loses host b (ranks 2 and 3, SIGKILLed after the checkpoint of step 200
#    or later); the probe reports host b lost and copies the checkpoint the
#    restart resumes from; the script restarts on the 2 ranks of host a with
#    the layout plan ranks first for 2 ranks and the run finishes all steps;
#  - the losses after the restart equal (1e-5 relative) those of an
#    uninterrupted run on that 2-rank layout from the copied checkpoint;
#  - its lines name the lost host and ranks;
#  - it gives up with one line when the job fails without losing a rank or
#    saving, and when no layout fits.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus e
STEPS=1500
T="--train $W/e_train.bin --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --steps $STEPS --timeout 5 --log-every 0"
PLAN="--cpu --cpu-gflops 100 --cpu-bw 3.5 --cpu-cores 2 --mem-gb 1"
export ELASTIC_TEST_TAG=$W # in the ranks' environment: which processes are this test's
export MESHTRAIN=$M # the build under test (MT_BUILD)
el_pid=; on_exit 'kill $el_pid 2>/dev/null || true'

# the probe: after the job has died, keep the checkpoint the restart starts from, and report host b lost
cat >$W/probe.sh <<EOF
[ -d $W/ref ] || cp -a $W/ck $W/ref
echo b
EOF
scripts/elastic.sh --hosts "a:2 b:2" --ckpt-dir $W/ck --ckpt-every 50 --probe "bash $W/probe.sh" \
    --plan-flags "$PLAN" -- $T --dp 2 --tp 2 --metrics $W/el.jsonl >$W/el.out 2>&1 &
el_pid=$!
ranks_of() { # the pids of this test's meshtrain ranks RANK...
    local p r want
    for p in $(grep -lsF "ELASTIC_TEST_TAG=$W" /proc/[0-9]*/environ | cut -d/ -f3); do
        [ "$(cat /proc/$p/comm 2>/dev/null)" = meshtrain ] || continue
        r=$(tr '\0' '\n' </proc/$p/environ 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
        for want; do [ "$r" = "$want" ] && echo $p; done
    done
}
killed=
for i in $(seq 1 1200); do
    s=$(grep -so '"step":[0-9]*' $W/ck/manifest.json | head -1 | cut -d: -f2)
    if [ "${s:-0}" -ge 200 ]; then
        pids=$(ranks_of 2 3)
        [ "$(wc -w <<<"$pids")" = 2 ] && { kill -9 $pids; killed=$s; break; }
    fi
    sleep 0.1
done
wait $el_pid; rc=$?; el_pid=
[ -n "$killed" ] || { fail "ranks 2 and 3 were never found running after a checkpoint of step >= 200"; cat $W/el.out; exit 1; }
[ $rc -eq 0 ] || { fail "elastic.sh exited with $rc"; grep elastic: $W/el.out; exit 1; }
grep '^elastic:' $W/el.out | sed 's/^/  | /' | cut -c1-220

# (d) the lines name the lost host and its ranks; the restart resumes from the copied checkpoint
grep -q "^elastic: launch 1 ended with status [1-9][0-9]* after .*process rank [23] .*exited on signal 9" $W/el.out ||
    fail "no line for the job's end naming the killed rank"
grep -q "^elastic: lost host b (2 slot(s)): ranks 2-3 of launch 1 (from the probe 'bash $W/probe.sh')$" $W/el.out ||
    fail "no line naming host b and ranks 2-3 lost"
grep -q "^elastic: 2 rank(s) left: a:2$" $W/el.out || fail "no line with the ranks left"
ck=$(sed -n 's/^elastic: newest complete checkpoint: .* at step \([0-9]*\) (ckpt verify: ok)$/\1/p' $W/el.out)
ref_ck=$(grep -o '"step":[0-9]*' $W/ref/manifest.json | head -1 | cut -d: -f2)
[ -n "$ck" ] && [ "$ck" = "$ref_ck" ] || fail "the restart's checkpoint (step '$ck') is not the copied one (step $ref_ck)"
grep -q "^resumed from $W/ck at step $ck$" $W/el.out || fail "the restarted job did not resume from step $ck"

# (b) the restart's layout is the one plan ranks first for 2 ranks
want=$($M plan $PLAN --gpus 2 --gpus-per-node 2 --precision fp32 --global-batch 8 --layers 2 --dim 64 --heads 4 \
    --seq-len 32 --vocab 256 --json --top 1 | $PY -c '
import json, sys
l = json.load(sys.stdin)["layouts"][0]
f = ["--dp", l["dp"], "--tp", l["tp"], "--pp", l["pp"], "--zero", l["zero"], "--micro-batch", l["micro_batch"], "--recompute", l["recompute"]]
if l["shard_group"] != l["dp"]: f += ["--shard-group", l["shard_group"]]
if l["sequence_parallel"]: f += ["--sequence-parallel"]
if l["chunks"] > 1: f += ["--pp-schedule", "interleaved", "--pp-chunks", l["chunks"]]
print(" ".join(map(str, f)))')
relaunch=$(grep '^elastic: launch 2 on 2 rank(s) (hosts a:2): ' $W/el.out)
[[ $relaunch == *" -np 2 "*" $want --ckpt-dir $W/ck --ckpt-every 50 --resume auto " ]] ||
    fail "the restart's layout is not plan's for 2 ranks ($want): $relaunch"
[ "$(grep -c '^elastic: launch [0-9]* on ' $W/el.out)" = 2 ] || fail "expected 2 launches"

# (a) all steps ran: the restart's steps are ck+1..STEPS, and the run says it finished
$PY - $W/el.jsonl $W/after.jsonl $ck $STEPS <<'PY' || fail "the restarted run's steps"
import json, sys
rows = [l for l in open(sys.argv[1]) if '"loss"' in l]
steps = [json.loads(l)["step"] for l in rows]
ck, n = int(sys.argv[3]), int(sys.argv[4])
cut = max(i for i in range(len(steps)) if steps[i] == ck + 1)  # where the restart began (metrics are appended)
after = steps[cut:]
assert after == list(range(ck + 1, n + 1)), f"steps after the restart: {after[:3]}..{after[-3:]}, expected {ck + 1}..{n}"
assert steps[:cut][-1] >= ck, "the first launch stopped before the checkpoint"
open(sys.argv[2], "w").writelines(rows[cut:])
print(f"  first launch: steps 1-{steps[cut - 1]}; after the restart: steps {after[0]}-{after[-1]}")
PY
grep -q "^elastic: the job finished (exit 0) after [0-9]* s on 2 rank(s); checkpoint at step $STEPS in $W/ck; 1 restart(s)$" $W/el.out ||
    fail "no line saying the job finished at step $STEPS"

# (c) an uninterrupted run on the same layout from the same checkpoint
$MPI -np 2 $M train $T $want --ckpt-dir $W/ref --ckpt-every 50 --resume auto --metrics $W/ref.jsonl >$W/ref.out 2>&1 ||
    { fail "the reference run"; tail -5 $W/ref.out; }
grep -q "^resumed from $W/ref at step $ck$" $W/ref.out || fail "the reference did not resume from step $ck"
losses_within $W/ref.jsonl $W/after.jsonl "after the restart vs uninterrupted ($want)" || fail "losses after the restart"
echo

# a loss reported in the lost file while the job runs stops it; 3 ranks left
# have no layout for a batch of 8, so the restart runs on 2 of them
scripts/elastic.sh --np 4 --ckpt-dir $W/ck2 --ckpt-every 20 --lost-file $W/lost --plan-flags "$PLAN" -- \
    ${T/--steps $STEPS/--steps 400} --metrics $W/el2.jsonl >$W/el2.out 2>&1 &
el_pid=$!
for i in $(seq 1 1200); do
    s=$(grep -so '"step":[0-9]*' $W/ck2/manifest.json | head -1 | cut -d: -f2)
    [ "${s:-0}" -ge 60 ] && { echo "localhost:1" >$W/lost; break; }
    sleep 0.1
done
wait $el_pid; rc=$?; el_pid=
for line in "$W/lost reports lost slots (localhost:1) while the job runs: stopping it" \
    "lost 1 slot(s) of host localhost: rank 3 of launch 1 (from $W/lost)" \
    "plan finds no layout for 3 ranks (global batch 8): .*: trying 2 of the 3 ranks" \
    "launch 2 on 2 rank(s) (hosts localhost:2): .* -np 2 .* --dp 2 " \
    "the job finished (exit 0) after [0-9]* s on 2 rank(s); checkpoint at step 400 in $W/ck2; 1 restart(s)"; do
    grep -q "^elastic: $line" $W/el2.out || { fail "no line 'elastic: $line'"; grep elastic: $W/el2.out; break; }
done
grep '^elastic:' $W/el2.out | sed 's/^/  | /' | cut -c1-220
[ $rc -eq 0 ] && echo "ok   --lost-file: a slot reported lost while the job runs stops it; no layout for 3 ranks, the restart runs on 2; finished"

# giving up, one line each: a job that fails without losing a rank or saving; no layout that fits
one_giveup() { # WANT: the last run's one "giving up" line
    [ "$(grep -c '^elastic: giving up' $W/g.out)" = 1 ] && grep -q "^elastic: giving up: $1" $W/g.out ||
        { fail "expected one 'giving up: $1' line"; grep elastic: $W/g.out; return; }
    echo "ok   $(grep '^elastic: giving up' $W/g.out | cut -c1-160)"
}
scripts/elastic.sh --np 2 --ckpt-dir $W/g1 --ckpt-every 5 -- $T --dp 3 >$W/g.out 2>&1 && fail "a wrong layout was accepted"
one_giveup "the job failed (status [0-9]*) without losing a rank and without a new checkpoint"
scripts/elastic.sh --np 2 --ckpt-dir $W/g2 --ckpt-every 5 --plan-flags "$PLAN --mem-gb 0.0001" -- $T >$W/g.out 2>&1 &&
    fail "a model that fits no layout was accepted"
one_giveup "plan finds no layout for 2 ranks (global batch 8): .*, nor for fewer ranks"

[ $fails -eq 0 ] || exit 1
echo "ok   elastic: 4 ranks (a:2 b:2) lost host b after step $killed's checkpoint; restarted from step $ck on 2 ranks with plan's $want; finished step $STEPS; losses within 1e-5 of an uninterrupted run from that checkpoint"
