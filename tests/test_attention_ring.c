/* Ring attention's block step (ops/attention_ring.c) against the one-process
 * attention kernel (op_attention_forward_gqa / backward_gqa): the sequence
 * cut into 2N chunks, rank r of N holding chunks r and 2N-1-r (causal load
 * balancing), each rank's query chunks meeting every rank's key/value
 * chunks in the order a ring delivers them (its own first, then r-1, r-2,
 * ...), forward merged by the log-sum-exp and backward summed per chunk.
 * Grouped-query (8 heads, 2 kv heads), without and with dropout, and with
 * packed documents (doc_start) and dropout: out and lse, and dQ, dK, dV,
 * equal the one-process kernel's for cp 1, 2 and 4. */
#include "device/backend.h"
#include "ops/ops.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
static mt_backend cpu_be; /* the CPU backend the ops run on (set in main) */
#define BE (&cpu_be)
#define CHECK(c, ...)                                                                                                  \
    do {                                                                                                               \
        if (!(c)) {                                                                                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
            fails++;                                                                                                   \
        }                                                                                                              \
    } while (0)

enum { B = 2, T = 48, NH = 8, NKV = 2, HS = 16, C = NH * HS, W = (NH + 2 * NKV) * HS };

static float *falloc(size_t n) {
    float *p = calloc(n, sizeof(float));
    if (!p) abort();
    return p;
}

/* Rows [g*c, (g+1)*c) of every sample of a [B][T][w] buffer into a [B][c][w] one, and back. */
static void chunk_of(float *dst, const float *src, int g, int c, int w) {
    for (int b = 0; b < B; b++) memcpy(dst + (size_t)b * c * w, src + ((size_t)b * T + (size_t)g * c) * w, sizeof(float) * c * w);
}

static double max_rel(const float *a, const float *ref, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - ref[i])), m = fmax(m, fabs((double)ref[i]));
    return d / (m > 0 ? m : 1);
}

static void run(int N, const float *qkv, const float *dout, const float *out_f, const float *lse_f, const float *dqkv_f,
                const mt_attn_dropout *dr) {
    const int c = T / (2 * N), nch = 2 * N;
    float *x[8], *o[8], *l[8], *dx[8], *go[8];
    int32_t ds[8][B * T];
    mt_attn_dropout cdr[8]; /* per query chunk: its rows' document starts */
    for (int g = 0; g < nch; g++) {
        if (dr) {
            cdr[g] = *dr;
            if (dr->doc_start) {
                for (int b = 0; b < B; b++)
                    for (int i = 0; i < c; i++) ds[g][b * c + i] = dr->doc_start[b * T + g * c + i];
                cdr[g].doc_start = ds[g];
            }
        }
        x[g] = falloc((size_t)B * c * W), dx[g] = falloc((size_t)B * c * W);
        o[g] = falloc((size_t)B * c * C), go[g] = falloc((size_t)B * c * C), l[g] = falloc((size_t)B * NH * c);
        chunk_of(x[g], qkv, g, c, W);
        chunk_of(go[g], dout, g, c, C);
        for (size_t i = 0; i < (size_t)B * NH * c; i++) l[g][i] = -INFINITY;
    }
    float *scratch = falloc(op_attention_block_scratch_floats(BE, B, c, NKV));
    /* the ring: rank r's chunks meet rank src's at step t, src = r - t */
    for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < N; r++)
            for (int t = 0; t < N; t++) {
                int src = (r - t + N) % N, mine[2] = {r, nch - 1 - r}, theirs[2] = {src, nch - 1 - src};
                for (int a = 0; a < 2; a++)
                    for (int bb = 0; bb < 2; bb++) {
                        int qa = mine[a], kb = theirs[bb];
                        const float *q = x[qa], *k = x[kb] + (size_t)NH * HS, *v = k + (size_t)NKV * HS;
                        if (pass == 0)
                            op_attention_block_forward(BE, o[qa], l[qa], q, W, k, v, W, B, c, c, qa * c, kb * c, NH, NKV,
                                                       HS, dr ? &cdr[qa] : NULL, scratch);
                        else
                            op_attention_block_backward(BE, dx[qa], dx[kb] + (size_t)NH * HS,
                                                        dx[kb] + (size_t)(NH + NKV) * HS, go[qa], o[qa], l[qa], q, W, k,
                                                        v, W, B, c, c, qa * c, kb * c, NH, NKV, HS, dr ? &cdr[qa] : NULL,
                                                        scratch);
                    }
            }
    /* back into one-process order */
    float *out = falloc((size_t)B * T * C), *lse = falloc((size_t)B * NH * T), *dqkv = falloc((size_t)B * T * W);
    for (int g = 0; g < nch; g++)
        for (int b = 0; b < B; b++) {
            memcpy(out + ((size_t)b * T + (size_t)g * c) * C, o[g] + (size_t)b * c * C, sizeof(float) * c * C);
            memcpy(dqkv + ((size_t)b * T + (size_t)g * c) * W, dx[g] + (size_t)b * c * W, sizeof(float) * c * W);
            for (int h = 0; h < NH; h++)
                memcpy(lse + ((size_t)b * NH + h) * T + (size_t)g * c, l[g] + ((size_t)b * NH + h) * c, sizeof(float) * c);
        }
    double eo = max_rel(out, out_f, (size_t)B * T * C), el = max_rel(lse, lse_f, (size_t)B * NH * T);
    double ed = max_rel(dqkv, dqkv_f, (size_t)B * T * W);
    printf("  cp %d (chunks of %d, rank r holds r and %d-r): out %.2g, lse %.2g, dqkv %.2g (max rel)\n", N, c,
           nch - 1, eo, el, ed);
    CHECK(eo <= 1e-6 && el <= 1e-6 && ed <= 1e-5, "cp %d: out %.3g lse %.3g dqkv %.3g", N, eo, el, ed);
    for (int g = 0; g < nch; g++) free(x[g]), free(dx[g]), free(o[g]), free(go[g]), free(l[g]);
    free(scratch), free(out), free(lse), free(dqkv);
}

int main(void) {
    cpu_be = mt_backend_cpu(MT_GEMM_DEFAULT);
    size_t n = (size_t)B * T * W;
    float *qkv = falloc(n), *dout = falloc((size_t)B * T * C);
    for (size_t i = 0; i < n; i++) qkv[i] = sinf(0.37f * (float)i + 0.1f) * 1.5f;
    for (size_t i = 0; i < (size_t)B * T * C; i++) dout[i] = cosf(0.11f * (float)i);
    uint64_t samples[B] = {7, 3};
    /* packed windows: sample 0 holds documents from 0, 13 and 30, sample 1 from 0 and 7 */
    int32_t docs[B * T];
    for (int t = 0; t < T; t++) docs[t] = t < 13 ? 0 : t < 30 ? 13 : 30, docs[T + t] = t < 7 ? 0 : 7;
    for (int mode = 0; mode < 3; mode++) {
        mt_attn_dropout dr = {{mode ? 0.1f : 0.0f, 1234, 5, 2, MT_DROPOUT_ATTN_PROBS}, samples, 0, mode == 2 ? docs : NULL};
        printf("ring attention blocks, B %d T %d heads %d/%d HS %d, dropout %s%s\n", B, T, NH, NKV, HS,
               mode ? "0.1" : "off", mode == 2 ? ", packed documents" : "");
        const mt_attn_dropout *d = mode ? &dr : NULL;
        float *out = falloc((size_t)B * T * C), *lse = falloc((size_t)B * NH * T), *dqkv = falloc(n);
        float *scr = falloc(op_attention_scratch_floats_gqa(BE, B, T, NH, NKV, HS));
        op_attention_forward_gqa(BE, out, lse, qkv, B, T, NH, NKV, HS, d, scr);
        op_attention_backward_gqa(BE, dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS, d, scr);
        for (int N = 1; N <= 4; N *= 2) run(N, qkv, dout, out, lse, dqkv, d);
        free(out), free(lse), free(dqkv), free(scr);
    }
    free(qkv), free(dout);
    printf(fails ? "test_attention_ring: %d FAILED\n" : "test_attention_ring: OK\n", fails);
    return fails != 0;
}
