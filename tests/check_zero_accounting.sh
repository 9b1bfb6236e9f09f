#!/usr/bin/env bash
# ZeRO accounting on a model of 10.3M parameters (L=13 C=256 H=4 T=32 V=256)
# with dp=4, 2 steps, from --report-json (rank 0's numbers):
#  - memory: params / grads / optimizer bytes equal the fp32 ZeRO formulas
#    (AdamW: K = 8 bytes of m and v per parameter; Psi parameters, N = 4)
#      stage 0: 4Psi, 4Psi, 8Psi      stage 1: 4Psi, 4Psi, 8Psi/N
#      stage 2: 4Psi, 4Psi/N, 8Psi/N  stage 3: 4Psi/N, 4Psi/N, 8Psi/N
#    up to the padding of each unit to a multiple of N elements;
#  - communication: fp32 bytes sent per step per rank (ring convention of
#    comm.h) equal 2(N-1)/N * 4Psi for stages 0-2 and 3(N-1)/N * 4Psi for
#    stage 3, within 5% (stage 3 gathers unit 0 -- wte, tied to the head --
#    once per microbatch, so it sends 3 - Psi_0/Psi ~ 2.99 Psi here).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
M=build/meshtrain; PY=/usr/bin/python3
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
$M tokenize --tokenizer byte --out $W/shk ../shared/data/tinyshakespeare.txt >/dev/null
T="--train $W/shk_train.bin --layers 13 --dim 256 --heads 4 --seq-len 32 --batch 4 --steps 2 --log-every 0 --timeout 60"
for z in 0 1 2 3; do
    mpirun --oversubscribe -np 4 $M train $T --dp 4 --zero $z --report-json $W/z$z.json >/dev/null
done
$PY - "$W" <<'PY'
import json, sys
w = sys.argv[1]
N, L, units = 4, 13, 15
for z in range(4):
  top = json.load(open(f"{w}/z{z}.json"))
  assert len(top["ranks"]) == N, f"zero {z}: {len(top['ranks'])} rank records, expected {N}"
  for rank, r in enumerate(top["ranks"]):
    psi = top["params"]; assert psi >= 10_000_000, psi
    mem = r["memory"]
    assert r["memory_start"] == mem, f"zero {z} rank {rank}: bytes held changed during training"
    assert r["memory_peak_total"] >= sum(mem.values())
    full, shard = 4 * psi, 4 * psi / N
    want = {0: (full, full, 2 * full), 1: (full, full, 2 * shard),
            2: (full, shard, 2 * shard), 3: (shard, shard, 2 * shard)}[z]
    pad = 4 * units * N  # at most N-1 padding elements per unit (x2 for m, v)
    for cat, exp in zip(("params", "grads", "optimizer"), want):
        got = mem[cat]
        assert exp <= got <= exp + 2 * pad, f"zero {z} rank {rank} {cat}: {got} bytes, formula {exp:.0f}"
    comm = r["comm_per_step"]
    sent = sum(comm[g][k]["bytes_sent"] for g in ("dp", "shard", "replica")
               for k in ("allreduce", "reduce_scatter", "allgather"))
    theory = (3 if z == 3 else 2) * (N - 1) / N * 4 * psi
    assert abs(sent - theory) <= 0.05 * theory, f"zero {z} rank {rank}: sent {sent:.0f} bytes/step, theory {theory:.0f}"
    if rank == 0: print(f"zero {z} (rank 0 of {N}, every rank checked): params {mem['params']} grads {mem['grads']} optimizer {mem['optimizer']} comm-buffers {mem['comm']} "
          f"bytes | sent {sent/1e6:.2f} MB/step = {sent/theory:.4f} x theory")
PY
echo OK
