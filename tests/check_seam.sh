#!/usr/bin/env bash
# The backend seam (docs/design.md, "Seams"): src/models/, src/parallel/,
# src/optim/, src/train/ and the adapters' src/nn/ hold no OpenMP pragma, no
# memcpy/memset on tensor data, no dtype-conversion loop and no loop over
# tensor data, but the allow-list's entries (tests/seam_allow.txt: host
# metadata, and the work still pending, each with its reason). Then the
# checker itself: each kind of violation planted into a copy of the tree
# must be reported, and a loop over host metadata must not be.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
python3 tests/seam.py src tests/seam_allow.txt || exit 1
plant() { # plant NAME FILE CODE: the tree with CODE appended to FILE must be refused, naming the line
    rm -rf "$W/src" && cp -r src "$W/src" && printf '%s\n' "$3" >> "$W/src/$2"
    local line
    line=$(wc -l < "$W/src/$2")
    if python3 tests/seam.py "$W/src" tests/seam_allow.txt > "$W/out"; then
        echo "FAIL: the planted $1 ($2: $3) passed"; exit 1
    fi
    if ! grep -q "src/$2:$line: " "$W/out"; then
        echo "FAIL: the planted $1 was not reported at src/$2:$line:"; cat "$W/out"; exit 1
    fi
    echo "refused the planted $1: $(grep "src/$2:$line: " "$W/out" | head -n 1)"
}
plant "element loop" models/unit_ops.c 'static void planted(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2.0f; }'
plant "bf16 loop over a struct field" parallel/zero.c 'static void planted(mt_zero *z, int u, size_t n) { for (size_t i = 0; i < n; i++) z->mp.g16[u][i] = 0; }'
plant "OpenMP pragma" optim/opt_state.c '#pragma omp parallel for'
plant "tensor memcpy" train/trainer.c 'static void planted(float *a, const float *b, size_t n) { memcpy(a, b, n * sizeof(float)); }'
plant "dtype conversion" models/linear.c 'static void planted(uint16_t *d, const float *s, size_t n) { mt_convert_to_16(MT_BF16, d, s, n); }'
plant "loop over the losses" models/model.c 'static double planted(mt_model *m, int n) { double s = 0; for (int i = 0; i < n; i++) s += m->acts.losses[i]; return s; }'
# host metadata passes: a loop over units' sizes, a struct cleared
rm -rf "$W/src" && cp -r src "$W/src"
printf '%s\n' 'static size_t planted(const size_t *numel, int n, mt_zero *z) { size_t s = 0; memset(z, 0, sizeof *z); for (int u = 0; u < n; u++) s += numel[u]; return s; }' >> "$W/src/parallel/zero.c"
python3 tests/seam.py "$W/src" tests/seam_allow.txt > "$W/out" || { echo "FAIL: a host-metadata loop was reported:"; cat "$W/out"; exit 1; }
echo "passed the planted host-metadata loop"
echo "check_seam: ok"
