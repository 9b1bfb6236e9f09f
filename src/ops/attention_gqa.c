/* Grouped-query attention: rows of qkv hold [Q: NH*HS | K: NKV*HS |
 * V: NKV*HS] and query head h reads kv head h / (NH/NKV). Computed as
 * Hugging Face's repeat_kv does: the kv heads are expanded into a full
 * [Q | K | V] row of NH heads each in the caller's scratch and the
 * multi-head kernels (flash or BLAS, attention.c) run on that; the
 * backward sums the expanded heads' dK and dV over each group, in head
 * order, so the result does not depend on threads. NKV == NH is the plain
 * kernel itself, without the copy. The cost of the expansion: two N x 3 x
 * NH*HS buffers of scratch and a copy per call (a native GQA kernel would
 * read the shared heads in place). */
#include "ops/ops.h"
#include <string.h>

size_t op_attention_scratch_floats_gqa(int B, int T, int NH, int NKV, int HS, int nthreads) {
    size_t inner = op_attention_scratch_floats(B, T, NH, HS, nthreads);
    if (NKV == NH) return inner;
    return inner + 2 * (size_t)B * (size_t)T * 3 * (size_t)NH * (size_t)HS;
}

/* The full-head row layout of qkv in ex (N rows of 3 NH HS). */
static void expand(float *ex, const float *qkv, int N, int NH, int NKV, int HS) {
    size_t QW = (size_t)NH * HS, KW = (size_t)NKV * HS, in = QW + 2 * KW, out = 3 * QW;
    int g = NH / NKV;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *r = qkv + (size_t)i * in;
        float *e = ex + (size_t)i * out;
        memcpy(e, r, QW * sizeof(float));
        for (int h = 0; h < NH; h++) {
            memcpy(e + QW + (size_t)h * HS, r + QW + (size_t)(h / g) * HS, (size_t)HS * sizeof(float));
            memcpy(e + 2 * QW + (size_t)h * HS, r + QW + KW + (size_t)(h / g) * HS, (size_t)HS * sizeof(float));
        }
    }
}

void op_attention_forward_gqa(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV, int HS,
                              const mt_attn_dropout *drop, float *scratch) {
    if (NKV == NH) {
        op_attention_forward(out, lse, qkv, B, T, NH, HS, drop, scratch);
        return;
    }
    size_t ne = (size_t)B * T * 3 * NH * HS;
    expand(scratch, qkv, B * T, NH, NKV, HS);
    op_attention_forward(out, lse, scratch, B, T, NH, HS, drop, scratch + 2 * ne);
}

void op_attention_backward_gqa(float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                               int B, int T, int NH, int NKV, int HS, const mt_attn_dropout *drop, float *scratch) {
    if (NKV == NH) {
        op_attention_backward(dqkv, dout, qkv, out, lse, B, T, NH, HS, drop, scratch);
        return;
    }
    int N = B * T, g = NH / NKV;
    size_t ne = (size_t)N * 3 * NH * HS, QW = (size_t)NH * HS, KW = (size_t)NKV * HS;
    float *ex = scratch, *dex = scratch + ne;
    expand(ex, qkv, N, NH, NKV, HS);
    op_attention_backward(dex, dout, ex, out, lse, B, T, NH, HS, drop, scratch + 2 * ne);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *e = dex + (size_t)i * 3 * QW;
        float *r = dqkv + (size_t)i * (QW + 2 * KW);
        memcpy(r, e, QW * sizeof(float));
        for (int k = 0; k < NKV; k++)
            for (int part = 0; part < 2; part++) { /* dK, then dV: the group's heads summed in order */
                float *dst = r + QW + (size_t)part * KW + (size_t)k * HS;
                const float *src = e + (size_t)(1 + part) * QW + (size_t)k * g * HS;
                memcpy(dst, src, (size_t)HS * sizeof(float));
                for (int j = 1; j < g; j++)
                    for (int d = 0; d < HS; d++) dst[d] += src[(size_t)j * HS + d];
            }
    }
}
