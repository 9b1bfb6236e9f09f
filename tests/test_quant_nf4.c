/* NF4 (with and without double quant) and int8 weight quantizers
 * (quant/nf4.h, quant/int8.h): properties here; with --dump DIR the
 * cases' inputs and outputs are written for tests/check_quant_bnb.sh,
 * which recomputes them with a PyTorch re-implementation of bitsandbytes'
 * reference quantizer (tests/quant_ref.py) and compares byte for byte. */
#include <math.h>
#include <stdlib.h>
#include "core/dtype.h"
#include "quant/int8.h"
#include "quant/nf4.h"
#include "testlib.h"
#include "testlib_unit.h"

/* kind 0: sums of uniforms times mag; 1: ties (row 0 the NF4 midpoints
 * with absmax 1, row 1 half-integers with absmax 127); 2: zeros in
 * elements [128, 192) (block 2) and row 3; 3: zero tail from element 64;
 * 4: each row a different scale, mag * 10^(r % 7 - 3) */
static void fill(float *x, int64_t rows, int64_t cols, int kind, float mag, uint64_t seed) {
    uint64_t s = seed;
    int64_t n = rows * cols;
    for (int64_t i = 0; i < n; i++) x[i] = mag * (rng_sym(&s) + rng_sym(&s) + rng_sym(&s));
    if (kind == 1) {
        for (int64_t c = 0; c < cols; c++) {
            int k = (int)(c % 15);
            float m = (mt_nf4_code[k] + mt_nf4_code[k + 1]) / 2.0f;
            x[c] = c % 2 ? m : -m;
        }
        x[0] = 1.0f;
        for (int64_t c = 0; c < cols && rows > 1; c++) x[cols + c] = (float)((int)(c % 254) - 127) + 0.5f;
        if (rows > 1) x[cols] = 127.0f;
    }
    if (kind == 2) {
        for (int64_t i = 128; i < 192 && i < n; i++) x[i] = 0.0f;
        for (int64_t c = 0; c < cols && rows > 3; c++) x[3 * cols + c] = 0.0f;
    }
    if (kind == 3)
        for (int64_t i = 64; i < n; i++) x[i] = 0.0f;
    if (kind == 4)
        for (int64_t i = 0; i < n; i++) x[i] *= powf(10.0f, (float)((i / cols) % 7 - 3));
}

/* tile API = full dequantization, bit for bit, for row ranges starting
 * mid-block, and with a row stride wider than the matrix */
static void check_tiles_nf4(const char *name, const mt_nf4 *q, const float *full) {
    int64_t R = q->rows, C = q->cols, ld = C + 3;
    float *t = malloc((size_t)(R * ld) * sizeof *t);
    uint16_t *tb = malloc((size_t)(R * ld) * sizeof *tb);
    if (!t || !tb) abort();
    int64_t starts[] = {0, R / 3, R / 2, R - 1};
    for (size_t s = 0; s < sizeof starts / sizeof *starts; s++) {
        int64_t r0 = starts[s], nr = R - r0 < 5 ? R - r0 : 5;
        mt_nf4_dequant_rows(q, r0, nr, ld, t);
        mt_nf4_dequant_rows_bf16(q, r0, nr, ld, tb);
        int same = 1, same_bf = 1;
        for (int64_t r = 0; r < nr; r++)
            for (int64_t c = 0; c < C; c++) {
                float want = full[(r0 + r) * C + c];
                same &= mt_f32_bits(t[r * ld + c]) == mt_f32_bits(want);
                same_bf &= tb[r * ld + c] == mt_fp32_to_bf16(want);
            }
        CHECK(same, "%s: nf4 rows [%lld, +%lld) differ from the full dequantization", name, (long long)r0, (long long)nr);
        CHECK(same_bf, "%s: nf4 bf16 rows [%lld, +%lld) are not the rounded fp32 ones", name, (long long)r0, (long long)nr);
    }
    free(t);
    free(tb);
}

static void check_tiles_int8(const char *name, const mt_int8w *q, const float *full) {
    int64_t R = q->rows, C = q->cols, ld = C + 1;
    float *t = malloc((size_t)(R * ld) * sizeof *t);
    uint16_t *tb = malloc((size_t)(R * ld) * sizeof *tb);
    if (!t || !tb) abort();
    int64_t r0 = R / 2, nr = R - r0;
    mt_int8w_dequant_rows(q, r0, nr, ld, t);
    mt_int8w_dequant_rows_bf16(q, r0, nr, ld, tb);
    int same = 1;
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < C; c++) {
            float want = full[(r0 + r) * C + c];
            same &= mt_f32_bits(t[r * ld + c]) == mt_f32_bits(want) && tb[r * ld + c] == mt_fp32_to_bf16(want);
        }
    CHECK(same, "%s: int8 tile rows [%lld, +%lld) differ from the full dequantization", name, (long long)r0, (long long)nr);
    free(t);
    free(tb);
}

static void check_rejects(void) {
    float x[200];
    uint64_t s = 7;
    for (int i = 0; i < 200; i++) x[i] = rng_sym(&s);
    const float bad[] = {INFINITY, -INFINITY, NAN};
    const char *word[] = {"+inf", "-inf", "nan"};
    for (int k = 0; k < 3; k++) {
        x[137] = bad[k];
        for (int dq = 0; dq < 3; dq++) {
            mt_error err = {{0}};
            int rc;
            if (dq < 2) {
                mt_nf4 q;
                rc = mt_nf4_init(&q, x, 2, 100, dq, &err);
                mt_nf4_free(&q);
            } else {
                mt_int8w q;
                rc = mt_int8w_init(&q, x, 2, 100, &err);
                mt_int8w_free(&q);
            }
            CHECK(rc == -1 && strstr(err.msg, "element 137 (row 1, column 37)") && strstr(err.msg, word[k]),
                  "%s at element 137 (mode %d): rc %d, message \"%s\"", word[k], dq, rc, err.msg);
        }
        x[137] = 0.5f;
    }
}

int main(int argc, char **argv) {
    const char *dump = argc == 3 && !strcmp(argv[1], "--dump") ? argv[2] : NULL;
    static const struct {
        const char *name;
        int64_t rows, cols;
        int kind;
        float mag;
    } cases[] = {
        {"m64x64", 64, 64, 0, 0.02f},     {"m3x100_tail", 3, 100, 0, 0.05f}, {"m1x7", 1, 7, 0, 1.0f},
        {"m5x13_odd", 5, 13, 0, 0.3f},    {"m256x300", 256, 300, 0, 0.02f},  {"zero_block", 8, 96, 2, 0.1f},
        {"zero_tail", 1, 100, 3, 0.1f},   {"ties", 2, 64, 1, 0.0f},          {"large", 16, 80, 0, 1e30f},
        {"tiny", 16, 80, 0, 1e-30f},      {"subnormal", 2, 70, 0, 1e-39f},   {"scales", 70, 260, 4, 0.01f},
        {"m1x4096", 1, 4096, 0, 0.01f},
    };
    FILE *list = NULL;
    if (dump) {
        char path[512];
        snprintf(path, sizeof path, "%s/cases.txt", dump);
        list = fopen(path, "w");
        CHECK(list != NULL, "cannot write %s", path);
        if (!list) TEST_MAIN_END("test_quant_nf4");
        CHECK(!write_file(dump, "maps", "nf4", mt_nf4_code, sizeof mt_nf4_code) &&
                  !write_file(dump, "maps", "dynamic", mt_nf4_dynamic_map, sizeof mt_nf4_dynamic_map),
              "cannot write the maps under %s", dump);
    }
    float halfgap = 0; /* the largest half gap between NF4 codes */
    for (int i = 0; i < 15; i++) halfgap = fmaxf(halfgap, (mt_nf4_code[i + 1] - mt_nf4_code[i]) / 2);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *name = cases[c].name;
        int64_t R = cases[c].rows, C = cases[c].cols, n = R * C;
        float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y), *yd = malloc((size_t)n * sizeof *yd),
              *yi = malloc((size_t)n * sizeof *yi);
        uint16_t *yb = malloc((size_t)n * sizeof *yb);
        if (!x || !y || !yd || !yi || !yb) abort();
        fill(x, R, C, cases[c].kind, cases[c].mag, 2000 + c);
        mt_error err = {{0}};
        mt_nf4 q, qd;
        mt_int8w qi;
        CHECK(mt_nf4_init(&q, x, R, C, 0, &err) == 0, "%s: %s", name, err.msg);
        CHECK(mt_nf4_init(&qd, x, R, C, 1, &err) == 0, "%s: %s", name, err.msg);
        CHECK(mt_int8w_init(&qi, x, R, C, &err) == 0, "%s: %s", name, err.msg);
        mt_nf4_dequant(&q, y);
        mt_nf4_dequant(&qd, yd);
        mt_int8w_dequant(&qi, yi);
        CHECK(!memcmp(q.packed, qd.packed, (size_t)(n + 1) / 2), "%s: double quant changed the codes", name);

        /* within half the widest NF4 gap of the block's absmax (plus the
         * nested quantization's error on the absmax itself) */
        int within = 1, within_d = 1;
        for (int64_t b = 0; b < q.nblocks; b++) {
            int64_t e0 = b * MT_NF4_BLOCK, e1 = e0 + MT_NF4_BLOCK < n ? e0 + MT_NF4_BLOCK : n;
            float am = 0;
            for (int64_t e = e0; e < e1; e++) am = fmaxf(am, fabsf(x[e]));
            if (am < 1e-37f) continue; /* bnb's 1e-38 clamp: no longer normalized */
            float amd = mt_nf4_block_absmax(&qd, b);
            for (int64_t e = e0; e < e1; e++) {
                within &= fabsf(y[e] - x[e]) <= halfgap * am * (1 + 1e-6f);
                within_d &= fabsf(yd[e] - x[e]) <= halfgap * am * (1 + 1e-6f) + fabsf(amd - am) * 1.000001f;
            }
        }
        CHECK(within, "%s: an nf4 value off by more than half a code gap", name);
        CHECK(within_d, "%s: a double-quant nf4 value off by more than half a gap plus the absmax error", name);
        int within_i = 1;
        for (int64_t r = 0; r < R && C > 0; r++)
            for (int64_t j = 0; j < C; j++)
                if (qi.scb[r] > 1e-37f) within_i &= fabsf(yi[r * C + j] - x[r * C + j]) <= 0.5f * qi.scb[r] / 127 * 1.0001f;
        CHECK(within_i, "%s: an int8 value off by more than half a step", name);
        check_tiles_nf4(name, &q, y);
        check_tiles_nf4(name, &qd, yd);
        check_tiles_int8(name, &qi, yi);
        if (cases[c].kind == 2) { /* block 2 all zero: code 7 (0.0) everywhere, absmax 0 */
            int sevens = 1;
            for (int64_t i = 64; i < 96; i++) sevens &= q.packed[i] == 0x77;
            CHECK(sevens && q.absmax[2] == 0.0f && y[150] == 0.0f, "%s: zero block codes %02x absmax %g", name,
                  q.packed[64], q.absmax[2]);
            CHECK(qi.scb[3] == 0.0f && qi.q[3 * C] == 0 && yi[3 * C + 5] == 0.0f, "%s: zero row scb %g", name, qi.scb[3]);
        }
        if (cases[c].kind == 1) { /* absmax 1, values on midpoints: the lower code */
            int lower = 1;
            for (int64_t j = 1; j < C; j++) {
                int k = (int)(j % 15), code = j % 2 ? k : 14 - k;
                int got = j % 2 ? q.packed[j / 2] & 0xF : q.packed[j / 2] >> 4;
                lower &= got == code;
            }
            CHECK(lower, "%s: a tie did not go to the lower code", name);
        }
        if (n % (64 * 256) == 0) { /* whole nested blocks: the ceil rounding of a few blocks aside */
            double bits = 8.0 * (double)mt_nf4_bytes(&qd) / (double)n;
            CHECK(bits <= 4.13, "%s: %.4f bits per parameter with double quant", name, bits);
        }
        if (list) {
            fprintf(list, "%s %lld %lld\n", name, (long long)R, (long long)C);
            int bad = write_file(dump, name, "x", x, (size_t)n * sizeof *x);
            bad |= write_file(dump, name, "packed", q.packed, (size_t)(n + 1) / 2);
            bad |= write_file(dump, name, "absmax", q.absmax, (size_t)q.nblocks * sizeof(float));
            bad |= write_file(dump, name, "y", y, (size_t)n * sizeof *y);
            mt_nf4_dequant_rows_bf16(&q, 0, R, C, yb);
            bad |= write_file(dump, name, "yb", yb, (size_t)n * sizeof *yb);
            bad |= write_file(dump, name, "dq_acode", qd.absmax_code, (size_t)qd.nblocks);
            bad |= write_file(dump, name, "dq_nabsmax", qd.nested_absmax, (size_t)qd.nnested * sizeof(float));
            bad |= write_file(dump, name, "dq_offset", &qd.offset, sizeof(float));
            bad |= write_file(dump, name, "dq_y", yd, (size_t)n * sizeof *yd);
            mt_nf4_dequant_rows_bf16(&qd, 0, R, C, yb);
            bad |= write_file(dump, name, "dq_yb", yb, (size_t)n * sizeof *yb);
            bad |= write_file(dump, name, "i8_q", qi.q, (size_t)n);
            bad |= write_file(dump, name, "i8_scb", qi.scb, (size_t)R * sizeof(float));
            bad |= write_file(dump, name, "i8_y", yi, (size_t)n * sizeof *yi);
            mt_int8w_dequant_rows_bf16(&qi, 0, R, C, yb);
            bad |= write_file(dump, name, "i8_yb", yb, (size_t)n * sizeof *yb);
            CHECK(!bad, "cannot write case %s under %s", name, dump);
        }
        mt_nf4_free(&q);
        mt_nf4_free(&qd);
        mt_int8w_free(&qi);
        free(x); free(y); free(yd); free(yi); free(yb);
    }
    /* bits per parameter of a larger matrix: 4 + 8/64 + 32/(64*256) + 32/n */
    {
        int64_t R = 512, C = 512;
        float *x = malloc((size_t)(R * C) * sizeof *x);
        if (!x) abort();
        fill(x, R, C, 0, 0.02f, 99);
        mt_nf4 q, qd;
        mt_error err = {{0}};
        CHECK(mt_nf4_init(&q, x, R, C, 0, &err) == 0 && mt_nf4_init(&qd, x, R, C, 1, &err) == 0, "512x512: %s", err.msg);
        double bits = 8.0 * (double)mt_nf4_bytes(&qd) / (double)(R * C), plain = 8.0 * (double)mt_nf4_bytes(&q) / (double)(R * C);
        CHECK(bits <= 4.13 && fabs(bits - (4 + 8.0 / 64 + 32.0 / (64 * 256) + 32.0 / (R * C))) < 1e-12,
              "512x512: %.5f bits per parameter with double quant", bits);
        CHECK(plain == 4.5, "512x512: %.5f bits per parameter without", plain);
        printf("nf4 512x512: %.4f bits/param (double quant), %.4f without; int8: %.4f\n", bits, plain,
               8.0 + 32.0 / C);
        mt_nf4_free(&q);
        mt_nf4_free(&qd);
        free(x);
    }
    check_rejects();
    if (list) CHECK(fclose(list) == 0, "closing cases.txt");
    TEST_MAIN_END("test_quant_nf4");
}
