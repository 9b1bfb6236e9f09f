/* Kernel tests: every forward/backward of src/ops against naive double
 * references, finite differences of the fp32 kernels, attention dropout
 * (mask consistency and kept fraction), optimizer steps, determinism. */
#define TL_LCG_SEED 0x12345678ULL
#include "ops/ops.h"
#include "testlib.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

/* ---------- helpers ---------- */
/* compares arrays with CHECK_CLOSE, but counts one CHECK per array to keep output short */
static void check_arr(const char *what, const float *a, const double *ref, size_t n, double tol) {
    size_t bad = 0, worst = 0; double wd = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]) / fmax(1.0, fabs(ref[i]));
        if (!(d <= tol)) { bad++; if (!(d <= wd)) { wd = d; worst = i; } }
    }
    CHECK(bad == 0, "%s: %zu of %zu differ, worst [%zu] %.9g vs %.9g", what, bad, n, worst,
          n ? (double)a[worst] : 0.0, n ? ref[worst] : 0.0);
}
/* ---------- matmul ---------- */
static void test_matmul(mt_gemm_lib lib, int N, int C, int OC) {
    mt_backend lb = mt_backend_cpu(lib);
    float *inp = falloc(N * C), *w = falloc(OC * C), *bias = falloc(OC), *out = falloc(N * OC), *dout = falloc(N * OC);
    fill(inp, N * C, 1); fill(w, OC * C, 1); fill(bias, OC, 1); fill(dout, N * OC, 1);
    double *ref = dalloc(N * OC);
    for (int withb = 0; withb < 2; withb++) {
        op_matmul_forward(&lb, out, inp, w, withb ? bias : NULL, N, C, OC);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double s = withb ? bias[o] : 0;
                for (int c = 0; c < C; c++) s += (double)inp[n * C + c] * w[o * C + c];
                ref[n * OC + o] = s;
            }
        check_arr("matmul fwd", out, ref, N * OC, 1e-5);
    }
    float *dinp = falloc(N * C), *dw = falloc(OC * C), *db = falloc(OC);
    float *dinp0 = falloc(N * C), *dw0 = falloc(OC * C), *db0 = falloc(OC);
    fill(dinp0, N * C, 1); fill(dw0, OC * C, 1); fill(db0, OC, 1);
    for (int acc = 0; acc < 2; acc++) {
        memcpy(dinp, dinp0, N * C * 4); memcpy(dw, dw0, OC * C * 4); memcpy(db, db0, OC * 4);
        op_matmul_backward(&lb, dinp, dw, db, dout, inp, w, N, C, OC, acc);
        double *rdi = dalloc(N * C), *rdw = dalloc(OC * C), *rdb = dalloc(OC);
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double s = acc ? dinp0[n * C + c] : 0;
                for (int o = 0; o < OC; o++) s += (double)dout[n * OC + o] * w[o * C + c];
                rdi[n * C + c] = s;
            }
        for (int o = 0; o < OC; o++) {
            double sb = db0[o];
            for (int n = 0; n < N; n++) sb += dout[n * OC + o];
            rdb[o] = sb;
            for (int c = 0; c < C; c++) {
                double s = dw0[o * C + c];
                for (int n = 0; n < N; n++) s += (double)dout[n * OC + o] * inp[n * C + c];
                rdw[o * C + c] = s;
            }
        }
        check_arr("matmul dinp", dinp, rdi, N * C, 1e-5);
        check_arr("matmul dw", dw, rdw, OC * C, 1e-5);
        check_arr("matmul dbias", db, rdb, OC, 1e-5);
        free(rdi); free(rdw); free(rdb);
    }
    /* NULL outputs are skipped: dw alone gives the same dw */
    float *dw1 = fdup(dw0, OC * C);
    memcpy(dw, dw0, OC * C * 4);
    op_matmul_backward(&lb, dinp, dw, NULL, dout, inp, w, N, C, OC, 0);
    op_matmul_backward(&lb, NULL, dw1, NULL, dout, inp, w, N, C, OC, 0);
    CHECK(!memcmp(dw, dw1, (size_t)OC * C * 4), "%s: dw with dinp skipped differs", mt_gemm_lib_name(lib));
    /* MT_SET_DW writes dw whatever its buffer held (NaN here): the same
     * values as adding into zeros */
    float *dwz = falloc(OC * C);
    for (int i = 0; i < OC * C; i++) dw1[i] = NAN;
    op_matmul_backward(&lb, NULL, dwz, NULL, dout, inp, w, N, C, OC, 0);
    op_matmul_backward(&lb, NULL, dw1, NULL, dout, inp, w, N, C, OC, MT_SET_DW);
    int same = 1;
    for (int i = 0; i < OC * C; i++) same &= dw1[i] == dwz[i];
    CHECK(same, "%s: dw written with MT_SET_DW differs from dw added into zeros", mt_gemm_lib_name(lib));
    free(dw1); free(dwz);
    free(inp); free(w); free(bias); free(out); free(dout); free(ref);
    free(dinp); free(dw); free(db); free(dinp0); free(dw0); free(db0);
}

/* No products: with C = 0 out is the bias; with N = 0 dw gets nothing added. */
static void test_matmul_empty(mt_gemm_lib lib) {
    mt_backend lb = mt_backend_cpu(lib);
    float bias[3] = {1, 2, 3}, out[6] = {9, 9, 9, 9, 9, 9}, dw[1] = {5}, dout[2] = {1, 1}, in[1] = {0};
    op_matmul_forward(&lb, out, in, in, bias, 2, 0, 3);
    CHECK(out[0] == 1 && out[2] == 3 && out[3] == 1 && out[5] == 3, "%s: C=0 forward is not the bias",
          mt_gemm_lib_name(lib));
    op_matmul_backward(&lb, NULL, dw, NULL, dout, in, in, 0, 1, 1, 0);
    CHECK(dw[0] == 5, "%s: no rows changed dw to %g", mt_gemm_lib_name(lib), (double)dw[0]);
    op_matmul_backward(&lb, NULL, dw, NULL, dout, in, in, 0, 1, 1, MT_SET_DW);
    CHECK(dw[0] == 0, "%s: no rows with MT_SET_DW left dw at %g, not 0", mt_gemm_lib_name(lib), (double)dw[0]);
}

/* ---------- layernorm ---------- */
static void ln_ref(double *out, const float *x, const float *w, const float *b, int N, int C, double *mean, double *rstd) {
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[n * C + c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[n * C + c] - m) * (x[n * C + c] - m);
        v /= C;
        double r = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < C; c++) out[n * C + c] = (x[n * C + c] - m) * r * w[c] + b[c];
        mean[n] = m; rstd[n] = r;
    }
}
static double ln_loss(const float *x, const float *w, const float *b, const float *R, int N, int C) {
    float *o = falloc(N * C), *m = falloc(N), *r = falloc(N);
    op_layernorm_forward(BE, o, m, r, x, w, b, N, C);
    double L = dotw(o, R, N * C);
    free(o); free(m); free(r);
    return L;
}
static void test_layernorm(void) {
    const int N = 14, C = 15;
    float *x = falloc(N * C), *w = falloc(C), *b = falloc(C), *out = falloc(N * C), *mean = falloc(N), *rstd = falloc(N);
    fill(x, N * C, 2); for (int i = 0; i < N * C; i++) x[i] += 0.5f;
    fill(w, C, 1); fill(b, C, 1);
    op_layernorm_forward(BE, out, mean, rstd, x, w, b, N, C);
    double *ro = dalloc(N * C), *rm = dalloc(N), *rr = dalloc(N);
    ln_ref(ro, x, w, b, N, C, rm, rr);
    check_arr("ln fwd", out, ro, N * C, 1e-5);
    check_arr("ln mean", mean, rm, N, 1e-5);
    check_arr("ln rstd", rstd, rr, N, 1e-5);
    /* backward vs double reference; accumulation on top of initial values */
    float *dout = falloc(N * C); fill(dout, N * C, 1);
    float *dx = falloc(N * C), *dw = falloc(C), *db = falloc(C);
    fill(dx, N * C, 1); fill(dw, C, 1); fill(db, C, 1);
    float *dx0 = fdup(dx, N * C), *dw0 = fdup(dw, C), *db0 = fdup(db, C);
    op_layernorm_backward(BE, dx, dw, db, dout, x, w, mean, rstd, N, C);
    double *rdx = dalloc(N * C), *rdw = dalloc(C), *rdb = dalloc(C);
    for (int c = 0; c < C; c++) { rdw[c] = dw0[c]; rdb[c] = db0[c]; }
    for (int n = 0; n < N; n++) {
        double sg = 0, sgx = 0;
        for (int c = 0; c < C; c++) {
            double xh = (x[n * C + c] - rm[n]) * rr[n], g = (double)dout[n * C + c] * w[c];
            sg += g; sgx += g * xh;
            rdw[c] += dout[n * C + c] * xh; rdb[c] += dout[n * C + c];
        }
        sg /= C; sgx /= C;
        for (int c = 0; c < C; c++) {
            double xh = (x[n * C + c] - rm[n]) * rr[n], g = (double)dout[n * C + c] * w[c];
            rdx[n * C + c] = dx0[n * C + c] + rr[n] * (g - sg - xh * sgx);
        }
    }
    check_arr("ln dinp", dx, rdx, N * C, 1e-5);
    check_arr("ln dw", dw, rdw, C, 1e-5);
    check_arr("ln db", db, rdb, C, 1e-5);
    /* finite differences of the fp32 forward (gradients from zero) */
    memset(dx, 0, N * C * 4); memset(dw, 0, C * 4); memset(db, 0, C * 4);
    op_layernorm_backward(BE, dx, dw, db, dout, x, w, mean, rstd, N, C);
    const float h = 1e-2f;
    int bad = 0;
    for (int i = 0; i < N * C; i += 3) {
        float s = x[i];
        x[i] = s + h; double lp = ln_loss(x, w, b, dout, N, C);
        x[i] = s - h; double lm = ln_loss(x, w, b, dout, N, C);
        x[i] = s;
        double fd = (lp - lm) / (2 * h);
        if (fabs(fd - dx[i]) > 2e-3 * fmax(1, fabs(fd))) { bad++; fprintf(stderr, "ln fd dx[%d] %g vs %g\n", i, fd, dx[i]); }
    }
    for (int c = 0; c < C; c++) {
        float s = w[c];
        w[c] = s + h; double lp = ln_loss(x, w, b, dout, N, C);
        w[c] = s - h; double lm = ln_loss(x, w, b, dout, N, C);
        w[c] = s;
        double fd = (lp - lm) / (2 * h);
        if (fabs(fd - dw[c]) > 2e-3 * fmax(1, fabs(fd))) { bad++; fprintf(stderr, "ln fd dw[%d] %g vs %g\n", c, fd, dw[c]); }
        s = b[c];
        b[c] = s + h; lp = ln_loss(x, w, b, dout, N, C);
        b[c] = s - h; lm = ln_loss(x, w, b, dout, N, C);
        b[c] = s;
        fd = (lp - lm) / (2 * h);
        if (fabs(fd - db[c]) > 2e-3 * fmax(1, fabs(fd))) { bad++; fprintf(stderr, "ln fd db[%d] %g vs %g\n", c, fd, db[c]); }
    }
    CHECK(bad == 0, "layernorm finite differences: %d bad", bad);
    /* determinism on a larger shape */
    {
        const int N2 = 301, C2 = 77;
        float *x2 = falloc(N2 * C2), *w2 = falloc(C2), *b2 = falloc(C2), *o2 = falloc(N2 * C2), *m2 = falloc(N2),
              *r2 = falloc(N2), *d2 = falloc(N2 * C2);
        fill(x2, N2 * C2, 1); fill(w2, C2, 1); fill(b2, C2, 1); fill(d2, N2 * C2, 1);
        op_layernorm_forward(BE, o2, m2, r2, x2, w2, b2, N2, C2);
        float *g1 = falloc(N2 * C2 + 2 * C2), *g2 = falloc(N2 * C2 + 2 * C2);
        op_layernorm_backward(BE, g1, g1 + N2 * C2, g1 + N2 * C2 + C2, d2, x2, w2, m2, r2, N2, C2);
        op_layernorm_backward(BE, g2, g2 + N2 * C2, g2 + N2 * C2 + C2, d2, x2, w2, m2, r2, N2, C2);
        CHECK(memcmp(g1, g2, (N2 * C2 + 2 * C2) * 4) == 0, "layernorm backward not deterministic");
        free(x2); free(w2); free(b2); free(o2); free(m2); free(r2); free(d2); free(g1); free(g2);
    }
    free(x); free(w); free(b); free(out); free(mean); free(rstd); free(ro); free(rm); free(rr);
    free(dout); free(dx); free(dw); free(db); free(dx0); free(dw0); free(db0); free(rdx); free(rdw); free(rdb);
}

/* ---------- gelu ---------- */
static double gelu_ref(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
static double gelu_dref(double x) {
    double u = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
}
static void test_gelu(void) {
    const size_t n = 4001; /* odd; spans [-12, 12] plus extremes */
    float *x = falloc(n), *y = falloc(n), *d = falloc(n), *dx = falloc(n);
    for (size_t i = 0; i < n; i++) x[i] = -12.0f + 24.0f * (float)i / (float)(n - 1);
    x[0] = -100.0f; x[1] = 100.0f; x[2] = 0.0f; x[3] = -1e-30f;
    fill(d, n, 1);
    op_gelu_forward(BE, y, x, n);
    double *r = dalloc(n), *rd = dalloc(n);
    for (size_t i = 0; i < n; i++) { r[i] = gelu_ref(x[i]); rd[i] = gelu_dref(x[i]) * d[i]; }
    check_arr("gelu fwd", y, r, n, 2e-6);
    op_gelu_backward(BE, dx, x, d, n);
    check_arr("gelu bwd", dx, rd, n, 2e-6);
    /* in place: dinp aliases dout */
    float *d2 = fdup(d, n);
    op_gelu_backward(BE, d2, x, d2, n);
    CHECK(memcmp(d2, dx, n * 4) == 0, "gelu backward in place differs");
    /* finite differences of the fp32 forward */
    int bad = 0;
    for (size_t i = 4; i < n; i += 37) {
        float hx = 1e-2f, a[2] = {x[i] + hx, x[i] - hx}, o[2];
        op_gelu_forward(BE, o, a, 2);
        double fd = ((double)o[0] - o[1]) / (2.0 * hx);
        double an = dx[i] / d[i];
        if (fabs(fd - an) > 2e-3 * fmax(1, fabs(an))) { bad++; fprintf(stderr, "gelu fd x=%g %g vs %g\n", x[i], fd, an); }
    }
    CHECK(bad == 0, "gelu finite differences: %d bad", bad);
    free(x); free(y); free(d); free(dx); free(r); free(rd); free(d2);
}

/* ---------- softmax + cross-entropy ---------- */
static void test_softmax_xent(void) {
    const int N = 14, V = 37, Vp = 40;
    float *lg = falloc(N * Vp);
    int32_t tg[14];
    fill(lg, N * Vp, 4);
    for (int i = 0; i < N * Vp; i++) if (i % Vp >= V) lg[i] = 1e4f; /* padding must not count */
    for (int n = 0; n < N; n++) tg[n] = (n % 5 == 3) ? -1 : (n * 11) % V;
    lg[2 * Vp + 5] = 80.0f; /* large logit */
    float *lg0 = fdup(lg, N * Vp), *loss = falloc(N);
    const float sc = 1.0f / 11.0f;
    double *rl = dalloc(N), *rg = dalloc(N * Vp);
    for (int n = 0; n < N; n++) {
        double mx = -1e300, s = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, lg0[n * Vp + j]);
        for (int j = 0; j < V; j++) s += exp(lg0[n * Vp + j] - mx);
        double lse = mx + log(s);
        rl[n] = tg[n] < 0 ? 0 : lse - lg0[n * Vp + tg[n]];
        for (int j = 0; j < Vp; j++)
            rg[n * Vp + j] = (tg[n] < 0 || j >= V) ? 0 : sc * (exp(lg0[n * Vp + j] - lse) - (j == tg[n]));
    }
    /* loss only: logits untouched */
    op_softmax_xent(BE, lg, loss, tg, N, V, Vp, 0.0f);
    check_arr("xent loss", loss, rl, N, 1e-5);
    CHECK(memcmp(lg, lg0, N * Vp * 4) == 0, "logits modified with dlogits_scale 0");
    op_softmax_xent(BE, lg, loss, tg, N, V, Vp, sc);
    check_arr("xent loss (grad pass)", loss, rl, N, 1e-5);
    check_arr("xent dlogits", lg, rg, N * Vp, 1e-6);
    /* finite differences of the fp32 loss sum */
    int bad = 0;
    for (int n = 0; n < N; n++) {
        if (tg[n] < 0) continue;
        for (int j = n % 3; j < V; j += 4) {
            float h = 1e-2f, row[2][40], l2[2];
            int32_t t2[2] = {tg[n], tg[n]};
            memcpy(row[0], lg0 + n * Vp, Vp * 4); memcpy(row[1], lg0 + n * Vp, Vp * 4);
            row[0][j] += h; row[1][j] -= h;
            op_softmax_xent(BE, &row[0][0], l2, t2, 2, V, Vp, 0.0f);
            double fd = ((double)l2[0] - l2[1]) / (2 * h) * sc;
            if (fabs(fd - lg[n * Vp + j]) > 2e-3 * sc) { bad++; fprintf(stderr, "xent fd [%d,%d] %g vs %g\n", n, j, fd, lg[n * Vp + j]); }
        }
    }
    CHECK(bad == 0, "softmax_xent finite differences: %d bad", bad);
    free(lg); free(lg0); free(loss); free(rl); free(rg);
}

/* ---------- embeddings ---------- */
static void test_embed(void) {
    const int B = 2, T = 7, C = 15, V = 37, pos0 = 3, maxT = 12;
    int32_t tok[14];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7) % 5 * 8; /* repeated tokens */
    float *wte = falloc(V * C), *wpe = falloc(maxT * C), *out = falloc(B * T * C), *d = falloc(B * T * C);
    fill(wte, V * C, 1); fill(wpe, maxT * C, 1); fill(d, B * T * C, 1);
    op_embed_forward(BE, out, tok, wte, wpe, B, T, C, pos0);
    double *r = dalloc(B * T * C);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                r[(b * T + t) * C + c] = (double)wte[tok[b * T + t] * C + c] + wpe[(pos0 + t) * C + c];
    check_arr("embed fwd", out, r, B * T * C, 1e-6);
    float *dwte = falloc(V * C), *dwpe = falloc(maxT * C);
    fill(dwte, V * C, 1); fill(dwpe, maxT * C, 1);
    double *rte = dalloc(V * C), *rpe = dalloc(maxT * C);
    for (int i = 0; i < V * C; i++) rte[i] = dwte[i];
    for (int i = 0; i < maxT * C; i++) rpe[i] = dwpe[i];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                rte[tok[b * T + t] * C + c] += d[(b * T + t) * C + c];
                rpe[(pos0 + t) * C + c] += d[(b * T + t) * C + c];
            }
    op_embed_backward(BE, dwte, dwpe, d, tok, B, T, C, pos0);
    check_arr("embed dwte", dwte, rte, V * C, 1e-6);
    check_arr("embed dwpe", dwpe, rpe, maxT * C, 1e-6);
    free(wte); free(wpe); free(out); free(d); free(r); free(dwte); free(dwpe); free(rte); free(rpe);
}

/* ---------- element-wise ---------- */
static void test_elementwise(void) {
    const size_t n = 100003;
    float *a = falloc(n), *b = falloc(n), *o = falloc(n);
    fill(a, n, 1); fill(b, n, 1);
    op_add(BE, o, a, b, n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += o[i] != a[i] + b[i];
    CHECK(bad == 0, "op_add");
    float *c = fdup(a, n);
    op_accumulate(BE, c, b, n);
    CHECK(memcmp(c, o, n * 4) == 0, "op_accumulate");
    op_scale(BE, c, 0.5f, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += c[i] != o[i] * 0.5f;
    CHECK(bad == 0, "op_scale");
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * a[i];
    CHECK_CLOSE(op_sumsq(BE, a, n), s, 1e-12);
    CHECK(op_sumsq(BE, a, n) == op_sumsq(BE, a, n), "op_sumsq deterministic");
    CHECK_CLOSE(op_sumsq(BE, a, 5),
                (double)a[0] * a[0] + (double)a[1] * a[1] + (double)a[2] * a[2] + (double)a[3] * a[3] +
                    (double)a[4] * a[4],
                1e-12);
    free(a); free(b); free(o); free(c);
}

/* ---------- optimizers ---------- */
static void test_optim(void) {
    const size_t n = 1001;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f, mom = 0.9f;
    float *p = falloc(n), *m = falloc(n), *v = falloc(n), *g = falloc(n);
    double *rp = dalloc(n), *rm = dalloc(n), *rv = dalloc(n);
    for (int kind = 0; kind < 3; kind++) { /* 0 AdamW, 1 Adam, 2 SGD */
        fill(p, n, 1); memset(m, 0, n * 4); memset(v, 0, n * 4);
        for (size_t i = 0; i < n; i++) { rp[i] = p[i]; rm[i] = 0; rv[i] = 0; }
        for (int step = 1; step <= 3; step++) {
            fill(g, n, 1);
            if (kind == 0) op_adamw_update(BE, p, g, m, v, n, lr, b1, b2, eps, wd, step, gs);
            else if (kind == 1) op_adam_update(BE, p, g, m, v, n, lr, b1, b2, eps, wd, step, gs);
            else op_sgd_update(BE, p, g, m, n, lr, mom, wd, step, gs);
            double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
            for (size_t i = 0; i < n; i++) {
                double gi = (double)g[i] * gs;
                if (kind == 2) {
                    gi += wd * rp[i];
                    rm[i] = step == 1 ? gi : mom * rm[i] + gi;
                    rp[i] -= lr * rm[i];
                    continue;
                }
                if (kind == 0) rp[i] *= 1 - (double)lr * wd;
                else gi += wd * rp[i];
                rm[i] = b1 * rm[i] + (1 - (double)b1) * gi;
                rv[i] = b2 * rv[i] + (1 - (double)b2) * gi * gi;
                rp[i] -= lr / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + eps);
            }
        }
        const char *nm[3] = {"adamw p", "adam p", "sgd p"};
        check_arr(nm[kind], p, rp, n, 2e-6);
        check_arr("optim m", m, rm, n, 2e-6);
        if (kind < 2) check_arr("optim v", v, rv, n, 2e-6);
    }
    /* SGD without momentum, buf NULL */
    fill(p, n, 1); fill(g, n, 1);
    for (size_t i = 0; i < n; i++) rp[i] = p[i] - lr * ((double)g[i] * gs + wd * p[i]);
    op_sgd_update(BE, p, g, NULL, n, lr, 0.0f, wd, 1, gs);
    check_arr("sgd no momentum", p, rp, n, 1e-6);
    free(p); free(m); free(v); free(g); free(rp); free(rm); free(rv);
}

/* The one-pass mixed-precision Adam(W) is bitwise the three passes it
 * replaces: widen the 16-bit gradient, update, round the master. The
 * gradients include subnormals (bf16 keeps fp32's range), values that round
 * to fp16 subnormals and zeros; several steps, Adam and AdamW; a size not
 * a multiple of the vector width, one threaded and one not (the threads'
 * ranges start off the 32-byte alignment of the streaming stores). */
static void test_optim_16_n(size_t n) {
    float *p = falloc(n), *m = falloc(n), *v = falloc(n), *g = falloc(n);
    float *p2 = falloc(n), *m2 = falloc(n), *v2 = falloc(n), *gw = falloc(n);
    uint16_t *g16 = malloc(n * 2), *p16 = malloc(n * 2), *r16 = malloc(n * 2);
    const mt_dtype dts[2] = {MT_BF16, MT_FP16};
    for (int d = 0; d < 2; d++)
        for (int kind = 0; kind < 2; kind++) {
            mt_dtype dt = dts[d];
            fill(p, n, 1); memset(m, 0, n * 4); memset(v, 0, n * 4);
            memcpy(p2, p, n * 4); memcpy(m2, m, n * 4); memcpy(v2, v, n * 4);
            for (int step = 1; step <= 3; step++) {
                fill(g, n, 1);
                for (size_t i = 0; i < n; i += 7) g[i] *= 1e-40f; /* fp32 subnormals */
                for (size_t i = 3; i < n; i += 11) g[i] *= 1e-6f;  /* fp16 subnormals */
                g[5] = 0.0f;
                mt_convert_to_16(dt, g16, g, n);
                if (kind == 0)
                    op_adamw_update_16(BE, p, g16, p16, dt, m, v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.7f);
                else op_adam_update_16(BE, p, g16, p16, dt, m, v, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.7f);
                mt_convert_from_16(dt, gw, g16, n);
                if (kind == 0) op_adamw_update(BE, p2, gw, m2, v2, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.7f);
                else op_adam_update(BE, p2, gw, m2, v2, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.7f);
                mt_convert_to_16(dt, r16, p2, n);
                CHECK(!memcmp(p, p2, n * 4) && !memcmp(m, m2, n * 4) && !memcmp(v, v2, n * 4),
                      "%s %s step %d: one-pass master or moments differ from the three passes", mt_dtype_name(dt),
                      kind ? "adam" : "adamw", step);
                CHECK(!memcmp(p16, r16, n * 2), "%s %s step %d: one-pass 16-bit parameters differ from the rounding",
                      mt_dtype_name(dt), kind ? "adam" : "adamw", step);
            }
        }
    free(p); free(m); free(v); free(g); free(p2); free(m2); free(v2); free(gw); free(g16); free(p16); free(r16);
}

static void test_optim_16(void) {
    test_optim_16_n(4099);
    test_optim_16_n(40009);
}

/* Rounding a gradient and taking its sum of squares in one pass gives the
 * rounding of mt_convert_to_16 and the double of op_sumsq_16 on the result,
 * bit for bit (sizes below and above the threaded size, odd tails; in the
 * vector part and the tail: subnormals, ties, values that round to inf). */
static void test_round_sumsq(void) {
    const size_t sizes[3] = {1, 5000, 70001};
    const mt_dtype dts[2] = {MT_BF16, MT_FP16};
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 3; k++) {
            size_t n = sizes[k];
            float *x = falloc(n);
            uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
            fill(x, n, 3);
            const float special[6] = {1e-40f, -3e-39f, 3.3895e38f, 1.00390625f, -1.01171875f, 65519.0f};
            for (int i = 0; i < 6 && n >= 64; i++) x[7 * i] = x[n - 1 - i] = special[i];
            double s = op_round_to_16_sumsq(BE, dts[d], a, x, n);
            mt_convert_to_16(dts[d], b, x, n);
            double r = op_sumsq_16(BE, dts[d], b, n);
            CHECK(!memcmp(a, b, n * 2), "%s n=%zu: one-pass rounding differs", mt_dtype_name(dts[d]), n);
            CHECK(s == r, "%s n=%zu: one-pass sum of squares %.17g, op_sumsq_16 %.17g", mt_dtype_name(dts[d]), n, s, r);
            free(x); free(a); free(b);
        }
}

/* ---------- attention ---------- */
/* Double reference forward + backward for all (b,h); mask from the same
 * Philox rows as the kernel. dqkv may be NULL (forward only). */
static void attn_ref(double *out, double *lse, double *dqkv, const float *qkv, const float *dout, int B, int T,
                     int NH, int HS, const mt_attn_dropout *dr) {
    const int C = NH * HS;
    const double sc = 1.0 / sqrt((double)HS);
    double *P = dalloc((size_t)T * T), *M = dalloc((size_t)T * T), *dP = dalloc((size_t)T * T);
    float *rs = falloc(T);
    if (dqkv) memset(dqkv, 0, sizeof(double) * B * T * 3 * C);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
#define Qe(i, k) ((double)qkv[((size_t)(b * T + (i))) * 3 * C + h * HS + (k)])
#define Ke(i, k) ((double)qkv[((size_t)(b * T + (i))) * 3 * C + C + h * HS + (k)])
#define Ve(i, k) ((double)qkv[((size_t)(b * T + (i))) * 3 * C + 2 * C + h * HS + (k)])
            for (int i = 0; i < T; i++) {
                double mx = -1e300;
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int k = 0; k < HS; k++) s += Qe(i, k) * Ke(j, k);
                    P[i * T + j] = s * sc;
                    mx = fmax(mx, s * sc);
                }
                double z = 0;
                for (int j = 0; j <= i; j++) z += exp(P[i * T + j] - mx);
                lse[(b * NH + h) * T + i] = mx + log(z);
                for (int j = 0; j <= i; j++) P[i * T + j] = exp(P[i * T + j] - mx) / z;
                if (dr && dr->d.p > 0) mt_dropout_row_scales(rs, &dr->d, dr->sample_ids[b], i, dr->head0 + h, 0, i + 1);
                for (int j = 0; j <= i; j++) M[i * T + j] = (dr && dr->d.p > 0) ? rs[j] : 1.0;
                for (int k = 0; k < HS; k++) {
                    double o = 0;
                    for (int j = 0; j <= i; j++) o += P[i * T + j] * M[i * T + j] * Ve(j, k);
                    out[(size_t)(b * T + i) * C + h * HS + k] = o;
                }
            }
            if (!dqkv) continue;
            for (int i = 0; i < T; i++) {
                const float *g = dout + (size_t)(b * T + i) * C + h * HS;
                double D = 0;
                for (int j = 0; j <= i; j++) {
                    double dpd = 0;
                    for (int k = 0; k < HS; k++) dpd += g[k] * Ve(j, k);
                    for (int k = 0; k < HS; k++) dqkv[(size_t)(b * T + j) * 3 * C + 2 * C + h * HS + k] += P[i * T + j] * M[i * T + j] * g[k];
                    dP[i * T + j] = dpd * M[i * T + j];
                    D += P[i * T + j] * dP[i * T + j];
                }
                for (int j = 0; j <= i; j++) {
                    double ds = P[i * T + j] * (dP[i * T + j] - D) * sc;
                    for (int k = 0; k < HS; k++) {
                        dqkv[(size_t)(b * T + i) * 3 * C + h * HS + k] += ds * Ke(j, k);
                        dqkv[(size_t)(b * T + j) * 3 * C + C + h * HS + k] += ds * Qe(i, k);
                    }
                }
            }
#undef Qe
#undef Ke
#undef Ve
        }
    free(P); free(M); free(dP); free(rs);
}

static double attn_loss(const float *qkv, const float *R, int B, int T, int NH, int HS, const mt_attn_dropout *dr,
                        float *scratch) {
    float *out = falloc((size_t)B * T * NH * HS), *lse = falloc((size_t)B * NH * T);
    op_attention_forward(BE, out, lse, qkv, B, T, NH, HS, dr, scratch);
    double L = dotw(out, R, (size_t)B * T * NH * HS);
    free(out); free(lse);
    return L;
}

static void test_attention_case(int B, int T, int NH, int HS, float p, int do_fd) {
    const int C = NH * HS;
    const size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
    uint64_t sids[4] = {123456789012ULL, 4000000001ULL, 5, 17};
    mt_attn_dropout dr = {{p, 42, 3, 1, MT_DROPOUT_ATTN_PROBS}, sids, 2, NULL};
    const mt_attn_dropout *drp = p > 0 ? &dr : NULL;
    float *qkv = falloc(nq), *out = falloc(no), *lse = falloc((size_t)B * NH * T), *dout = falloc(no), *dqkv = falloc(nq);
    fill(qkv, nq, 1.5f); fill(dout, no, 1);
    float *scratch = falloc(op_attention_scratch_floats(BE, B, T, NH, HS));
    op_attention_forward(BE, out, lse, qkv, B, T, NH, HS, drp, scratch);
    double *ro = dalloc(no), *rl = dalloc((size_t)B * NH * T), *rd = dalloc(nq);
    attn_ref(ro, rl, rd, qkv, dout, B, T, NH, HS, drp);
    char nm[96];
    snprintf(nm, sizeof nm, "attn fwd B%d T%d NH%d HS%d p%g", B, T, NH, HS, p);
    check_arr(nm, out, ro, no, 1e-5);
    check_arr("attn lse", lse, rl, (size_t)B * NH * T, 1e-5);
    fill(dqkv, nq, 1); /* must be overwritten */
    op_attention_backward(BE, dqkv, dout, qkv, out, lse, B, T, NH, HS, drp, scratch);
    snprintf(nm, sizeof nm, "attn bwd B%d T%d NH%d HS%d p%g", B, T, NH, HS, p);
    check_arr(nm, dqkv, rd, nq, 1e-5);
    /* determinism */
    float *dq2 = falloc(nq), *out2 = falloc(no), *lse2 = falloc((size_t)B * NH * T);
    op_attention_forward(BE, out2, lse2, qkv, B, T, NH, HS, drp, scratch);
    op_attention_backward(BE, dq2, dout, qkv, out2, lse2, B, T, NH, HS, drp, scratch);
    CHECK(memcmp(out, out2, no * 4) == 0 && memcmp(dqkv, dq2, nq * 4) == 0, "attention not deterministic");
    if (do_fd) {
        int bad = 0;
        const float h = 1e-2f;
        for (size_t i = 0; i < nq; i += 2) {
            float s = qkv[i];
            qkv[i] = s + h; double lp = attn_loss(qkv, dout, B, T, NH, HS, drp, scratch);
            qkv[i] = s - h; double lm = attn_loss(qkv, dout, B, T, NH, HS, drp, scratch);
            qkv[i] = s;
            double fd = (lp - lm) / (2 * h);
            if (fabs(fd - dqkv[i]) > 3e-3 * fmax(1, fabs(fd))) { bad++; if (bad < 5) fprintf(stderr, "attn fd [%zu] %g vs %g\n", i, fd, dqkv[i]); }
        }
        CHECK(bad == 0, "attention finite differences (p=%g): %d bad", p, bad);
    }
    free(qkv); free(out); free(lse); free(dout); free(dqkv); free(scratch); free(ro); free(rl); free(rd);
    free(dq2); free(out2); free(lse2);
}

/* With Q = 0 and V = 1 every output element of row i is (#kept)/(i+1)/(1-p). */
static void test_attention_keep_fraction(void) {
    const int B = 2, T = 128, NH = 2, HS = 4, C = NH * HS;
    const float p = 0.1f;
    uint64_t sids[2] = {7, 8};
    mt_attn_dropout dr = {{p, 99, 1, 0, MT_DROPOUT_ATTN_PROBS}, sids, 0, NULL};
    float *qkv = falloc((size_t)B * T * 3 * C), *out = falloc((size_t)B * T * C), *lse = falloc((size_t)B * NH * T);
    for (int n = 0; n < B * T; n++)
        for (int c = 0; c < C; c++) {
            qkv[(size_t)n * 3 * C + C + c] = frand(1);
            qkv[(size_t)n * 3 * C + 2 * C + c] = 1.0f;
        }
    float *scratch = falloc(op_attention_scratch_floats(BE, B, T, NH, HS));
    op_attention_forward(BE, out, lse, qkv, B, T, NH, HS, &dr, scratch);
    double kept = 0, total = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                kept += out[(size_t)(b * T + t) * C + h * HS] * (t + 1) * (1 - p);
                total += t + 1;
            }
    double frac = kept / total;
    CHECK(fabs(frac - (1 - p)) < 0.01, "kept fraction %g, expected %g", frac, 1 - p);
    /* a different step draws a different mask */
    float *out2 = falloc((size_t)B * T * C);
    dr.d.step = 2;
    op_attention_forward(BE, out2, lse, qkv, B, T, NH, HS, &dr, scratch);
    CHECK(memcmp(out, out2, (size_t)B * T * C * 4) != 0, "dropout mask does not depend on step");
    free(qkv); free(out); free(out2); free(lse); free(scratch);
}

int main(void) {
    for (mt_gemm_lib lib = MT_GEMM_ONEDNN; lib <= MT_GEMM_OPENBLAS; lib++) {
        test_matmul(lib, 14, 15, 9);
        test_matmul(lib, 300, 33, 47);  /* rows split across threads */
        test_matmul(lib, 150, 20, 200); /* dw rows split */
        test_matmul(lib, 1, 16, 300);   /* one row (generation) */
        test_matmul_empty(lib);
    }
    test_layernorm();
    test_gelu();
    test_softmax_xent();
    test_embed();
    test_elementwise();
    test_optim();
    test_optim_16();
    test_round_sumsq();
    test_attention_case(2, 7, 3, 5, 0.0f, 1);
    test_attention_case(2, 7, 3, 5, 0.3f, 1);
    test_attention_case(1, 131, 2, 8, 0.0f, 0); /* several query blocks */
    test_attention_case(2, 70, 3, 5, 0.2f, 0);
    test_attention_case(3, 1, 1, 4, 0.5f, 1);   /* T = 1 */
    test_attention_case(1, 9, 1, 1, 0.0f, 1);   /* HS = 1 */
    /* head sizes that are multiples of 16 take the flash kernels */
    test_attention_case(1, 21, 2, 16, 0.3f, 1);
    test_attention_case(2, 67, 2, 32, 0.0f, 0);
    test_attention_case(2, 67, 2, 32, 0.2f, 0);
    test_attention_case(1, 130, 1, 64, 0.1f, 0);
    test_attention_case(1, 50, 2, 48, 0.2f, 0);
    test_attention_case(1, 40, 1, 128, 0.0f, 0); /* past the flash kernels' sizes: BLAS path */
    test_attention_keep_fraction();
    TEST_MAIN_END("test_ops");
}
