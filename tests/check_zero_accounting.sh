#!/usr/bin/env bash
# ZeRO accounting on a model of 10.3M parameters (L=13 C=256 H=4 T=32 V=256)
# with dp=4, 2 steps, from --report-json (every rank's numbers):
#  - memory: params / grads / optimizer bytes equal the ZeRO formulas, up to
#    the padding of each unit to a multiple of N elements (Psi parameters,
#    N = 4, AdamW):
#      fp32 (K = 8: m, v; the parameters are their own master)
#        stage 0: 4Psi, 4Psi, 8Psi      stage 1: 4Psi, 4Psi, 8Psi/N
#        stage 2: 4Psi, 4Psi/N, 8Psi/N  stage 3: 4Psi/N, 4Psi/N, 8Psi/N
#      bf16 (K = 12: fp32 master, m, v), the paper's mixed-precision forms
#        stage 0: (2+2+12)Psi           stage 1: 2Psi + 2Psi + 12Psi/N
#        stage 2: 2Psi + (2+12)Psi/N    stage 3: (2+2+12)Psi/N
#  - communication: bytes sent per step per rank (ring convention of comm.h)
#    within 5% of (N-1)/N times
#      fp32:                       stages 0-2: 2 x 4Psi    stage 3: 3 x 4Psi
#      bf16, fp32 gradient reduction: stage 0: 2 x 4Psi  stages 1-2: 4Psi + 2Psi
#                                     stage 3: 4Psi + 2 x 2Psi
#      bf16, --grad-reduce-dtype bf16: stages 0-2: 2 x 2Psi  stage 3: 3 x 2Psi
#    (stage 3 gathers unit 0 -- wte, tied to the head -- once per
#    microbatch, so it sends a little less than the formula here);
#  - start-up: the full fp32 model never exists at once (ZeRO's init draws
#    one unit at a time and keeps its storage): the peak of params bytes is at
#    most the held bytes plus one block's fp32 parameters, the peak of grads
#    bytes is the held bytes, and the peak total at most the held total plus
#    one block.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus text
T="--train $W/text_train.bin --layers 13 --dim 256 --heads 4 --seq-len 32 --batch 4 --steps 2 --log-every 0 --timeout 60"
for z in 0 1 2 3; do
    mpirun --oversubscribe -np 4 $M train $T --dp 4 --zero $z --report-json $W/fp32_z$z.json >/dev/null
    mpirun --oversubscribe -np 4 $M train $T --dp 4 --zero $z --precision bf16 --report-json $W/bf16_z$z.json >/dev/null
    mpirun --oversubscribe -np 4 $M train $T --dp 4 --zero $z --precision bf16 --grad-reduce-dtype bf16 \
        --report-json $W/bf16r_z$z.json >/dev/null
done
$PY - "$W" <<'PY'
import json, sys
w = sys.argv[1]
N, L, units = 4, 13, 15
for mode in ("fp32", "bf16", "bf16r"):
  for z in range(4):
    top = json.load(open(f"{w}/{mode}_z{z}.json"))
    assert len(top["ranks"]) == N, f"{mode} zero {z}: {len(top['ranks'])} rank records, expected {N}"
    psi = top["params"]; assert psi >= 10_000_000, psi
    if mode == "fp32":
      P, G, K = 4, 4, 8
    else:
      P, G, K = 2, 2, 12
    want = {0: (P, G, K), 1: (P, G, K / N), 2: (P, G / N, K / N), 3: (P / N, G / N, K / N)}[z]
    if mode == "fp32":
      elems = (2 if z < 3 else 3) * 4
    elif mode == "bf16":
      elems = {0: 2 * 4, 1: 4 + 2, 2: 4 + 2, 3: 4 + 2 * 2}[z]
    else:
      elems = (2 if z < 3 else 3) * 2
    theory = (N - 1) / N * elems * psi
    for rank, r in enumerate(top["ranks"]):
      mem = r["memory"]
      assert r["memory_start"] == mem, f"{mode} zero {z} rank {rank}: bytes held changed during training"
      assert r["memory_peak_total"] >= sum(mem.values())
      blk = 4 * (12 * 256 * 256 + 13 * 256)  # one block's fp32 parameters (the largest unit)
      pk = r["memory_peak"]
      assert pk["params"] <= mem["params"] + blk, f"{mode} zero {z} rank {rank}: params peak {pk['params']} > {mem['params']} + {blk}"
      assert pk["grads"] <= mem["grads"], f"{mode} zero {z} rank {rank}: grads peak {pk['grads']} > held {mem['grads']}"
      assert r["memory_peak_total"] <= sum(mem.values()) + blk, \
          f"{mode} zero {z} rank {rank}: peak total {r['memory_peak_total']} > held {sum(mem.values())} + {blk}"
      pad = 4 * units * N  # at most N-1 padding elements per unit, 4 bytes (x3 for master, m, v)
      for cat, per in zip(("params", "grads", "optimizer"), want):
        got, exp = mem[cat], per * psi
        assert exp <= got <= exp + 3 * pad, f"{mode} zero {z} rank {rank} {cat}: {got} bytes, formula {exp:.0f}"
      comm = r["comm_per_step"]
      sent = sum(comm[g][k]["bytes_sent"] for g in ("dp", "shard", "replica")
                 for k in ("allreduce", "reduce_scatter", "allgather"))
      assert abs(sent - theory) <= 0.05 * theory, f"{mode} zero {z} rank {rank}: sent {sent:.0f} bytes/step, theory {theory:.0f}"
      if rank == 0:
        print(f"{mode:5s} zero {z} (rank 0 of {N}, every rank checked): params {mem['params']/psi:.4f} "
              f"grads {mem['grads']/psi:.4f} optimizer {mem['optimizer']/psi:.4f} bytes/param "
              f"(formula {want[0]:g}, {want[1]:g}, {want[2]:g}) | comm buffers {mem['comm']} B | "
              f"sent {sent/1e6:.2f} MB/step = {sent/theory:.4f} x theory | start-up peak params "
              f"{(pk['params'] - mem['params']) / blk:.2f} blocks over held")
PY
echo OK
