#!/usr/bin/env bash
# Inter-node byte counts (comm.h "Nodes"): the ranks that share memory form
# a node (on this machine: all of them), --ranks-per-node N makes nodes of N
# consecutive ranks. Under the ring convention a rank's collective bytes
# cross nodes when the next rank of the group is on another node, a send's
# when its peer is. Checked on --report-json:
#  - dp4 ZeRO-3, one real node: no inter-node bytes;
#  - dp4 ZeRO-3, --ranks-per-node 2 (nodes {0,1}, {2,3}): ranks 1 and 3
#    send everything across (their successors 2 and 0 are on the other
#    node), ranks 0 and 2 nothing; the bytes sent are the same as without
#    the flag (the flag changes only the accounting) and the losses are
#    bitwise those of the run without it;
#  - dp2 x pp2 with --ranks-per-node 2 (the mesh puts pp inside dp: pp
#    peers are ranks r and r+1, dp peers r and r+2): the pipeline's
#    activations stay inside the node, the dp all-reduce crosses;
#  - --ranks-per-node -1 is refused with one line.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus text
T="--train $W/text_train.bin --layers 2 --dim 32 --heads 4 --seq-len 32 --batch 8 --steps 3 --log-every 0 --timeout 30"
MPI="$MPI -np 4"
$MPI $M train $T --dp 4 --zero 3 --report-json $W/one.json --metrics $W/one.jsonl >/dev/null
$MPI $M train $T --dp 4 --zero 3 --ranks-per-node 2 --report-json $W/two.json --metrics $W/two.jsonl >/dev/null
$MPI $M train $T --dp 2 --pp 2 --micro-batch 2 --ranks-per-node 2 --report-json $W/pp.json >/dev/null
cmp <(step_losses $W/one.jsonl) <(step_losses $W/two.jsonl) || { echo "--ranks-per-node changed the losses"; exit 1; }
$PY - $W <<'PY'
import json, sys
W = sys.argv[1]
def per_rank(path):
    out = []
    for r in json.load(open(path))["ranks"]:
        sent = inter = 0.0
        by_axis = {}
        for axis, kinds in r["comm_per_step"].items():
            s = sum(k["bytes_sent"] for k in kinds.values()); i = sum(k["bytes_inter"] for k in kinds.values())
            sent += s; inter += i; by_axis[axis] = (s, i)
        out.append((sent, inter, by_axis))
    return out
one, two, pp = per_rank(f"{W}/one.json"), per_rank(f"{W}/two.json"), per_rank(f"{W}/pp.json")
ok = True
def check(cond, msg):
    global ok
    print(("ok   " if cond else "FAIL ") + msg)
    ok &= cond
check(all(r[1] == 0 for r in one), "dp4 ZeRO-3 on one node: inter-node bytes 0 on every rank (%s)" % [r[1] for r in one])
check([r[0] for r in one] == [r[0] for r in two], "--ranks-per-node 2 leaves the bytes sent unchanged (%s MB/step)"
      % [round(r[0] / 1e6, 4) for r in two])
check([r[1] == r[0] and r[0] > 0 for r in two] == [False, True, False, True] and two[0][1] == 0 and two[2][1] == 0,
      "nodes {0,1},{2,3}: ranks 1 and 3 send all %s bytes across, ranks 0 and 2 none (inter %s)"
      % ([r[0] for r in two], [r[1] for r in two]))
act = [r[2]["pp"] for r in pp]
check(all(i == 0 for s, i in act) and sum(s for s, i in act) > 0,
      "dp2 x pp2: the pipeline's sends stay inside the node (%s)" % act)
dp = [r[2]["dp"] for r in pp]
check(all(s > 0 and i == s for s, i in dp), "dp2 x pp2: the dp all-reduce crosses nodes (%s)" % dp)
sys.exit(0 if ok else 1)
PY
set +e
out=$($MPI $M train $T --dp 4 --ranks-per-node -1 2>&1); rc=$?
set -e
[ $rc -ne 0 ] && echo "$out" | grep -q -- "--ranks-per-node must be >= 1, got -1" || { echo "--ranks-per-node -1 not refused: $out"; exit 1; }
echo "ok   --ranks-per-node -1 refused: $(echo "$out" | grep -m1 ranks-per-node)"
