/* LLM.int8()'s decomposition (ops/matmul_int8.h) on x [24, 96] with planted
 * outlier features (columns 5 and 40 reach +-20, column 77 once crosses the
 * threshold in one row only), a weight [40, 96] stored as int8 rows
 * (quant/int8.h):
 *  - the outlier columns found are exactly those (threshold 6);
 *  - with a threshold above every activation none is found, and the result
 *    equals a plain int8 x int8 product computed here from its definition;
 *  - the decomposition's error against the fp32 product of x and the
 *    dequantized weight is far below the plain int8 product's (the outliers
 *    no longer set the rows' scales).
 * `test_int8_outliers --dump FILE` writes x, the codes, SCB, the outputs at
 * threshold 6 and above every activation, an output gradient and the input
 * gradient the model's backward computes (dout . dequantized W, with
 * models/unit_ops.c's quant_backward's calls) for tests/int8_outlier_ref.py:
 *   int64 N, C, R; float32 threshold; float32 x[N, C]; int8 q[R, C];
 *   float32 scb[R], out6[N, R], out_inf[N, R], dout[N, R], dinp[N, C] */
#include <stdint.h>
#include <stdlib.h>
#include "ops/matmul_int8.h"
#include "quant/int8.h"
#include "testlib.h"

enum { N = 24, C = 96, R = 40 };

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / den);
}

int main(int argc, char **argv) {
    float *x = falloc(N * C), *w = falloc(R * C), *wd = falloc(R * C), *out6 = falloc(N * R), *outi = falloc(N * R),
          *ref = falloc(N * R), *plain = falloc(N * R), *dout = falloc(N * R), *dinp = falloc(N * C);
    uint64_t s = 3;
    for (int i = 0; i < N * C; i++) x[i] = 1.5f * rng_sym(&s);
    for (int i = 0; i < N; i++) {
        x[i * C + 5] = 20.0f * rng_sym(&s) + (i % 2 ? 8.0f : -8.0f);
        x[i * C + 40] = 12.0f + 4.0f * rng_sym(&s);
    }
    x[7 * C + 77] = -6.5f;
    for (int i = 0; i < R * C; i++) w[i] = 0.1f * rng_sym(&s);
    for (int i = 0; i < N * R; i++) dout[i] = rng_sym(&s);
    mt_int8w q;
    mt_error err;
    CHECK(mt_int8w_init(&q, w, R, C, &err) == 0, "%s", err.msg);
    mt_int8w_dequant(&q, wd);
    mt_backend ob = mt_backend_cpu(MT_GEMM_OPENBLAS);
    void *scratch = aligned_alloc(64, op_int8_outlier_scratch_bytes(&ob, N, C));
    int n6 = op_int8_outlier_matmul(&ob, out6, R, x, N, C, q.q, q.scb, R, 6.0f, scratch);
    int ni = op_int8_outlier_matmul(&ob, outi, R, x, N, C, q.q, q.scb, R, 1e30f, scratch);
    CHECK(n6 == 3 && ni == 0, "outlier columns: %d at threshold 6 (want 3: 5, 40, 77), %d above every activation", n6, ni);
    /* the plain int8 product from its definition */
    for (int i = 0; i < N; i++) {
        float a = 0;
        for (int j = 0; j < C; j++) a = fmaxf(a, fabsf(x[i * C + j]));
        for (int o = 0; o < R; o++) {
            int32_t acc = 0;
            for (int j = 0; j < C; j++) acc += (int32_t)nearbyintf(x[i * C + j] * (127.0f / a)) * q.q[o * C + j];
            plain[i * R + o] = (float)acc * a * q.scb[o] * (float)6.2000124000248e-05;
        }
    }
    CHECK(!memcmp(plain, outi, sizeof(float) * N * R), "no outliers: the plain int8 x int8 product bit for bit");
    for (int i = 0; i < N; i++)
        for (int o = 0; o < R; o++) ref[i * R + o] = (float)dotw(x + i * C, wd + o * C, C);
    double e6 = rel_err(out6, ref, N * R), ei = rel_err(outi, ref, N * R);
    printf("relative error against fp32 x . dequantized W: threshold 6 %.3g, plain int8 x int8 %.3g\n", e6, ei);
    CHECK(e6 < ei / 5, "the decomposition (%.3g) is far closer than plain int8 (%.3g)", e6, ei);
    /* the input gradient as the model's backward computes it: rows of the
     * weight dequantized (mt_int8w_dequant_rows), dout . W in an sgemm */
    float *tile = falloc(R * C);
    mt_int8w_dequant_rows(&q, 0, R, C, tile);
    op_sgemm(&ob, 'N', 'N', N, C, R, 1.0f, dout, R, tile, C, 0.0f, dinp, C);
    free(tile);
    if (argc == 3 && !strcmp(argv[1], "--dump")) {
        FILE *f = fopen(argv[2], "wb");
        if (!f) return perror(argv[2]), 2;
        int64_t h[3] = {N, C, R};
        float th = 6.0f;
        fwrite(h, 8, 3, f);
        fwrite(&th, 4, 1, f);
        fwrite(x, 4, N * C, f);
        fwrite(q.q, 1, R * C, f);
        fwrite(q.scb, 4, R, f);
        fwrite(out6, 4, N * R, f);
        fwrite(outi, 4, N * R, f);
        fwrite(dout, 4, N * R, f);
        fwrite(dinp, 4, N * C, f);
        if (fclose(f)) return perror(argv[2]), 2;
    }
    mt_int8w_free(&q);
    free(scratch);
    free(x), free(w), free(wd), free(out6), free(outi), free(ref), free(plain), free(dout), free(dinp);
    TEST_MAIN_END("test_int8_outliers");
}
