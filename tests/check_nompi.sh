#!/usr/bin/env bash
# The build without MPI (`make MPI=0` -> build-nompi/, src/comm/local.c, the
# plain C compiler): what the one-process GPU build uses on a machine without
# Open MPI. Builds only what it needs (the CLI and the comm unit test;
# incremental after the first time) and checks:
#   - ldd: build-nompi/meshtrain links no libmpi (build/meshtrain does, so the
#     check sees one) and needs no MPI symbol;
#   - test_comm_self passes in it (collectives of a group of one, counters,
#     a device stream refused);
#   - one-process training is bitwise the MPI build's one-process run: every
#     step's loss, lr, grad norm and validation loss, and the final
#     checkpoint's tensors byte for byte -- GPT-2 fp32 with dropout, and Llama
#     (GQA) in bf16 with a bf16 gradient reduction;
#   - more than one process is one clear error: the no-MPI binary under
#     `mpirun -np 2`, and --dp 2 in one process.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
N=build-nompi
t0=$SECONDS
make -s -j2 MPI=0 $N/meshtrain $N/tests/test_comm_self >$W/make.log 2>&1 || { cat $W/make.log; echo "FAIL: make MPI=0"; exit 1; }
[ -x $M ] || { echo "FAIL: $M is not built (make)"; exit 1; }
echo "ok: make MPI=0 ($N/meshtrain, $N/tests/test_comm_self): $((SECONDS - t0)) s"

ldd $N/meshtrain >$W/ldd.txt
ldd $M >$W/ldd_mpi.txt
if grep -q libmpi $W/ldd.txt || ! grep -q libmpi $W/ldd_mpi.txt; then
    echo "FAIL: ldd: libmpi in $N/meshtrain, or not in $M"; cat $W/ldd.txt; exit 1
fi
nm -D --undefined-only $N/meshtrain >$W/nm.txt
if grep -E ' (P?MPI|ompi)_' $W/nm.txt; then echo "FAIL: $N/meshtrain needs MPI symbols (above)"; exit 1; fi
echo "ok: ldd $N/meshtrain: $(wc -l <$W/ldd.txt) libraries, no libmpi; no MPI symbol needed"

$N/tests/test_comm_self >$W/self.txt 2>&1 || { cat $W/self.txt; echo "FAIL: $N/tests/test_comm_self"; exit 1; }
echo "ok: $(tail -n 1 $W/self.txt) ($N)"

corpus d
GPT="--train $W/d_train.bin --val $W/d_val.bin --layers 2 --dim 48 --heads 4 --seq-len 32 --batch 8 --micro-batch 4
     --steps 8 --lr 1e-3 --warmup 2 --dropout 0.1 --grad-clip 1.0 --eval-every 4 --log-every 0"
LLAMA="--train $W/d_train.bin --val $W/d_val.bin --family llama --layers 2 --dim 64 --heads 4 --kv-heads 2
       --ffn-dim 96 --seq-len 32 --batch 8 --micro-batch 4 --steps 8 --lr 1e-3 --eval-every 4 --log-every 0
       --precision bf16 --grad-reduce-dtype bf16"
for run in gpt llama; do
    [ $run = gpt ] && flags=$GPT || flags=$LLAMA
    for b in mpi nompi; do
        [ $b = mpi ] && bin=$M || bin=$N/meshtrain
        # shellcheck disable=SC2086
        $bin train $flags --ckpt-dir $W/$run.$b --metrics $W/$run.$b.jsonl >$W/$run.$b.out 2>&1 ||
            { cat $W/$run.$b.out; echo "FAIL: $run training with $bin"; exit 1; }
        step_val_losses $W/$run.$b.jsonl >$W/$run.$b.losses
        $M export --ckpt $W/$run.$b --format hf --out $W/$run.$b.hf >/dev/null
    done
    n=$(grep -c '"loss"' $W/$run.mpi.losses) || true
    v=$(grep -c '"val_loss"' $W/$run.mpi.losses) || true
    [ "$n" = 8 ] && [ "$v" -ge 2 ] || { echo "FAIL: $run: $n step lines, $v validation lines"; exit 1; }
    cmp $W/$run.mpi.losses $W/$run.nompi.losses ||
        { diff $W/$run.mpi.losses $W/$run.nompi.losses | head; echo "FAIL: $run: the losses differ"; exit 1; }
    diff -r $W/$run.mpi.hf $W/$run.nompi.hf || { echo "FAIL: $run: the exported final models differ"; exit 1; }
    echo "ok: $run: $n steps' loss, lr, grad norm and $v validation losses bitwise equal, final model (Hugging Face export) byte-equal ($(cat $W/$run.mpi.hf/* | wc -c) bytes)"
done

# more than one process: one line, from one process
set +e
timeout 60 $MPI -q -np 2 $N/meshtrain train $GPT --steps 1 >$W/out 2>$W/err; rc=$?
set -e
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ "$(grep -c 'error:' $W/err)" != 1 ] ||
    ! grep -q "built without MPI (make MPI=0) and runs one process, but a launcher started 2" $W/err; then
    echo "FAIL: mpirun -np 2 of $N/meshtrain: exit $rc"; cat $W/err; exit 1
fi
echo "ok: mpirun -np 2 $N/meshtrain: exit $rc, $(grep 'error:' $W/err)"
# shellcheck disable=SC2086
expect_failure "= 2 processes, but the job has 1" $N/meshtrain train $GPT --dp 2
echo "check_nompi: ok"
