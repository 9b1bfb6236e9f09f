/* Ring attention (see ring_attention.h): copies between the local rows and
 * chunk-major buffers (op_copy_rows), the ring's messages, and ops' block step. */
#include "models/ring_attention.h"
#include <string.h>

int mt_cp_mode_parse(const char *s, mt_cp_mode *out, mt_error *err) {
    if (!strcmp(s, "ring")) *out = MT_CP_RING;
    else if (!strcmp(s, "alltoall")) *out = MT_CP_ALLTOALL;
    else return mt_errorf(err, "unknown {cp-mode} '%s': expected ring or alltoall", s);
    return 0;
}

const char *mt_cp_mode_name(mt_cp_mode m) { return m == MT_CP_ALLTOALL ? "alltoall" : "ring"; }

enum { TAG_KV = 3301, TAG_DKV = 3302 /* and 3303: a K|V chunk's dK|dV each */ };

typedef struct {
    float *x[2], *kv[2], *o[2], *l[2], *dx[2], *dkv[2], *dout[2], *block;
    int32_t *docs[2];
} bufs;

static size_t carve(mt_backend *be, int B, int c, int NH, int NKV, int HS, float *base, bufs *b) {
    size_t W = (size_t)(NH + 2 * NKV) * HS, KW2 = (size_t)2 * NKV * HS, C = (size_t)NH * HS, n = (size_t)B * c;
    size_t off = 0;
#define TAKE(p, count) (p = base ? base + off : NULL, off += (count))
    for (int a = 0; a < 2; a++) {
        TAKE(b->x[a], n * W);
        TAKE(b->kv[a], 2 * n * KW2);
        TAKE(b->o[a], n * C);
        TAKE(b->l[a], (size_t)B * NH * c);
        TAKE(b->dx[a], n * W);
        TAKE(b->dkv[a], 2 * n * KW2);
        TAKE(b->dout[a], n * C);
        float *d;
        TAKE(d, n); /* int32 document starts: 4 bytes like a float */
        b->docs[a] = (int32_t *)d;
    }
    TAKE(b->block, op_attention_block_scratch_floats(be, B, c, NKV));
#undef TAKE
    return off;
}

size_t mt_ring_attention_scratch_floats(mt_backend *be, int B, int c, int NH, int NKV, int HS) {
    bufs b;
    return carve(be, B, c, NH, NKV, HS, NULL, &b);
}

/* Rows of chunk a of the local [B][2c][width] layout into / out of a
 * chunk-major [B][c][cw] buffer: cw floats per row from column col0. */
static void to_chunk(mt_backend *be, float *dst, size_t cw, const float *src, size_t width, size_t col0, int B, int c,
                     int a) {
    const size_t f = sizeof(float);
    op_copy_rows(be, dst, cw * f, (size_t)c * cw * f, src + (size_t)a * c * width + col0, width * f,
                 (size_t)2 * c * width * f, cw * f, c, B);
}
static void from_chunk(mt_backend *be, float *dst, size_t width, size_t col0, const float *src, size_t cw, int B,
                       int c, int a) {
    const size_t f = sizeof(float);
    op_copy_rows(be, dst + (size_t)a * c * width + col0, width * f, (size_t)2 * c * width * f, src, cw * f,
                 (size_t)c * cw * f, cw * f, c, B);
}
/* lse [B][NH][2c] <-> [B][NH][c] of chunk a: B*NH rows of c floats */
static void lse_chunk(mt_backend *be, float *local, float *chunk, int B, int NH, int c, int a, int to_local) {
    const size_t f = sizeof(float), rows = (size_t)B * NH;
    float *lp = local + (size_t)a * c;
    if (to_local)
        op_copy_rows(be, lp, 2 * (size_t)c * f, 0, chunk, (size_t)c * f, 0, (size_t)c * f, (int)rows, 1);
    else
        op_copy_rows(be, chunk, (size_t)c * f, 0, lp, 2 * (size_t)c * f, 0, (size_t)c * f, (int)rows, 1);
}

static int chunk_of(int rank, int N, int a) { return a == 0 ? rank : 2 * N - 1 - rank; }

/* Per local chunk: dropout coordinates with the chunk's document starts. */
static void chunk_drop(mt_backend *be, mt_attn_dropout per_chunk[2], const mt_attn_dropout *drop, bufs *bf, int B, int c) {
    const size_t i4 = sizeof(int32_t);
    for (int a = 0; a < 2; a++) {
        per_chunk[a] = *drop;
        if (!drop->doc_start) continue;
        /* B rows of c document starts, from sample b's chunk a */
        op_copy_rows(be, bf->docs[a], (size_t)c * i4, 0, drop->doc_start + (size_t)a * c, (size_t)2 * c * i4, 0,
                     (size_t)c * i4, B, 1);
        per_chunk[a].doc_start = bf->docs[a];
    }
}

static void ring_start_on(mt_comm *comm, const mt_cp *cp, float *send, float *recv, size_t bytes, int tag,
                          mt_comm_req r[2]) {
    int next = (cp->rank + 1) % cp->size, prev = (cp->rank + cp->size - 1) % cp->size;
    mt_comm_irecv(comm, recv, bytes, prev, tag, &r[0]);
    mt_comm_isend(comm, send, bytes, next, tag, &r[1]);
}
static void ring_start(const mt_cp *cp, float *send, float *recv, size_t bytes, int tag, mt_comm_req r[2]) {
    ring_start_on(cp->comm, cp, send, recv, bytes, tag, r);
}

/* A ring step's timing (ring_attention.h, mt_ring_probe): the clock is read
 * only while measuring. */
typedef struct {
    mt_ring_probe *p;
    double first_post, in_calls, t;
} step_timer;
static step_timer timer_start(mt_ring_probe *p) { return (step_timer){p, -1.0, 0.0, 0.0}; }
static void timer_enter(step_timer *s) { /* a communication call begins */
    if (!s->p) return;
    s->t = mt_clock_s();
    if (s->first_post < 0.0) s->first_post = s->t;
}
static void timer_leave(step_timer *s) {
    if (s->p) s->in_calls += mt_clock_s() - s->t;
}
static void timer_done(step_timer *s, int step) { /* after the step's last wait */
    if (!s->p) return;
    s->p->wait_s[step] = s->in_calls;
    s->p->in_flight_s[step] = mt_clock_s() - s->first_post;
}

/* The probe: the pass's ring steps' messages again, alone and blocking, from
 * the chunk buffers the pass is done with (the sizes are the pass's; the
 * bytes do not matter). Ring step t sends K|V when t < N - 1 and, in
 * backward, both chunks' dK|dV; the fastest of MT_RING_PROBE_REPEATS
 * exchanges, each after a barrier, is its communication time (the transfer,
 * not a peer descheduled on a shared core). Its time leaves the attention
 * category. */
static void probe_pass(mt_ring_probe *p, const mt_cp *cp, bufs *bf, size_t half, int backward) {
    const int N = cp->size, steps = backward ? N : N - 1;
    const double t_probe = mt_clock_s();
    for (int t = 0; t < steps; t++) {
        double best = 0.0;
        for (int rep = 0; rep < MT_RING_PROBE_REPEATS; rep++) {
            mt_comm_req req[6] = {{0}};
            int nr = 0;
            mt_comm_barrier(p->comm); /* together: a late peer is not communication */
            const double t0 = mt_clock_s();
            if (t < N - 1) ring_start_on(p->comm, cp, bf->kv[0], bf->kv[1], 2 * half * sizeof(float), TAG_KV, req), nr = 2;
            for (int kb = 0; backward && kb < 2; kb++, nr += 2)
                ring_start_on(p->comm, cp, bf->dkv[0] + kb * half, bf->dkv[1] + kb * half, half * sizeof(float),
                              TAG_DKV + kb, req + nr);
            mt_comm_waitall(req, nr);
            const double dt = mt_clock_s() - t0;
            best = rep == 0 || dt < best ? dt : best;
        }
        mt_prof_ring_step(p->prof, p->wait_s[t], p->in_flight_s[t], best);
    }
    const double probe = mt_clock_s() - t_probe;
    p->prof->ring.probe += probe;
    mt_prof_add(p->prof, MT_PROF_ATTENTION, -probe);
}

void mt_ring_attention_forward(mt_backend *be, const mt_cp *cp, float *out, float *lse, const float *qkv, int B, int c, int NH,
                               int NKV, int HS, const mt_attn_dropout *drop, float *scratch) {
    bufs bf;
    carve(be, B, c, NH, NKV, HS, scratch, &bf);
    const int N = cp && cp->comm ? cp->size : 1, r = N > 1 ? cp->rank : 0;
    const size_t W = (size_t)(NH + 2 * NKV) * HS, KW2 = (size_t)2 * NKV * HS, C = (size_t)NH * HS, n = (size_t)B * c;
    mt_attn_dropout cd[2];
    if (drop) chunk_drop(be, cd, drop, &bf, B, c);
    for (int a = 0; a < 2; a++) {
        to_chunk(be, bf.x[a], W, qkv, W, 0, B, c, a);
        to_chunk(be, bf.kv[0] + (size_t)a * n * KW2, KW2, qkv, W, C, B, c, a);
        op_attention_block_start(be, bf.o[a], bf.l[a], n * C, (size_t)B * NH * c);
    }
    mt_ring_probe *probe = N > 1 ? cp->probe : NULL;
    int cur = 0;
    for (int t = 0; t < N; t++) {
        mt_comm_req req[2] = {{0}};
        step_timer st = timer_start(probe);
        if (t < N - 1) {
            timer_enter(&st);
            ring_start(cp, bf.kv[cur], bf.kv[1 - cur], 2 * n * KW2 * sizeof(float), TAG_KV, req);
            timer_leave(&st);
        }
        const int src = (r - t + N) % N;
        for (int a = 0; a < 2; a++)
            for (int kb = 0; kb < 2; kb++) {
                const float *k = bf.kv[cur] + (size_t)kb * n * KW2;
                op_attention_block_forward(be, bf.o[a], bf.l[a], bf.x[a], W, k, k + (size_t)NKV * HS, KW2, B, c, c,
                                           chunk_of(r, N, a) * c, chunk_of(src, N, kb) * c, NH, NKV, HS,
                                           drop ? &cd[a] : NULL, bf.block);
            }
        if (t < N - 1) {
            timer_enter(&st);
            mt_comm_waitall(req, 2);
            timer_leave(&st);
            timer_done(&st, t);
            cur = 1 - cur;
        }
    }
    for (int a = 0; a < 2; a++) {
        from_chunk(be, out, C, 0, bf.o[a], C, B, c, a);
        lse_chunk(be, lse, bf.l[a], B, NH, c, a, 1);
    }
    if (probe) probe_pass(probe, cp, &bf, n * KW2, 0);
}

void mt_ring_attention_backward(mt_backend *be, const mt_cp *cp, float *dqkv, const float *dout, const float *qkv, const float *out,
                                const float *lse, int B, int c, int NH, int NKV, int HS, const mt_attn_dropout *drop,
                                float *scratch) {
    bufs bf;
    carve(be, B, c, NH, NKV, HS, scratch, &bf);
    const int N = cp && cp->comm ? cp->size : 1, r = N > 1 ? cp->rank : 0;
    const size_t W = (size_t)(NH + 2 * NKV) * HS, KW2 = (size_t)2 * NKV * HS, C = (size_t)NH * HS, n = (size_t)B * c;
    mt_attn_dropout cd[2];
    if (drop) chunk_drop(be, cd, drop, &bf, B, c);
    for (int a = 0; a < 2; a++) {
        to_chunk(be, bf.x[a], W, qkv, W, 0, B, c, a);
        to_chunk(be, bf.kv[0] + (size_t)a * n * KW2, KW2, qkv, W, C, B, c, a);
        to_chunk(be, bf.o[a], C, out, C, 0, B, c, a);
        to_chunk(be, bf.dout[a], C, dout, C, 0, B, c, a);
        lse_chunk(be, (float *)lse, bf.l[a], B, NH, c, a, 0);
    }
    op_zero_bytes(be, bf.dx[0], n * W * sizeof(float));
    op_zero_bytes(be, bf.dx[1], n * W * sizeof(float));
    op_zero_bytes(be, bf.dkv[0], 2 * n * KW2 * sizeof(float));
    mt_ring_probe *probe = N > 1 ? cp->probe : NULL;
    int cur = 0;
    const size_t half = n * KW2; /* one K|V chunk's floats (and its dK|dV's) */
    for (int t = 0; t < N; t++) {
        mt_comm_req req[2] = {{0}}, dreq[4] = {{0}};
        step_timer st = timer_start(probe);
        if (t < N - 1) {
            timer_enter(&st);
            ring_start(cp, bf.kv[cur], bf.kv[1 - cur], 2 * half * sizeof(float), TAG_KV, req);
            timer_leave(&st);
        }
        const int src = (r - t + N) % N;
        /* K|V chunk by chunk: chunk kb's gradient is complete once both query chunks met it, and goes on
           with its K|V (the last shift takes it home) while the other chunk is computed */
        for (int kb = 0; kb < 2; kb++) {
            const float *k = bf.kv[cur] + (size_t)kb * half;
            float *dk = bf.dkv[cur] + (size_t)kb * half;
            for (int a = 0; a < 2; a++)
                op_attention_block_backward(be, bf.dx[a], dk, dk + (size_t)NKV * HS, bf.dout[a], bf.o[a], bf.l[a],
                                            bf.x[a], W, k, k + (size_t)NKV * HS, KW2, B, c, c, chunk_of(r, N, a) * c,
                                            chunk_of(src, N, kb) * c, NH, NKV, HS, drop ? &cd[a] : NULL, bf.block);
            if (N > 1) {
                timer_enter(&st);
                ring_start(cp, dk, bf.dkv[1 - cur] + (size_t)kb * half, half * sizeof(float), TAG_DKV + kb, dreq + 2 * kb);
                timer_leave(&st);
            }
        }
        timer_enter(&st);
        if (N > 1) mt_comm_waitall(dreq, 4);
        if (t < N - 1) mt_comm_waitall(req, 2);
        timer_leave(&st);
        timer_done(&st, t);
        if (N > 1) cur = 1 - cur;
    }
    /* after N shifts of dK|dV the buffer in hand is this rank's own */
    for (int a = 0; a < 2; a++) {
        from_chunk(be, dqkv, W, 0, bf.dx[a], W, B, c, a);
        from_chunk(be, dqkv, W, C, bf.dkv[cur] + (size_t)a * n * KW2, KW2, B, c, a);
    }
    if (probe) probe_pass(probe, cp, &bf, half, 1);
}
