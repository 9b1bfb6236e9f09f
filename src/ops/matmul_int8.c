/* LLM.int8()'s mixed-precision decomposition (see matmul_int8.h). */
#include "ops/matmul_int8.h"
#include "ops/kernel_table.h"
#include <dnnl.h>
#include <math.h>
#include <string.h>
#include "core/error.h"

#define INV127 ((float)7.874015718698502e-3)        /* quant/int8.h's dequantization constant */
#define INV127SQ ((float)6.2000124000248e-05)       /* 1 / 127^2, bitsandbytes' int8_mm_dequant constant */
#define WTILE 64                                    /* weight rows dequantized per outlier GEMM */
#define ITILE 256 /* weight rows per int8 x int8 GEMM (its int32 result: N x ITILE) */

static size_t up64(size_t b) { return (b + 63) / 64 * 64; }

size_t op_int8_outlier_scratch_bytes(mt_backend *be, int N, int C) {
    MT_DISPATCH_RET(be, int8_outlier_scratch_bytes, be, N, C);
    size_t n = (size_t)N, c = (size_t)C;
    return up64(n * c) /* xq */ + up64(n * 4) /* row absmax */ + up64(c * 4) /* outlier columns */ +
           up64(n * c * 4) /* outlier inputs */ + up64((size_t)WTILE * c * 4) /* dequantized weight tile */ +
           up64(n * ITILE * 4) /* int32 products of a weight row tile */;
}

int op_int8_outlier_matmul(mt_backend *be, float *out, int ldo, const float *x, int N, int C, const int8_t *wq,
                           const float *scb, int R, float threshold, void *scratch) {
    MT_DISPATCH_RET(be, int8_outlier_matmul, be, out, ldo, x, N, C, wq, scb, R, threshold, scratch);
    char *p = scratch;
    int8_t *xq = (int8_t *)p;
    p += up64((size_t)N * C);
    float *xa = (float *)p;
    p += up64((size_t)N * 4);
    int32_t *cols = (int32_t *)p;
    p += up64((size_t)C * 4);
    float *xsub = (float *)p;
    p += up64((size_t)N * C * 4);
    float *wt = (float *)p;
    p += up64((size_t)WTILE * C * 4);
    int32_t *acc = (int32_t *)p;
    /* the outlier columns, ascending: xq's first row serves as the flags */
    memset(xq, 0, (size_t)C);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < C; j++)
            if (fabsf(x[(size_t)i * C + j]) >= threshold) xq[j] = 1;
    int n_out = 0;
    for (int j = 0; j < C; j++)
        if (xq[j]) cols[n_out++] = j;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * C;
        float a = 0.0f;
        for (int j = 0; j < C; j++) {
            float v = fabsf(xi[j]);
            if (v < threshold && v > a) a = v;
        }
        xa[i] = a;
        int8_t *qi = xq + (size_t)i * C;
        float s = a > 0.0f ? 127.0f / a : 0.0f;
        for (int j = 0; j < C; j++) /* an element at or above the threshold lies in an outlier column: 0 */
            qi[j] = fabsf(xi[j]) < threshold ? (int8_t)nearbyintf(xi[j] * s) : 0;
        for (int k = 0; k < n_out; k++) {
            qi[cols[k]] = 0;
            xsub[(size_t)i * n_out + k] = xi[cols[k]];
        }
    }
    /* int8 x int8 with int32 accumulation on oneDNN (exact: the integer sums do not depend on its order) */
    for (int r0 = 0; r0 < R; r0 += ITILE) {
        int nr = R - r0 < ITILE ? R - r0 : ITILE;
        const int32_t zero = 0;
        dnnl_status_t st = dnnl_gemm_s8s8s32('N', 'T', 'F', N, nr, C, 1.0f, xq, C, 0, wq + (size_t)r0 * C, C, 0, 0.0f,
                                             acc, nr, &zero);
        if (st != dnnl_success)
            mt_die("oneDNN's int8 GEMM (dnnl_gemm_s8s8s32, %d x %d x %d) failed with status %d", N, nr, C, (int)st);
#pragma omp parallel for schedule(static)
        for (int i = 0; i < N; i++)
            for (int o = 0; o < nr; o++)
                out[(size_t)i * ldo + r0 + o] = (float)acc[(size_t)i * nr + o] * xa[i] * scb[r0 + o] * INV127SQ;
    }
    for (int r0 = 0; r0 < R && n_out > 0; r0 += WTILE) { /* out[:, r0..] += xsub . wt^T */
        int nr = R - r0 < WTILE ? R - r0 : WTILE;
        for (int o = 0; o < nr; o++)
            for (int k = 0; k < n_out; k++)
                wt[(size_t)o * n_out + k] = ((float)wq[(size_t)(r0 + o) * C + cols[k]] * scb[r0 + o]) * INV127;
        op_sgemm(be, 'N', 'T', N, nr, n_out, 1.0f, xsub, n_out, wt, n_out, 1.0f, out + r0, ldo);
    }
    return n_out;
}
