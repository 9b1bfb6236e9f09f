/* Grouped-query attention's dK/dV slots and their reduction, shared by the
 * BLAS and flash backward passes (ops/attention_gqa.h). */
#include "ops/attention_gqa.h"

/* Slot layout: [kind: dK, dV][b][kv][j - 1][T][HS], j = 1..g-1. */
size_t op_attention_gqa_partial_floats(int B, int T, int NH, int NKV, int HS) {
    if (NKV >= NH) return 0;
    size_t n = 2 * (size_t)B * (size_t)(NH - NKV) * (size_t)T * (size_t)HS;
    return (n + 15) & ~(size_t)15;
}

float *op_attention_gqa_dkv_dst(float *dqkv, float *part, int b, int h, int kind, int B, int T, int NH, int NKV,
                                int HS, size_t *ld) {
    const int g = NH / NKV, kv = h / g, j = h % g;
    const size_t W = (size_t)(NH + 2 * NKV) * HS;
    if (j == 0) {
        *ld = W;
        return dqkv + (size_t)b * T * W + (size_t)(NH + kind * NKV + kv) * HS;
    }
    const size_t TH = (size_t)T * HS, nslot = (size_t)B * NKV * (g - 1);
    *ld = (size_t)HS;
    return part + (kind * nslot + ((size_t)b * NKV + kv) * (g - 1) + (j - 1)) * TH;
}

void op_attention_gqa_reduce(mt_backend *be, float *dqkv, const float *part, int B, int T, int NH, int NKV, int HS) {
    const int g = NH / NKV;
    if (g == 1) return;
    const size_t W = (size_t)(NH + 2 * NKV) * HS, TH = (size_t)T * HS, nslot = (size_t)B * NKV * (g - 1);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < B * T; n++) {
        const int b = n / T, t = n % T;
        for (int kind = 0; kind < 2; kind++)
            for (int kv = 0; kv < NKV; kv++) {
                float *dst = dqkv + (size_t)n * W + (size_t)(NH + kind * NKV + kv) * HS;
                const float *src = part + (kind * nslot + ((size_t)b * NKV + kv) * (g - 1)) * TH + (size_t)t * HS;
                for (int j = 0; j < g - 1; j++) {
#pragma omp simd
                    for (int d = 0; d < HS; d++) dst[d] += src[(size_t)j * TH + d];
                }
            }
    }
}
