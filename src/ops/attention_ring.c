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
 * Work is parallel over (sample, kv head); the query heads of a group are
 * taken in order inside one task, so dK/dV do not depend on the thread count. */
#include "ops/ops.h"
#include <math.h>
#include <stdlib.h>

static int dropout_on(const mt_attn_dropout *drop) { return drop && drop->d.p > 0.0f; }

/* The first visible key of the block for query row i: its document's start
 * (packed samples; doc_start [B*nq] of the block's query rows, in global
 * positions), else the block's first key. */
static int first_key(const mt_attn_dropout *drop, int b, int nq, int i, int k0) {
    if (!drop || !drop->doc_start) return 0;
    int d = drop->doc_start[(size_t)b * nq + i] - k0;
    return d > 0 ? d : 0;
}

void op_attention_block_forward(float *out, float *lse, const float *q, size_t ldq, const float *k, const float *v,
                                size_t ldkv, int B, int nq, int nk, int q0, int k0, int NH, int NKV, int HS,
                                const mt_attn_dropout *drop, float *scratch) {
    if (k0 > q0 + nq - 1) return; /* every key after every query */
    const int grp = NH / NKV, C = NH * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const int use_drop = dropout_on(drop);
#pragma omp parallel for schedule(static)
    for (int task = 0; task < B * NKV; task++) {
        const int b = task / NKV, kvh = task % NKV;
        float *s = scratch + (size_t)task * 2 * (size_t)nk, *keep = s + nk;
        for (int h = kvh * grp; h < (kvh + 1) * grp; h++)
            for (int i = 0; i < nq; i++) {
                const int qp = q0 + i, n = qp - k0 + 1 < nk ? qp - k0 + 1 : nk; /* keys j0 <= j < n are visible */
                const int j0 = first_key(drop, b, nq, i, k0);
                if (n <= j0) continue;
                const float *qi = q + ((size_t)b * nq + i) * ldq + (size_t)h * HS;
                float mx = -INFINITY;
                for (int j = j0; j < n; j++) {
                    const float *kj = k + ((size_t)b * nk + j) * ldkv + (size_t)kvh * HS;
                    float d = 0.0f;
                    for (int e = 0; e < HS; e++) d += qi[e] * kj[e];
                    s[j] = d * scale;
                    mx = s[j] > mx ? s[j] : mx;
                }
                if (use_drop)
                    mt_dropout_row_scales(keep + j0, &drop->d, drop->sample_ids[b], (uint32_t)qp,
                                          (uint32_t)(drop->head0 + h), (uint32_t)(k0 + j0), n - j0);
                float sum = 0.0f;
                for (int j = j0; j < n; j++) {
                    float e = expf(s[j] - mx);
                    sum += e;
                    s[j] = use_drop ? e * keep[j] : e;
                }
                float *o = out + ((size_t)b * nq + i) * C + (size_t)h * HS;
                float *lp = lse + ((size_t)b * NH + h) * nq + i;
                const float lb = mx + logf(sum);
                const float lnew = *lp == -INFINITY ? lb : fmaxf(*lp, lb) + log1pf(expf(-fabsf(*lp - lb)));
                const float wa = *lp == -INFINITY ? 0.0f : expf(*lp - lnew), wb = expf(lb - lnew) / sum;
                for (int e = 0; e < HS; e++) {
                    float acc = 0.0f;
                    for (int j = j0; j < n; j++) acc += s[j] * v[((size_t)b * nk + j) * ldkv + (size_t)kvh * HS + e];
                    o[e] = o[e] * wa + acc * wb;
                }
                *lp = lnew;
            }
    }
}

void op_attention_block_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                                 const float *lse, const float *q, size_t ldq, const float *k, const float *v,
                                 size_t ldkv, int B, int nq, int nk, int q0, int k0, int NH, int NKV, int HS,
                                 const mt_attn_dropout *drop, float *scratch) {
    if (k0 > q0 + nq - 1) return;
    const int grp = NH / NKV, C = NH * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const int use_drop = dropout_on(drop);
#pragma omp parallel for schedule(static)
    for (int task = 0; task < B * NKV; task++) {
        const int b = task / NKV, kvh = task % NKV;
        float *keep = scratch + (size_t)task * 2 * (size_t)nk;
        for (int h = kvh * grp; h < (kvh + 1) * grp; h++)
            for (int i = 0; i < nq; i++) {
                const int qp = q0 + i, n = qp - k0 + 1 < nk ? qp - k0 + 1 : nk;
                const int j0 = first_key(drop, b, nq, i, k0);
                if (n <= j0) continue;
                const size_t ro = ((size_t)b * nq + i) * C + (size_t)h * HS;
                const float *qi = q + ((size_t)b * nq + i) * ldq + (size_t)h * HS, *doi = dout + ro, *oi = out + ro;
                float *dqi = dq + ((size_t)b * nq + i) * ldq + (size_t)h * HS;
                const float l = lse[((size_t)b * NH + h) * nq + i];
                float D = 0.0f;
                for (int e = 0; e < HS; e++) D += doi[e] * oi[e];
                if (use_drop)
                    mt_dropout_row_scales(keep + j0, &drop->d, drop->sample_ids[b], (uint32_t)qp,
                                          (uint32_t)(drop->head0 + h), (uint32_t)(k0 + j0), n - j0);
                for (int j = j0; j < n; j++) {
                    const size_t kr = ((size_t)b * nk + j) * ldkv + (size_t)kvh * HS;
                    const float *kj = k + kr, *vj = v + kr;
                    float sc = 0.0f, dpd = 0.0f;
                    for (int e = 0; e < HS; e++) sc += qi[e] * kj[e], dpd += doi[e] * vj[e];
                    const float p = expf(sc * scale - l), kp = use_drop ? keep[j] : 1.0f;
                    const float ds = p * (dpd * kp - D) * scale, pd = p * kp;
                    float *dkj = dk + kr, *dvj = dv + kr;
                    for (int e = 0; e < HS; e++) {
                        dqi[e] += ds * kj[e];
                        dkj[e] += ds * qi[e];
                        dvj[e] += pd * doi[e];
                    }
                }
            }
    }
}

size_t op_attention_block_scratch_floats(int B, int nk, int NKV) { return (size_t)B * NKV * 2 * (size_t)nk; }

void op_attention_block_start(float *out, float *lse, size_t n_out, size_t n_lse) {
    for (size_t i = 0; i < n_out; i++) out[i] = 0.0f;
    for (size_t i = 0; i < n_lse; i++) lse[i] = -INFINITY;
}
