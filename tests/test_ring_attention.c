/* Ring attention over the world communicator (models/ring_attention.c): the
 * world's N ranks are one context-parallel group; rank r holds chunks r and
 * 2N-1-r of every sample (T = 48 positions, 2N chunks). Each rank runs the
 * ring forward and backward on its rows and compares them with the rows of
 * the one-process kernel (op_attention_forward_gqa / backward_gqa on the
 * whole sequence): out, lse and dQ/dK/dV, grouped-query, with dropout (global
 * positions), and with packed documents; then the packed run again under
 * the ring's probe ({profile}'s measurement, mt_ring_probe): bitwise the
 * same results, the same bytes on the cp group, and consistent numbers
 * (0 <= hidden <= comm, hidden + exposed = comm, 2N - 1 ring steps; none
 * at cp 1). Run alone it is cp 1;
 * tests/check_ring_attention.sh runs it under mpirun -np 2 and 4, and
 * counts the ring's bytes. */
#include "comm/comm.h"
#include "device/backend.h"
#include "models/ring_attention.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 48, NH = 8, NKV = 2, HS = 16, C = NH * HS, W = (NH + 2 * NKV) * HS };

static float *falloc(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) abort();
    return p;
}

/* Max |a - b| / max |b| over the local rows (global row of local row i given by pos). */
static double rel(double d, double m) { return d / (m > 0 ? m : 1); }

int main(int argc, char **argv) {
    mt_error err = {{0}};
    if (mt_comm_process_init(&argc, &argv, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    mt_comm_ctx *ctx = mt_comm_ctx_create(60, &err);
    if (!ctx) return fprintf(stderr, "%s\n", err.msg), 1;
    mt_comm *w = mt_comm_world(ctx);
    const int N = mt_comm_size(w), r = mt_comm_rank(w), c = T / (2 * N);
    int fails = 0;
    mt_backend cpu_be = mt_backend_cpu(MT_GEMM_DEFAULT), *BE = &cpu_be;
    if (T % (2 * N)) {
        if (r == 0) printf("test_ring_attention: %d ranks do not cut %d positions into %d chunks\n", N, T, 2 * N);
        mt_comm_ctx_free(ctx);
        mt_comm_process_finalize();
        return 1;
    }
    mt_cp cp = {w, N, r, MT_CP_RING, NULL};
    mt_profile prof;
    mt_profile_init(&prof);
    double pw[T], pf[T];
    mt_ring_probe probe = {NULL, &prof, pw, pf};
    if (mt_comm_split(w, 0, r, "probe", &probe.comm, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    float *keep[3] = {NULL, NULL, NULL}; /* mode 2's out, lse, dqkv, against the probed run's */
    size_t n = (size_t)B * T * W;
    float *qkv = falloc(n), *dout = falloc((size_t)B * T * C);
    for (size_t i = 0; i < n; i++) qkv[i] = sinf(0.37f * (float)i + 0.1f) * 1.5f;
    for (size_t i = 0; i < (size_t)B * T * C; i++) dout[i] = cosf(0.11f * (float)i);
    uint64_t samples[B] = {7, 3};
    int32_t docs[B * T], ldocs[B * T];
    for (int t = 0; t < T; t++) docs[t] = t < 13 ? 0 : t < 30 ? 13 : 30, docs[T + t] = t < 7 ? 0 : 7;
    /* local row (b, i) of 2c: global position pos[i] */
    int pos[T];
    for (int i = 0; i < 2 * c; i++) pos[i] = i < c ? r * c + i : (2 * N - 1 - r) * c + (i - c);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < 2 * c; i++) ldocs[b * 2 * c + i] = docs[b * T + pos[i]];
    float *lq = falloc((size_t)B * 2 * c * W), *ldo = falloc((size_t)B * 2 * c * C);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < 2 * c; i++) {
            memcpy(lq + ((size_t)b * 2 * c + i) * W, qkv + ((size_t)b * T + pos[i]) * W, W * sizeof(float));
            memcpy(ldo + ((size_t)b * 2 * c + i) * C, dout + ((size_t)b * T + pos[i]) * C, C * sizeof(float));
        }
    float *scr = falloc(mt_ring_attention_scratch_floats(BE, B, c, NH, NKV, HS));
    for (int mode = 0; mode < 4; mode++) { /* 3: mode 2 probed */
        mt_attn_dropout dr = {{mode ? 0.1f : 0.0f, 1234, 5, 2, MT_DROPOUT_ATTN_PROBS}, samples, 0, mode >= 2 ? docs : NULL};
        mt_attn_dropout ldr = dr;
        ldr.doc_start = mode >= 2 ? ldocs : NULL;
        cp.probe = mode == 3 ? &probe : NULL;
        float *out = falloc((size_t)B * T * C), *lse = falloc((size_t)B * NH * T), *dqkv = falloc(n);
        float *fs = falloc(op_attention_scratch_floats_gqa(BE, B, T, NH, NKV, HS));
        op_attention_forward_gqa(BE, out, lse, qkv, B, T, NH, NKV, HS, mode ? &dr : NULL, fs);
        op_attention_backward_gqa(BE, dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS, mode ? &dr : NULL, fs);
        float *lo = falloc((size_t)B * 2 * c * C), *ll = falloc((size_t)B * NH * 2 * c), *ld = falloc((size_t)B * 2 * c * W);
        mt_comm_reset_stats(w);
        mt_ring_attention_forward(BE, &cp, lo, ll, lq, B, c, NH, NKV, HS, mode ? &ldr : NULL, scr);
        mt_ring_attention_backward(BE, &cp, ld, ldo, lq, lo, ll, B, c, NH, NKV, HS, mode ? &ldr : NULL, scr);
        double e[6] = {0}; /* |diff| and |ref| maxima of out, lse, dqkv */
        for (int b = 0; b < B; b++)
            for (int i = 0; i < 2 * c; i++) {
                for (int k = 0; k < C; k++) {
                    double ref = out[((size_t)b * T + pos[i]) * C + k], got = lo[((size_t)b * 2 * c + i) * C + k];
                    e[0] = fmax(e[0], fabs(got - ref)), e[1] = fmax(e[1], fabs(ref));
                }
                for (int h = 0; h < NH; h++) {
                    double ref = lse[((size_t)b * NH + h) * T + pos[i]], got = ll[((size_t)b * NH + h) * 2 * c + i];
                    e[2] = fmax(e[2], fabs(got - ref)), e[3] = fmax(e[3], fabs(ref));
                }
                for (int k = 0; k < W; k++) {
                    double ref = dqkv[((size_t)b * T + pos[i]) * W + k], got = ld[((size_t)b * 2 * c + i) * W + k];
                    e[4] = fmax(e[4], fabs(got - ref)), e[5] = fmax(e[5], fabs(ref));
                }
            }
        mt_comm_allreduce_ctl(w, e, e, 6, MT_COMM_F64, MT_COMM_MAX);
        const mt_comm_stats *st = mt_comm_get_stats(w);
        double sent = (double)st->k[MT_COMM_SEND].bytes_sent;
        double want = (double)(N > 1) * (3.0 * N - 2.0) * 2.0 * B * c * 2.0 * NKV * HS * 4.0; /* K|V: N-1 + N-1, dK|dV: N */
        if (mode == 3) {
            const mt_prof_ring *g = &prof.ring;
            size_t no = (size_t)B * 2 * c * C, nl = (size_t)B * NH * 2 * c, nd = (size_t)B * 2 * c * W;
            int same = !memcmp(lo, keep[0], no * sizeof(float)) && !memcmp(ll, keep[1], nl * sizeof(float)) &&
                       !memcmp(ld, keep[2], nd * sizeof(float));
            int ok = same && g->steps == (N > 1 ? 2 * N - 1 : 0) && (N > 1) == (g->comm > 0) && g->hidden >= 0 &&
                     g->hidden <= g->comm && fabs(g->hidden + g->exposed - g->comm) <= 1e-9 && g->hidden <= g->compute &&
                     g->wait >= 0 && g->in_flight >= g->wait && (N > 1) == (g->probe > 0);
            printf("rank %d probed: results %s; %.0f ring steps, comm %.3f ms, hidden %.3f ms, exposed %.3f ms, wait "
                   "%.3f ms, compute %.3f ms, probe %.3f ms%s\n",
                   r, same ? "bitwise the same" : "DIFFER", g->steps, g->comm * 1e3, g->hidden * 1e3, g->exposed * 1e3,
                   g->wait * 1e3, g->compute * 1e3, g->probe * 1e3, ok ? "" : " -- FAILED");
            fails += !ok;
        }
        if (r == 0)
            printf("cp %d%s: out %.2g, lse %.2g, dqkv %.2g (max rel vs one process); ring bytes sent by rank 0: %.0f "
                   "(closed form %.0f)\n",
                   N, mode == 0 ? "" : mode == 1 ? ", dropout 0.1" : mode == 2 ? ", dropout 0.1, packed documents" : ", probed", rel(e[0], e[1]),
                   rel(e[2], e[3]), rel(e[4], e[5]), sent, want);
        if (!(rel(e[0], e[1]) <= 1e-6 && rel(e[2], e[3]) <= 1e-6 && rel(e[4], e[5]) <= 1e-5)) fails++;
        if (sent != want) fails++;
        free(out), free(lse), free(dqkv), free(fs);
        if (mode == 2) keep[0] = lo, keep[1] = ll, keep[2] = ld;
        else free(lo), free(ll), free(ld);
    }
    free(keep[0]), free(keep[1]), free(keep[2]);
    mt_comm_free(probe.comm);
    free(qkv), free(dout), free(lq), free(ldo), free(scr);
    if (r == 0) printf(fails ? "test_ring_attention: %d FAILED\n" : "test_ring_attention: OK\n", fails);
    mt_comm_ctx_free(ctx);
    mt_comm_process_finalize();
    return fails != 0;
}
