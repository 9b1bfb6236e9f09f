#!/usr/bin/env bash
# Context parallelism in the trainer ({cp} N, {cp-mode} ring): each sequence
# cut into 2N chunks, cp rank i holding chunks i and 2N-1-i, attention over
# the ring, gradients reduced over dp x cp. Against one process, 10 steps,
# every loss within 1e-5 relative: GPT-2 with dropout 0.1 (embedding,
# attention-probability and residual masks from global coordinates) at cp2,
# cp4, dp2 x cp2 ZeRO-3, cp2 x tp2 + sp and cp2 x pp2; Llama (GQA, 4 heads /
# 2 kv heads, RoPE at the chunks' positions) at cp2, cp4, dp2 x cp2
# ZeRO-3, cp2 x tp2 + sp and cp2 x pp2; packed documents at cp4 (GPT-2) and cp2 (Llama); recomputation
# (selective, full); the validation loss; bf16 and fp16 against themselves
# in one process (1e-3); activation compression (int8, lossless). cp1 is the one-process path itself (bitwise: every
# other layout test). Then the accounting against the closed forms and
# `plan --cp`, {cp-mode} alltoall on the same layouts (its bytes against
# their closed form), and the bad inputs, one line each.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
G="--train $W/d_train.bin --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 4 --steps 10 --lr 2e-3 --log-every 0
   --dropout 0.1"
L="--train $W/d_train.bin --family llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 --seq-len 32
   --batch 4 --steps 10 --lr 2e-3 --log-every 0"
run() { # NAME NP FLAGS...
    local name=$1 n=$2; shift 2
    $MPI -np $n $M train "$@" --metrics $W/$name.jsonl >$W/$name.out 2>&1 || { cat $W/$name.out; exit 1; }
}
run g_one 1 $G
run g_cp2 2 $G --cp 2;                                   losses_within $W/g_one.jsonl $W/g_cp2.jsonl gpt2_cp2
grep -q "cp 2 (ring)" $W/g_cp2.out || { echo "the model line does not name cp"; cat $W/g_cp2.out; exit 1; }
run g_cp4 4 $G --cp 4;                                   losses_within $W/g_one.jsonl $W/g_cp4.jsonl gpt2_cp4
run g_dp2cp2 4 $G --dp 2 --cp 2 --zero 3;                losses_within $W/g_one.jsonl $W/g_dp2cp2.jsonl gpt2_dp2_cp2_zero3
run g_cp2tp2 4 $G --cp 2 --tp 2 --sequence-parallel;     losses_within $W/g_one.jsonl $W/g_cp2tp2.jsonl gpt2_cp2_tp2_sp
run g_cp2pp2 4 $G --cp 2 --pp 2 --micro-batch 2;         losses_within $W/g_one.jsonl $W/g_cp2pp2.jsonl gpt2_cp2_pp2
echo
run l_one 1 $L
run l_cp2 2 $L --cp 2;                                   losses_within $W/l_one.jsonl $W/l_cp2.jsonl llama_cp2
run l_cp4 4 $L --cp 4;                                   losses_within $W/l_one.jsonl $W/l_cp4.jsonl llama_cp4
run l_dp2cp2 4 $L --dp 2 --cp 2 --zero 3;                losses_within $W/l_one.jsonl $W/l_dp2cp2.jsonl llama_dp2_cp2_zero3
run l_cp2tp2 4 $L --cp 2 --tp 2 --sequence-parallel;     losses_within $W/l_one.jsonl $W/l_cp2tp2.jsonl llama_cp2_tp2_sp
run l_cp2pp2 4 $L --cp 2 --pp 2 --micro-batch 2;         losses_within $W/l_one.jsonl $W/l_cp2pp2.jsonl llama_cp2_pp2
# packed documents (several a window: attention within each document, positions from each
# document's start) at cp4 (GPT-2) and cp2 (Llama); recomputation; bf16 against bf16 in one
# process (its 16-bit gradients round at other points: 1e-3, as check_precision's layouts);
# the validation loss of a cp run (eval through the same ring) against one process's
$PY - $W <<'PY'
import json, random, sys
random.seed(1)
words = open(sys.argv[1] + "/corpus.txt").read().split()
with open(sys.argv[1] + "/pk.jsonl", "w") as f:  # short texts: 2-8 words, several a window
    for i in range(400):
        n, s = random.randint(2, 8), random.randint(0, len(words) - 10)
        f.write(json.dumps({"text": " ".join(words[s:s + n])}) + "\n")
PY
$M tokenize --format jsonl --tokenizer byte --seq-len 32 --packing --out $W/pk $W/pk.jsonl >$W/pk.log 2>&1 ||
    { cat $W/pk.log; exit 1; }
grep -q "packed: .* samples in .* windows" $W/pk.log || { echo "no packed windows:"; cat $W/pk.log; exit 1; }
run pk_one 1 $G --train $W/pk_train.bin
run pk_cp4 4 $G --train $W/pk_train.bin --cp 4;          losses_within $W/pk_one.jsonl $W/pk_cp4.jsonl gpt2_packed_cp4
run pkl_one 1 $L --train $W/pk_train.bin
run pkl_cp2 2 $L --train $W/pk_train.bin --cp 2;         losses_within $W/pkl_one.jsonl $W/pkl_cp2.jsonl llama_packed_cp2
run g_cp2_rc 2 $G --cp 2 --recompute selective;          losses_within $W/g_one.jsonl $W/g_cp2_rc.jsonl gpt2_cp2_selective
run g_cp2_full 2 $G --cp 2 --recompute full;             losses_within $W/g_one.jsonl $W/g_cp2_full.jsonl gpt2_cp2_full
echo
run bf_one 1 $G --precision bf16
run bf_cp2 2 $G --precision bf16 --cp 2
run h_one 1 $G --precision fp16
run h_cp2 2 $G --precision fp16 --cp 2
# activation compression composes: int8 at cp2 against int8 in one process; lossless (bf16) at
# cp2 bitwise bf16 at cp2
run ci_one 1 $G --compress-activations int8
run ci_cp2 2 $G --compress-activations int8 --cp 2;      losses_within $W/ci_one.jsonl $W/ci_cp2.jsonl int8_compressed_cp2
run cl_cp2 2 $G --precision bf16 --compress-activations lossless --cp 2
cmp <(step_losses $W/bf_cp2.jsonl) <(step_losses $W/cl_cp2.jsonl) || { echo "lossless compression changed bf16 cp2"; exit 1; }
echo "lossless cp2 = bf16 cp2 bitwise"
run v_one 1 $G --val $W/d_val.bin --eval-every 5 --eval-batches 2
run v_cp2 2 $G --val $W/d_val.bin --eval-every 5 --eval-batches 2 --cp 2
$PY - $W <<'PY'
import json, sys
w = sys.argv[1]
def series(name, key):
    return [json.loads(l)[key] for l in open(f"{w}/{name}.jsonl") if f'"{key}"' in l]
a, b = series("bf_one", "loss"), series("bf_cp2", "loss")
worst = max(abs(x - y) / x for x, y in zip(a, b))
assert len(a) == len(b) == 10 and worst <= 1e-3, (len(a), len(b), worst)
print(f"bf16 cp2: {len(b)} losses within {worst:.2g} of bf16 in one process", end="; ")
a, b = series("h_one", "loss"), series("h_cp2", "loss")
worst = max(abs(x - y) / x for x, y in zip(a, b))
assert len(a) == len(b) == 10 and worst <= 1e-3, (len(a), len(b), worst)
print(f"fp16 cp2: within {worst:.2g}", end="; ")
a, b = series("v_one", "val_loss"), series("v_cp2", "val_loss")
worst = max(abs(x - y) / x for x, y in zip(a, b))
assert len(a) == len(b) == 2 and worst <= 1e-5, (a, b)
print(f"val_loss at cp2: {len(b)} evaluations within {worst:.2g} of one process")
PY

# a checkpoint written under dp2 x cp2 ZeRO-3 after 5 steps resumes under cp2 alltoall to the
# uninterrupted one-process losses; `ckpt info` names the layout it was saved with
$MPI -np 4 $M train $G --steps 5 --dp 2 --cp 2 --zero 3 --ckpt-dir $W/ck --metrics $W/res.jsonl >/dev/null
$M ckpt info $W/ck >$W/info.txt
grep -q "4 ranks: dp 2, cp 2, tp 1" $W/info.txt || { echo "ckpt info:"; cat $W/info.txt; exit 1; }
$MPI -np 2 $M train $G --cp 2 --cp-mode alltoall --ckpt-dir $W/ck --resume --metrics $W/res.jsonl >/dev/null
losses_within $W/g_one.jsonl $W/res.jsonl resume_dp2cp2_to_cp2_alltoall
echo

# {cp-mode} alltoall (Ulysses: the rank's rows of every head to every row of 1/cp of the heads and
# back): the same layouts where the heads divide, and its bytes per step: per block and
# microbatch 2 all-to-alls forward (q|k|v, out) and 4 backward (q|k|v, out, dout, dq|dk|dv),
# each sending (cp-1)/cp of the rank's 2 b c rows of that width
X="--cp-mode alltoall"
run a_cp2 2 $G --cp 2 $X;                                losses_within $W/g_one.jsonl $W/a_cp2.jsonl gpt2_alltoall_cp2
run a_cp4 4 $G --cp 4 $X;                                losses_within $W/g_one.jsonl $W/a_cp4.jsonl gpt2_alltoall_cp4
run a_dp2cp2 4 $G --dp 2 --cp 2 --zero 3 $X;             losses_within $W/g_one.jsonl $W/a_dp2cp2.jsonl gpt2_alltoall_dp2_cp2_zero3
run a_cp2tp2 4 $G --cp 2 --tp 2 --sequence-parallel $X;  losses_within $W/g_one.jsonl $W/a_cp2tp2.jsonl gpt2_alltoall_cp2_tp2_sp
run a_cp2pp2 4 $G --cp 2 --pp 2 --micro-batch 2 $X;      losses_within $W/g_one.jsonl $W/a_cp2pp2.jsonl gpt2_alltoall_cp2_pp2
run a_pk 2 $G --train $W/pk_train.bin --cp 2 $X;         losses_within $W/pk_one.jsonl $W/a_pk.jsonl gpt2_alltoall_packed_cp2
run a_l_cp2 2 $L --cp 2 $X;                              losses_within $W/l_one.jsonl $W/a_l_cp2.jsonl llama_alltoall_cp2
run a_l_dp2cp2 4 $L --dp 2 --cp 2 --zero 3 $X;           losses_within $W/l_one.jsonl $W/a_l_dp2cp2.jsonl llama_alltoall_dp2_cp2_zero3
echo
run a_acct 4 --train $W/d_train.bin --dim 64 --heads 4 --seq-len 32 --batch 4 --micro-batch 2 --log-every 0 --layers 2 \
    --cp 4 $X --steps 2 --report-json $W/a_acct.json
$PY - $W <<'PY'
import json, sys
r = json.load(open(sys.argv[1] + "/a_acct.json"))
s, b, h, cp, layers, micro = 32, 2, 64, 4, 2, 2
rows = 2 * b * (s // (2 * cp))
per = layers * micro * (cp - 1) * rows * 4 * (3 * (3 * h // cp) + 3 * (h // cp))
got = r["comm_per_step"]["cp"]["alltoall"]
assert got["calls"] == layers * micro * 6 and got["bytes_sent"] == per, (got, per)
assert r["comm_per_step"]["cp"]["send"]["calls"] == 0, r["comm_per_step"]["cp"]["send"]
print(f"alltoall cp4: {got['calls']:.0f} all-to-alls, {per} bytes per step = closed form")
PY

# Accounting. Activations: a cp rank keeps its s/cp rows of everything, so
# the per-layer bytes are docs/memory.md's closed form 4 (s/cp) b (16h + a + 4)
# exactly (the difference quotient between --layers 2 and 4), and the rest
# the non-layer form at s/cp rows. Ring bytes on the cp group per step: per
# block and microbatch, K|V of the rank's two chunks (2 b c 2 h floats,
# c = s / 2cp) is sent cp-1 times in forward, cp-1 times in backward and its
# dK|dV cp times.
A="--train $W/d_train.bin --dim 64 --heads 4 --seq-len 32 --batch 4 --micro-batch 2 --log-every 0"
for cpn in 2 4; do
    for l in 2 4; do
        $MPI -np $cpn $M train $A --layers $l --cp $cpn --steps 2 --report-json $W/acct_${cpn}_$l.json >/dev/null
    done
done
$PY - $W <<'PY'
import json, sys
w = sys.argv[1]
s, b, h, a, V, micro = 32, 2, 64, 4, 256, 2
for cp in (2, 4):
    r = {l: json.load(open(f"{w}/acct_{cp}_{l}.json")) for l in (2, 4)}
    acts = {l: r[l]["memory"]["activations"] for l in r}
    per_layer = (acts[4] - acts[2]) / 2
    sl = s // cp
    want = 4 * sl * b * (16 * h + a + 4)
    assert per_layer == want, f"cp{cp}: {per_layer} bytes per layer, closed form {want}"
    n = sl * b
    rest = 16 * n + 8 * b + 4 * n * h + 4 * n * (h + 2) + 4 * n + 4 * n * V
    assert acts[2] - 2 * per_layer == rest, f"cp{cp}: non-layer {acts[2] - 2 * per_layer}, closed form {rest}"
    for l in (2, 4):
        send = r[l]["comm_per_step"]["cp"]["send"]
        c = s // (2 * cp)
        msg = 2 * b * c * 2 * h * 4
        calls = l * micro * (2 * (cp - 1) + 2 * cp)  # dK|dV: a message per K|V chunk
        sent = l * micro * (3 * cp - 2) * msg
        assert send["calls"] == calls and send["bytes_sent"] == sent, (cp, l, send, calls, sent)
    print(f"cp{cp}: activations {per_layer:.0f} bytes per layer = 4 (s/cp) b (16h + a + 4); ring "
          f"{r[4]['comm_per_step']['cp']['send']['bytes_sent']:.0f} bytes per step at 4 layers = closed form")
PY

# plan --cp: the planner's bytes for these layouts ({cpu}: the engine's exact buffers) equal the
# measured ones -- parameters, gradients, optimizer state, activations -- and its ring bytes per step
# equal the measured cp sends, at cp2, cp4 and dp2 x cp2 ZeRO-3 (sharded over the 4 ranks of dp x cp).
P="--cpu --cpu-gflops 1 --cpu-bw 1 --tp 1 --pp 1 --micro-batch 2 --recompute none --precision fp32 --global-batch 4
   --layers 4 --dim 64 --heads 4 --seq-len 32 --vocab 256 --json --all"
$M plan $P --gpus 2 --cp 2 --dp 1 --zero 0 >$W/plan_cp2.json
$M plan $P --gpus 4 --cp 4 --dp 1 --zero 0 >$W/plan_cp4.json
$M plan $P --gpus 4 --cp 2 --dp 2 --zero 3 --shard-group 4 >$W/plan_dp2cp2.json
run acct_dp2cp2 4 $A --layers 4 --dp 2 --cp 2 --zero 3 --steps 2 --report-json $W/acct_dp2cp2.json
$PY - $W <<'PY'
import json, sys
w = sys.argv[1]
for plan, meas in (("cp2", "2_4"), ("cp4", "4_4"), ("dp2cp2", "dp2cp2")):
    p = json.load(open(f"{w}/plan_{plan}.json"))["layouts"]
    assert len(p) == 1, (plan, len(p))
    p = p[0]
    m = json.load(open(f"{w}/acct_{meas}.json"))
    for k, mk in (("params", "params"), ("grads", "grads"), ("optimizer", "optimizer"), ("activations", "activations")):
        assert p["bytes"][k] == m["memory"][mk], f"{plan}: planned {k} {p['bytes'][k]}, measured {m['memory'][mk]}"
    sent = m["comm_per_step"]["cp"]["send"]["bytes_sent"]
    assert p["comm_cp"] == sent, f"{plan}: planned ring bytes {p['comm_cp']}, measured {sent}"
    print(f"plan --cp {plan}: bytes and ring bytes ({sent:.0f} per step) equal the measured", end="; ")
print()
PY

# a sequence one rank's memory cannot hold trains at cp4: at T 4096 the planner puts one process over
# a 30 MB device budget and a cp4 rank under it; both runs' measured activations equal the plan's, and
# a cp4 rank's are a quarter of one process's (the part outside the layers also scales with s/cp)
P4K="--cpu --cpu-gflops 1 --cpu-bw 1 --tp 1 --pp 1 --dp 1 --zero 0 --micro-batch 1 --recompute none --precision fp32
     --global-batch 1 --layers 2 --dim 64 --heads 4 --seq-len 4096 --vocab 256 --json --all --mem-gb 0.03"
$M plan $P4K --gpus 1 --cp 1 >$W/plan_4k_cp1.json
$M plan $P4K --gpus 4 --cp 4 >$W/plan_4k_cp4.json
T4K="--train $W/d_train.bin --layers 2 --dim 64 --heads 4 --seq-len 4096 --batch 1 --steps 1 --log-every 0"
run long_cp1 1 $T4K --report-json $W/long_cp1.json
run long_cp4 4 $T4K --cp 4 --report-json $W/long_cp4.json
$PY - $W <<'PY'
import json, sys
w = sys.argv[1]
p = {cp: json.load(open(f"{w}/plan_4k_cp{cp}.json"))["layouts"][0] for cp in (1, 4)}
m = {cp: json.load(open(f"{w}/long_cp{cp}.json"))["memory"] for cp in (1, 4)}
assert not p[1]["fits"] and p[4]["fits"], ("fits", p[1]["fits"], p[4]["fits"])
for cp in (1, 4):
    assert p[cp]["bytes"]["activations"] == m[cp]["activations"], (cp, p[cp]["bytes"], m[cp]["activations"])
    held = sum(m[cp][k] for k in ("params", "grads", "optimizer", "activations"))
    assert (held > 3e7) == (cp == 1), (cp, held)
ratio = m[4]["activations"] / m[1]["activations"]
assert abs(ratio - 0.25) < 1e-3, ratio
print(f"T 4096: one process holds {sum(m[1][k] for k in ('params', 'grads', 'optimizer', 'activations')):.0f} bytes "
      f"(over the 30 MB budget), a cp4 rank {sum(m[4][k] for k in ('params', 'grads', 'optimizer', 'activations')):.0f}; "
      f"activations {m[1]['activations']} -> {m[4]['activations']} (x{ratio:.5f}), equal to the plan's")
PY

# bad input: one line each, on every rank's clean exit
expect_failure "cp 4 cuts each sequence into 2 x 4 = 8 chunks.*seq-len 36" $MPI -np 4 $M train $G --seq-len 36 --cp 4
expect_failure "cp 2 x pp 1 x tp 1 = 2 processes, but the job has 4" $MPI -np 4 $M train $G --cp 2
expect_failure "unknown --cp-mode 'ringg'" $M train $G --cp-mode ringg
expect_failure "cp-mode alltoall gives each of the --cp 4 ranks 1/4 of the heads, but the 4 query heads and 2 kv heads" \
    $MPI -np 4 $M train $L --cp 4 --cp-mode alltoall
echo "context parallelism OK"
