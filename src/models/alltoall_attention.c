/* All-to-all attention (see alltoall_attention.h): op_copy_rows packs each
 * destination's heads / each source's chunks, comm's all-to-all moves them,
 * ops' one-process kernel computes. */
#include "models/alltoall_attention.h"

typedef struct {
    float *send, *recv, *q, *o, *dout, *dq, *block;
    int32_t *docs_all, *docs;
} bufs;

/* The floats the buffers take; with base, their addresses. */
static size_t carve(mt_backend *be, int N, int B, int c, int NH, int NKV, int HS, float *base, bufs *b) {
    const size_t W = (size_t)(NH + 2 * NKV) * HS, n = (size_t)B * 2 * c, T = (size_t)2 * c * N;
    const int Hq = NH / N, Hk = NKV / N;
    size_t off = 0;
#define TAKE(p, count) (p = base ? base + off : NULL, off += (count))
    TAKE(b->send, n * W);
    TAKE(b->recv, n * W);
    TAKE(b->q, n * W);                      /* [B][T][W / N] */
    TAKE(b->o, (size_t)B * T * Hq * HS);
    TAKE(b->dout, (size_t)B * T * Hq * HS);
    TAKE(b->dq, n * W);
    float *d;
    TAKE(d, n * N); /* int32 document starts of every rank's rows, then of the whole sequence */
    b->docs_all = (int32_t *)d;
    TAKE(d, (size_t)B * T);
    b->docs = (int32_t *)d;
    TAKE(b->block, op_attention_scratch_floats_gqa(be, B, (int)T, Hq, Hk, HS));
#undef TAKE
    return off;
}

size_t mt_alltoall_attention_scratch_floats(mt_backend *be, const mt_cp *cp, int B, int c, int NH, int NKV, int HS) {
    bufs b;
    return carve(be, mt_cp_size(cp), B, c, NH, NKV, HS, NULL, &b);
}

/* the global chunk of local chunk a on rank r of N (ring_attention.h's layout) */
static int chunk_of(int r, int N, int a) { return a == 0 ? r : 2 * N - 1 - r; }

/* The column sections of a row that travel: q|k|v (3), or the output (1);
 * col0 in the local row of W floats, width per rank `width` (rank p's: col0 + p width). */
typedef struct {
    int n;
    size_t col0[3], width[3], W, wsum;
} sections;

static sections qkv_sections(int N, int NH, int NKV, int HS) {
    sections s = {3, {0, (size_t)NH * HS, (size_t)(NH + NKV) * HS},
                  {(size_t)NH / N * HS, (size_t)NKV / N * HS, (size_t)NKV / N * HS}, (size_t)(NH + 2 * NKV) * HS, 0};
    s.wsum = s.width[0] + s.width[1] + s.width[2];
    return s;
}
static sections out_sections(int N, int NH, int HS) {
    sections s = {1, {0, 0, 0}, {(size_t)NH / N * HS, 0, 0}, (size_t)NH * HS, (size_t)NH / N * HS};
    return s;
}

/* local [B][2c][W] (every head, this rank's rows) -> full [B][T][wsum] (every row, this rank's heads) */
static void to_heads(mt_backend *be, const mt_cp *cp, float *full, const float *local, const sections *s, int B, int c,
                     bufs *bf) {
    const int N = cp->size;
    const size_t f = sizeof(float), n = (size_t)B * 2 * c, T = (size_t)2 * c * N, blk = n * s->wsum;
    for (int p = 0; p < N; p++) { /* destination p: its heads of each section, side by side */
        size_t at = 0;
        for (int k = 0; k < s->n; k++) {
            op_copy_rows(be, bf->send + p * blk + at, s->wsum * f, 0, local + s->col0[k] + p * s->width[k], s->W * f, 0,
                         s->width[k] * f, (int)n, 1);
            at += s->width[k];
        }
    }
    mt_comm_alltoall(cp->comm, bf->send, bf->recv, blk * f);
    for (int r = 0; r < N; r++) /* source r's two chunks to their places in the sequence */
        for (int a = 0; a < 2; a++)
            op_copy_rows(be, full + (size_t)chunk_of(r, N, a) * c * s->wsum,
                         s->wsum * f, T * s->wsum * f, bf->recv + r * blk + (size_t)a * c * s->wsum, s->wsum * f,
                         (size_t)2 * c * s->wsum * f, s->wsum * f, c, B);
}

/* the inverse: full [B][T][wsum] of this rank's heads -> local [B][2c][W] (overwritten in its sections) */
static void from_heads(mt_backend *be, const mt_cp *cp, float *local, const float *full, const sections *s, int B, int c,
                       bufs *bf) {
    const int N = cp->size;
    const size_t f = sizeof(float), n = (size_t)B * 2 * c, T = (size_t)2 * c * N, blk = n * s->wsum;
    for (int p = 0; p < N; p++) /* destination p: the rows of its two chunks */
        for (int a = 0; a < 2; a++)
            op_copy_rows(be, bf->send + p * blk + (size_t)a * c * s->wsum, s->wsum * f, (size_t)2 * c * s->wsum * f,
                         full + (size_t)chunk_of(p, N, a) * c * s->wsum, s->wsum * f,
                         T * s->wsum * f, s->wsum * f, c, B);
    mt_comm_alltoall(cp->comm, bf->send, bf->recv, blk * f);
    for (int r = 0; r < N; r++) { /* source r's heads into their columns */
        size_t at = 0;
        for (int k = 0; k < s->n; k++) {
            op_copy_rows(be, local + s->col0[k] + r * s->width[k], s->W * f, 0, bf->recv + r * blk + at, s->wsum * f, 0,
                         s->width[k] * f, (int)n, 1);
            at += s->width[k];
        }
    }
}

/* The dropout of this rank's heads over the whole sequence: head0 moved to
 * its first head, and the document starts of every row. */
static const mt_attn_dropout *head_drop(mt_backend *be, const mt_cp *cp, const mt_attn_dropout *drop, int B, int c,
                                        int NH, bufs *bf, mt_attn_dropout *d) {
    const int N = cp->size;
    if (!drop) return NULL;
    *d = *drop;
    d->head0 += cp->rank * (NH / N);
    if (!drop->doc_start) return d;
    const size_t i4 = sizeof(int32_t), n = (size_t)B * 2 * c, T = (size_t)2 * c * N;
    mt_comm_allgather(cp->comm, drop->doc_start, bf->docs_all, n * i4);
    for (int r = 0; r < N; r++)
        for (int a = 0; a < 2; a++)
            op_copy_rows(be, bf->docs + (size_t)chunk_of(r, N, a) * c, T * i4, 0,
                         bf->docs_all + r * n + (size_t)a * c, (size_t)2 * c * i4, 0, (size_t)c * i4, B, 1);
    d->doc_start = bf->docs;
    return d;
}

void mt_alltoall_attention_forward(mt_backend *be, const mt_cp *cp, float *out, float *lse, const float *qkv, int B, int c,
                                   int NH, int NKV, int HS, const mt_attn_dropout *drop, float *scratch) {
    const int N = mt_cp_size(cp), T = 2 * c * N;
    bufs bf;
    carve(be, N, B, c, NH, NKV, HS, scratch, &bf);
    sections sq = qkv_sections(N, NH, NKV, HS), so = out_sections(N, NH, HS);
    mt_attn_dropout dd;
    const mt_attn_dropout *d = head_drop(be, cp, drop, B, c, NH, &bf, &dd);
    to_heads(be, cp, bf.q, qkv, &sq, B, c, &bf);
    op_attention_forward_gqa(be, bf.o, lse, bf.q, B, T, NH / N, NKV / N, HS, d, bf.block);
    from_heads(be, cp, out, bf.o, &so, B, c, &bf);
}

void mt_alltoall_attention_backward(mt_backend *be, const mt_cp *cp, float *dqkv, const float *dout, const float *qkv,
                                    const float *out, const float *lse, int B, int c, int NH, int NKV, int HS,
                                    const mt_attn_dropout *drop, float *scratch) {
    const int N = mt_cp_size(cp), T = 2 * c * N;
    bufs bf;
    carve(be, N, B, c, NH, NKV, HS, scratch, &bf);
    sections sq = qkv_sections(N, NH, NKV, HS), so = out_sections(N, NH, HS);
    mt_attn_dropout dd;
    const mt_attn_dropout *d = head_drop(be, cp, drop, B, c, NH, &bf, &dd);
    to_heads(be, cp, bf.q, qkv, &sq, B, c, &bf);
    to_heads(be, cp, bf.o, out, &so, B, c, &bf);
    to_heads(be, cp, bf.dout, dout, &so, B, c, &bf);
    op_attention_backward_gqa(be, bf.dq, bf.dout, bf.q, bf.o, lse, B, T, NH / N, NKV / N, HS, d, bf.block);
    from_heads(be, cp, dqkv, bf.dq, &sq, B, c, &bf);
}

size_t mt_cp_attention_scratch_floats(mt_backend *be, const mt_cp *cp, int B, int c, int NH, int NKV, int HS) {
    return cp->mode == MT_CP_ALLTOALL ? mt_alltoall_attention_scratch_floats(be, cp, B, c, NH, NKV, HS)
                                      : mt_ring_attention_scratch_floats(be, B, c, NH, NKV, HS);
}

void mt_cp_attention_forward(mt_backend *be, const mt_cp *cp, float *out, float *lse, const float *qkv, int B, int c,
                             int NH, int NKV, int HS, const mt_attn_dropout *drop, float *scratch) {
    if (cp->mode == MT_CP_ALLTOALL) mt_alltoall_attention_forward(be, cp, out, lse, qkv, B, c, NH, NKV, HS, drop, scratch);
    else mt_ring_attention_forward(be, cp, out, lse, qkv, B, c, NH, NKV, HS, drop, scratch);
}

void mt_cp_attention_backward(mt_backend *be, const mt_cp *cp, float *dqkv, const float *dout, const float *qkv,
                              const float *out, const float *lse, int B, int c, int NH, int NKV, int HS,
                              const mt_attn_dropout *drop, float *scratch) {
    if (cp->mode == MT_CP_ALLTOALL)
        mt_alltoall_attention_backward(be, cp, dqkv, dout, qkv, out, lse, B, c, NH, NKV, HS, drop, scratch);
    else mt_ring_attention_backward(be, cp, dqkv, dout, qkv, out, lse, B, c, NH, NKV, HS, drop, scratch);
}
