#!/usr/bin/env bash
# ZeRO-R's partitioned activation checkpoints (--partition-activations) under
# tensor parallelism with --recompute full, and the activation arena:
#  - GPT-2 (L 2 and 4) and Llama (grouped-query attention) under tp2 and tp4:
#    per-step losses bitwise equal to the same run without the flag (dropout
#    on for GPT-2, 2 microbatches a step);
#  - per-rank activation bytes (--report-json) equal the closed form: the
#    L+1 replicated [N, C] residual-stream tensors full recomputation keeps
#    (embedding output, every block's output) become L kept block inputs of
#    N/tp rows, so  acts = acts(without) - 4(L+1)NC + 4LNC/tp  exactly, and
#    the growth per layer is exactly 4NC/tp;
#  - the extra communication is counted: L all-gathers over tp per
#    microbatch, each sending (tp-1) x 4NC/tp bytes; scratch grows by the two
#    [N, C] working buffers (8NC bytes), nothing else changes;
#  - the activations are one allocation (activation_arena.allocations == 1)
#    whose size is the activation bytes plus alignment gaps under 64 bytes a
#    buffer;
#  - with --sequence-parallel the block inputs are split already: the flag
#    changes nothing (same bytes, same communication, same losses);
#  - collective buffers do not grow with the depth: dp2 ZeRO-0 with
#    --bucket-mb 0.05 holds none and all-reduces the flat gradient in place
#    as ceil(gradient bytes / 52428) messages of at most 52428 bytes (more
#    messages at L 4, not larger ones; losses bitwise those of one
#    all-reduce per unit), dp2 ZeRO-3 the same pool bytes at L 2 and L 4;
#  - tp2 x pp2 (1f1b, 4 microbatches of L 4, 2 blocks a stage): losses
#    bitwise; a stage's boundary buffers stay whole, so per activation slot
#    stage 0 (embedding output, blocks 0 and 1 kept partitioned, block 1's
#    output sent) saves 4NC(3 - 1) - 2 x 4NC/tp, stage 1 (its input received
#    whole, block 3's kept partitioned) 4NC x 2 - 4NC/tp; 1f1b holds 2 slots
#    on stage 0 and 1 on stage 1; 2 and 1 all-gathers per microbatch;
#  - without tp or without full recomputation: one error line.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus text
S=32 B=2 C=64
GPT="--train $W/text_train.bin --dim $C --heads 4 --seq-len $S --batch 4 --micro-batch $B --dropout 0.1 --steps 3 --log-every 0 --recompute full --timeout 60"
LLAMA="--train $W/text_train.bin --family llama --dim $C --heads 4 --kv-heads 2 --ffn-dim 96 --seq-len $S --batch 4 --micro-batch $B --steps 3 --log-every 0 --recompute full --timeout 60"

run() { # name np flags...
    local name=$1 np=$2; shift 2
    $MPI -np $np $M train "$@" --metrics $W/$name.jsonl --report-json $W/$name.json >/dev/null \
        || { echo "meshtrain train failed: $name"; exit 1; }
    step_losses $W/$name.jsonl >$W/$name.losses
}
same_losses() { # a b
    cmp -s $W/$1.losses $W/$2.losses || { echo "$2: losses differ from $1"; paste $W/$1.losses $W/$2.losses; exit 1; }
    echo "$2: $(wc -l <$W/$2.losses) step losses bitwise equal to $1"
}

for tp in 2 4; do
    for L in 2 4; do
        run gpt_tp${tp}_L$L $tp $GPT --layers $L --tp $tp
        run gpt_tp${tp}_L${L}_pa $tp $GPT --layers $L --tp $tp --partition-activations
        same_losses gpt_tp${tp}_L$L gpt_tp${tp}_L${L}_pa
    done
    run llama_tp$tp $tp $LLAMA --layers 2 --tp $tp
    run llama_tp${tp}_pa $tp $LLAMA --layers 2 --tp $tp --partition-activations
    same_losses llama_tp$tp llama_tp${tp}_pa
done
for L in 2 4; do # collective buffers: the same bytes at any depth
    run cb_zero0_L$L 2 $GPT --layers $L --dp 2 --micro-batch 1 --bucket-mb 0.05
    run cb_zero3_L$L 2 $GPT --layers $L --dp 2 --micro-batch 1 --zero 3
done
run cb_unit_L4 2 $GPT --layers 4 --dp 2 --micro-batch 1 # one all-reduce per unit
same_losses cb_unit_L4 cb_zero0_L4
run gpt_sp 2 $GPT --layers 2 --tp 2 --sequence-parallel
run gpt_pp 4 $GPT --layers 4 --tp 2 --pp 2 --batch 8 --micro-batch 2
run gpt_pp_pa 4 $GPT --layers 4 --tp 2 --pp 2 --batch 8 --micro-batch 2 --partition-activations
same_losses gpt_pp gpt_pp_pa
run gpt_sp_pa 2 $GPT --layers 2 --tp 2 --sequence-parallel --partition-activations
same_losses gpt_sp gpt_sp_pa
# with context parallelism the kept rows are a cp rank's s/cp rows, split again over tp
run llama_cp2tp2 4 $LLAMA --layers 2 --tp 2 --cp 2
run llama_cp2tp2_pa 4 $LLAMA --layers 2 --tp 2 --cp 2 --partition-activations
same_losses llama_cp2tp2 llama_cp2tp2_pa

$PY - $W $S $B $C <<'PY'
import json, sys
w, S, B, C = sys.argv[1], *map(int, sys.argv[2:])
N, MBS = S * B, 2  # rows per microbatch; microbatches per step (batch 4 / micro-batch 2)
def load(name):
    return json.load(open(f"{w}/{name}.json"))
def check(plain, part, L, tp):
    a, p = load(plain), load(part)
    assert p["partitioned_activations"] == 1 and a["partitioned_activations"] == 0, f"{part}: not partitioned"
    for r in range(tp):  # every rank of the tp group
        ma, mp = a["ranks"][r]["memory"], p["ranks"][r]["memory"]
        want = ma["activations"] - 4 * (L + 1) * N * C + 4 * L * N * C // tp
        assert mp["activations"] == want, f"{part} rank {r}: activations {mp['activations']}, closed form {want}"
        assert mp["scratch"] - ma["scratch"] == 8 * N * C, f"{part} rank {r}: scratch grows by {mp['scratch'] - ma['scratch']}"
        for k in ("params", "grads", "optimizer", "comm", "frozen"):
            assert mp[k] == ma[k], f"{part} rank {r}: {k} {mp[k]} != {ma[k]}"
        ga, gp = a["ranks"][r]["comm_per_step"]["tp"]["allgather"], p["ranks"][r]["comm_per_step"]["tp"]["allgather"]
        assert gp["calls"] - ga["calls"] == L * MBS, f"{part} rank {r}: {gp['calls'] - ga['calls']} extra all-gathers"
        extra = L * MBS * (tp - 1) * 4 * N * C // tp
        assert gp["bytes_sent"] - ga["bytes_sent"] == extra, f"{part} rank {r}: all-gathers send {gp['bytes_sent'] - ga['bytes_sent']} more bytes, closed form {extra}"
        for j in (a, p):
            ar, acts = j["ranks"][r]["activation_arena"], j["ranks"][r]["memory"]["activations"]
            assert ar["allocations"] == 1, f"activation arena: {ar['allocations']} allocations"
            assert acts <= ar["bytes"] < acts + 64 * ar["buffers"], f"arena {ar} for {acts} activation bytes"
    print(f"{part}: activations {p['memory']['activations']} bytes per rank (without: {a['memory']['activations']}; "
          f"kept block inputs {L} x {4 * N * C // tp}), +{L * MBS} tp all-gathers = "
          f"{L * MBS * (tp - 1) * 4 * N * C // tp} bytes sent per step, arena {p['activation_arena']}")
for tp in (2, 4):
    for L in (2, 4):
        check(f"gpt_tp{tp}_L{L}", f"gpt_tp{tp}_L{L}_pa", L, tp)
    per_layer = (load(f"gpt_tp{tp}_L4_pa")["memory"]["activations"] - load(f"gpt_tp{tp}_L2_pa")["memory"]["activations"]) / 2
    assert per_layer == 4 * N * C / tp, f"tp{tp}: {per_layer} activation bytes per layer, closed form {4 * N * C / tp}"
    print(f"tp{tp}: {per_layer:.0f} activation bytes per layer = 4 N C / tp")
    check(f"llama_tp{tp}", f"llama_tp{tp}_pa", 2, tp)
a, p = load("gpt_sp"), load("gpt_sp_pa")
assert p["partitioned_activations"] == 0, "sequence parallelism: the flag should be a no-op"
for r in range(2):
    assert a["ranks"][r]["memory"] == p["ranks"][r]["memory"], f"sp rank {r}: memory differs with the flag"
    assert a["ranks"][r]["comm_per_step"] == p["ranks"][r]["comm_per_step"], f"sp rank {r}: communication differs"
print("sequence parallelism: the flag changes no byte (the block inputs are split over tp already)")
a, p = load("gpt_pp"), load("gpt_pp_pa")
F, f = 4 * N * C, 4 * N * C // 2  # a whole and a partitioned residual-stream tensor (tp 2)
for r in range(4):  # rank = pp stage x tp 2 + tp rank
    stage = r // 2
    slots, saved, gathers = (2, F * (3 - 1) - 2 * f, 2) if stage == 0 else (1, F * 2 - f, 1)
    d = a["ranks"][r]["memory"]["activations"] - p["ranks"][r]["memory"]["activations"]
    assert d == slots * saved, f"pp stage {stage} rank {r}: {d} activation bytes saved, closed form {slots} x {saved}"
    g = p["ranks"][r]["comm_per_step"]["tp"]["allgather"]["calls"] - a["ranks"][r]["comm_per_step"]["tp"]["allgather"]["calls"]
    assert g == 4 * gathers, f"pp stage {stage} rank {r}: {g} extra all-gathers, expected {4 * gathers}"
print(f"tp2 x pp2: stage 0 saves 2 x {F * 2 - 2 * f}, stage 1 1 x {F * 2 - f} activation bytes per rank")
for z in ("zero0", "zero3"):
    c = [load(f"cb_{z}_L{L}")["memory"]["comm"] for L in (2, 4)]
    assert c[0] == c[1], f"{z}: collective buffers grow with the layers: {c[0]} bytes at L 2, {c[1]} at L 4"
    if z == "zero0":
        assert c[0] == 0, f"zero 0 with --bucket-mb: {c[0]} bytes of collective buffers (the buckets are the gradients)"
        msg = int(0.05 * 1048576) // 4 * 4  # --bucket-mb 0.05: messages of this many bytes (whole floats)
        for L in (2, 4):
            j = load(f"cb_zero0_L{L}")
            g, ar = j["memory"]["grads"], j["comm_per_step"]["dp"]["allreduce"]
            want = -(-g // msg)
            assert ar["calls"] == want and ar["payload"] == g, \
                f"L {L}: {ar['calls']} all-reduces of {ar['payload']} bytes per step, expected {want} messages of <= {msg} bytes covering the {g} gradient bytes"
            print(f"zero0 L {L}: {g} gradient bytes all-reduced as {ar['calls']:.0f} messages of <= {msg} bytes", end="; ")
    print(f"{z}: collective buffers {c[0]} bytes at L 2 and at L 4")
PY

T1="--train $W/text_train.bin --layers 2 --dim $C --heads 4 --seq-len $S --batch 4 --steps 1"
expect_failure "partition-activations.*needs --tp > 1" $MPI -np 1 $M train $T1 --recompute full --partition-activations
expect_failure "needs --recompute full, got none" $MPI -np 2 $M train $T1 --tp 2 --partition-activations
expect_failure "needs --recompute full, got selective" $MPI -np 2 $M train $T1 --tp 2 --recompute selective --partition-activations
echo OK
