/* Causal self-attention core, multi-head and grouped-query, fp32, on BLAS:
 * the path for head sizes the flash kernels (attention_flash.c) do not
 * take, and the reference they are tested against. op_attention_forward_gqa
 * / backward_gqa pick; op_attention_forward/backward are their NKV == NH
 * case.
 *
 * Layout: a qkv row is [Q: NH*HS | K: NKV*HS | V: NKV*HS] (W = (NH + 2 NKV)
 * HS floats); query head h reads kv head h / g, g = NH/NKV (Hugging Face's
 * repeat_kv, without the copy: the shared head is read in place).
 *
 * Memory choice: no T x T matrix is kept between forward and backward. The
 * forward pass saves only lse[B,NH,T] (log-sum-exp of each query row's
 * scaled, masked scores); backward recomputes the scores S = scale Q K^T
 * and P = exp(S - lse), and regenerates the dropout mask from the Philox
 * stream. Work is parallel over (batch, query head) pairs; each thread uses
 * its own slice of the caller's scratch:
 *   Q, K, V, dO, dQ, dK, dV   7 * T * HS  (the head gathered contiguously)
 *   S, dP                     2 * BQ * T  (one block of BQ query rows)
 *   row scales, 1/rowsum      T + 4, BQ
 * so the workspace is O(threads * T * (HS + BQ)), not O(B * NH * T^2); the
 * grouped-query backward adds the partial dK/dV slots of attention_impl.h
 * in front of it.
 * Query rows are processed in blocks of BQ; block [i0, i1) only needs keys
 * [0, i1), which halves the GEMM work of a full T x T product.
 *
 * forward per block: S = scale Q_b K^T; row softmax over keys j <= i (lse
 *   of the undropped softmax is saved); Pd = P * dropout scale; O_b = Pd V
 *   (computed as diag(1/rowsum) (exp(S - max) * dropout scale) V).
 * backward per block: S and P recomputed; dPd = dO_b V^T; dP = dPd * scale;
 *   D_i = sum_j Pd_ij dPd_ij = dO_i . O_i (computed from the saved output);
 *   dS = P (dP - D); dV += Pd^T dO_b; dQ_b = scale dS K; dK += scale dS^T Q_b.
 * Each (b, head) task is computed independently by one thread and writes
 * its own outputs, so results do not depend on the thread count. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "ops/attention_impl.h"
#include "core/error.h"
#include "ops/vmath.h"
#include "ops/blas_threads.h"
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#ifndef BQ
#define BQ 64 /* query rows per block */
#endif

static size_t per_thread_floats(int T, int HS) {
    size_t n = 7 * (size_t)T * HS + 2 * (size_t)BQ * T + (size_t)T + 4 + BQ;
    return (n + 15) & ~(size_t)15;
}

size_t op_attention_blas_scratch_floats(mt_backend *be, int B, int T, int NH, int NKV, int HS) {
    size_t nthreads = be->nthreads > 1 ? (size_t)be->nthreads : 1;
    return op_attention_gqa_partial_floats(B, T, NH, NKV, HS) + per_thread_floats(T, HS) * (size_t)nthreads;
}

size_t op_attention_scratch_floats_gqa(mt_backend *be, int B, int T, int NH, int NKV, int HS) {
    MT_DISPATCH_RET(be, attention_scratch_floats_gqa, be, B, T, NH, NKV, HS);
    if (op_attention_flash_supported(be, T, HS)) return op_attention_flash_scratch_floats(be, B, T, NH, NKV, HS);
    return op_attention_blas_scratch_floats(be, B, T, NH, NKV, HS);
}

void op_attention_forward_gqa(mt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                              int HS, const mt_attn_dropout *drop, float *scratch) {
    MT_DISPATCH(be, attention_forward_gqa, be, out, lse, qkv, B, T, NH, NKV, HS, drop, scratch);
    if (NKV < 1 || NH % NKV) mt_die("attention: %d query heads do not split into %d kv groups", NH, NKV);
    if (op_attention_flash_supported(be, T, HS))
        op_attention_flash_forward(be, out, lse, qkv, B, T, NH, NKV, HS, drop, scratch);
    else op_attention_blas_forward(be, out, lse, qkv, B, T, NH, NKV, HS, drop, scratch);
}

void op_attention_backward_gqa(mt_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, int B, int T, int NH, int NKV, int HS, const mt_attn_dropout *drop,
                               float *scratch) {
    MT_DISPATCH(be, attention_backward_gqa, be, dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS, drop, scratch);
    if (NKV < 1 || NH % NKV) mt_die("attention: %d query heads do not split into %d kv groups", NH, NKV);
    if (op_attention_flash_supported(be, T, HS))
        op_attention_flash_backward(be, dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS, drop, scratch);
    else op_attention_blas_backward(be, dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS, drop, scratch);
}

size_t op_attention_scratch_floats(mt_backend *be, int B, int T, int NH, int HS) {
    MT_DISPATCH_RET(be, attention_scratch_floats, be, B, T, NH, HS);
    return op_attention_scratch_floats_gqa(be, B, T, NH, NH, HS);
}

void op_attention_forward(mt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH, int HS,
                          const mt_attn_dropout *drop, float *scratch) {
    MT_DISPATCH(be, attention_forward, be, out, lse, qkv, B, T, NH, HS, drop, scratch);
    op_attention_forward_gqa(be, out, lse, qkv, B, T, NH, NH, HS, drop, scratch);
}

void op_attention_backward(mt_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                           const float *lse, int B, int T, int NH, int HS, const mt_attn_dropout *drop,
                           float *scratch) {
    MT_DISPATCH(be, attention_backward, be, dqkv, dout, qkv, out, lse, B, T, NH, HS, drop, scratch);
    op_attention_backward_gqa(be, dqkv, dout, qkv, out, lse, B, T, NH, NH, HS, drop, scratch);
}

static int dropout_on(const mt_attn_dropout *drop) { return drop && drop->d.p > 0.0f; }

/* Copies column block [off, off+HS) of T rows with stride ld into dst[T,HS]. */
static void gather(float *dst, const float *src, int T, int HS, size_t ld) {
    for (int t = 0; t < T; t++) memcpy(dst + (size_t)t * HS, src + (size_t)t * ld, (size_t)HS * sizeof(float));
}
static void scatter(float *dst, const float *src, int T, int HS, size_t ld) {
    for (int t = 0; t < T; t++) memcpy(dst + (size_t)t * ld, src + (size_t)t * HS, (size_t)HS * sizeof(float));
}

void op_attention_blas_forward(mt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                               int HS, const mt_attn_dropout *drop, float *scratch) {
    const int C = NH * HS, grp = NH / NKV;
    const size_t W = (size_t)(NH + 2 * NKV) * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const int use_drop = dropout_on(drop);
    const int32_t *doc = drop ? drop->doc_start : NULL;
    const int nt = be->nthreads > 1 ? be->nthreads : 1;
    const size_t ptf = per_thread_floats(T, HS);
    float *wsbase = scratch + op_attention_gqa_partial_floats(B, T, NH, NKV, HS);
    int saved = mt_blas_threads_enter();
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int task = 0; task < B * NH; task++) {
        const int b = task / NH, h = task % NH, kv = h / grp;
        float *ws = wsbase + ptf * (size_t)omp_get_thread_num();
        float *Q = ws, *K = Q + (size_t)T * HS, *V = K + (size_t)T * HS, *O = V + (size_t)T * HS;
        float *S = ws + 7 * (size_t)T * HS, *rs = S + 2 * (size_t)BQ * T, *rinv = rs + T + 4;
        const float *row0 = qkv + (size_t)b * T * W;
        gather(Q, row0 + (size_t)h * HS, T, HS, W);
        gather(K, row0 + (size_t)(NH + kv) * HS, T, HS, W);
        gather(V, row0 + (size_t)(NH + NKV + kv) * HS, T, HS, W);
        float *lrow = lse + ((size_t)b * NH + h) * T;
        for (int i0 = 0; i0 < T; i0 += BQ) {
            const int i1 = i0 + BQ < T ? i0 + BQ : T, nb = i1 - i0;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, i1, HS, scale, Q + (size_t)i0 * HS, HS, K,
                        HS, 0.0f, S, T);
            for (int i = i0; i < i1; i++) {
                float *s = S + (size_t)(i - i0) * T;
                const int n = i + 1, lo = doc ? doc[(size_t)b * T + i] : 0; /* keys lo..i: its document's */
                float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
                for (int j = lo; j < n; j++) mx = s[j] > mx ? s[j] : mx;
                float sum = 0.0f;
                if (use_drop) {
                    mt_dropout_block_scales(rs, &drop->d, drop->sample_ids[b], (uint32_t)i,
                                            (uint32_t)(drop->head0 + h), 0, (n + 3) / 4);
#pragma omp simd reduction(+ : sum)
                    for (int j = lo; j < n; j++) {
                        float e = mt_vexpf(s[j] - mx);
                        s[j] = e * rs[j];
                        sum += e;
                    }
                } else {
#pragma omp simd reduction(+ : sum)
                    for (int j = lo; j < n; j++) {
                        float e = mt_vexpf(s[j] - mx);
                        s[j] = e;
                        sum += e;
                    }
                }
                for (int j = 0; j < lo; j++) s[j] = 0.0f;
                lrow[i] = mx + logf(sum);
                rinv[i - i0] = 1.0f / sum;
                for (int j = n; j < i1; j++) s[j] = 0.0f;
            }
            /* O_b = diag(1/sum) (E * mask) V: the softmax normalisation is
             * applied to the HS outputs instead of the i+1 probabilities */
            float *Ob = O + (size_t)i0 * HS;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, HS, i1, 1.0f, S, T, V, HS, 0.0f, Ob, HS);
            for (int r = 0; r < nb; r++) {
#pragma omp simd
                for (int k = 0; k < HS; k++) Ob[(size_t)r * HS + k] *= rinv[r];
            }
        }
        scatter(out + (size_t)b * T * C + (size_t)h * HS, O, T, HS, (size_t)C);
    }
    mt_blas_threads_leave(saved);
}

void op_attention_blas_backward(mt_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                                const float *lse, int B, int T, int NH, int NKV, int HS, const mt_attn_dropout *drop,
                                float *scratch) {
    const int C = NH * HS, grp = NH / NKV;
    const size_t W = (size_t)(NH + 2 * NKV) * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const int use_drop = dropout_on(drop);
    const int32_t *doc = drop ? drop->doc_start : NULL;
    const int nt = be->nthreads > 1 ? be->nthreads : 1;
    const size_t ptf = per_thread_floats(T, HS);
    float *part = scratch, *wsbase = scratch + op_attention_gqa_partial_floats(B, T, NH, NKV, HS);
    int saved = mt_blas_threads_enter();
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int task = 0; task < B * NH; task++) {
        const int b = task / NH, h = task % NH, kv = h / grp;
        float *ws = wsbase + ptf * (size_t)omp_get_thread_num();
        const size_t TH = (size_t)T * HS;
        float *Q = ws, *K = Q + TH, *V = K + TH, *dO = V + TH, *dQ = dO + TH, *dK = dQ + TH, *dV = dK + TH;
        float *S = ws + 7 * TH, *dP = S + (size_t)BQ * T, *rs = dP + (size_t)BQ * T;
        const float *row0 = qkv + (size_t)b * T * W;
        const float *obase = out + (size_t)b * T * C + (size_t)h * HS;
        gather(Q, row0 + (size_t)h * HS, T, HS, W);
        gather(K, row0 + (size_t)(NH + kv) * HS, T, HS, W);
        gather(V, row0 + (size_t)(NH + NKV + kv) * HS, T, HS, W);
        gather(dO, dout + (size_t)b * T * C + (size_t)h * HS, T, HS, (size_t)C);
        memset(dK, 0, 2 * TH * sizeof(float));
        const float *lrow = lse + ((size_t)b * NH + h) * T;
        for (int i0 = 0; i0 < T; i0 += BQ) {
            const int i1 = i0 + BQ < T ? i0 + BQ : T, nb = i1 - i0;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, i1, HS, scale, Q + (size_t)i0 * HS, HS, K,
                        HS, 0.0f, S, T);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, i1, HS, 1.0f, dO + (size_t)i0 * HS, HS, V,
                        HS, 0.0f, dP, T);
            for (int i = i0; i < i1; i++) {
                float *s = S + (size_t)(i - i0) * T, *dp = dP + (size_t)(i - i0) * T;
                const int n = i + 1;
                const float *o = obase + (size_t)i * C, *g = dO + (size_t)i * HS;
                float D = 0.0f;
                for (int k = 0; k < HS; k++) D += g[k] * o[k];
                const float L = lrow[i];
                const int lo = doc ? doc[(size_t)b * T + i] : 0;
                for (int j = 0; j < lo; j++) s[j] = dp[j] = 0.0f;
                if (use_drop) {
                    mt_dropout_block_scales(rs, &drop->d, drop->sample_ids[b], (uint32_t)i,
                                            (uint32_t)(drop->head0 + h), 0, (n + 3) / 4);
#pragma omp simd
                    for (int j = lo; j < n; j++) {
                        float p = mt_vexpf(s[j] - L);
                        float pd = p * rs[j];
                        dp[j] = p * (dp[j] * rs[j] - D);
                        s[j] = pd;
                    }
                } else {
#pragma omp simd
                    for (int j = lo; j < n; j++) {
                        float p = mt_vexpf(s[j] - L);
                        dp[j] = p * (dp[j] - D);
                        s[j] = p;
                    }
                }
                for (int j = n; j < i1; j++) s[j] = dp[j] = 0.0f;
            }
            /* dV[0:i1] += Pd^T dO_b ; dQ_b = scale dS K ; dK[0:i1] += scale dS^T Q_b */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, HS, nb, 1.0f, S, T, dO + (size_t)i0 * HS, HS,
                        1.0f, dV, HS);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, HS, i1, scale, dP, T, K, HS, 0.0f,
                        dQ + (size_t)i0 * HS, HS);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, HS, nb, scale, dP, T, Q + (size_t)i0 * HS, HS,
                        1.0f, dK, HS);
        }
        scatter(dqkv + (size_t)b * T * W + (size_t)h * HS, dQ, T, HS, W);
        size_t ldk, ldv;
        float *kdst = op_attention_gqa_dkv_dst(dqkv, part, b, h, 0, B, T, NH, NKV, HS, &ldk);
        float *vdst = op_attention_gqa_dkv_dst(dqkv, part, b, h, 1, B, T, NH, NKV, HS, &ldv);
        scatter(kdst, dK, T, HS, ldk);
        scatter(vdst, dV, T, HS, ldv);
    }
    mt_blas_threads_leave(saved);
    op_attention_gqa_reduce(be, dqkv, part, B, T, NH, NKV, HS);
}
