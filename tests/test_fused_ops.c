/* Every fused kernel against its unfused reference (fp32, 1e-5 relative),
 * and against a double-precision oracle where the unfused form is itself
 * fused (softmax + cross-entropy): residual add + LayerNorm, bias + GELU
 * forward and backward (with the bias gradient), residual add with bias,
 * softmax + cross-entropy and its vocab-parallel pieces, and the flash
 * attention kernels against the BLAS attention (multi-head and grouped-query,
 * with and without dropout);
 * each also at 1 and 2 threads, which must agree bit for bit. */
#define TL_LCG_SEED 0x9E3779B97F4A7C15ULL
#include "ops/ops.h"
#include "ops/attention_impl.h"
#include "testlib.h"
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#define TOL 1e-5

static float *frandn(size_t n, float a) {
    float *x = falloc(n);
    fill(x, n, a);
    return x;
}

/* max |a-b| / max(1, |b|) over n elements */
static double rel_err(const float *a, const float *b, size_t n) {
    double w = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / fmax(1.0, fabs((double)b[i]));
        if (!(d <= w)) w = d; /* NaN propagates */
    }
    return w;
}
#define CHECK_ARR(what, a, b, n) \
    do { double e_ = rel_err(a, b, n); CHECK(e_ <= TOL, "%s: relative error %.3g", what, e_); } while (0)

/* ---- residual add + LayerNorm ---- */
static void test_residual_layernorm(int N, int C, int with_bias, int threads) {
    omp_set_num_threads(threads);
    float *x = frandn((size_t)N * C, 2), *br = frandn((size_t)N * C, 1), *bias = frandn(C, 0.5f);
    float *w = frandn(C, 1), *b = frandn(C, 1);
    float *res = falloc((size_t)N * C), *out = falloc((size_t)N * C), *mean = falloc(N), *rstd = falloc(N);
    float *rres = falloc((size_t)N * C), *rout = falloc((size_t)N * C), *rmean = falloc(N), *rrstd = falloc(N);
    op_residual_layernorm_forward(BE, res, out, mean, rstd, x, br, with_bias ? bias : NULL, w, b, N, C);
    /* unfused: the branch's bias added first (as the GEMM does), then op_add, then LayerNorm */
    float *brb = fdup(br, (size_t)N * C);
    if (with_bias)
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) brb[(size_t)n * C + c] += bias[c];
    op_add(BE, rres, x, brb, (size_t)N * C);
    op_layernorm_forward(BE, rout, rmean, rrstd, rres, w, b, N, C);
    char what[96];
    snprintf(what, sizeof what, "residual+layernorm N=%d C=%d bias=%d threads=%d", N, C, with_bias, threads);
    CHECK_ARR(what, res, rres, (size_t)N * C);
    CHECK_ARR(what, out, rout, (size_t)N * C);
    CHECK_ARR(what, mean, rmean, N);
    CHECK_ARR(what, rstd, rrstd, N);
    /* residual add alone */
    float *r2 = falloc((size_t)N * C);
    op_residual_add(BE, r2, x, br, with_bias ? bias : NULL, N, C);
    CHECK_ARR("residual add", r2, rres, (size_t)N * C);
    free(x); free(br); free(bias); free(w); free(b); free(res); free(out); free(mean); free(rstd);
    free(rres); free(rout); free(rmean); free(rrstd); free(brb); free(r2);
}

/* ---- bias + GELU ---- */
static void test_bias_gelu(int N, int OC, int threads) {
    omp_set_num_threads(threads);
    size_t n = (size_t)N * OC;
    float *pre0 = frandn(n, 4), *bias = frandn(OC, 1), *dout = frandn(n, 1), *db0 = frandn(OC, 1);
    float *pre = fdup(pre0, n), *out = falloc(n);
    op_bias_gelu_forward(BE, pre, out, NULL, bias, N, OC);
    float *rpre = fdup(pre0, n), *rout = falloc(n);
    for (int r = 0; r < N; r++)
        for (int j = 0; j < OC; j++) rpre[(size_t)r * OC + j] += bias[j];
    op_gelu_forward(BE, rout, rpre, n);
    char what[80];
    snprintf(what, sizeof what, "bias+gelu fwd N=%d OC=%d threads=%d", N, OC, threads);
    CHECK_ARR(what, pre, rpre, n);
    CHECK_ARR(what, out, rout, n);
    /* backward, in place (dpre aliases dout, as the model calls it) */
    float *g = fdup(dout, n), *db = fdup(db0, OC);
    op_gelu_bias_backward(BE, g, db, pre, g, N, OC);
    float *rg = falloc(n), *rdb = fdup(db0, OC);
    op_gelu_backward(BE, rg, rpre, dout, n);
    op_matmul_backward(BE, NULL, NULL, rdb, rg, NULL, NULL, N, 1, OC, 0); /* the unfused bias sum */
    snprintf(what, sizeof what, "gelu+bias bwd N=%d OC=%d threads=%d", N, OC, threads);
    CHECK_ARR(what, g, rg, n);
    CHECK_ARR(what, db, rdb, OC);
    CHECK(memcmp(db, rdb, OC * sizeof(float)) == 0, "%s: bias gradient not bitwise equal to the matmul's", what);
    /* without bias: plain GELU */
    float *p2 = fdup(pre0, n), *o2 = falloc(n), *r2 = falloc(n);
    op_bias_gelu_forward(BE, p2, o2, NULL, NULL, N, OC);
    op_gelu_forward(BE, r2, pre0, n);
    CHECK_ARR("gelu without bias", o2, r2, n);
    /* the bf16 output for the next linear layer: op_to_16 of out, bit for bit, with out written or not */
    uint16_t *o16 = malloc(n * sizeof *o16), *r16 = malloc(n * sizeof *r16);
    CHECK(o16 && r16, "out of memory");
    op_to_16(BE, MT_BF16, r16, out, n);
    float *p3 = fdup(pre0, n), *o3 = falloc(n);
    op_bias_gelu_forward(BE, p3, o3, o16, bias, N, OC);
    CHECK(memcmp(o16, r16, n * sizeof *o16) == 0, "%s: bf16 output differs from op_to_16 of the fp32 one", what);
    CHECK_ARR("bias+gelu fwd with bf16 output (out)", o3, out, n);
    CHECK_ARR("bias+gelu fwd with bf16 output (pre)", p3, pre, n);
    memcpy(p3, pre0, n * sizeof *p3);
    memset(o16, 0, n * sizeof *o16);
    op_bias_gelu_forward(BE, p3, NULL, o16, bias, N, OC);
    CHECK(memcmp(o16, r16, n * sizeof *o16) == 0, "%s: bf16 output alone differs from op_to_16 of out", what);
    CHECK_ARR("bias+gelu fwd, bf16 output alone (pre)", p3, pre, n);
    free(o16); free(r16); free(p3); free(o3);
    free(pre0); free(bias); free(dout); free(db0); free(pre); free(out); free(rpre); free(rout);
    free(g); free(db); free(rg); free(rdb); free(p2); free(o2); free(r2);
}

/* ---- softmax + cross-entropy ---- */
/* double oracle: loss = lse - x_t, grad = scale (softmax - onehot) over the first V columns */
static void xent_oracle(const float *x, const int32_t *tg, int N, int V, int Vp, float scale, double *loss,
                        float *grad) {
    for (int n = 0; n < N; n++) {
        const float *r = x + (size_t)n * Vp;
        float *g = grad + (size_t)n * Vp;
        for (int j = 0; j < Vp; j++) g[j] = 0.0f;
        if (tg[n] < 0) { loss[n] = 0.0; continue; }
        double mx = -INFINITY, s = 0.0;
        for (int j = 0; j < V; j++) mx = r[j] > mx ? r[j] : mx;
        for (int j = 0; j < V; j++) s += exp((double)r[j] - mx);
        double lse = mx + log(s);
        loss[n] = lse - r[tg[n]];
        for (int j = 0; j < V; j++) g[j] = (float)(scale * exp((double)r[j] - lse));
        g[tg[n]] -= scale;
    }
}

static void test_softmax_xent(int N, int V, int Vp, float spread, float shift, int threads) {
    omp_set_num_threads(threads);
    size_t n = (size_t)N * Vp;
    float *x = frandn(n, spread);
    for (size_t i = 0; i < n; i++) x[i] += shift;
    int32_t *tg = malloc((size_t)N * sizeof(int32_t));
    if (!tg) exit(2);
    for (int i = 0; i < N; i++) tg[i] = i % 7 == 3 ? -1 : (int32_t)(urand() * V);
    const float scale = 1.0f / (float)N;
    double *rloss = calloc((size_t)N, sizeof(double));
    float *rgrad = falloc(n), *loss = falloc(N), *g = fdup(x, n), *lossonly = falloc(N), *xo = fdup(x, n);
    if (!rloss) exit(2);
    xent_oracle(x, tg, N, V, Vp, scale, rloss, rgrad);
    op_softmax_xent(BE, g, loss, tg, N, V, Vp, scale);
    op_softmax_xent(BE, xo, lossonly, tg, N, V, Vp, 0.0f);
    char what[112];
    snprintf(what, sizeof what, "softmax+xent N=%d V=%d Vp=%d spread=%g shift=%g threads=%d", N, V, Vp, spread,
             shift, threads);
    double worst = 0.0;
    for (int i = 0; i < N; i++) worst = fmax(worst, fabs(loss[i] - rloss[i]) / fmax(1.0, fabs(rloss[i])));
    CHECK(worst <= TOL, "%s: loss relative error %.3g", what, worst);
    /* gradients are O(scale): compare relative to the scale */
    double gw = 0.0;
    for (size_t i = 0; i < n; i++) gw = fmax(gw, fabs((double)g[i] - rgrad[i]) / scale);
    CHECK(gw <= TOL, "%s: gradient error %.3g (in units of the scale)", what, gw);
    CHECK(memcmp(loss, lossonly, (size_t)N * sizeof(float)) == 0, "%s: loss differs without the gradient", what);
    CHECK(memcmp(xo, x, n * sizeof(float)) == 0, "%s: logits changed although no gradient was asked for", what);
    /* the bf16 form: op_softmax_xent's gradient rounded, bit for bit, the
     * same losses, the logits untouched */
    uint16_t *g16 = malloc(n * sizeof(uint16_t)), *r16 = malloc(n * sizeof(uint16_t));
    float *loss16 = falloc(N);
    if (!g16 || !r16) exit(2);
    op_softmax_xent_bf16(BE, xo, g16, loss16, tg, N, V, Vp, scale);
    mt_convert_fp32_to_bf16(r16, g, n);
    CHECK(memcmp(g16, r16, n * sizeof(uint16_t)) == 0, "%s: bf16 gradient is not the fp32 one rounded", what);
    CHECK(memcmp(loss16, loss, (size_t)N * sizeof(float)) == 0, "%s: bf16 form's losses differ", what);
    CHECK(memcmp(xo, x, n * sizeof(float)) == 0, "%s: the bf16 form changed the logits", what);
    free(g16); free(r16); free(loss16);

    /* vocab-parallel: 3 uneven shards of the V columns give the same losses and gradient */
    int cut[4] = {0, V / 5, V / 5 + V / 2, V};
    float *mx = falloc(3 * (size_t)N), *se = falloc(3 * (size_t)N), *xt = falloc(3 * (size_t)N);
    float *lse = falloc(N), *gs = fdup(x, n);
    for (int s = 0; s < 3; s++)
        op_xent_shard_stats(BE, x + cut[s], mx + (size_t)s * N, se + (size_t)s * N, xt + (size_t)s * N, tg, N,
                            cut[s + 1] - cut[s], Vp, cut[s]);
    op_xent_combine_lse(BE, lse, mx, se, 3, N, N);
    double lw = 0.0;
    for (int i = 0; i < N; i++) {
        double l = tg[i] < 0 ? 0.0 : (double)lse[i] - (xt[i] + xt[N + i] + xt[2 * N + i]);
        lw = fmax(lw, fabs(l - rloss[i]) / fmax(1.0, fabs(rloss[i])));
    }
    CHECK(lw <= TOL, "%s: vocab-parallel loss relative error %.3g", what, lw);
    for (int s = 0; s < 3; s++) op_xent_shard_grad(BE, gs + cut[s], lse, tg, N, cut[s + 1] - cut[s], Vp, cut[s], scale);
    double pw = 0.0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < V; j++) {
            size_t k = (size_t)i * Vp + j;
            pw = fmax(pw, fabs((double)gs[k] - rgrad[k]) / scale);
        }
    CHECK(pw <= TOL, "%s: vocab-parallel gradient error %.3g", what, pw);
    free(x); free(tg); free(rloss); free(rgrad); free(loss); free(g); free(lossonly); free(xo);
    free(mx); free(se); free(xt); free(lse); free(gs);
}

/* ---- flash attention (online softmax) against the BLAS path, multi-head
 * and grouped-query (NKV kv heads) ---- */
static void test_flash_attention(int B, int T, int NH, int NKV, int HS, float p, int threads) {
    omp_set_num_threads(threads);
    const int C = NH * HS;
    const size_t nq = (size_t)B * T * (NH + 2 * NKV) * HS, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    uint64_t sids[3] = {7, 1000003, 99};
    mt_attn_dropout dr = {{p, 1234, 5, 2, MT_DROPOUT_ATTN_PROBS}, sids, 1, NULL};
    const mt_attn_dropout *drp = p > 0 ? &dr : NULL;
    float *qkv = frandn(nq, 2), *dout = frandn(no, 1);
    float *fs = falloc(op_attention_flash_scratch_floats(BE, B, T, NH, NKV, HS));
    float *bs = falloc(op_attention_blas_scratch_floats(BE, B, T, NH, NKV, HS));
    float *fo = falloc(no), *fl = falloc(nl), *fd = frandn(nq, 1), *bo = falloc(no), *bl = falloc(nl), *bd = falloc(nq);
    CHECK(op_attention_flash_supported(BE, T, HS), "flash kernels should take T=%d HS=%d", T, HS);
    op_attention_flash_forward(BE, fo, fl, qkv, B, T, NH, NKV, HS, drp, fs);
    op_attention_blas_forward(BE, bo, bl, qkv, B, T, NH, NKV, HS, drp, bs);
    op_attention_flash_backward(BE, fd, dout, qkv, fo, fl, B, T, NH, NKV, HS, drp, fs); /* fd pre-filled: overwritten */
    op_attention_blas_backward(BE, bd, dout, qkv, bo, bl, B, T, NH, NKV, HS, drp, bs);
    char what[96];
    snprintf(what, sizeof what, "flash attention B%d T%d NH%d NKV%d HS%d p%g threads=%d", B, T, NH, NKV, HS, p,
             threads);
    CHECK_ARR(what, fo, bo, no);
    CHECK_ARR(what, fl, bl, nl);
    CHECK_ARR(what, fd, bd, nq);
    free(qkv); free(dout); free(fs); free(bs); free(fo); free(fl); free(fd); free(bo); free(bl); free(bd);
}

/* The same call at 1 and 2 threads gives the same bits. */
static void test_thread_invariance(void) {
    const int N = 37, C = 200, OC = 4 * C, V = 1000, Vp = 1024;
    float *x = frandn((size_t)N * OC, 3), *br = frandn((size_t)N * C, 1), *w = frandn(C, 1), *b = frandn(C, 1);
    float *bias = frandn(OC, 1), *d = frandn((size_t)N * OC, 1), *lg = frandn((size_t)N * Vp, 5);
    int32_t tg[37];
    for (int i = 0; i < N; i++) tg[i] = (i * 131) % V;
    float *o[2][8];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        float *res = falloc((size_t)N * C), *out = falloc((size_t)N * C), *mr = falloc(2 * (size_t)N);
        op_residual_layernorm_forward(BE, res, out, mr, mr + N, x, br, bias, w, b, N, C);
        float *pre = fdup(x, (size_t)N * OC), *ge = falloc((size_t)N * OC);
        op_bias_gelu_forward(BE, pre, ge, NULL, bias, N, OC);
        float *gd = fdup(d, (size_t)N * OC), *db = falloc(OC);
        op_gelu_bias_backward(BE, gd, db, pre, gd, N, OC);
        float *l = fdup(lg, (size_t)N * Vp), *loss = falloc(N);
        op_softmax_xent(BE, l, loss, tg, N, V, Vp, 0.5f);
        float *set[8] = {res, out, mr, pre, ge, gd, db, l};
        memcpy(o[t], set, sizeof set);
        free(loss);
    }
    size_t sz[8] = {(size_t)N * C, (size_t)N * C, 2 * (size_t)N, (size_t)N * OC, (size_t)N * OC, (size_t)N * OC,
                    (size_t)OC, (size_t)N * Vp};
    const char *names[8] = {"residual", "layernorm", "mean/rstd", "gelu pre", "gelu out", "gelu grad", "bias grad",
                            "dlogits"};
    for (int k = 0; k < 8; k++) {
        CHECK(memcmp(o[0][k], o[1][k], sz[k] * sizeof(float)) == 0, "%s differs between 1 and 2 threads", names[k]);
        free(o[0][k]);
        free(o[1][k]);
    }
    free(x); free(br); free(w); free(b); free(bias); free(d); free(lg);
}

int main(void) {
    for (int t = 1; t <= 2; t++) {
        test_residual_layernorm(1, 1, 1, t);
        test_residual_layernorm(5, 17, 0, t);
        test_residual_layernorm(64, 768, 1, t);
        test_bias_gelu(1, 3, t);
        test_bias_gelu(33, 100, t);
        test_bias_gelu(64, 3072, t);
        test_softmax_xent(3, 1, 16, 1, 0, t);        /* one real column */
        test_softmax_xent(9, 257, 384, 4, 0, t);     /* ragged tail, padding columns */
        test_softmax_xent(16, 50257, 50304, 3, 0, t); /* GPT-2 vocabulary */
        test_softmax_xent(8, 1000, 1000, 30, 70, t); /* large, shifted logits: stability */
        test_flash_attention(2, 64, 2, 2, 64, 0.0f, t);
        test_flash_attention(3, 100, 3, 3, 32, 0.0f, t);  /* T not a multiple of the blocks */
        test_flash_attention(3, 100, 3, 3, 32, 0.25f, t); /* the same dropout mask */
        test_flash_attention(1, 130, 2, 2, 16, 0.1f, t);
        test_flash_attention(1, 17, 1, 1, 48, 0.0f, t);
        test_flash_attention(2, 100, 4, 2, 32, 0.25f, t); /* grouped-query */
        test_flash_attention(1, 130, 6, 1, 64, 0.1f, t);
    }
    test_thread_invariance();
    TEST_MAIN_END("test_fused_ops");
}
