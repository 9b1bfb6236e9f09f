/* Attention of one block pair, the numeric step of ring attention (context
 * parallelism): the queries of a contiguous run of global positions
 * [q0, q0 + nq) against the keys and values of another run [k0, k0 + nk) of
 * the same samples, causal in global positions (key <= query).
 *
 * Forward merges the block into a running result by its log-sum-exp, so
 * blocks may arrive in any order (the ring's): with the block's row
 * statistics m (max scaled score), l = sum exp(s - m) (undropped) and
 * O_b = sum_j exp(s_j - m) keep_j V_j / l,
 *   lse' = log(exp(lse) + exp(m + log l)),
 *   O'   = O exp(lse - lse') + O_b exp(m + log l - lse');
 * starting from lse = -inf, O = 0 this is the softmax over the union of the
 * keys, dropped as one process drops it (the mask of query i and key j is
 * Philox of their global positions, as attention.c draws it).
 * Backward, given the final O and lse of each query row and
 * D_i = dO_i . O_i: P = exp(s - lse); dV_j += P keep dO_i;
 * dS = P (keep dO_i . V_j - D_i) scale; dQ_i += dS K_j; dK_j += dS Q_i. Each
 * block's contribution is independent of the others, so dK/dV can travel
 * with K/V around the ring and come home summed.
 *
 * Packed samples (mt_attn_dropout.doc_start, here of the block's query rows
 * in global positions) keep a query to the keys of its own document.
 *
 * As the BLAS path of attention.c: queries in blocks of BQ rows, the block's
 * scores S = scale Q K^T, O_b = P V, and in backward dP = dO V^T, dQ += dS K,
 * dK += dS^T Q, dV += Pd^T dO, each one GEMM over the keys the rows can see.
 * Work is parallel over (sample, kv head); the query heads of a group are
 * taken in order inside one task, so dK/dV do not depend on the thread count. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "ops/blas_threads.h"
#include "ops/vmath.h"
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#define BQ 64 /* query rows per block */

static int dropout_on(const mt_attn_dropout *drop) { return drop && drop->d.p > 0.0f; }

/* The first visible key of the block for query row i: its document's start
 * (packed samples; doc_start [B*nq] of the block's query rows, in global
 * positions), else the block's first key. */
static int first_key(const mt_attn_dropout *drop, int b, int nq, int i, int k0) {
    if (!drop || !drop->doc_start) return 0;
    int d = drop->doc_start[(size_t)b * nq + i] - k0;
    return d > 0 ? d : 0;
}

/* Keys [0, n) are at or before query position qp: n = min(nk, qp - k0 + 1). */
static int visible(int qp, int k0, int nk) { return qp - k0 + 1 < nk ? (qp - k0 + 1 > 0 ? qp - k0 + 1 : 0) : nk; }

static size_t per_thread(int nk) { return 2 * (size_t)BQ * nk + (size_t)nk + (size_t)BQ * 1024 + 64; }

static int threads_of(const mt_backend *be) { return be->nthreads > 1 ? be->nthreads : 1; }

size_t op_attention_block_scratch_floats(mt_backend *be, int B, int nk, int NKV) {
    MT_DISPATCH_RET(be, attention_block_scratch_floats, be, B, nk, NKV);
    return per_thread(nk) * (size_t)threads_of(be);
}

void op_attention_block_forward(mt_backend *be, float *out, float *lse, const float *q, size_t ldq, const float *k,
                                const float *v, size_t ldkv, int B, int nq, int nk, int q0, int k0, int NH, int NKV,
                                int HS, const mt_attn_dropout *drop, float *scratch) {
    MT_DISPATCH(be, attention_block_forward, be, out, lse, q, ldq, k, v, ldkv, B, nq, nk, q0, k0, NH, NKV, HS, drop,
                scratch);
    if (k0 > q0 + nq - 1) return; /* every key after every query */
    const int grp = NH / NKV, C = NH * HS, nt = threads_of(be);
    const float scale = 1.0f / sqrtf((float)HS);
    const int use_drop = dropout_on(drop);
    int saved = mt_blas_threads_enter();
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int task = 0; task < B * NKV; task++) {
        const int b = task / NKV, kvh = task % NKV;
        float *S = scratch + per_thread(nk) * (size_t)omp_get_thread_num(), *keep = S + 2 * (size_t)BQ * nk;
        float *Ob = keep + nk, rsum[BQ];
        const float *K = k + (size_t)b * nk * ldkv + (size_t)kvh * HS, *V = v + (size_t)b * nk * ldkv + (size_t)kvh * HS;
        for (int h = kvh * grp; h < (kvh + 1) * grp; h++)
            for (int i0 = 0; i0 < nq; i0 += BQ) {
                const int i1 = i0 + BQ < nq ? i0 + BQ : nq, nb = i1 - i0, nmax = visible(q0 + i1 - 1, k0, nk);
                if (nmax <= 0) continue;
                const float *Q = q + ((size_t)b * nq + i0) * ldq + (size_t)h * HS;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, nmax, HS, scale, Q, (int)ldq, K, (int)ldkv,
                            0.0f, S, nmax);
                for (int i = i0; i < i1; i++) {
                    float *s = S + (size_t)(i - i0) * nmax;
                    const int n = visible(q0 + i, k0, nk), j0 = first_key(drop, b, nq, i, k0);
                    if (n <= j0) { /* no key of this block: the row takes no part */
                        memset(s, 0, (size_t)nmax * sizeof(float));
                        rsum[i - i0] = 0.0f;
                        continue;
                    }
                    float mx = -INFINITY, sum = 0.0f;
                    for (int j = j0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
                    if (use_drop)
                        mt_dropout_row_scales(keep + j0, &drop->d, drop->sample_ids[b], (uint32_t)(q0 + i),
                                              (uint32_t)(drop->head0 + h), (uint32_t)(k0 + j0), n - j0);
                    for (int j = j0; j < n; j++) {
                        float e = mt_vexpf(s[j] - mx);
                        sum += e;
                        s[j] = use_drop ? e * keep[j] : e;
                    }
                    for (int j = 0; j < j0; j++) s[j] = 0.0f;
                    for (int j = n; j < nmax; j++) s[j] = 0.0f;
                    rsum[i - i0] = sum;
                    S[(size_t)BQ * nmax + (i - i0)] = mx; /* the row's max, beside the block */
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, HS, nmax, 1.0f, S, nmax, V, (int)ldkv, 0.0f,
                            Ob, HS);
                for (int i = i0; i < i1; i++) {
                    const float sum = rsum[i - i0];
                    if (sum == 0.0f) continue;
                    float *o = out + ((size_t)b * nq + i) * C + (size_t)h * HS, *lp = lse + ((size_t)b * NH + h) * nq + i;
                    const float lb = S[(size_t)BQ * nmax + (i - i0)] + logf(sum);
                    const float lnew = *lp == -INFINITY ? lb : fmaxf(*lp, lb) + log1pf(expf(-fabsf(*lp - lb)));
                    const float wa = *lp == -INFINITY ? 0.0f : expf(*lp - lnew), wb = expf(lb - lnew) / sum;
                    const float *ob = Ob + (size_t)(i - i0) * HS;
                    for (int e = 0; e < HS; e++) o[e] = o[e] * wa + ob[e] * wb;
                    *lp = lnew;
                }
            }
    }
    mt_blas_threads_leave(saved);
}

void op_attention_block_backward(mt_backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                                 const float *lse, const float *q, size_t ldq, const float *k, const float *v,
                                 size_t ldkv, int B, int nq, int nk, int q0, int k0, int NH, int NKV, int HS,
                                 const mt_attn_dropout *drop, float *scratch) {
    MT_DISPATCH(be, attention_block_backward, be, dq, dk, dv, dout, out, lse, q, ldq, k, v, ldkv, B, nq, nk, q0, k0,
                NH, NKV, HS, drop, scratch);
    if (k0 > q0 + nq - 1) return;
    const int grp = NH / NKV, C = NH * HS, nt = threads_of(be);
    const float scale = 1.0f / sqrtf((float)HS);
    const int use_drop = dropout_on(drop);
    int saved = mt_blas_threads_enter();
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int task = 0; task < B * NKV; task++) {
        const int b = task / NKV, kvh = task % NKV;
        float *S = scratch + per_thread(nk) * (size_t)omp_get_thread_num(), *dP = S + (size_t)BQ * nk;
        float *keep = dP + (size_t)BQ * nk;
        const size_t kvo = (size_t)b * nk * ldkv + (size_t)kvh * HS;
        const float *K = k + kvo, *V = v + kvo;
        float *dK = dk + kvo, *dV = dv + kvo;
        for (int h = kvh * grp; h < (kvh + 1) * grp; h++)
            for (int i0 = 0; i0 < nq; i0 += BQ) {
                const int i1 = i0 + BQ < nq ? i0 + BQ : nq, nb = i1 - i0, nmax = visible(q0 + i1 - 1, k0, nk);
                if (nmax <= 0) continue;
                const size_t qo = ((size_t)b * nq + i0) * ldq + (size_t)h * HS, oo = ((size_t)b * nq + i0) * C + (size_t)h * HS;
                const float *Q = q + qo, *dO = dout + oo;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, nmax, HS, scale, Q, (int)ldq, K, (int)ldkv,
                            0.0f, S, nmax);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, nmax, HS, 1.0f, dO, C, V, (int)ldkv, 0.0f, dP,
                            nmax);
                for (int i = i0; i < i1; i++) {
                    float *s = S + (size_t)(i - i0) * nmax, *dp = dP + (size_t)(i - i0) * nmax;
                    const int n = visible(q0 + i, k0, nk), j0 = first_key(drop, b, nq, i, k0);
                    const float l = lse[((size_t)b * NH + h) * nq + i];
                    const float *doi = dout + ((size_t)b * nq + i) * C + (size_t)h * HS;
                    const float *oi = out + ((size_t)b * nq + i) * C + (size_t)h * HS;
                    float D = 0.0f;
                    for (int e = 0; e < HS; e++) D += doi[e] * oi[e];
                    if (use_drop && n > j0)
                        mt_dropout_row_scales(keep + j0, &drop->d, drop->sample_ids[b], (uint32_t)(q0 + i),
                                              (uint32_t)(drop->head0 + h), (uint32_t)(k0 + j0), n - j0);
                    for (int j = 0; j < nmax; j++) {
                        if (j < j0 || j >= n) { /* masked: no gradient */
                            s[j] = dp[j] = 0.0f;
                            continue;
                        }
                        const float p = mt_vexpf(s[j] - l), kp = use_drop ? keep[j] : 1.0f;
                        dp[j] = p * (dp[j] * kp - D) * scale; /* dS */
                        s[j] = p * kp;                         /* Pd */
                    }
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, HS, nmax, 1.0f, dP, nmax, K, (int)ldkv, 1.0f,
                            dq + qo, (int)ldq);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nmax, HS, nb, 1.0f, dP, nmax, Q, (int)ldq, 1.0f, dK,
                            (int)ldkv);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nmax, HS, nb, 1.0f, S, nmax, dO, C, 1.0f, dV,
                            (int)ldkv);
            }
    }
    mt_blas_threads_leave(saved);
}

void op_attention_block_start(mt_backend *be, float *out, float *lse, size_t n_out, size_t n_lse) {
    MT_DISPATCH(be, attention_block_start, be, out, lse, n_out, n_lse);
    for (size_t i = 0; i < n_out; i++) out[i] = 0.0f;
    for (size_t i = 0; i < n_lse; i++) lse[i] = -INFINITY;
}
