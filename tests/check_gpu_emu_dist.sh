#!/usr/bin/env bash
# Layouts of several processes on `--device cuda` under the CUDA emulation
# (build-gpu-emu/meshtrain, MPI-linked: each rank an emulated device; the
# collectives of device buffers host-staged through pinned memory on a
# communication stream, comm.h "Streams and device buffers"):
#  - dp2 ZeRO-3, dp2 hybrid sharding (ZeRO-3, shard groups of 1 replicated
#    over 2), tp2 + sequence parallelism, pp2 1F1B, and dp2 x tp2 x pp2
#    (ZeRO-1): 10 steps each reproduce the one-process CPU curve (loss and
#    gradient norm of every step) within 1e-5 relative, fp32; dp2 ZeRO-2 bf16
#    with bf16 gradient reduction: the CPU build's dp2 curve within 1e-3;
#  - every rank's communication counters (calls, bytes sent, payload, bytes
#    crossing nodes, per collective and mesh axis, from --report-json) equal
#    those of the same layout on the CPU build;
#  - a rank stopped with SIGSTOP mid-run (dp2 ZeRO-3): every rank exits
#    non-zero within two --timeouts + grace, the survivor naming the
#    collective and world rank 1 as the one that did not arrive;
#  - context parallelism (--cp, ring attention without CUDA kernels) is
#    refused with one line;
#  - the rank -> device mapping: --gpus-per-node above the devices a
#    process sees is refused with one line; --comm nccl with fewer GPUs
#    than a node's ranks is refused with one line, and with a GPU per rank
#    (MT_EMU_DEVICES=2) this build says it has no NCCL (comm/nccl.c is
#    only in `make gpu-mpi`; it has not run anywhere yet).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
# the emulated runs with device memory closed to the host outside CUDA calls (src/cuda/emu/emu.h): a
# host read or write of a device buffer stops the run (a real GPU's is cudaMalloc memory)
export MT_EMU_GUARD_HOST=1
one_thread
E=build-gpu-emu/meshtrain
make -s -j2 all gpu-emu >"$W/build.log" 2>&1 || { tail -n 30 "$W/build.log"; echo "FAIL: make gpu-emu"; exit 1; }
victim=; on_exit '[ -n "$victim" ] && kill -CONT $victim 2>/dev/null'
corpus d
BASE="--train $W/d_train.bin --seq-len 16 --batch 4 --micro-batch 1 --steps 10 --lr 1e-3 --log-every 0 --layers 2 --dim 32 --heads 2 --timeout 30"
# the one-process CPU curve every layout reproduces (4 microbatches of 1 sequence a step)
# shellcheck disable=SC2086
$M train $BASE --metrics "$W/ref.jsonl" >"$W/ref.out" 2>&1 || { cat "$W/ref.out"; echo "FAIL: the CPU reference"; exit 1; }

# layout NAME NP FLAGS...: the layout on the CPU build and on --device cuda (emulated), both with --report-json;
# the curve against the one-process CPU run at 1e-5, or with REF=layout against the same layout on the CPU at $TOL
layout() {
    local name=$1 np=$2 ref=$W/ref.jsonl; shift 2
    [ "${REF:-}" = layout ] && ref=$W/$name.cpu.jsonl
    # shellcheck disable=SC2086
    $MPI -np "$np" $M train $BASE "$@" --metrics "$W/$name.cpu.jsonl" --report-json "$W/$name.cpu.json" >"$W/$name.cpu.out" 2>&1 ||
        { tail -n 20 "$W/$name.cpu.out"; echo "FAIL: $name on the CPU"; exit 1; }
    # shellcheck disable=SC2086
    $MPI -np "$np" $E train $BASE "$@" --device cuda --metrics "$W/$name.jsonl" --report-json "$W/$name.cuda.json" \
        >"$W/$name.cuda.out" 2>&1 || { tail -n 20 "$W/$name.cuda.out"; echo "FAIL: $name on --device cuda (emulated)"; exit 1; }
    grep -q '| device cuda$' "$W/$name.cuda.out" || { head -n 3 "$W/$name.cuda.out"; echo "FAIL: $name: not on device cuda"; exit 1; }
    $PY tests/gpu/compare_losses.py "$ref" "$W/$name.jsonl" "$name" "${TOL:-1e-5}"
    $PY - "$W/$name.cpu.json" "$W/$name.cuda.json" "$name" <<'PY'
import json, sys
cpu, cuda, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
assert len(cpu["ranks"]) == len(cuda["ranks"]), f"{name}: rank counts differ"
n = 0
for r, (a, b) in enumerate(zip(cpu["ranks"], cuda["ranks"])):
    for axis, kinds in a["comm_per_step"].items():
        for kind, v in kinds.items():
            w = b["comm_per_step"][axis][kind]
            assert v == w, f"{name}: rank {r} {axis} {kind}: cpu {v} vs cuda {w}"
            n += v["calls"] > 0
assert n > 0, f"{name}: no collective counted"
sent = sum(k["bytes_sent"] for ax in cpu["ranks"][0]["comm_per_step"].values() for k in ax.values())
print(f"ok {name}: counters of {n} (rank, axis, collective) pairs equal the CPU engine's ({sent:.0f} bytes sent per step on rank 0)")
PY
}
layout dp2_zero3 2 --dp 2 --zero 3
layout dp2_hybrid 2 --dp 2 --zero 3 --shard-group 1
layout tp2_sp 2 --tp 2 --sequence-parallel
layout pp2_1f1b 2 --pp 2 --pp-schedule 1f1b
layout dp2_tp2_pp2 8 --dp 2 --tp 2 --pp 2 --zero 1 --sequence-parallel
# bf16 with the gradients reduced in bf16: against the same layout on the CPU (16-bit rounding after sums in
# another order: the one-process bf16 bound of check_gpu_emu_train)
REF=layout TOL=1e-3 layout dp2_zero2_bf16 2 --dp 2 --zero 2 --precision bf16 --grad-reduce-dtype bf16

# a stalled rank: every rank ends within two timeouts + grace, the survivor naming the collective and rank 1
T="--train $W/d_train.bin --seq-len 16 --batch 4 --layers 2 --dim 32 --heads 2 --steps 1000000 --log-every 0"
# shellcheck disable=SC2086
$MPI -np 2 $E train $T --dp 2 --zero 3 --device cuda --timeout 5 >"$W/stall.out" 2>"$W/stall.err" & mp=$!
for _ in $(seq 100); do [ "$(pgrep -P $mp | wc -l)" = 2 ] && break; sleep 0.1; done
sleep 3
victim=$(pgrep -P $mp | sort -n | sed -n 2p)
start=$SECONDS
kill -STOP "$victim"
rc=0; wait $mp || rc=$?
took=$((SECONDS - start))
kill -CONT "$victim" 2>/dev/null || true; victim=
[ $rc -ne 0 ] || { echo "FAIL: the stalled job exited 0"; exit 1; }
[ $took -le 20 ] || { echo "FAIL: the stalled job took ${took}s to end"; exit 1; }
grep -q "rank 0: timeout: [a-z_]* .* on group .*did not arrive: 1 (world rank 1 on host [^:]*: no response" "$W/stall.err" ||
    { cat "$W/stall.err"; echo "FAIL: no message naming the collective and rank 1"; exit 1; }
echo "ok: SIGSTOP of rank 1 on --device cuda: all ranks ended (rc $rc) after ${took}s: $(grep -o 'timeout: [a-z_]* #[0-9]* on group [^ ]*' "$W/stall.err" | head -n 1)"

# the rank -> device mapping: more GPUs per node than a process sees is refused
# shellcheck disable=SC2086
expect_failure "\-\-gpus-per-node 2, but this process sees 1 GPU" $E train $BASE --steps 1 --device cuda --gpus-per-node 2
# shellcheck disable=SC2086
expect_failure "\-\-comm nccl needs a GPU per rank, but 2 ranks share this node's 1 GPU" \
    $MPI -np 2 $E train $BASE --steps 1 --dp 2 --device cuda --comm nccl
# shellcheck disable=SC2086
expect_failure "\-\-comm nccl: this meshtrain was built without NCCL" \
    $MPI -np 2 -x MT_EMU_DEVICES=2 $E train $BASE --steps 1 --dp 2 --device cuda --comm nccl
# context parallelism's ring attention has no CUDA kernels: refused before the run
# shellcheck disable=SC2086
expect_failure "\-\-cp > 1 (ring attention's block kernels) is not yet supported on --device cuda" \
    $MPI -np 2 $E train $BASE --steps 1 --cp 2 --device cuda
# shellcheck disable=SC2086
expect_failure "\-\-comm nccl reduces device buffers: it needs \-\-device cuda" $M train $BASE --steps 1 --comm nccl
echo "check_gpu_emu_dist: ok"
