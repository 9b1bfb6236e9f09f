/* The Falcon kernels against straightforward references: exact (erf) GELU
 * forward against 0.5 x (1 + erf(x / sqrt 2)) in double, its backward
 * against the analytic derivative Phi(x) + x phi(x) and central
 * differences of the double form, in place (dinp aliasing dout) too; the
 * fused q|k|v conversions: grouped -> planar puts each group's query heads,
 * key and value where the attention kernels read them (checked element by
 * element against index arithmetic), a head range [q0, q0 + nq) takes just
 * those heads, planar -> grouped inverts it and writes zeros for the other
 * heads of each group; and both kernels give the same bits on 1 and 2
 * threads. Each comparison prints its measured maximum error. */
#define TL_LCG_SEED 0x9E3779B97F4A7C15ULL
#include "ops/ops.h"
#include "testlib.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static double gelu_ref(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double gelu_grad_ref(double x) { return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI); }

static void test_gelu(size_t n) {
    float *x = tl_calloc(n, sizeof(float)), *y = tl_calloc(n, sizeof(float)), *dy = tl_calloc(n, sizeof(float));
    float *dx = tl_calloc(n, sizeof(float)), *y2 = tl_calloc(n, sizeof(float));
    fill(x, n, 6.0f);
    x[0] = 0.0f, x[1] = -10.0f, x[2] = 10.0f, x[3] = -3e-8f; /* zero, both tails, a tiny value */
    fill(dy, n, 1.0f);
    op_gelu_erf_forward(BE, y, x, n);
    op_gelu_erf_backward(BE, dx, x, dy, n);
    double wf = 0, wb = 0, wfd = 0;
    for (size_t i = 0; i < n; i++) {
        double xd = x[i];
        wf = fmax(wf, fabs(y[i] - gelu_ref(xd)) / fmax(1.0, fabs(gelu_ref(xd))));
        double g = gelu_grad_ref(xd) * dy[i];
        wb = fmax(wb, fabs(dx[i] - g) / fmax(1.0, fabs(g)));
        double h = 1e-5, fd = (gelu_ref(xd + h) - gelu_ref(xd - h)) / (2 * h) * dy[i];
        wfd = fmax(wfd, fabs(dx[i] - fd) / fmax(1.0, fabs(fd)));
    }
    printf("  gelu_erf n=%-6zu forward %.3g, backward %.3g (analytic), %.3g (central differences)\n", n, wf, wb, wfd);
    CHECK(wf <= 2e-7, "gelu_erf forward max err %.3g", wf);
    CHECK(wb <= 5e-7, "gelu_erf backward max err %.3g", wb);
    CHECK(wfd <= 1e-6, "gelu_erf backward vs differences %.3g", wfd);
    CHECK(y[0] == 0.0f && y[1] == -0.0f && y[2] == 10.0f, "gelu(0, -10, 10) = %g %g %g", y[0], y[1], y[2]);
    memcpy(y2, dy, n * sizeof(float)); /* in place */
    op_gelu_erf_backward(BE, y2, x, y2, n);
    CHECK(!memcmp(y2, dx, n * sizeof(float)), "gelu_erf backward in place differs");
    omp_set_num_threads(1);
    op_gelu_erf_forward(BE, y2, x, n);
    CHECK(!memcmp(y2, y, n * sizeof(float)), "gelu_erf forward differs on 1 thread");
    omp_set_num_threads(2);
    op_gelu_erf_forward(BE, y2, x, n);
    CHECK(!memcmp(y2, y, n * sizeof(float)), "gelu_erf forward differs on 2 threads");
    free(x), free(y), free(dy), free(dx), free(y2);
}

/* groups of G query heads; heads [q0, q0 + nq) of each taken */
static void test_qkv_groups(int N, int n_groups, int G, int q0, int nq, int hd) {
    size_t gw = (size_t)n_groups * (G + 2) * hd, pw = (size_t)n_groups * (nq + 2) * hd;
    float *grouped = tl_calloc((size_t)N * gw, sizeof(float)), *planar = tl_calloc((size_t)N * pw, sizeof(float));
    float *back = tl_calloc((size_t)N * gw, sizeof(float)), *p1 = tl_calloc((size_t)N * pw, sizeof(float));
    fill(grouped, (size_t)N * gw, 1.0f);
    op_qkv_grouped_to_planar(BE, planar, grouped, N, n_groups, G, q0, nq, hd);
    int bad = 0;
    for (int i = 0; i < N; i++)
        for (int g = 0; g < n_groups; g++)
            for (int e = 0; e < hd; e++) {
                const float *gr = grouped + (size_t)i * gw + (size_t)g * (G + 2) * hd;
                const float *pl = planar + (size_t)i * pw;
                for (int h = 0; h < nq; h++) bad += pl[((size_t)g * nq + h) * hd + e] != gr[(size_t)(q0 + h) * hd + e];
                bad += pl[((size_t)n_groups * nq + g) * hd + e] != gr[(size_t)G * hd + e];            /* k */
                bad += pl[((size_t)n_groups * (nq + 1) + g) * hd + e] != gr[(size_t)(G + 1) * hd + e]; /* v */
            }
    fill(back, (size_t)N * gw, 5.0f); /* every element must be written */
    op_qkv_planar_to_grouped(BE, back, planar, N, n_groups, G, q0, nq, hd);
    int bad_back = 0;
    for (int i = 0; i < N; i++)
        for (int g = 0; g < n_groups; g++)
            for (int h = 0; h < G + 2; h++)
                for (int e = 0; e < hd; e++) {
                    size_t k = (size_t)i * gw + ((size_t)g * (G + 2) + h) * hd + e;
                    int taken = h >= G || (h >= q0 && h < q0 + nq);
                    bad_back += back[k] != (taken ? grouped[k] : 0.0f);
                }
    omp_set_num_threads(1);
    op_qkv_grouped_to_planar(BE, p1, grouped, N, n_groups, G, q0, nq, hd);
    omp_set_num_threads(2);
    int same = !memcmp(p1, planar, (size_t)N * pw * sizeof(float));
    printf("  qkv groups N=%d groups=%d G=%d heads [%d, %d) hd=%d: %d misplaced, %d wrong after the inverse\n", N,
           n_groups, G, q0, q0 + nq, hd, bad, bad_back);
    CHECK(bad == 0 && bad_back == 0 && same, "qkv groups: %d misplaced, %d wrong back, threads same %d", bad, bad_back, same);
    free(grouped), free(planar), free(back), free(p1);
}

int main(void) {
    omp_set_num_threads(2);
    test_gelu(1000);
    test_gelu(40000); /* threaded */
    test_qkv_groups(70, 1, 4, 0, 4, 16);   /* multi-query: all heads, then k, v */
    test_qkv_groups(70, 2, 2, 0, 2, 8);    /* grouped */
    test_qkv_groups(130, 4, 1, 0, 1, 6);   /* per-head q, k, v */
    test_qkv_groups(130, 1, 4, 2, 2, 16);  /* a replicated group's second rank (tp 2, one kv head) */
    test_qkv_groups(9, 2, 6, 1, 3, 4);
    TEST_MAIN_END("test_falcon_ops");
}
