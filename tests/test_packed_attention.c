/* Attention over packed documents (mt_attn_dropout.doc_start): for both
 * kernels (flash: head size 32; BLAS: head size 24) and grouped-query
 * heads, the output, log-sum-exp and every gradient of a window holding
 * several documents equal those of each document run alone as its own
 * sequence (the plain causal kernels, checked against PyTorch elsewhere),
 * with documents ending inside and across the kernels' 4-row, 16-key and
 * 64-key blocks; and the positions ops against their definitions. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "ops/attention_impl.h"
#include "ops/positions.h"
#include "testlib.h"

static double worst(const float *a, const float *b, size_t n) {
    double w = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        w = fmax(w, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return w / m;
}

static void check_packed(int flash, int B, int T, int NH, int NKV, int HS, const int *lens, int nlens, int threads) {
    omp_set_num_threads(threads);
    const int C = NH * HS;
    const size_t W = (size_t)(NH + 2 * NKV) * HS, nq = (size_t)B * T * W, no = (size_t)B * T * C,
                 nl = (size_t)B * NH * T;
    uint64_t seed = 1234 + (uint64_t)T;
    float *qkv = falloc(nq), *dout = falloc(no);
    for (size_t i = 0; i < nq; i++) qkv[i] = rng_sym(&seed);
    for (size_t i = 0; i < no; i++) dout[i] = rng_sym(&seed);
    int32_t *doc = tl_calloc((size_t)B * T, sizeof *doc);
    for (int b = 0; b < B; b++) { /* documents of lens[] lengths, cycling, shifted per row */
        int t = 0, k = b;
        while (t < T) {
            int l = lens[k++ % nlens];
            for (int j = t; j < T && j < t + l; j++) doc[(size_t)b * T + j] = t;
            t += l;
        }
    }
    uint64_t sids[4] = {1, 2, 3, 4};
    mt_attn_dropout dr = {{0.0f, 1, 0, 0, MT_DROPOUT_ATTN_PROBS}, sids, 0, doc};
    size_t sc = flash ? op_attention_flash_scratch_floats(BE, B, T, NH, NKV, HS)
                      : op_attention_blas_scratch_floats(BE, B, T, NH, NKV, HS);
    float *scr = falloc(sc), *o = falloc(no), *l = falloc(nl), *d = falloc(nq);
    if (flash) {
        op_attention_flash_forward(BE, o, l, qkv, B, T, NH, NKV, HS, &dr, scr);
        op_attention_flash_backward(BE, d, dout, qkv, o, l, B, T, NH, NKV, HS, &dr, scr);
    } else {
        op_attention_blas_forward(BE, o, l, qkv, B, T, NH, NKV, HS, &dr, scr);
        op_attention_blas_backward(BE, d, dout, qkv, o, l, B, T, NH, NKV, HS, &dr, scr);
    }
    /* reference: each document alone (B = 1, T = its length), same kernel */
    float *ro = falloc(no), *rl = falloc(nl), *rd = falloc(nq);
    float *sq = falloc((size_t)T * W), *sg = falloc((size_t)T * C), *so = falloc((size_t)T * C), *sl = falloc((size_t)NH * T),
          *sd = falloc((size_t)T * W), *ss = falloc(sc);
    for (int b = 0; b < B; b++)
        for (int t0 = 0; t0 < T;) {
            int t1 = t0 + 1;
            while (t1 < T && doc[(size_t)b * T + t1] == t0) t1++;
            int n = t1 - t0;
            memcpy(sq, qkv + ((size_t)b * T + t0) * W, (size_t)n * W * sizeof(float));
            memcpy(sg, dout + ((size_t)b * T + t0) * C, (size_t)n * C * sizeof(float));
            if (flash) {
                op_attention_flash_forward(BE, so, sl, sq, 1, n, NH, NKV, HS, NULL, ss);
                op_attention_flash_backward(BE, sd, sg, sq, so, sl, 1, n, NH, NKV, HS, NULL, ss);
            } else {
                op_attention_blas_forward(BE, so, sl, sq, 1, n, NH, NKV, HS, NULL, ss);
                op_attention_blas_backward(BE, sd, sg, sq, so, sl, 1, n, NH, NKV, HS, NULL, ss);
            }
            memcpy(ro + ((size_t)b * T + t0) * C, so, (size_t)n * C * sizeof(float));
            memcpy(rd + ((size_t)b * T + t0) * W, sd, (size_t)n * W * sizeof(float));
            for (int h = 0; h < NH; h++)
                memcpy(rl + ((size_t)b * NH + h) * T + t0, sl + (size_t)h * n, (size_t)n * sizeof(float));
            t0 = t1;
        }
    double wo = worst(o, ro, no), wl = worst(l, rl, nl), wd = worst(d, rd, nq);
    printf("%s B%d T%d NH%d NKV%d HS%d threads %d: out %.2g, lse %.2g, dqkv %.2g (max diff / max)\n",
           flash ? "flash" : "blas", B, T, NH, NKV, HS, threads, wo, wl, wd);
    CHECK(wo <= 2e-6 && wl <= 2e-6 && wd <= 2e-6, "%s T%d: out %.3g lse %.3g dqkv %.3g", flash ? "flash" : "blas", T,
          wo, wl, wd);
    free(qkv); free(dout); free(doc); free(scr); free(o); free(l); free(d); free(ro); free(rl); free(rd);
    free(sq); free(sg); free(so); free(sl); free(sd); free(ss);
}

static void check_positions(void) {
    const int N = 37, C = 20, HS = 8, nh = 3, Tmax = 16;
    uint64_t s = 9;
    int32_t pos[37];
    for (int i = 0; i < N; i++) pos[i] = (int32_t)rng_below(&s, Tmax);
    float *cs = falloc((size_t)Tmax * HS / 2), *sn = falloc((size_t)Tmax * HS / 2), *x = falloc((size_t)N * nh * HS),
          *y = falloc((size_t)N * nh * HS), *row = falloc((size_t)nh * HS);
    for (int i = 0; i < Tmax * HS / 2; i++) cs[i] = rng_sym(&s), sn[i] = rng_sym(&s);
    for (int i = 0; i < N * nh * HS; i++) x[i] = y[i] = rng_sym(&s);
    op_rope_apply_at(BE, y, N, nh, HS, (size_t)nh * HS, cs, sn, 0, pos);
    int ok = 1;
    for (int i = 0; i < N; i++) { /* row i alone, at position pos[i], through the plain op (T large) */
        memcpy(row, x + (size_t)i * nh * HS, (size_t)nh * HS * sizeof(float));
        op_rope_apply(BE, row, 1, 1, nh, HS, (size_t)nh * HS, cs + (size_t)pos[i] * HS / 2, sn + (size_t)pos[i] * HS / 2, 0);
        ok &= !memcmp(row, y + (size_t)i * nh * HS, (size_t)nh * HS * sizeof(float));
    }
    CHECK(ok, "op_rope_apply_at differs from op_rope_apply at the row's position");
    float *wpe = falloc((size_t)Tmax * C), *out = falloc((size_t)N * C), *dw = falloc((size_t)Tmax * C);
    double *ref = dalloc((size_t)Tmax * C);
    for (int i = 0; i < Tmax * C; i++) wpe[i] = rng_sym(&s);
    op_add_positions_at(BE, out, wpe, pos, N, C);
    ok = 1;
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) ok &= out[(size_t)i * C + c] == wpe[(size_t)pos[i] * C + c];
    CHECK(ok, "op_add_positions_at: out[i] != wpe[pos[i]]");
    for (int i = 0; i < N * C; i++) out[i] = rng_sym(&s);
    op_positions_backward_at(BE, dw, out, pos, N, C);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) ref[(size_t)pos[i] * C + c] += out[(size_t)i * C + c];
    double w = 0;
    for (int i = 0; i < Tmax * C; i++) w = fmax(w, fabs(dw[i] - ref[i]));
    CHECK(w < 1e-5, "op_positions_backward_at: %.3g from the sums", w);
    free(cs); free(sn); free(x); free(y); free(row); free(wpe); free(out); free(dw); free(ref);
}

int main(void) {
    const int a[] = {5, 1, 17, 64, 3, 30, 70}, b[] = {130}, c[] = {2, 9};
    for (int threads = 1; threads <= 2; threads++) {
        check_packed(1, 2, 150, 4, 2, 32, a, 7, threads);
        check_packed(1, 3, 97, 4, 4, 16, c, 2, threads);
        check_packed(1, 1, 200, 2, 1, 64, b, 1, threads); /* 130 then 70 */
        check_packed(0, 2, 150, 4, 2, 24, a, 7, threads);
        check_packed(0, 2, 90, 2, 2, 20, c, 2, threads);
    }
    check_positions();
    TEST_MAIN_END("test_packed_attention");
}
