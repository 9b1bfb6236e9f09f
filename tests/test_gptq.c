/* GPTQ on one layer (quant/gptq.h), on a weight W [64, 256] and calibration
 * inputs X [512, 256] whose columns differ in scale by 100x (so the
 * quantization order and the Hessian matter), with one dead input column:
 *  - the Hessian accumulated in chunks equals X^T X;
 *  - per configuration (4 and 8 bits, groups of 32 / 64 / 128 / 256, act
 *    order on and off, symmetric and asymmetric grids) the layer's output
 *    error ||X W^T - X Q^T||_F is below round-to-nearest's on the same grid
 *    (groups, fp16 scales), the dead column quantizes to zero and g_idx maps
 *    every column to its group in the quantization order;
 *  - packing into the Hugging Face layout and unpacking gives the dequantized
 *    weights bit for bit, and so do the training op's row tiles of the packed
 *    layer (op_gptq_dequant_rows: any first row and count, a wider stride);
 *  - bad bits, a group size that does not divide the columns and a Hessian
 *    that is not positive definite fail with one message.
 * `test_gptq --dump FILE` writes every configuration for tests/gptq_ref.py
 * (the PyTorch re-implementation):
 *   int64 rows, cols, n, n_configs; float32 W[rows, cols], X[n, cols];
 *   float64 H[cols, cols] (what the C accumulated); per configuration
 *   int64 bits, group_size, act_order, sym; float64 damp; uint8 q[rows, cols];
 *   float32 scales[groups, rows]; int32 zeros[groups, rows], g_idx[cols], perm[cols] */
#include <stdint.h>
#include <stdlib.h>
#include "core/dtype.h"
#include "ops/ops.h"
#include "quant/gptq.h"
#include "testlib.h"

enum { ROWS = 64, COLS = 256, N = 512, DEAD = 77 };

static const mt_gptq_opts configs[] = {
    {4, 32, 1, 1, 0.01}, {4, 128, 0, 1, 0.01}, {4, 64, 1, 0, 0.01},
    {8, 64, 1, 1, 0.01}, {4, 256, 1, 1, 0.05}, {8, 256, 0, 0, 0.01},
};
#define NCONF ((int)(sizeof configs / sizeof configs[0]))

static void make_data(float *w, float *x) {
    uint64_t s = 11;
    for (int i = 0; i < ROWS * COLS; i++) w[i] = 0.05f * rng_sym(&s) + (i % 37 == 0 ? 0.2f * rng_sym(&s) : 0.0f);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < COLS; c++) {
            float scale = c % 16 == 3 ? 5.0f : 0.05f + 0.01f * (float)(c % 7);
            float v = scale * rng_sym(&s) + (c % 5 == 0 && c > 0 ? 0.3f * x[(size_t)r * COLS + c - 1] : 0.0f);
            x[(size_t)r * COLS + c] = c == DEAD ? 0.0f : v;
        }
}

/* ||X A^T - X B^T||_F for A, B [ROWS, COLS] */
static double out_error(const float *x, const float *a, const float *b) {
    double s = 0.0;
    for (int r = 0; r < N; r++)
        for (int o = 0; o < ROWS; o++) {
            double d = 0.0;
            for (int c = 0; c < COLS; c++)
                d += (double)x[(size_t)r * COLS + c] * ((double)a[o * COLS + c] - (double)b[o * COLS + c]);
            s += d * d;
        }
    return sqrt(s);
}

/* Round-to-nearest on GPTQ's grid (groups of consecutive columns, fp16 scales): the baseline. */
static void rtn(const float *w, int bits, int G, int sym, float *out) {
    int maxq = (1 << bits) - 1;
    for (int o = 0; o < ROWS; o++)
        for (int g0 = 0; g0 < COLS; g0 += G) {
            double lo = 0.0, hi = 0.0;
            for (int c = g0; c < g0 + G; c++) {
                double v = w[o * COLS + c];
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
            if (sym) {
                hi = fabs(lo) > hi ? fabs(lo) : hi;
                if (lo < 0) lo = -hi;
            }
            double scale = (double)mt_fp16_to_fp32(mt_fp32_to_fp16((float)((hi - lo) / maxq)));
            double zero = sym ? (maxq + 1) / 2 : nearbyint(-lo / scale);
            for (int c = g0; c < g0 + G; c++) {
                double q = nearbyint(w[o * COLS + c] / scale) + zero;
                q = q < 0 ? 0 : q > maxq ? maxq : q;
                out[o * COLS + c] = (float)(scale * (q - zero));
            }
        }
}

static int run(FILE *dump) {
    float *w = falloc(ROWS * COLS), *x = falloc((size_t)N * COLS), *dq = falloc(ROWS * COLS),
          *base = falloc(ROWS * COLS), *un = falloc(ROWS * COLS);
    make_data(w, x);
    double *H = dalloc(COLS * COLS), *Hc = dalloc(COLS * COLS);
    mt_gptq_hessian_add(H, x, 200, COLS); /* in two calls, as calibration batches come */
    mt_gptq_hessian_add(H, x + 200 * COLS, N - 200, COLS);
    double worst = 0.0;
    for (int a = 0; a < COLS; a++)
        for (int b = 0; b < COLS; b++) {
            double s = 0.0;
            for (int r = 0; r < N; r++) s += (double)x[(size_t)r * COLS + a] * (double)x[(size_t)r * COLS + b];
            worst = fmax(worst, fabs(s - H[a * COLS + b]) / fmax(1.0, fabs(s)));
        }
    CHECK(worst < 1e-12, "Hessian = X^T X: worst relative difference %.3g", worst);
    if (dump) {
        int64_t head[4] = {ROWS, COLS, N, NCONF};
        fwrite(head, 8, 4, dump);
        fwrite(w, 4, ROWS * COLS, dump);
        fwrite(x, 4, (size_t)N * COLS, dump);
        fwrite(H, 8, COLS * COLS, dump);
    }
    for (int k = 0; k < NCONF; k++) {
        const mt_gptq_opts *o = &configs[k];
        memcpy(Hc, H, sizeof(double) * COLS * COLS);
        mt_gptq_result r;
        mt_error err;
        int rc = mt_gptq_quantize(o, w, ROWS, COLS, Hc, "test layer", &r, &err);
        CHECK(rc == 0, "config %d: %s", k, err.msg);
        if (rc) continue;
        mt_gptq_dequant(&r, dq);
        rtn(w, o->bits, o->group_size, o->sym, base);
        double eg = out_error(x, w, dq), er = out_error(x, w, base);
        printf("bits %d group %3d act_order %d sym %d: ||XW^T - XQ^T|| GPTQ %.5g, round-to-nearest %.5g (%.3fx)\n",
               o->bits, o->group_size, o->act_order, o->sym, eg, er, eg / er);
        CHECK(eg < er, "config %d: GPTQ error %g not below round-to-nearest's %g", k, eg, er);
        int dead_zero = 1, gidx_ok = 1;
        for (int i = 0; i < ROWS; i++) dead_zero &= dq[i * COLS + DEAD] == 0.0f;
        for (int c = 0; c < COLS; c++) gidx_ok &= r.g_idx[r.perm[c]] == c / o->group_size;
        CHECK(dead_zero, "config %d: the dead column dequantizes to 0", k);
        CHECK(gidx_ok, "config %d: g_idx follows the quantization order", k);
        CHECK(mt_gptq_packable(o->bits, ROWS, COLS), "packable");
        int pack = 32 / o->bits;
        int32_t *qw = calloc(COLS / pack * ROWS, 4), *qz = calloc((size_t)r.n_groups * ROWS / pack, 4);
        uint16_t *sc = calloc((size_t)r.n_groups * ROWS, 2);
        mt_gptq_pack(&r, qw, qz, sc);
        rc = mt_gptq_unpack_dequant(o->bits, ROWS, COLS, r.n_groups, qw, qz, sc, r.g_idx, un, "test layer", &err);
        CHECK(rc == 0 && !memcmp(un, dq, sizeof(float) * ROWS * COLS), "config %d: pack + unpack = dequant", k);
        /* the training op ({quantize-base} gptq) on the packed layer: row tiles of any size at any
         * row, into a wider row stride, give the import's dequantized weights bit for bit */
        int same = 1;
        const int64_t ld = COLS + 3;
        float *tile = malloc(sizeof(float) * ROWS * ld);
        for (int64_t r0 = 0, nr = 1; r0 < ROWS; r0 += nr, nr = nr * 2 + 1) {
            int64_t n = r0 + nr < ROWS ? nr : ROWS - r0;
            op_gptq_dequant_rows(BE, qw, qz, sc, r.g_idx, o->bits, ROWS, COLS, r0, n, ld, tile);
            for (int64_t i = 0; i < n; i++) same &= !memcmp(tile + i * ld, un + (r0 + i) * COLS, sizeof(float) * COLS);
        }
        free(tile);
        CHECK(same, "config %d: op_gptq_dequant_rows's row tiles = the unpacked weights", k);
        if (dump) {
            int64_t c4[4] = {o->bits, o->group_size, o->act_order, o->sym};
            fwrite(c4, 8, 4, dump);
            fwrite(&o->damp, 8, 1, dump);
            fwrite(r.q, 1, ROWS * COLS, dump);
            fwrite(r.scales, 4, (size_t)r.n_groups * ROWS, dump);
            fwrite(r.zeros, 4, (size_t)r.n_groups * ROWS, dump);
            fwrite(r.g_idx, 4, COLS, dump);
            fwrite(r.perm, 4, COLS, dump);
        }
        free(qw), free(qz), free(sc);
        mt_gptq_result_free(&r);
    }
    /* the op on a packed layer of more groups than it tables per row (1024 groups of one column,
     * act-order-like g_idx): random codes, zero points and scales against the unpacker */
    for (int bits = 4; bits <= 8; bits += 4) {
        enum { R = 16, C = 1024 };
        int pack = 32 / bits;
        int32_t *qw = malloc(sizeof(int32_t) * C / pack * R), *qz = malloc(sizeof(int32_t) * C * R / pack);
        int32_t *gi = malloc(sizeof(int32_t) * C);
        uint16_t *sc = malloc(sizeof(uint16_t) * C * R);
        float *a = malloc(sizeof(float) * R * C), *b = malloc(sizeof(float) * R * C);
        uint64_t st = 12345;
        for (int i = 0; i < C / pack * R; i++) qw[i] = (int32_t)(uint32_t)rng_next(&st);
        for (int i = 0; i < C * R / pack; i++) qz[i] = (int32_t)(uint32_t)rng_next(&st);
        for (int i = 0; i < C * R; i++) sc[i] = mt_fp32_to_fp16(0.001f + (float)(rng_next(&st) % 1000) * 1e-5f);
        for (int c = 0; c < C; c++) gi[c] = (c * 37 + 11) % C; /* a permutation of the groups */
        mt_error e2;
        int rc = mt_gptq_unpack_dequant(bits, R, C, C, qw, qz, sc, gi, a, "wide layer", &e2);
        op_gptq_dequant_rows(BE, qw, qz, sc, gi, bits, R, C, 3, R - 3, C, b + 3 * C);
        CHECK(rc == 0 && !memcmp(a + 3 * C, b + 3 * C, sizeof(float) * (R - 3) * C),
              "%d bits, %d groups: op_gptq_dequant_rows = the unpacker", bits, C);
        free(qw), free(qz), free(gi), free(sc), free(a), free(b);
    }
    /* bad options and a Hessian that damping cannot save */
    mt_error err;
    mt_gptq_result r;
    mt_gptq_opts bad = {3, 32, 0, 1, 0.01};
    CHECK(mt_gptq_quantize(&bad, w, ROWS, COLS, Hc, "t", &r, &err) == -1 && strstr(err.msg, "{bits} must be 4 or 8"),
          "%s", err.msg);
    bad = (mt_gptq_opts){4, 48, 0, 1, 0.01};
    CHECK(mt_gptq_quantize(&bad, w, ROWS, COLS, Hc, "t", &r, &err) == -1 && strstr(err.msg, "does not divide"),
          "%s", err.msg);
    memset(Hc, 0, sizeof(double) * COLS * COLS);
    for (int c = 0; c < COLS; c++) Hc[c * COLS + c] = 1.0;
    Hc[1] = Hc[COLS] = 5.0; /* [[1, 5], [5, 1]] in the corner: indefinite */
    bad = (mt_gptq_opts){4, 32, 0, 1, 0.01};
    CHECK(mt_gptq_quantize(&bad, w, ROWS, COLS, Hc, "h.0.attn.c_attn.weight", &r, &err) == -1 &&
              strstr(err.msg, "not positive definite") && strstr(err.msg, "h.0.attn.c_attn.weight"),
          "%s", err.msg);
    free(w), free(x), free(dq), free(base), free(un), free(H), free(Hc);
    return 0;
}

int main(int argc, char **argv) {
    FILE *dump = NULL;
    if (argc == 3 && !strcmp(argv[1], "--dump") && !(dump = fopen(argv[2], "wb"))) return perror(argv[2]), 2;
    run(dump);
    if (dump && fclose(dump)) return perror(argv[2]), 2;
    TEST_MAIN_END("test_gptq");
}
