#!/usr/bin/env bash
# The ring's communication measured under {profile} (mt_ring_probe,
# mt_prof_ring): every profile line of a ring run at cp 2 and 4 carries
# "ring" with the closed-form count of ring steps (per layer and microbatch
# N - 1 forward, N backward, N - 1 more for a recomputed forward) and
# consistent numbers (0 <= hidden <= comm, hidden + exposed = comm and
# hidden <= the overlapped compute within the JSON's rounding, hidden_pct =
# 100 hidden / comm, in_flight = wait + compute); {report-json}'s
# ring_overlap per rank the same, rank 0's equal to the mean of its
# lines; the profile's categories still add up to the step. The probe
# changes nothing: the losses are bitwise those of the run without
# {profile}, and so are the cp group's bytes. One process and
# {cp-mode} alltoall report no ring communication.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus d
G="--train $W/d_train.bin --layers 2 --dim 64 --heads 4 --seq-len 256 --batch 4 --micro-batch 2 --steps 3 --lr 2e-3
   --log-every 0 --dropout 0.1"
run() { # NAME NP FLAGS...
    local name=$1 n=$2; shift 2
    $MPI -np $n $M train "$@" --metrics $W/$name.jsonl --report-json $W/$name.json >$W/$name.out 2>&1 ||
        { cat $W/$name.out; exit 1; }
}
run one 1 $G --profile
run cp2_plain 2 $G --cp 2
run cp2 2 $G --cp 2 --profile
run cp4 4 $G --cp 4 --profile
run cp2_rc 2 $G --cp 2 --recompute selective --profile
run a2a 2 $G --cp 2 --cp-mode alltoall --profile
for r in cp2 cp4 cp2_rc; do grep -q "^  ring: communication" $W/$r.out || { echo "$r: no ring line"; cat $W/$r.out; exit 1; }; done
if grep -q "ring:" $W/one.out $W/a2a.out; then echo "a run without a ring printed a ring line"; exit 1; fi
$PY - $W <<'PY'
import json, sys
w = sys.argv[1]
L, MICRO, STEPS = 2, 2, 3
EPS = 5e-4  # ms: each value is printed to 1e-4 ms

def lines(name):
    return [json.loads(l) for l in open(f"{w}/{name}.jsonl")]

def consistent(tag, g, ring_steps):
    assert abs(g["steps" if "steps" in g else "ring_steps_per_step"] - ring_steps) < 1e-9, (tag, g, ring_steps)
    c, h, e = g["comm_ms"], g["hidden_ms"], g["exposed_ms"]
    assert c > 0, (tag, "no ring communication", g)
    assert -EPS <= h <= c + EPS, (tag, "hidden outside [0, comm]", g)
    assert abs(h + e - c) <= EPS, (tag, "hidden + exposed != comm", g)
    assert h <= g["compute_ms"] + EPS, (tag, "hidden above the overlapped compute", g)
    assert abs(g["in_flight_ms"] - g["wait_ms"] - g["compute_ms"]) <= EPS, (tag, "in flight != wait + compute", g)
    assert abs(g["hidden_pct"] - 100 * h / c) <= 100 * EPS / c + 1e-3, (tag, "hidden_pct", g)
    assert g["probe_ms"] > 0, (tag, "no probe time", g)

for name, N, extra in (("cp2", 2, 0), ("cp4", 4, 0), ("cp2_rc", 2, 1)):
    ring_steps = L * MICRO * ((2 * N - 1) + extra * (N - 1))
    prof = [r for r in lines(name) if "ms_by_category" in r]
    assert len(prof) == STEPS, (name, len(prof))
    for r in prof:
        consistent(f"{name} step {r['step']}", r["ring"], ring_steps)
        cats = sum(r["ms_by_category"].values())
        assert abs(cats - r["ms"]) <= 0.01 * r["ms"] + 1e-3, (name, r["step"], cats, r["ms"])
    rep = json.load(open(f"{w}/{name}.json"))
    assert rep["ring_overlap"] == rep["ranks"][0]["ring_overlap"]
    for k in rep["ranks"]:
        g = k["ring_overlap"]
        assert g["profiled_steps"] == STEPS, g
        consistent(f"{name} rank {k['rank']}", g, ring_steps)
    g = rep["ring_overlap"]
    for key in ("comm_ms", "hidden_ms", "exposed_ms", "wait_ms"):
        mean = sum(r["ring"][key] for r in prof) / STEPS
        assert abs(mean - g[key]) <= EPS, (name, key, mean, g[key])
    tot = [sum(k["ring_overlap"][x] for k in rep["ranks"]) for x in ("comm_ms", "hidden_ms", "wait_ms")]
    print(f"{name}: {ring_steps} ring steps a step; over its {N} ranks per step: communication {tot[0]:.3f} ms, "
          f"hidden {tot[1]:.3f} ms ({100 * tot[1] / tot[0]:.1f}%), waited {tot[2]:.3f} ms")

# the probe changes no result, and its messages are not the cp group's
def losses(name):
    return [l for l in open(f"{w}/{name}.jsonl") if '"loss"' in l and "ms_by_category" not in l]
strip = lambda l: json.dumps({k: v for k, v in json.loads(l).items() if k in ("step", "loss", "grad_norm")})
a, b = [strip(l) for l in losses("cp2_plain")], [strip(l) for l in losses("cp2")]
assert a == b and len(a) == STEPS, ("the probe changed the run", a, b)
pa, pb = json.load(open(f"{w}/cp2_plain.json")), json.load(open(f"{w}/cp2.json"))
assert pa["comm_per_step"]["cp"] == pb["comm_per_step"]["cp"], "the probe's messages counted on the cp group"
assert "ring_overlap" not in pa, "ring_overlap without {profile}"

for name in ("one", "a2a"):  # no ring: nothing to measure
    g = json.load(open(f"{w}/{name}.json"))["ring_overlap"]
    assert g["comm_ms"] == 0 and g["hidden_ms"] == 0 and g["ring_steps_per_step"] == 0 and g["hidden_pct"] is None, (name, g)
    assert not any("ring" in r for r in lines(name) if "ms_by_category" in r), name
print("losses and cp bytes with the probe bitwise those without; one process and alltoall: no ring communication")
PY
echo OK
