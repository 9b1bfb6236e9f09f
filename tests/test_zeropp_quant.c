/* ZeRO++'s block quantizers (parallel/zeropp_quant.h): properties here;
 * with --dump DIR the cases' inputs and outputs are written for
 * tests/check_zeropp_quant.sh, which recomputes them with PyTorch
 * (tests/zeropp_quant_ref.py) and compares byte for byte. */
#include <math.h>
#include <stdlib.h>
#include "ops/ops.h"
#include "parallel/zeropp_quant.h"
#include "testlib.h"
#include "testlib_unit.h"

typedef struct {
    const char *name;
    size_t n, block;
    int bits;
} qcase;

/* Inputs: kind 0 random normal-ish of magnitude mag, 1 an exact-tie block
 * (absmax qmax: scale 1, halves in between), 2 zeros in the second block. */
static void fill(float *x, size_t n, size_t block, int bits, int kind, float mag, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) x[i] = mag * (rng_sym(&s) + rng_sym(&s) + rng_sym(&s));
    if (kind == 1) {
        float qmax = bits == 8 ? 127.0f : 7.0f;
        for (size_t i = 0; i < n && i < block; i++) x[i] = (float)((int)(i % (size_t)(2 * qmax)) - (int)qmax) + 0.5f;
        x[0] = qmax;
    }
    if (kind == 2)
        for (size_t i = block; i < n && i < 2 * block; i++) x[i] = 0.0f;
}

int main(int argc, char **argv) {
    const char *dump = argc == 3 && !strcmp(argv[1], "--dump") ? argv[2] : NULL;
    static const struct {
        const char *name;
        size_t n, block;
        int bits, kind;
        float mag;
    } cases[] = {
        {"i8_one", 1, 256, 8, 0, 1.0f},       {"i8_tail", 1000, 256, 8, 0, 0.02f},
        {"i8_exact", 512, 256, 8, 0, 3.0f},   {"i8_ties", 300, 256, 8, 1, 0},
        {"i8_zero_block", 700, 256, 8, 2, 0.5f}, {"i8_large", 257, 256, 8, 0, 1e30f},
        {"i8_tiny", 257, 256, 8, 0, 1e-30f},  {"i8_b64", 4097, 64, 8, 0, 0.1f},
        {"i4_odd", 999, 256, 4, 0, 0.02f},    {"i4_ties", 300, 256, 4, 1, 0},
        {"i4_zero_block", 601, 256, 4, 2, 2.0f}, {"i4_b64", 4097, 64, 4, 0, 1e-3f},
    };
    FILE *list = NULL;
    if (dump) {
        char path[512];
        snprintf(path, sizeof path, "%s/cases.txt", dump);
        list = fopen(path, "w");
        CHECK(list != NULL, "cannot write %s", path);
        if (!list) TEST_MAIN_END("test_zeropp_quant");
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n = cases[c].n, block = cases[c].block, nb = mt_zpp_blocks(n, block);
        int bits = cases[c].bits;
        float qmax = bits == 8 ? 127.0f : 7.0f;
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *sc = malloc(nb * sizeof *sc);
        uint8_t *q = malloc(mt_zpp_code_bytes(n, bits));
        if (!x || !y || !sc || !q) abort();
        fill(x, n, block, bits, cases[c].kind, cases[c].mag, 1000 + c);
        op_block_quantize(BE, x, n, block, bits, q, sc);
        op_block_dequantize(BE, q, sc, n, block, bits, y);
        /* every element within half a step of its block's scale; the block's
         * largest magnitude exact up to the scale's rounding */
        int within = 1;
        for (size_t i = 0; i < n; i++) within &= fabsf(y[i] - x[i]) <= 0.5f * sc[i / block] * (1 + 1e-6f) + 1e-45f;
        CHECK(within, "%s: an element off by more than half a step", cases[c].name);
        if (cases[c].kind == 1) /* scale 1: a tie k + 0.5 goes to the even neighbour */
            for (size_t i = 1; i < n && i < block; i++) {
                float e = nearbyintf(x[i]);
                CHECK(y[i] == e && fmodf(e, 2.0f) == 0.0f, "%s[%zu]: %g -> %g, want %g", cases[c].name, i, x[i], y[i], e);
                if (y[i] != e) break;
            }
        if (cases[c].kind == 2) CHECK(sc[1] == 0.0f && y[block] == 0.0f, "%s: zero block scale %g", cases[c].name, sc[1]);
        CHECK(sc[0] > 0 && fabsf(fabsf(x[0]) / sc[0]) <= qmax * (1 + 1e-6f), "%s: scale %g", cases[c].name, sc[0]);
        if (list) {
            fprintf(list, "%s %zu %zu %d\n", cases[c].name, n, block, bits);
            CHECK(!write_file(dump, cases[c].name, "x", x, n * sizeof *x) &&
                      !write_file(dump, cases[c].name, "q", q, mt_zpp_code_bytes(n, bits)) &&
                      !write_file(dump, cases[c].name, "s", sc, nb * sizeof *sc) &&
                      !write_file(dump, cases[c].name, "y", y, n * sizeof *y),
                  "cannot write case %s under %s", cases[c].name, dump);
        }
        free(x); free(y); free(sc); free(q);
    }
    if (list) CHECK(fclose(list) == 0, "closing cases.txt");
    TEST_MAIN_END("test_zeropp_quant");
}
