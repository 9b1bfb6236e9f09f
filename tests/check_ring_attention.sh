#!/usr/bin/env bash
# Ring attention over real ranks (build/tests/test_ring_attention, see its
# header): cp 2 and cp 4 under mpirun, each rank's out, lse and dQ/dK/dV
# against the one-process kernel (GQA; dropout; packed documents with
# dropout), and the ring's bytes against the closed form
# (K|V sent N-1 times in each pass, dK|dV N times).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
for n in 2 4; do
    $MPI -np $n $BUILD/tests/test_ring_attention >$W/ring_$n.txt 2>&1 || { cat $W/ring_$n.txt; exit 1; }
    cat $W/ring_$n.txt
    grep -q "test_ring_attention: OK" $W/ring_$n.txt
done
echo "ring attention OK"
