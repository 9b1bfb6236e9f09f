/* Mixture-of-experts kernels (ops/moe.h). Every row is independent except
 * the dispatch plan, which is one sequential pass over the slots (N*K
 * integers: cheap next to the expert GEMMs) so the sorted order never
 * depends on the thread count. */
#include "ops/moe.h"
#include "ops/kernel_table.h"
#include <math.h>
#include <string.h>

void op_moe_route_forward(mt_backend *be, float *probs, float *lse, int32_t *topk, float *topw, int N, int E, int K,
                          mt_moe_router router, int norm_topk) {
    MT_DISPATCH(be, moe_route_forward, be, probs, lse, topk, topw, N, E, K, router, norm_topk);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *p = probs + (size_t)n * E;
        int32_t *sel = topk + (size_t)n * K;
        float *w = topw + (size_t)n * K;
        unsigned char taken[MT_MOE_MAX_EXPERTS];
        memset(taken, 0, (size_t)E);
        /* the k largest logits, strictly greater wins: ties go to the lower index */
        for (int k = 0; k < K; k++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
            taken[best] = 1;
            sel[k] = best;
        }
        float mx = p[sel[0]];
        if (router == MT_MOE_ROUTER_TOPK_SOFTMAX) { /* softmax over the chosen logits */
            float s = 0.0f;
            for (int k = 0; k < K; k++) s += (w[k] = expf(p[sel[k]] - mx));
            for (int k = 0; k < K; k++) w[k] /= s;
        }
        float s = 0.0f;
        for (int e = 0; e < E; e++) s += (p[e] = expf(p[e] - mx));
        lse[n] = mx + logf(s);
        for (int e = 0; e < E; e++) p[e] /= s;
        if (router == MT_MOE_ROUTER_SOFTMAX_TOPK) {
            float t = 0.0f;
            for (int k = 0; k < K; k++) t += (w[k] = p[sel[k]]);
            if (norm_topk)
                for (int k = 0; k < K; k++) w[k] /= t;
        }
    }
}

int64_t op_moe_dispatch_plan(mt_backend *be, int32_t *offsets, int32_t *slot, int32_t *order, const int32_t *topk,
                             int N, int E, int K, int capacity) {
    MT_DISPATCH_RET(be, moe_dispatch_plan, be, offsets, slot, order, topk, N, E, K, capacity);
    int32_t fill[MT_MOE_MAX_EXPERTS];
    memset(fill, 0, (size_t)E * sizeof fill[0]);
    size_t S = (size_t)N * K;
    for (size_t i = 0; i < S; i++) fill[topk[i]]++;
    offsets[0] = 0;
    for (int e = 0; e < E; e++) {
        int kept = capacity > 0 && fill[e] > capacity ? capacity : fill[e];
        offsets[e + 1] = offsets[e] + kept;
        fill[e] = 0;
    }
    int64_t dropped = 0;
    for (size_t i = 0; i < S; i++) { /* slots in token order: each expert's rows in token order */
        int e = topk[i];
        if (offsets[e] + fill[e] >= offsets[e + 1]) {
            slot[i] = -1;
            dropped++;
            continue;
        }
        int32_t r = offsets[e] + fill[e]++;
        slot[i] = r;
        order[r] = (int32_t)(i / (size_t)K);
    }
    return dropped;
}

void op_moe_gather(mt_backend *be, float *xs, const float *x, const int32_t *order, int M, int C) {
    MT_DISPATCH(be, moe_gather, be, xs, x, order, M, C);
#pragma omp parallel for schedule(static)
    for (int m = 0; m < M; m++) memcpy(xs + (size_t)m * C, x + (size_t)order[m] * C, (size_t)C * sizeof(float));
}

void op_moe_combine_forward(mt_backend *be, float *out, const float *y, const float *topw, const int32_t *slot, int N,
                            int K, int C) {
    MT_DISPATCH(be, moe_combine_forward, be, out, y, topw, slot, N, K, C);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
        memset(o, 0, (size_t)C * sizeof(float));
        for (int k = 0; k < K; k++) {
            int32_t s = slot[(size_t)n * K + k];
            if (s < 0) continue;
            float w = topw[(size_t)n * K + k];
            const float *ys = y + (size_t)s * C;
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] += w * ys[c];
        }
    }
}

void op_moe_combine_backward(mt_backend *be, float *dy, float *dtopw, const float *dout, const float *y,
                             const float *topw, const int32_t *slot, int N, int K, int C) {
    MT_DISPATCH(be, moe_combine_backward, be, dy, dtopw, dout, y, topw, slot, N, K, C);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * C;
        for (int k = 0; k < K; k++) {
            size_t i = (size_t)n * K + k;
            int32_t s = slot[i];
            if (s < 0) {
                dtopw[i] = 0.0f;
                continue;
            }
            float w = topw[i];
            const float *ys = y + (size_t)s * C;
            float *dys = dy + (size_t)s * C;
            double acc = 0.0;
            for (int c = 0; c < C; c++) {
                dys[c] = w * d[c];
                acc += (double)d[c] * ys[c];
            }
            dtopw[i] = (float)acc;
        }
    }
}

void op_moe_scatter_rows(mt_backend *be, float *dx, const float *dxs, const int32_t *slot, int N, int K, int C) {
    MT_DISPATCH(be, moe_scatter_rows, be, dx, dxs, slot, N, K, C);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = dx + (size_t)n * C;
        memset(o, 0, (size_t)C * sizeof(float));
        for (int k = 0; k < K; k++) {
            int32_t s = slot[(size_t)n * K + k];
            if (s < 0) continue;
            const float *r = dxs + (size_t)s * C;
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] += r[c];
        }
    }
}

void op_moe_shared_gate_forward(mt_backend *be, float *out, const float *ys, float *g, int N, int C) {
    MT_DISPATCH(be, moe_shared_gate_forward, be, out, ys, g, N, C);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float s = 1.0f / (1.0f + expf(-g[n]));
        g[n] = s;
        float *o = out + (size_t)n * C;
        const float *y = ys + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] += s * y[c];
    }
}

void op_moe_shared_gate_backward(mt_backend *be, float *dys, float *dg, const float *dout, const float *ys,
                                 const float *g, int N, int C) {
    MT_DISPATCH(be, moe_shared_gate_backward, be, dys, dg, dout, ys, g, N, C);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * C, *y = ys + (size_t)n * C;
        float *dy = dys + (size_t)n * C, s = g[n];
        double acc = 0.0;
        for (int c = 0; c < C; c++) {
            dy[c] = s * d[c];
            acc += (double)d[c] * y[c];
        }
        dg[n] = (float)((double)s * (1.0 - (double)s) * acc);
    }
}

static void choice_counts(int32_t *count, const int32_t *topk, int N, int E, int K) {
    memset(count, 0, (size_t)E * sizeof(int32_t));
    for (size_t i = 0; i < (size_t)N * K; i++) count[topk[i]]++;
}

void op_moe_aux_losses(mt_backend *be, double *aux, double *z, const float *probs, const float *lse,
                       const int32_t *topk, int N, int E, int K) {
    MT_DISPATCH(be, moe_aux_losses, be, aux, z, probs, lse, topk, N, E, K);
    int32_t count[MT_MOE_MAX_EXPERTS];
    double P[MT_MOE_MAX_EXPERTS];
    choice_counts(count, topk, N, E, K);
    memset(P, 0, sizeof P);
    double zs = 0.0;
    for (int n = 0; n < N; n++) { /* sequential: a fixed summation order */
        const float *p = probs + (size_t)n * E;
        for (int e = 0; e < E; e++) P[e] += p[e];
        zs += (double)lse[n] * lse[n];
    }
    double a = 0.0;
    for (int e = 0; e < E; e++) a += (double)count[e] / ((double)N * K) * (P[e] / N);
    *aux = E * a;
    *z = zs / N;
}

void op_moe_route_backward(mt_backend *be, float *dlogits, const float *dtopw, const float *probs, const float *lse,
                           const int32_t *topk, const float *topw, int N, int E, int K, mt_moe_router router,
                           int norm_topk, float ga, float gz) {
    MT_DISPATCH(be, moe_route_backward, be, dlogits, dtopw, probs, lse, topk, topw, N, E, K, router, norm_topk, ga, gz);
    int32_t count[MT_MOE_MAX_EXPERTS];
    choice_counts(count, topk, N, E, K);
    /* d aux / d probs[n,e] = E count_e / (K N^2), the same for every row */
    double dpa[MT_MOE_MAX_EXPERTS];
    for (int e = 0; e < E; e++) dpa[e] = (double)ga * E * count[e] / ((double)K * N * N);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * E, *dw = dtopw + (size_t)n * K, *w = topw + (size_t)n * K;
        const int32_t *sel = topk + (size_t)n * K;
        float *dl = dlogits + (size_t)n * E;
        double dp[MT_MOE_MAX_EXPERTS];
        for (int e = 0; e < E; e++) dp[e] = dpa[e];
        for (int e = 0; e < E; e++) dl[e] = 0.0f;
        double t = 0.0;
        for (int k = 0; k < K; k++) t += (double)dw[k] * w[k];
        if (router == MT_MOE_ROUTER_TOPK_SOFTMAX) { /* softmax over the chosen logits: its own backward */
            for (int k = 0; k < K; k++) dl[sel[k]] = (float)(w[k] * (dw[k] - t));
        } else if (norm_topk) { /* w_k = p_k / s: dp_k = (dw_k - sum_j dw_j w_j) / s */
            double s = 0.0;
            for (int k = 0; k < K; k++) s += p[sel[k]];
            for (int k = 0; k < K; k++) dp[sel[k]] += (dw[k] - t) / s;
        } else {
            for (int k = 0; k < K; k++) dp[sel[k]] += dw[k];
        }
        double dot = 0.0;
        for (int e = 0; e < E; e++) dot += p[e] * dp[e];
        double zf = (double)gz * 2.0 * lse[n] / N;
        for (int e = 0; e < E; e++) dl[e] += (float)(p[e] * (dp[e] - dot) + zf * p[e]);
    }
}

void op_moe_ep_orders(mt_backend *be, int32_t *to_expert, int32_t *to_source, const int32_t *counts, int P, int El) {
    MT_DISPATCH(be, moe_ep_orders, be, to_expert, to_source, counts, P, El);
    int32_t src0[MT_MOE_MAX_EXPERTS]; /* where source i's block starts in the source-major order */
    int32_t at = 0;
    for (int i = 0; i < P; i++) {
        src0[i] = at;
        for (int e = 0; e < El; e++) at += counts[(size_t)i * El + e];
    }
    int32_t m = 0;
    for (int e = 0; e < El; e++)
        for (int i = 0; i < P; i++) {
            int32_t s = src0[i];
            for (int k = 0; k < e; k++) s += counts[(size_t)i * El + k];
            for (int32_t r = 0; r < counts[(size_t)i * El + e]; r++, m++) {
                to_expert[m] = s + r;
                to_source[s + r] = m;
            }
        }
}
