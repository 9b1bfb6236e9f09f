/* The Llama kernels against straightforward double-precision references:
 * RMSNorm forward and backward (accumulating dinp/dw, finite differences);
 * RoPE frequencies (Llama 3.1 scaling: a formula in double, and PyTorch's
 * fp32 values bit for bit), tables, rotation of the q and k parts of fused
 * qkv rows, its inverse and its transpose (the backward); SwiGLU forward
 * and backward (analytic double reference, finite differences, extreme
 * gates); grouped-query attention forward and backward for NKV = NH, NH/2,
 * 1, on the flash and the BLAS head sizes, with and without dropout,
 * against multi-head attention on the kv heads expanded to NH (dK/dV summed
 * over each group). Determinism: GQA with NKV == NH is bit for bit
 * op_attention_forward/backward, and every kernel gives the same bits on 1
 * and 2 threads. Each comparison prints its measured maximum error. */
#define TL_LCG_SEED 0x2545F4914F6CDD1DULL
#include "ops/ops.h"
#include "testlib.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

/* ---------- helpers ---------- */
static void fill_nan(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}
/* max |a - ref| / max(1, |ref|) (NaN counts as infinite), printed, and
 * one CHECK against tol */
static double check_arr(const char *what, const float *a, const double *ref, size_t n, double tol) {
    double w = 0;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]) / fmax(1.0, fabs(ref[i]));
        if (!(d <= w)) {
            w = isnan(d) ? INFINITY : d;
            worst = i;
        }
    }
    printf("  %-58s max err %.3g\n", what, w);
    CHECK(w <= tol, "%s: max err %.3g > %.3g at [%zu]: %.9g vs %.9g", what, w, tol, worst,
          n ? (double)a[worst] : 0.0, n ? ref[worst] : 0.0);
    return w;
}
static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* ---------- RMSNorm ---------- */
static void rms_ref(double *out, double *rstd, const float *x, const float *w, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)x[(size_t)n * C + c] * x[(size_t)n * C + c];
        double r = 1.0 / sqrt(ss / C + eps);
        rstd[n] = r;
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (double)w[c] * ((double)x[(size_t)n * C + c] * r);
    }
}
static double rms_loss(const float *x, const float *w, const float *R, int N, int C, float eps) {
    float *o = falloc((size_t)N * C), *r = falloc(N);
    op_rmsnorm_forward(BE, o, r, x, w, N, C, eps);
    double L = dotw(o, R, (size_t)N * C);
    free(o);
    free(r);
    return L;
}

static void test_rmsnorm(int N, int C, float eps) {
    printf("rmsnorm N=%d C=%d eps=%g\n", N, C, (double)eps);
    const size_t NC = (size_t)N * C;
    float *x = falloc(NC), *w = falloc(C), *out = falloc(NC), *rstd = falloc(N), *dout = falloc(NC);
    fill(x, NC, 2.0f);
    for (size_t i = 0; i < NC; i++) x[i] += 0.3f;
    for (int c = 0; c < C; c++) w[c] = 1.0f + frand(0.5f);
    fill(dout, NC, 1.0f);
    x[0] = x[1] = 0.0f; /* a row with a few zeros; the row of all zeros below */
    if (N > 2)
        for (int c = 0; c < C; c++) x[(size_t)2 * C + c] = 0.0f;
    op_rmsnorm_forward(BE, out, rstd, x, w, N, C, eps);
    double *ro = dalloc(NC), *rr = dalloc(N);
    rms_ref(ro, rr, x, w, N, C, eps);
    check_arr("forward out", out, ro, NC, 1e-5);
    {
        /* rstd itself is large for the zero row (1/sqrt(eps)): compare relatively */
        double wr = 0;
        for (int n = 0; n < N; n++) wr = fmax(wr, fabs(rstd[n] - rr[n]) / rr[n]);
        printf("  %-58s max err %.3g\n", "forward rstd (relative)", wr);
        CHECK(wr <= 1e-6, "rmsnorm rstd relative error %.3g", wr);
    }
    /* backward, accumulating on top of initial values */
    float *dx = falloc(NC), *dw = falloc(C);
    fill(dx, NC, 1.0f);
    fill(dw, C, 1.0f);
    double *rdx = dalloc(NC), *rdw = dalloc(C);
    for (size_t i = 0; i < NC; i++) rdx[i] = dx[i];
    for (int c = 0; c < C; c++) rdw[c] = dw[c];
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C, *d = dout + (size_t)n * C;
        double r = rr[n], sgx = 0;
        for (int c = 0; c < C; c++) sgx += (double)d[c] * w[c] * (xr[c] * r);
        sgx /= C;
        for (int c = 0; c < C; c++) {
            double xh = xr[c] * r;
            rdx[(size_t)n * C + c] += r * ((double)d[c] * w[c] - xh * sgx);
            rdw[c] += (double)d[c] * xh;
        }
    }
    float *dx_null = fdup(dx, NC);
    op_rmsnorm_backward(BE, dx, dw, dout, x, w, rstd, N, C);
    check_arr("backward dinp (accumulated)", dx, rdx, NC, 1e-5);
    check_arr("backward dw (accumulated)", dw, rdw, C, 1e-5);
    op_rmsnorm_backward(BE, dx_null, NULL, dout, x, w, rstd, N, C);
    CHECK(same_bits(dx_null, dx, NC), "rmsnorm backward with dw NULL gives another dinp");
    /* finite differences of the fp32 forward (gradients from zero) */
    memset(dx, 0, NC * 4);
    memset(dw, 0, (size_t)C * 4);
    op_rmsnorm_backward(BE, dx, dw, dout, x, w, rstd, N, C);
    const float h = 1e-2f;
    int bad = 0;
    double wfd = 0;
    const size_t step = NC / 300 > 7 ? NC / 300 + 1 : 7; /* about 300 entries */
    for (size_t i = 3 * (size_t)C; i < NC; i += step) { /* rows past the zero rows (not smooth at 0) */
        float s = x[i];
        x[i] = s + h;
        double lp = rms_loss(x, w, dout, N, C, eps);
        x[i] = s - h;
        double lm = rms_loss(x, w, dout, N, C, eps);
        x[i] = s;
        double fd = (lp - lm) / (2 * h), e = fabs(fd - dx[i]) / fmax(1, fabs(fd));
        wfd = fmax(wfd, e);
        bad += e > 2e-3;
    }
    for (int c = 0; c < C; c += 3) {
        float s = w[c];
        w[c] = s + h;
        double lp = rms_loss(x, w, dout, N, C, eps);
        w[c] = s - h;
        double lm = rms_loss(x, w, dout, N, C, eps);
        w[c] = s;
        double fd = (lp - lm) / (2 * h), e = fabs(fd - dw[c]) / fmax(1, fabs(fd));
        wfd = fmax(wfd, e);
        bad += e > 2e-3;
    }
    printf("  %-58s max err %.3g\n", "finite differences (dinp, dw)", wfd);
    CHECK(bad == 0, "rmsnorm finite differences: %d bad", bad);
    /* 1 and 2 threads: the same bits (dw: every column summed over the rows in order) */
    float *o2 = falloc(NC), *r2 = falloc(N), *g1 = falloc(NC + C), *g2 = falloc(NC + C);
    omp_set_num_threads(1);
    op_rmsnorm_forward(BE, out, rstd, x, w, N, C, eps);
    op_rmsnorm_backward(BE, g1, g1 + NC, dout, x, w, rstd, N, C);
    omp_set_num_threads(2);
    op_rmsnorm_forward(BE, o2, r2, x, w, N, C, eps);
    op_rmsnorm_backward(BE, g2, g2 + NC, dout, x, w, r2, N, C);
    CHECK(same_bits(out, o2, NC) && same_bits(rstd, r2, N), "rmsnorm forward differs between 1 and 2 threads");
    CHECK(same_bits(g1, g2, NC + C), "rmsnorm backward differs between 1 and 2 threads");
    free(x); free(w); free(out); free(rstd); free(dout); free(ro); free(rr); free(dx); free(dw); free(rdx);
    free(rdw); free(dx_null); free(o2); free(r2); free(g1); free(g2);
}

/* ---------- RoPE ---------- */
/* transformers' _compute_llama3_parameters in double */
static void inv_freq_ref(double *f, int HS, double theta, const mt_rope_scaling *s) {
    for (int j = 0; j < HS / 2; j++) {
        double v = 1.0 / pow(theta, (double)(2 * j) / HS);
        if (s && s->type == 1) {
            double old = s->original_max_position, wl = 2 * M_PI / v;
            double lo = s->low_freq_factor, hi = s->high_freq_factor;
            if (wl > old / lo) v = v / s->factor;
            else if (wl >= old / hi) {
                double sm = (old / wl - lo) / (hi - lo);
                v = (1 - sm) * v / s->factor + sm * v;
            }
        }
        f[j] = v;
    }
}

/* PyTorch 1.13's fp32 inv_freq of transformers' llama3 rope (factor 8, low
 * 1, high 4, original 8192), head size 64, as bit patterns. */
static const uint32_t torch_inv_theta5e5[32] = {
    0x3f800000, 0x3f29e1c6, 0x3ee177bc, 0x3e959ee3, 0x3e4693b0, 0x3e03c6a0, 0x3daee4ad, 0x3d681e67,
    0x3d1a08c8, 0x3ccc6f49, 0x3c87a9c3, 0x3c340d6d, 0x3beef74f, 0x3b9e9402, 0x3b527720, 0x3ab3d11d,
    0x3a0995d2, 0x393b2dd2, 0x38a3418d, 0x3858ac81, 0x380fc8f8, 0x37bed4f4, 0x377d45c3, 0x3728126b,
    0x36df10c4, 0x369406cb, 0x36447610, 0x36025f34, 0x35ad07a7, 0x3565a54d, 0x351864a7, 0x34ca41b0};
static const uint32_t torch_inv_theta1e4[32] = {
    0x3f800000, 0x3f3ff911, 0x3f0ff59a, 0x3ed7e89b, 0x3ea1e89b, 0x3e72d423, 0x3e361887, 0x3e088d77,
    0x3dcccccd, 0x3d99940d, 0x3d6655c2, 0x3d2cba15, 0x3d0186e3, 0x3cc2434f, 0x3c91ad39, 0x3c5a7bf2,
    0x3c23d70a, 0x3bf5b9b0, 0x3bb8449c, 0x3b8a2e77, 0x3b4f3e38, 0x3ae47c6e, 0x3a6d8ae2, 0x39ee0430,
    0x395ffbd9, 0x38c4948c, 0x38936a16, 0x385d1725, 0x3825cb60, 0x37f8a815, 0x37ba7753, 0x378bd472};

static void test_rope_freq(void) {
    printf("rope frequencies\n");
    enum { HS = 64, H = HS / 2 };
    mt_rope_scaling s = {.type = 1, .factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f, .original_max_position = 8192};
    float f[H], plain[H];
    double r[H];
    op_rope_inv_freq(BE, plain, HS, 500000.0f, NULL);
    inv_freq_ref(r, HS, 500000.0, NULL);
    check_arr("inv_freq theta 5e5 HS 64 (no scaling)", plain, r, H, 1e-6);
    op_rope_inv_freq(BE, f, HS, 500000.0f, &s);
    inv_freq_ref(r, HS, 500000.0, &s);
    {
        double w = 0; /* relative: the frequencies go down to 1e-6 */
        for (int j = 0; j < H; j++) w = fmax(w, fabs(f[j] - r[j]) / r[j]);
        printf("  %-58s max err %.3g\n", "inv_freq llama3 theta 5e5 HS 64 (relative)", w);
        CHECK(w <= 1e-6, "llama3 inv_freq relative error %.3g", w);
    }
    int kept = 0, divided = 0, mixed = 0;
    for (int j = 0; j < H; j++) {
        kept += f[j] == plain[j];
        divided += f[j] == plain[j] / 8.0f;
        mixed += f[j] < plain[j] && f[j] > plain[j] / 8.0f;
    }
    printf("  llama3 bands: %d kept, %d divided by 8, %d interpolated\n", kept, divided, mixed);
    CHECK(kept > 0 && divided > 0 && mixed > 0 && kept + divided + mixed == H, "bands %d %d %d", kept, divided,
          mixed);
    /* PyTorch's own fp32 values, bit for bit */
    const uint32_t *tv[2] = {torch_inv_theta5e5, torch_inv_theta1e4};
    const float th[2] = {500000.0f, 10000.0f};
    for (int k = 0; k < 2; k++) {
        op_rope_inv_freq(BE, f, HS, th[k], &s);
        int diff = 0;
        for (int j = 0; j < H; j++) {
            uint32_t b;
            memcpy(&b, &f[j], 4);
            diff += b != tv[k][j];
        }
        printf("  inv_freq llama3 theta %g HS 64 vs PyTorch fp32: %d of %d differ\n", (double)th[k], diff, H);
        CHECK(diff == 0, "theta %g: %d frequencies differ from PyTorch's", (double)th[k], diff);
    }
    /* type 0 is no scaling */
    mt_rope_scaling none = {.type = 0, .factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f, .original_max_position = 8192};
    op_rope_inv_freq(BE, f, HS, 500000.0f, &none);
    CHECK(same_bits(f, plain, H), "rope scaling type 0 changed the frequencies");
}

static void test_rope_apply(int B, int T, int NH, int NKV, int HS) {
    printf("rope B=%d T=%d NH=%d NKV=%d HS=%d (llama3 theta 5e5)\n", B, T, NH, NKV, HS);
    const int H = HS / 2, N = B * T;
    const size_t ld = (size_t)(NH + 2 * NKV) * HS + 3; /* a fused qkv row and 3 floats more */
    mt_rope_scaling s = {.type = 1, .factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f, .original_max_position = 8192};
    float *inv = falloc(H), *ct = falloc((size_t)T * H), *st = falloc((size_t)T * H);
    op_rope_inv_freq(BE, inv, HS, 500000.0f, &s);
    op_rope_table(BE, ct, st, inv, T, HS);
    /* the tables: cos/sin of the fp32 angle (float)t * inv_freq, rounded from double */
    int tab_bad = 0;
    double wsc = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < H; j++) {
            float a = (float)t * inv[j];
            size_t k = (size_t)t * H + j;
            tab_bad += ct[k] != (float)cos((double)a) || st[k] != (float)sin((double)a);
            wsc = fmax(wsc, fabs((double)ct[k] * ct[k] + (double)st[k] * st[k] - 1.0));
        }
    printf("  %-58s max err %.3g\n", "tables: |cos^2 + sin^2 - 1|", wsc);
    CHECK(tab_bad == 0, "%d table entries are not cos/sin of the fp32 angle", tab_bad);
    CHECK(wsc < 2e-7, "cos^2 + sin^2 off by %.3g", wsc);

    const size_t n = (size_t)N * ld;
    float *x = falloc(n), *y = falloc(n);
    fill(x, n, 1.5f);
    memcpy(y, x, n * 4);
    float *q = y, *k = y + (size_t)NH * HS;
    op_rope_apply(BE, q, N, T, NH, HS, ld, ct, st, 0);
    op_rope_apply(BE, k, N, T, NKV, HS, ld, ct, st, 0);
    /* reference: the rotation of each (j, j + H) pair of the q and k heads, from the tables in double */
    double *ref = dalloc(n);
    int rest_changed = 0;
    for (int i = 0; i < N; i++) {
        const int t = i % T;
        const float *xr = x + (size_t)i * ld;
        for (size_t c = 0; c < ld; c++) ref[(size_t)i * ld + c] = xr[c];
        for (int hd = 0; hd < NH + NKV; hd++)
            for (int j = 0; j < H; j++) {
                size_t a = (size_t)hd * HS + j, b = a + H;
                double c = ct[(size_t)t * H + j], sn = st[(size_t)t * H + j];
                ref[(size_t)i * ld + a] = xr[a] * c - xr[b] * sn;
                ref[(size_t)i * ld + b] = xr[b] * c + xr[a] * sn;
            }
        for (size_t c = (size_t)(NH + NKV) * HS; c < ld; c++) rest_changed += y[(size_t)i * ld + c] != xr[c];
    }
    check_arr("apply vs direct formula (q and k parts)", y, ref, n, 1e-6);
    CHECK(rest_changed == 0, "rope changed %d values of the V part or the row padding", rest_changed);
    /* the same rotation from the true angle t * f in double (the fp32 angle's
     * rounding grows with t: bounded here by T ulp-sized steps) */
    {
        double *rf = dalloc(H), w = 0;
        inv_freq_ref(rf, HS, 500000.0, &s);
        for (int i = 0; i < N; i++) {
            const int t = i % T;
            for (int hd = 0; hd < NH + NKV; hd++)
                for (int j = 0; j < H; j++) {
                    size_t a = (size_t)i * ld + (size_t)hd * HS + j, b = a + H;
                    double ang = t * rf[j], ra = x[a] * cos(ang) - x[b] * sin(ang);
                    w = fmax(w, fabs(y[a] - ra));
                }
        }
        printf("  %-58s max err %.3g\n", "apply vs rotation by the exact angle (absolute)", w);
        CHECK(w < 1e-7 * T + 1e-6, "rope off the exact rotation by %.3g", w);
        free(rf);
    }
    /* inverse(apply(x)) == x */
    float *z = fdup(y, n);
    op_rope_apply(BE, z, N, T, NH, HS, ld, ct, st, 1);
    op_rope_apply(BE, z + (size_t)NH * HS, N, T, NKV, HS, ld, ct, st, 1);
    double *xd = dalloc(n);
    for (size_t i = 0; i < n; i++) xd[i] = x[i];
    check_arr("inverse(apply(x)) vs x", z, xd, n, 1e-6);
    /* the backward is the transpose: <R a, b> == <a, R^T b> */
    float *a = falloc(n), *bb = falloc(n);
    fill(a, n, 1.0f);
    fill(bb, n, 1.0f);
    float *Ra = fdup(a, n), *Rtb = fdup(bb, n);
    op_rope_apply(BE, Ra, N, T, NH + NKV, HS, ld, ct, st, 0); /* q and k heads are contiguous: one call */
    op_rope_apply(BE, Rtb, N, T, NH + NKV, HS, ld, ct, st, 1);
    double l = dotw(Ra, bb, n), r = dotw(a, Rtb, n), e = fabs(l - r) / fmax(1, fabs(l));
    printf("  %-58s max err %.3g\n", "transpose: <R a, b> vs <a, R^T b>", e);
    CHECK(e < 1e-6, "rope backward is not the transpose: %.9g vs %.9g", l, r);
    float *y2 = fdup(x, n);
    op_rope_apply(BE, y2, N, T, NH + NKV, HS, ld, ct, st, 0);
    CHECK(same_bits(y, y2, n), "rope on q then k differs from one call over both");
    /* 1 and 2 threads */
    float *u1 = fdup(x, n), *u2 = fdup(x, n);
    omp_set_num_threads(1);
    op_rope_apply(BE, u1, N, T, NH, HS, ld, ct, st, 0);
    omp_set_num_threads(2);
    op_rope_apply(BE, u2, N, T, NH, HS, ld, ct, st, 0);
    CHECK(same_bits(u1, u2, n), "rope differs between 1 and 2 threads");
    free(inv); free(ct); free(st); free(x); free(y); free(ref); free(z); free(xd); free(a); free(bb); free(Ra);
    free(Rtb); free(y2); free(u1); free(u2);
}

/* ---------- SwiGLU ---------- */
static double sigmoid_ref(double g) { return g >= 0 ? 1.0 / (1.0 + exp(-g)) : exp(g) / (1.0 + exp(g)); }

static void test_swiglu(int N, int F) {
    printf("swiglu N=%d F=%d\n", N, F);
    const size_t NF = (size_t)N * F;
    float *gu = falloc(2 * NF), *out = falloc(NF), *dout = falloc(NF), *dgu = falloc(2 * NF);
    for (int i = 0; i < N; i++) {
        float *g = gu + (size_t)i * 2 * F;
        for (int j = 0; j < F; j++) g[j] = -20.0f + 40.0f * (float)urand(); /* gates across the sigmoid's range */
        fill(g + F, F, 2.0f);
    }
    /* extremes: large gates of both signs, zero, tiny */
    const float ext[8] = {-1e30f, 1e30f, -100.0f, 100.0f, -88.5f, 0.0f, -1e-30f, 87.9f};
    for (int k = 0; k < 8 && k < F; k++) gu[k] = ext[k];
    fill(dout, NF, 1.0f);
    double *ro = dalloc(NF), *rd = dalloc(2 * NF);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            const float *g = gu + (size_t)i * 2 * F;
            double gg = g[j], u = g[F + j], s = sigmoid_ref(gg), si = gg * s, d = dout[(size_t)i * F + j];
            ro[(size_t)i * F + j] = si * u;
            rd[(size_t)i * 2 * F + j] = d * u * s * (1 + gg * (1 - s));
            rd[(size_t)i * 2 * F + F + j] = d * si;
        }
    op_swiglu_forward(BE, out, gu, N, F);
    check_arr("forward", out, ro, NF, 2e-6);
    fill_nan(dgu, 2 * NF); /* overwritten */
    op_swiglu_backward(BE, dgu, dout, gu, N, F);
    check_arr("backward dgate|dup", dgu, rd, 2 * NF, 2e-6);
    int nonfinite = 0;
    for (size_t i = 0; i < NF; i++) nonfinite += !isfinite(out[i]);
    for (size_t i = 0; i < 2 * NF; i++) nonfinite += !isfinite(dgu[i]);
    CHECK(nonfinite == 0, "swiglu: %d values not finite", nonfinite);
    CHECK(fabsf(out[0]) == 0.0f && dgu[0] == 0.0f, "gate -1e30: out %g dgate %g, not 0", (double)out[0],
          (double)dgu[0]);
    /* finite differences of the fp32 forward, every 5th gate and up of rows
     * 1..3 (row 0 holds the extreme gates, whose outputs swamp the loss) */
    int bad = 0;
    double wfd = 0;
    for (int i = 1; i < 4 && i < N; i++)
        for (int j = 0; j < 2 * F; j += 5) {
            float row[2][2 * 512], o[2][512];
            if (F > 512) break;
            memcpy(row[0], gu + (size_t)i * 2 * F, (size_t)2 * F * 4);
            memcpy(row[1], row[0], (size_t)2 * F * 4);
            const float h = j < F ? 1e-2f : 1e-1f; /* up enters linearly */
            row[0][j] += h;
            row[1][j] -= h;
            op_swiglu_forward(BE, o[0], row[0], 1, F);
            op_swiglu_forward(BE, o[1], row[1], 1, F);
            const float *R = dout + (size_t)i * F;
            double fd = (dotw(o[0], R, F) - dotw(o[1], R, F)) / (2.0 * h);
            double e = fabs(fd - dgu[(size_t)i * 2 * F + j]) / fmax(1, fabs(fd));
            wfd = fmax(wfd, e);
            bad += e > 2e-3;
        }
    printf("  %-58s max err %.3g\n", "finite differences (gate, up)", wfd);
    CHECK(bad == 0, "swiglu finite differences: %d bad", bad);
    /* 1 and 2 threads */
    float *o1 = falloc(NF), *o2 = falloc(NF), *d1 = falloc(2 * NF), *d2 = falloc(2 * NF);
    omp_set_num_threads(1);
    op_swiglu_forward(BE, o1, gu, N, F);
    op_swiglu_backward(BE, d1, dout, gu, N, F);
    omp_set_num_threads(2);
    op_swiglu_forward(BE, o2, gu, N, F);
    op_swiglu_backward(BE, d2, dout, gu, N, F);
    CHECK(same_bits(o1, o2, NF) && same_bits(d1, d2, 2 * NF), "swiglu differs between 1 and 2 threads");
    free(gu); free(out); free(dout); free(dgu); free(ro); free(rd); free(o1); free(o2); free(d1); free(d2);
}

/* ---------- grouped-query attention ---------- */
/* Multi-head causal attention in double on qkv rows [Q | K | V] of NH heads
 * each (out [B,T,NH*HS], lse [B,NH,T], dqkv in the same layout, written);
 * the dropout mask from the same Philox rows as the kernels. */
static void mha_ref(double *out, double *lse, double *dqkv, const double *qkv, const float *dout, int B, int T,
                    int NH, int HS, const mt_attn_dropout *dr) {
    const int C = NH * HS;
    const size_t W = 3 * (size_t)C;
    const double sc = 1.0 / sqrt((double)HS);
    const int drop = dr && dr->d.p > 0;
    double *P = dalloc((size_t)T * T), *M = dalloc((size_t)T * T), *dP = dalloc((size_t)T * T);
    float *rs = falloc(T);
    memset(dqkv, 0, sizeof(double) * B * T * W);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const double *Q = qkv + (size_t)b * T * W + (size_t)h * HS, *K = Q + C, *V = Q + 2 * C;
            double *dQ = dqkv + (size_t)b * T * W + (size_t)h * HS, *dK = dQ + C, *dV = dQ + 2 * C;
            for (int i = 0; i < T; i++) {
                double mx = -1e300;
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int k = 0; k < HS; k++) s += Q[i * W + k] * K[j * W + k];
                    P[(size_t)i * T + j] = s * sc;
                    mx = fmax(mx, s * sc);
                }
                double z = 0;
                for (int j = 0; j <= i; j++) z += exp(P[(size_t)i * T + j] - mx);
                lse[((size_t)b * NH + h) * T + i] = mx + log(z);
                for (int j = 0; j <= i; j++) P[(size_t)i * T + j] = exp(P[(size_t)i * T + j] - mx) / z;
                if (drop) mt_dropout_row_scales(rs, &dr->d, dr->sample_ids[b], i, dr->head0 + h, 0, i + 1);
                for (int j = 0; j <= i; j++) M[(size_t)i * T + j] = drop ? rs[j] : 1.0;
                for (int k = 0; k < HS; k++) {
                    double o = 0;
                    for (int j = 0; j <= i; j++) o += P[(size_t)i * T + j] * M[(size_t)i * T + j] * V[j * W + k];
                    out[((size_t)b * T + i) * C + (size_t)h * HS + k] = o;
                }
            }
            for (int i = 0; i < T; i++) {
                const float *g = dout + ((size_t)b * T + i) * C + (size_t)h * HS;
                double D = 0;
                for (int j = 0; j <= i; j++) {
                    double dpd = 0, pm = P[(size_t)i * T + j] * M[(size_t)i * T + j];
                    for (int k = 0; k < HS; k++) {
                        dpd += g[k] * V[j * W + k];
                        dV[j * W + k] += pm * g[k];
                    }
                    dP[(size_t)i * T + j] = dpd * M[(size_t)i * T + j];
                    D += P[(size_t)i * T + j] * dP[(size_t)i * T + j];
                }
                for (int j = 0; j <= i; j++) {
                    double ds = P[(size_t)i * T + j] * (dP[(size_t)i * T + j] - D) * sc;
                    for (int k = 0; k < HS; k++) {
                        dQ[i * W + k] += ds * K[j * W + k];
                        dK[j * W + k] += ds * Q[i * W + k];
                    }
                }
            }
        }
    free(P); free(M); free(dP); free(rs);
}

/* The GQA reference: kv heads expanded to NH (Hugging Face's repeat_kv),
 * multi-head attention, then dK/dV of each kv head = the sum over its group. */
static void gqa_ref(double *out, double *lse, double *dqkv, const float *qkv, const float *dout, int B, int T, int NH,
                    int NKV, int HS, const mt_attn_dropout *dr) {
    const int g = NH / NKV, N = B * T;
    const size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS, KW = (size_t)NKV * HS;
    double *ex = dalloc((size_t)N * 3 * C), *dex = dalloc((size_t)N * 3 * C);
    for (int i = 0; i < N; i++) {
        const float *r = qkv + (size_t)i * W;
        double *e = ex + (size_t)i * 3 * C;
        for (size_t c = 0; c < C; c++) e[c] = r[c];
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < HS; d++) {
                e[C + (size_t)h * HS + d] = r[C + (size_t)(h / g) * HS + d];
                e[2 * C + (size_t)h * HS + d] = r[C + KW + (size_t)(h / g) * HS + d];
            }
    }
    mha_ref(out, lse, dex, ex, dout, B, T, NH, HS, dr);
    for (int i = 0; i < N; i++) {
        const double *e = dex + (size_t)i * 3 * C;
        double *r = dqkv + (size_t)i * W;
        memset(r, 0, W * sizeof(double));
        for (size_t c = 0; c < C; c++) r[c] = e[c];
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < HS; d++) {
                r[C + (size_t)(h / g) * HS + d] += e[C + (size_t)h * HS + d];
                r[C + KW + (size_t)(h / g) * HS + d] += e[2 * C + (size_t)h * HS + d];
            }
    }
    free(ex); free(dex);
}

static double gqa_loss(const float *qkv, const float *R, int B, int T, int NH, int NKV, int HS,
                       const mt_attn_dropout *dr, float *scratch) {
    float *out = falloc((size_t)B * T * NH * HS), *lse = falloc((size_t)B * NH * T);
    op_attention_forward_gqa(BE, out, lse, qkv, B, T, NH, NKV, HS, dr, scratch);
    double L = dotw(out, R, (size_t)B * T * NH * HS);
    free(out);
    free(lse);
    return L;
}

static void test_gqa_case(int B, int T, int NH, int NKV, int HS, float p, int do_fd) {
    printf("gqa B=%d T=%d NH=%d NKV=%d HS=%d p=%g\n", B, T, NH, NKV, HS, (double)p);
    const size_t W = (size_t)(NH + 2 * NKV) * HS, nq = (size_t)B * T * W, no = (size_t)B * T * NH * HS;
    const size_t nl = (size_t)B * NH * T;
    uint64_t sids[3] = {987654321ULL, 4000000007ULL, 11};
    mt_attn_dropout dr = {{p, 77, 4, 1, MT_DROPOUT_ATTN_PROBS}, sids, 3, NULL};
    const mt_attn_dropout *drp = p > 0 ? &dr : NULL;
    float *qkv = falloc(nq), *dout = falloc(no);
    fill(qkv, nq, 1.5f);
    fill(dout, no, 1.0f);
    const size_t ns = op_attention_scratch_floats_gqa(BE, B, T, NH, NKV, HS);
    float *scratch = falloc(ns), *out = falloc(no), *lse = falloc(nl), *dqkv = falloc(nq);
    omp_set_num_threads(2);
    fill_nan(scratch, ns);
    fill_nan(out, no);
    op_attention_forward_gqa(BE, out, lse, qkv, B, T, NH, NKV, HS, drp, scratch);
    double *ro = dalloc(no), *rl = dalloc(nl), *rd = dalloc(nq);
    gqa_ref(ro, rl, rd, qkv, dout, B, T, NH, NKV, HS, drp);
    check_arr("forward out", out, ro, no, 1e-5);
    check_arr("forward lse", lse, rl, nl, 1e-5);
    fill_nan(scratch, ns);
    fill_nan(dqkv, nq); /* overwritten, every element */
    op_attention_backward_gqa(BE, dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS, drp, scratch);
    check_arr("backward dq|dk|dv", dqkv, rd, nq, 1e-5);
    {
        /* dK and dV alone: the group sums */
        double w = 0;
        for (size_t i = 0; i < (size_t)B * T; i++)
            for (size_t c = (size_t)NH * HS; c < W; c++) {
                size_t k = i * W + c;
                w = fmax(w, fabs(dqkv[k] - rd[k]) / fmax(1, fabs(rd[k])));
            }
        printf("  %-58s max err %.3g\n", "backward dk|dv (summed over the group)", w);
    }
    /* 1 thread: the same bits */
    float *out1 = falloc(no), *lse1 = falloc(nl), *dq1 = falloc(nq);
    omp_set_num_threads(1);
    op_attention_forward_gqa(BE, out1, lse1, qkv, B, T, NH, NKV, HS, drp, scratch);
    op_attention_backward_gqa(BE, dq1, dout, qkv, out1, lse1, B, T, NH, NKV, HS, drp, scratch);
    omp_set_num_threads(2);
    CHECK(same_bits(out, out1, no) && same_bits(lse, lse1, nl), "gqa forward differs between 1 and 2 threads");
    CHECK(same_bits(dqkv, dq1, nq), "gqa backward differs between 1 and 2 threads");
    /* NKV == NH: the multi-head calls, bit for bit (their scratch) */
    if (NKV == NH) {
        CHECK(op_attention_scratch_floats(BE, B, T, NH, HS) == ns, "scratch sizes differ for NKV == NH");
        float *out2 = falloc(no), *lse2 = falloc(nl), *dq2 = falloc(nq);
        op_attention_forward(BE, out2, lse2, qkv, B, T, NH, HS, drp, scratch);
        op_attention_backward(BE, dq2, dout, qkv, out2, lse2, B, T, NH, HS, drp, scratch);
        CHECK(same_bits(out, out2, no) && same_bits(lse, lse2, nl) && same_bits(dqkv, dq2, nq),
              "gqa with NKV == NH differs from op_attention_forward/backward");
        free(out2); free(lse2); free(dq2);
    }
    if (do_fd) {
        int bad = 0;
        double wfd = 0;
        const float h = 1e-2f;
        for (size_t i = 0; i < nq; i += 3) {
            float s = qkv[i];
            qkv[i] = s + h;
            double lp = gqa_loss(qkv, dout, B, T, NH, NKV, HS, drp, scratch);
            qkv[i] = s - h;
            double lm = gqa_loss(qkv, dout, B, T, NH, NKV, HS, drp, scratch);
            qkv[i] = s;
            double fd = (lp - lm) / (2 * h), e = fabs(fd - dqkv[i]) / fmax(1, fabs(fd));
            wfd = fmax(wfd, e);
            bad += e > 3e-3;
        }
        printf("  %-58s max err %.3g\n", "finite differences (every 3rd of q|k|v)", wfd);
        CHECK(bad == 0, "gqa finite differences: %d bad", bad);
    }
    free(qkv); free(dout); free(scratch); free(out); free(lse); free(dqkv); free(ro); free(rl); free(rd);
    free(out1); free(lse1); free(dq1);
}

int main(void) {
    const int nt0 = omp_get_max_threads();
    test_rmsnorm(37, 67, 1e-5f);
    test_rmsnorm(301, 200, 1e-6f); /* rows and dw columns split over threads */
    test_rope_freq();
    test_rope_apply(3, 37, 4, 2, 64);
    test_rope_apply(2, 300, 3, 1, 16);
    test_swiglu(33, 301);
    test_swiglu(5, 16);
    /* flash head sizes (16..64 by 16) and BLAS ones (others), NKV = NH, NH/2, 1;
     * T across the flash key blocks (64) and BLAS query blocks (64) */
    const int kvs[3] = {4, 2, 1};
    for (int k = 0; k < 3; k++) {
        test_gqa_case(2, 70, 4, kvs[k], 32, 0.0f, 0);  /* flash */
        test_gqa_case(2, 70, 4, kvs[k], 32, 0.2f, 0);
        test_gqa_case(1, 131, 4, kvs[k], 64, 0.1f, 0); /* flash, several blocks */
        test_gqa_case(2, 70, 4, kvs[k], 40, 0.0f, 0);  /* BLAS */
        test_gqa_case(2, 70, 4, kvs[k], 40, 0.2f, 0);
        test_gqa_case(1, 131, 4, kvs[k], 128, 0.1f, 0); /* BLAS, several blocks */
    }
    test_gqa_case(2, 9, 6, 3, 16, 0.3f, 1); /* finite differences, flash */
    test_gqa_case(2, 9, 6, 2, 5, 0.0f, 1);  /* and BLAS */
    test_gqa_case(3, 1, 2, 1, 8, 0.5f, 1);  /* T = 1 */
    omp_set_num_threads(nt0);
    TEST_MAIN_END("test_llama_ops");
}
