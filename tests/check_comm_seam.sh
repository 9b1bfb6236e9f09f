#!/usr/bin/env bash
# The communication seam (src/comm/comm.h, "Backends"): MPI is comm's own
# business. Only src/comm/mpi.c includes <mpi.h>, and no file of src/ outside
# src/comm/ -- nor a unit test, tests/test_*.c, which the one-process build
# without MPI (make MPI=0) compiles too -- names an MPI symbol (MPI_...), in
# code or in a comment. (tests/comm_driver.c, comm's own MPI test, compares
# comm with raw MPI calls and is not a unit test.) Then the checker itself:
# a planted include and a planted MPI call outside src/comm/ must be refused.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# violations ROOT: prints each offending line of the tree under ROOT; exit 1 if any
violations() {
    local root=$1 out=$W/violations
    : >"$out"
    grep -rnE '#[[:space:]]*include[[:space:]]*[<"]mpi\.h[>"]' "$root/src" --include='*.c' --include='*.h' \
        >>"$out" || true
    sed -i "\|^$root/src/comm/mpi\.c:|d" "$out"
    { grep -rnE '\bMPI_[A-Za-z0-9_]*' "$root/src" --include='*.c' --include='*.h' --include='*.cu' || true; } |
        { grep -v "^$root/src/comm/" || true; } >>"$out"
    grep -nE '\bMPI_[A-Za-z0-9_]*|#[[:space:]]*include[[:space:]]*[<"]mpi\.h[>"]' "$root"/tests/test_*.c /dev/null \
        >>"$out" || true
    [ ! -s "$out" ] || { cat "$out"; return 1; }
}

violations . || { echo "FAIL: MPI outside src/comm/ (lines above)"; exit 1; }
echo "ok: <mpi.h> only in src/comm/mpi.c; no MPI symbol outside src/comm/ or in tests/test_*.c (in src/comm/: $(grep -rlE '\bMPI_' src/comm --include='*.c' | xargs -n1 basename | tr '\n' ' ')files)"

plant() { # plant NAME FILE LINE: the tree with LINE appended to FILE must be refused
    rm -rf "$W/tree" && mkdir -p "$W/tree/tests" && cp -r src "$W/tree/src" && cp tests/test_*.c "$W/tree/tests/"
    echo "$3" >>"$W/tree/$2"
    if violations "$W/tree" >"$W/planted"; then
        echo "FAIL: the planted $1 ($2: $3) passed"; exit 1
    fi
    echo "refused the planted $1: $(head -n 1 "$W/planted" | sed "s|^$W/tree/||")"
}
plant "include in the CLI" src/cli/main.c '#include <mpi.h>'
plant "MPI call in the trainer" src/train/trainer.c 'static void f(void) { MPI_Barrier(MPI_COMM_WORLD); }'
plant "include in comm.h" src/comm/comm.h '#include <mpi.h>'
plant "MPI call in a unit test" tests/test_mesh.c 'static void f(void) { MPI_Finalize(); }'
echo "check_comm_seam: ok"
