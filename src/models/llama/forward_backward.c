/* Forward and backward of the Llama units on one microbatch (the family
 * table is at the end).
 *   input:  x0 = embed_tokens[tok]
 *   block:  h  = x + o_proj(attn(rope(q), rope(k), v))    q|k|v = qkv_proj(rmsnorm1(x))
 *           r3 = h + down(silu(gate(rmsnorm2(h))) * up(rmsnorm2(h)))
 *   output: loss = xent(rmsnorm(x) . lm_head^T)   (lm_head may be embed_tokens)
 * RoPE rotates q and k in place after the projection, so the kept qkv is
 * the rotated one (what attention's backward needs); backward rotates the
 * q and k gradients back (the rotation is orthogonal: its inverse is its
 * transpose). Tensor parallelism is GPT-2's (models/unit_ops.h): q|k|v and
 * gate|up column-parallel by heads / columns, o_proj and down_proj
 * row-parallel, the embedding and head vocabulary-parallel. */
#include "models/llama/llama.h"
#include "models/model.h"
#include "models/unit_ops.h"
#include "models/alltoall_attention.h"
#include "ops/moe.h"
#include "ops/ops.h"
#include "ops/positions.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Activation buffers, head buffers and backward scratch (with the RoPE tables). */
/* With experts, LB_GU and LB_H hold the sorted slots' rows (N K of them),
 * LB_ROUTER the router's probabilities [N,E], log-sum-exp [N] and routing
 * weights [N,K], LB_ROUTE the integers of the routing (ops/moe.h: topk
 * [N,K], slot [N,K], order [N,K], offsets [E+1]) and LB_Y the experts'
 * outputs [N K, C]; the dense MLP leaves these three empty. */
/* Under expert parallelism LB_GU and LB_H hold the rows this rank's experts
 * received (at most N M of them, expert-major), LB_XS those rows' inputs,
 * LB_Y still this rank's slots' outputs once returned (N K rows), and
 * LB_ROUTE also the received counts [ep][E/ep] and the two orders of the
 * received rows (ops/moe.h: op_moe_ep_orders). */
/* With QK-norm LB_QKN holds q|k before their norms [N, QW + KW] and the
 * norms' rstd [N, 2]; empty without. */
/* With a shared expert LB_SGU, LB_SH and LB_SY hold its gate|up [N, 2 Fs],
 * SwiGLU [N, Fs], and output [N, C] (this tp rank's part) followed by its
 * gate's sigmoid [N]; empty without. */
enum { LB_X1, LB_RSTD1, LB_QKV, LB_ATTY, LB_LSE, LB_RES2, LB_X2, LB_RSTD2, LB_GU, LB_H, LB_RES3, LB_ROUTER, LB_ROUTE,
       LB_Y, LB_XS, LB_SGU, LB_SH, LB_SY, LB_QKN, LB_COUNT };
enum { LH_XF, LH_RSTDF, LH_COUNT };
enum { LS_DATTY, LS_DQKV, LS_DGU, LS_DH, LS_COS, LS_SIN };

/* Local (this tp rank's) widths. */
typedef struct {
    int C, hd, nh, nkv, qkv, F;
    int E, K, M; /* experts, choices per token and the expert-side rows per token row (N M in all): K, or
                    under expert parallelism what ep ranks may send to this rank's experts; 0 when dense */
    int ep, El, e0; /* expert parallelism: ranks, experts per rank, this rank's first expert (1, E, 0: none) */
    int Fs;         /* the shared expert's local width (0: none) */
} dims;

static dims local_dims(const mt_model *m) {
    const mt_model_config *c = &m->cfg;
    int tp = m->layout.tp;
    int kv = mt_model_kv_heads(c);
    dims d = {c->n_embd, mt_model_head_dim(c), c->n_head / tp, tp > kv ? 1 : kv / tp, 0, c->ffn_dim / tp, 0, 0, 0, 1, 0, 0, 0};
    d.qkv = (d.nh + 2 * d.nkv) * d.hd;
    if (c->num_experts) { /* F: one expert's local width */
        d.F = c->moe_ffn_dim / tp;
        d.E = c->num_experts;
        d.K = d.M = c->moe_top_k;
        d.ep = m->ep ? mt_comm_size(m->ep) : 1;
        d.El = d.E / d.ep;
        d.e0 = m->ep ? mt_comm_rank(m->ep) * d.El : 0;
        d.Fs = c->moe_shared_ffn_dim / tp;
        /* a token's K choices are distinct experts: one rank sends at most min(K, El) rows per token */
        if (d.ep > 1) d.M = d.ep * (d.K < d.El ? d.K : d.El);
    }
    return d;
}

static const float *block_input(const mt_model *m, int layer) {
    return layer == 0 ? m->acts.encoded : m->acts.blocks[layer - 1].b[LB_RES3];
}

static void input_forward(mt_model *m, const mt_fwd_ctx *fc) {
    (void)fc;
    mt_acts *a = &m->acts;
    const mt_tensor *t = mt_unit_tensor(&m->layout.units[0], MT_L_EMBED);
    const float *w = mt_model_tensor_data(m, 0, MT_L_EMBED);
    int C = m->cfg.n_embd, N = a->B * a->T, Vl = (int)t->shape[0], v0 = m->layout.tp_rank * Vl;
    float *part = m->layout.tp == 1 ? a->encoded : m->gs.dtmp; /* a masked lookup, summed over tp */
    if (m->precision == MT_FP32)
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_embed_shard_forward(m->be, part, a->tokens, w, v0, Vl, N, C));
    else /* read in 16 bits: just the rows looked up are widened */
        MT_TIMED(
            m->prof, MT_PROF_ELEMENTWISE,
            op_embed_shard_forward_16(m->be, part, a->tokens, m->precision, mt_model_weight16(m, w), v0, Vl, N, C));
    if (m->layout.tp > 1) {
        mt_unit_tp_scatter(m, part);
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_copy(m->be, a->encoded, part, mt_model_resid_floats(m)));
    }
}

static void input_backward(mt_model *m, const mt_fwd_ctx *fc) {
    (void)fc;
    mt_acts *a = &m->acts;
    const mt_tensor *t = mt_unit_tensor(&m->layout.units[0], MT_L_EMBED);
    float *dw = mt_model_tensor_grad(m, 0, MT_L_EMBED);
    if (!dw) return; /* a frozen embedding: nothing before it to feed */
    int Vl = (int)t->shape[0];
    const float *dfull = mt_unit_tp_gather(m, m->gs.dresid, m->gs.gathered); /* every rank's rows take all N */
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE,
             op_embed_shard_backward(m->be, dw, NULL, dfull, a->tokens, m->layout.tp_rank * Vl, Vl, a->B, a->T,
                                     m->cfg.n_embd));
}

/* q and k of every row rotated by their positions (inverse: the backward). */
static void rope(mt_model *m, float *qkv, const dims *d, int inverse) {
    int N = m->acts.B * m->acts.T;
    const float *cs = m->gs.f[LS_COS], *sn = m->gs.f[LS_SIN];
    if (mt_unit_positions_at(m)) /* packed samples: each document's positions start at 0; cp: the chunks' positions */
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, {
            op_rope_apply_at(m->be, qkv, N, d->nh, d->hd, (size_t)d->qkv, cs, sn, inverse, m->acts.pos);
            op_rope_apply_at(m->be, qkv + (size_t)d->nh * d->hd, N, d->nkv, d->hd, (size_t)d->qkv, cs, sn, inverse, m->acts.pos);
        });
    else
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, {
            op_rope_apply(m->be, qkv, N, m->acts.T, d->nh, d->hd, (size_t)d->qkv, cs, sn, inverse);
            op_rope_apply(m->be, qkv + (size_t)d->nh * d->hd, N, m->acts.T, d->nkv, d->hd, (size_t)d->qkv, cs, sn, inverse);
        });
}

static void attention_core_forward(mt_model *m, int layer) {
    mt_acts *a = &m->acts;
    mt_block_acts *ba = &a->blocks[layer];
    dims d = local_dims(m);
    mt_attn_dropout none = {{0.0f, m->seed, 0, (uint32_t)layer, MT_DROPOUT_ATTN_PROBS}, a->sample_ids, 0,
                            a->packed ? a->doc_start : NULL};
    if (m->cp)
        MT_TIMED(m->prof, MT_PROF_ATTENTION,
                 mt_cp_attention_forward(m->be, m->cp, ba->b[LB_ATTY], ba->b[LB_LSE], ba->b[LB_QKV], a->B, a->T / 2, d.nh,
                                           d.nkv, d.hd, &none, m->gs.attn_scratch));
    else
        MT_TIMED(m->prof, MT_PROF_ATTENTION, op_attention_forward_gqa(m->be, ba->b[LB_ATTY], ba->b[LB_LSE], ba->b[LB_QKV], a->B, a->T,
                                                                d.nh, d.nkv, d.hd, &none, m->gs.attn_scratch));
}

/* QK-norm (OLMoE's q_norm, k_norm) of the rows' q|k in place, before RoPE.
 * Under tp a rank holds its heads' columns: the rows' sums of squares are
 * all-reduced over tp (2 N floats) and divided by the local width x tp --
 * for k also when tp > kv heads, where each kv head's columns (and so its
 * squares) are on tp / kv ranks and the local width x tp counts them as
 * often. */
static void qk_norm_forward(mt_model *m, mt_block_acts *ba, const dims *d, const float *wq, const float *wk, int N,
                            float eps) {
    int QW = d->nh * d->hd, KW = d->nkv * d->hd, tp = m->layout.tp;
    float *pre = ba->b[LB_QKN], *ss = pre + (size_t)N * (QW + KW);
    MT_TIMED(m->prof, MT_PROF_LAYERNORM, op_qk_norm_sumsq(m->be, ss, ba->b[LB_QKV], N, QW, KW, (size_t)d->qkv));
    if (tp > 1) mt_tp_allreduce(m->tp, ss, 2 * (size_t)N);
    MT_TIMED(m->prof, MT_PROF_LAYERNORM,
             op_qk_norm_apply(m->be, ba->b[LB_QKV], pre, ss, wq, wk, N, QW, KW, (size_t)d->qkv, (float)QW * tp,
                              (float)KW * tp, eps));
}

/* ---- mixture of experts: the MLP as E experts behind a router ---- */

typedef struct {
    float *probs, *lse, *topw;
    int32_t *topk, *slot, *order, *offsets;
    int32_t *recv, *to_expert, *to_source; /* expert parallelism (dims.ep > 1) */
} moe_route;

static moe_route moe_route_of(mt_block_acts *ba, const dims *d, int N) {
    moe_route r;
    r.probs = ba->b[LB_ROUTER];
    r.lse = r.probs + (size_t)N * d->E;
    r.topw = r.lse + N;
    r.topk = (int32_t *)ba->b[LB_ROUTE];
    r.slot = r.topk + (size_t)N * d->K;
    r.order = r.slot + (size_t)N * d->K;
    r.offsets = r.order + (size_t)N * d->K;
    r.recv = r.offsets + d->E + 1;
    r.to_expert = r.recv + d->E;
    r.to_source = r.to_expert + (size_t)N * d->M;
    return r;
}

/* ---- expert parallelism: the token exchange of one block and microbatch ----
 * This rank's sorted rows are grouped by expert, so the rows for ep rank j's
 * experts are one run; the counts per expert go first (an all-to-all of E/ep
 * integers per rank), then the rows (all-to-all-v), to the experts' ranks
 * and back; the backward sends the output gradients the same two ways. */
typedef struct {
    size_t sb[MT_MOE_MAX_EXPERTS], sd[MT_MOE_MAX_EXPERTS]; /* bytes and byte offsets sent to each ep rank */
    size_t rb[MT_MOE_MAX_EXPERTS], rd[MT_MOE_MAX_EXPERTS]; /* ... and received from each */
    int32_t eo[MT_MOE_MAX_EXPERTS + 1]; /* local expert e's expert-major rows [eo[e], eo[e + 1]) */
    int R;                              /* rows received */
} ep_plan;

static void ep_plan_of(const dims *d, const int32_t *off, const int32_t *rc, ep_plan *p) {
    size_t row = (size_t)d->C * sizeof(float), at = 0;
    for (int j = 0; j < d->ep; j++) {
        p->sd[j] = (size_t)off[j * d->El] * row;
        p->sb[j] = (size_t)(off[(j + 1) * d->El] - off[j * d->El]) * row;
        size_t n = 0;
        for (int e = 0; e < d->El; e++) n += (size_t)rc[j * d->El + e];
        p->rd[j] = at * row;
        p->rb[j] = n * row;
        at += n;
    }
    p->R = (int)at;
    p->eo[0] = 0;
    for (int e = 0; e < d->El; e++) {
        int32_t n = 0;
        for (int j = 0; j < d->ep; j++) n += rc[j * d->El + e];
        p->eo[e + 1] = p->eo[e] + n;
    }
}

/* Forward of this rank's experts on the rows the ep group sends them: xs
 * the sorted rows [off[E], C] (free once sent); y the outputs of this
 * rank's slots, back in sorted order. */
static void ep_forward(mt_model *m, int U, const mt_llama_block_index *ix, const mt_fwd_ctx *fc, const dims *d,
                       const moe_route *r, const int32_t *off, const float *xs, mt_block_acts *ba, int account) {
    const int C = d->C, F = d->F;
    int32_t sc[MT_MOE_MAX_EXPERTS], rc[MT_MOE_MAX_EXPERTS];
    for (int e = 0; e < d->E; e++) sc[e] = off[e + 1] - off[e];
    MT_TIMED(m->prof, MT_PROF_ALLTOALL, mt_comm_alltoall(m->ep, sc, rc, (size_t)d->El * sizeof(int32_t)));
    ep_plan p;
    ep_plan_of(d, off, rc, &p);
    float *recv = m->gs.f[LS_DATTY], *xe = ba->b[LB_XS], *gu = ba->b[LB_GU], *h = ba->b[LB_H];
    float *ye = m->gs.f[LS_DATTY], *ysrc = m->gs.f[LS_DQKV];
    MT_TIMED(m->prof, MT_PROF_ALLTOALL, mt_comm_alltoallv(m->ep, xs, p.sb, p.sd, recv, p.rb, p.rd));
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, {
        op_copy_from_host(m->be, r->recv, rc, (size_t)d->E * sizeof(int32_t)); /* kept for the backward */
        op_moe_ep_orders(m->be, r->to_expert, r->to_source, r->recv, d->ep, d->El);
        op_moe_gather(m->be, xe, recv, r->to_expert, p.R, C);
    });
    for (int e = 0; e < d->El; e++) {
        int o = p.eo[e], n = p.eo[e + 1] - o;
        if (n) mt_unit_linear_fwd(m, U, ix->expert + 3 * (d->e0 + e), fc, gu + (size_t)o * 2 * F, xe + (size_t)o * C, NULL, n, C, 2 * F);
    }
    MT_TIMED(m->prof, MT_PROF_GELU, op_swiglu_forward(m->be, h, gu, p.R, F));
    for (int e = 0; e < d->El; e++) {
        int o = p.eo[e], n = p.eo[e + 1] - o;
        if (n) mt_unit_linear_fwd(m, U, ix->expert + 3 * (d->e0 + e) + 2, fc, ye + (size_t)o * C, h + (size_t)o * F, NULL, n, F, C);
    }
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_moe_gather(m->be, ysrc, ye, r->to_source, p.R, C));
    MT_TIMED(m->prof, MT_PROF_ALLTOALL, mt_comm_alltoallv(m->ep, ysrc, p.rb, p.rd, ba->b[LB_Y], p.sb, p.sd));
    if (account)
        for (int j = 0; j < d->ep; j++) m->moe_ep_rows[j] += (int64_t)(p.sb[j] / ((size_t)C * sizeof(float)));
}

/* Its backward: gs LS_DATTY holds the output gradients of this rank's sorted
 * rows on entry (dy) and their input gradients (dxs) on return; the expert
 * rows' gradients travel the forward's way, the input gradients back. */
static void ep_backward(mt_model *m, int U, const mt_llama_block_index *ix, const mt_fwd_ctx *fc, const dims *d,
                        const moe_route *r, const int32_t *off, mt_block_acts *ba) {
    const int C = d->C, F = d->F;
    mt_grad_scratch *gs = &m->gs;
    int32_t rc[MT_MOE_MAX_EXPERTS];
    op_copy_to_host(m->be, rc, r->recv, (size_t)d->E * sizeof(int32_t));
    ep_plan p;
    ep_plan_of(d, off, rc, &p);
    float *dy = gs->f[LS_DATTY], *recv = gs->f[LS_DQKV], *dye = gs->f[LS_DATTY], *dh = gs->f[LS_DH], *dgu = gs->f[LS_DGU];
    const float *xe = ba->b[LB_XS], *gu = ba->b[LB_GU], *h = ba->b[LB_H];
    MT_TIMED(m->prof, MT_PROF_ALLTOALL, mt_comm_alltoallv(m->ep, dy, p.sb, p.sd, recv, p.rb, p.rd));
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_moe_gather(m->be, dye, recv, r->to_expert, p.R, C));
    for (int e = 0; e < d->El; e++) {
        int o = p.eo[e], n = p.eo[e + 1] - o;
        if (n) mt_unit_linear_bwd(m, U, ix->expert + 3 * (d->e0 + e) + 2, fc, dh + (size_t)o * F, NULL,
                                  dye + (size_t)o * C, h + (size_t)o * F, n, F, C, 0);
    }
    MT_TIMED(m->prof, MT_PROF_GELU, op_swiglu_backward(m->be, dgu, dh, gu, p.R, F));
    float *dxe = dye; /* dead once the down projections' backward ran */
    for (int e = 0; e < d->El; e++) {
        int o = p.eo[e], n = p.eo[e + 1] - o;
        if (n) mt_unit_linear_bwd(m, U, ix->expert + 3 * (d->e0 + e), fc, dxe + (size_t)o * C, NULL,
                                  dgu + (size_t)o * 2 * F, xe + (size_t)o * C, n, C, 2 * F, 0);
    }
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_moe_gather(m->be, recv, dxe, r->to_source, p.R, C));
    MT_TIMED(m->prof, MT_PROF_ALLTOALL, mt_comm_alltoallv(m->ep, recv, p.rb, p.rd, dy, p.sb, p.sd));
}

/* The shared expert (Qwen2-MoE's): out += sigmoid(x2 . shared_gate) *
 * down(silu(gate(x2)) * up(x2)) for all N rows; every rank runs it on its
 * own rows (no exchange under ep), cut over tp like the dense MLP. */
static void shared_forward(mt_model *m, int U, const mt_llama_block_index *ix, const mt_fwd_ctx *fc, const dims *d,
                           const float *x2, float *out, mt_block_acts *ba, int N) {
    const int C = d->C, Fs = d->Fs;
    float *gu = ba->b[LB_SGU], *h = ba->b[LB_SH], *ys = ba->b[LB_SY], *g = ys + (size_t)N * C;
    mt_unit_linear_fwd(m, U, ix->shared, fc, gu, x2, NULL, N, C, 2 * Fs);
    MT_TIMED(m->prof, MT_PROF_GELU, op_swiglu_forward(m->be, h, gu, N, Fs));
    mt_unit_linear_fwd(m, U, ix->shared_down, fc, ys, h, NULL, N, Fs, C);
    mt_unit_linear_fwd(m, U, ix->shared_gate, fc, g, x2, NULL, N, C, 1);
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_moe_shared_gate_forward(m->be, out, ys, g, N, C));
}

/* Its backward, after the routed experts' (their scratch is free): adds
 * this tp rank's part of its input gradient into dx. */
static void shared_backward(mt_model *m, int U, const mt_llama_block_index *ix, const mt_fwd_ctx *fc, const dims *d,
                            const float *x2, const float *dfull, float *dx, int dwf, mt_block_acts *ba, int N) {
    mt_grad_scratch *gs = &m->gs;
    const int C = d->C, Fs = d->Fs;
    const float *gu = ba->b[LB_SGU], *h = ba->b[LB_SH], *ys = ba->b[LB_SY], *g = ys + (size_t)N * C;
    float *dys = gs->f[LS_DATTY], *dg = gs->f[LS_DQKV], *dh = gs->f[LS_DH], *dgu = gs->f[LS_DGU];
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_moe_shared_gate_backward(m->be, dys, dg, dfull, ys, g, N, C));
    /* under tp each rank's ys is its part of the shared expert's output: the gate's gradient is their sum */
    if (m->layout.tp > 1) mt_tp_allreduce(m->tp, dg, (size_t)N);
    mt_unit_linear_bwd(m, U, ix->shared_down, fc, dh, NULL, dys, h, N, Fs, C, dwf);
    MT_TIMED(m->prof, MT_PROF_GELU, op_swiglu_backward(m->be, dgu, dh, gu, N, Fs));
    mt_unit_linear_bwd(m, U, ix->shared, fc, dx, NULL, dgu, x2, N, C, 2 * Fs, MT_ACC_DINP | dwf);
    /* the gate is whole on every tp rank, as the router: its input gradient on tp rank 0 only, and under
       sequence parallelism only rank 0's weight gradient */
    int tp0 = m->layout.tp_rank == 0;
    if (!tp0 && mt_tp_sp(m->tp)) op_zero(m->be, dg, (size_t)N);
    mt_unit_linear_bwd(m, U, ix->shared_gate, fc, tp0 ? dx : NULL, NULL, dg, x2, N, C, 1, MT_ACC_DINP | dwf);
}

/* out [N, C] (this tp rank's part of the sum, like a row-parallel layer's)
 * from the gathered normed rows x2: route, sort the (token, choice) slots by
 * expert, one GEMM per expert over its rows, combine with the routing
 * weights. account: add the auxiliary losses to m->moe (not when
 * recomputing). */
static void moe_forward(mt_model *m, int layer, const mt_fwd_ctx *fc, const float *x2, float *out, int account) {
    const mt_model_config *c = &m->cfg;
    mt_block_acts *ba = &m->acts.blocks[layer];
    mt_llama_block_index ix = mt_llama_block_tensors(c);
    dims d = local_dims(m);
    const int U = 1 + layer, N = m->acts.B * m->acts.T, C = d.C, E = d.E, K = d.K, F = d.F;
    moe_route r = moe_route_of(ba, &d, N);
    mt_unit_linear_fwd(m, U, ix.router, fc, r.probs, x2, NULL, N, C, E);
    int cap = c->moe_capacity > 0.0f ? (int)ceil((double)c->moe_capacity * N * K / E) : 0;
    int64_t dropped;
    int32_t off[MT_MOE_MAX_EXPERTS + 1]; /* the plan's expert offsets on the host: the GEMMs' row counts */
    float *xs = m->gs.f[LS_DQKV], *gu = ba->b[LB_GU], *h = ba->b[LB_H], *y = ba->b[LB_Y];
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, {
        op_moe_route_forward(m->be, r.probs, r.lse, r.topk, r.topw, N, E, K, (mt_moe_router)c->moe_router,
                             c->moe_norm_topk);
        dropped = op_moe_dispatch_plan(m->be, r.offsets, r.slot, r.order, r.topk, N, E, K, cap);
        op_copy_to_host(m->be, off, r.offsets, (size_t)(E + 1) * sizeof(int32_t));
        op_moe_gather(m->be, xs, x2, r.order, off[E], C);
    });
    if (d.ep > 1) {
        ep_forward(m, U, &ix, fc, &d, &r, off, xs, ba, account);
    } else {
        for (int e = 0; e < E; e++) { /* gate|up of expert e: one GEMM over its rows */
            int o = off[e], n = off[e + 1] - o;
            if (n) mt_unit_linear_fwd(m, U, ix.expert + 3 * e, fc, gu + (size_t)o * 2 * F, xs + (size_t)o * C, NULL, n, C, 2 * F);
        }
        MT_TIMED(m->prof, MT_PROF_GELU, op_swiglu_forward(m->be, h, gu, off[E], F));
        for (int e = 0; e < E; e++) {
            int o = off[e], n = off[e + 1] - o;
            if (n) mt_unit_linear_fwd(m, U, ix.expert + 3 * e + 2, fc, y + (size_t)o * C, h + (size_t)o * F, NULL, n, F, C);
        }
    }
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_moe_combine_forward(m->be, out, y, r.topw, r.slot, N, K, C));
    if (d.Fs) shared_forward(m, U, &ix, fc, &d, x2, out, ba, N);
    if (!account) return;
    double aux, z;
    op_moe_aux_losses(m->be, &aux, &z, r.probs, r.lse, r.topk, N, E, K);
    double w = fc->block_loss_weight > 0.0f ? (double)fc->block_loss_weight : (double)N;
    m->moe.loss_sum += w * ((double)c->moe_aux_coef * aux + (double)c->moe_z_coef * z);
    m->moe.aux += aux;
    m->moe.z += z;
    m->moe.dropped += dropped;
    m->moe.routed += (int64_t)N * K;
    for (int e = 0; e < E; e++) {
        int64_t load = off[e + 1] - off[e];
        if (load > m->moe.max_load) m->moe.max_load = load;
        m->moe_load[(size_t)layer * E + e] += load;
    }
}

/* Its backward: dfull [N, C] the gathered gradient of the MoE output; sets
 * dx [N, C] (this tp rank's part of the gradient of x2). */
static void moe_backward(mt_model *m, int layer, const mt_fwd_ctx *fc, const float *x2, const float *dfull, float *dx,
                         int dwf) {
    const mt_model_config *c = &m->cfg;
    mt_grad_scratch *gs = &m->gs;
    mt_block_acts *ba = &m->acts.blocks[layer];
    mt_llama_block_index ix = mt_llama_block_tensors(c);
    dims d = local_dims(m);
    const int U = 1 + layer, N = m->acts.B * m->acts.T, C = d.C, E = d.E, K = d.K, F = d.F;
    moe_route r = moe_route_of(ba, &d, N);
    int32_t off[MT_MOE_MAX_EXPERTS + 1];
    op_copy_to_host(m->be, off, r.offsets, (size_t)(E + 1) * sizeof(int32_t));
    const int M = off[E];
    float *gu = ba->b[LB_GU], *h = ba->b[LB_H], *y = ba->b[LB_Y];
    float *dy = gs->f[LS_DATTY], *dh = gs->f[LS_DH], *dgu = gs->f[LS_DGU], *xs = gs->f[LS_DQKV];
    float *dtopw = dgu + (size_t)N * d.M * 2 * F, *dlogits = dtopw + (size_t)N * K;
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE,
             op_moe_combine_backward(m->be, dy, dtopw, dfull, y, r.topw, r.slot, N, K, C));
    /* under tp each rank's y is its part of the experts' outputs: the weights' gradient is their sum */
    if (m->layout.tp > 1) mt_tp_allreduce(m->tp, dtopw, (size_t)N * K);
    float *dxs = dy; /* dy is dead once the down projections' backward ran */
    if (d.ep > 1) {
        ep_backward(m, U, &ix, fc, &d, &r, off, ba);
    } else {
        for (int e = 0; e < E; e++) {
            int o = off[e], n = off[e + 1] - o;
            if (n) mt_unit_linear_bwd(m, U, ix.expert + 3 * e + 2, fc, dh + (size_t)o * F, NULL, dy + (size_t)o * C,
                                      h + (size_t)o * F, n, F, C, 0);
        }
        MT_TIMED(m->prof, MT_PROF_GELU, op_swiglu_backward(m->be, dgu, dh, gu, M, F));
        MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_moe_gather(m->be, xs, x2, r.order, M, C));
        for (int e = 0; e < E; e++) {
            int o = off[e], n = off[e + 1] - o;
            if (n) mt_unit_linear_bwd(m, U, ix.expert + 3 * e, fc, dxs + (size_t)o * C, NULL, dgu + (size_t)o * 2 * F,
                                      xs + (size_t)o * C, n, C, 2 * F, 0);
        }
    }
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, {
        op_moe_scatter_rows(m->be, dx, dxs, r.slot, N, K, C);
        /* the auxiliary losses entered the loss sum as w (coef x loss) per block */
        float w = fc->block_loss_weight > 0.0f ? fc->block_loss_weight : (float)N;
        op_moe_route_backward(m->be, dlogits, dtopw, r.probs, r.lse, r.topk, r.topw, N, E, K,
                              (mt_moe_router)c->moe_router, c->moe_norm_topk, fc->dscale * w * c->moe_aux_coef,
                              fc->dscale * w * c->moe_z_coef);
    });
    /* The router is whole on every tp rank and sees all N rows: its input gradient is added on tp rank 0
       only (dx is summed over tp), and under sequence parallelism (its weight gradient summed over tp too)
       only rank 0's counts. */
    int tp0 = m->layout.tp_rank == 0;
    if (!tp0 && mt_tp_sp(m->tp)) op_zero(m->be, dlogits, (size_t)N * E);
    mt_unit_linear_bwd(m, U, ix.router, fc, tp0 ? dx : NULL, NULL, dlogits, x2, N, C, E, MT_ACC_DINP | dwf);
    if (d.Fs) shared_backward(m, U, &ix, fc, &d, x2, dfull, dx, dwf, ba, N);
}

static void block_forward_account(mt_model *m, int layer, const mt_fwd_ctx *fc, int account) {
    mt_acts *a = &m->acts;
    const int U = 1 + layer;
    mt_block_acts *ba = &a->blocks[layer];
    mt_llama_block_index ix = mt_llama_block_tensors(&m->cfg);
    dims d = local_dims(m);
    int N = a->B * a->T, n = mt_unit_resid_n(m), C = d.C;
    float eps = m->cfg.norm_eps;
    const float *x = block_input(m, layer);
    float *tmp = m->gs.dtmp; /* a branch's output; scratch is free during forward */
#define P(i) mt_model_tensor_data(m, U, i)
    MT_TIMED(m->prof, MT_PROF_LAYERNORM,
             op_rmsnorm_forward(m->be, ba->b[LB_X1], ba->b[LB_RSTD1], x, P(ix.in_norm), n, C, eps));
    const float *x1 = mt_unit_tp_gather(m, ba->b[LB_X1], m->gs.gathered);
    mt_unit_linear_fwd(m, U, ix.q, fc, ba->b[LB_QKV], x1, ix.qb >= 0 ? P(ix.qb) : NULL, N, C, d.qkv);
    if (ix.qn >= 0) qk_norm_forward(m, ba, &d, P(ix.qn), P(ix.kn), N, eps);
    rope(m, ba->b[LB_QKV], &d, 0);
    attention_core_forward(m, layer);
    mt_unit_linear_fwd(m, U, ix.o, fc, tmp, ba->b[LB_ATTY], NULL, N, d.nh * d.hd, C);
    mt_unit_tp_scatter(m, tmp);
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_residual_add(m->be, ba->b[LB_RES2], x, tmp, NULL, n, C));
    MT_TIMED(m->prof, MT_PROF_LAYERNORM,
             op_rmsnorm_forward(m->be, ba->b[LB_X2], ba->b[LB_RSTD2], ba->b[LB_RES2], P(ix.post_norm), n, C, eps));
    const float *x2 = mt_unit_tp_gather(m, ba->b[LB_X2], m->gs.gathered);
    if (d.E) {
        moe_forward(m, layer, fc, x2, tmp, account);
    } else {
        mt_unit_linear_fwd(m, U, ix.gate, fc, ba->b[LB_GU], x2, NULL, N, C, 2 * d.F);
        MT_TIMED(m->prof, MT_PROF_GELU, op_swiglu_forward(m->be, ba->b[LB_H], ba->b[LB_GU], N, d.F));
        mt_unit_linear_fwd(m, U, ix.down, fc, tmp, ba->b[LB_H], NULL, N, d.F, C);
    }
    mt_unit_tp_scatter(m, tmp);
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE, op_residual_add(m->be, ba->b[LB_RES3], ba->b[LB_RES2], tmp, NULL, n, C));
#undef P
}

static void block_forward(mt_model *m, int layer, const mt_fwd_ctx *fc) { block_forward_account(m, layer, fc, 1); }

static void block_recompute(mt_model *m, int layer, const mt_fwd_ctx *fc) {
    /* full: rerun the block into the shared buffers; selective: the attention core */
    if (m->recompute == MT_RECOMPUTE_FULL) block_forward_account(m, layer, fc, 0);
    else if (m->recompute == MT_RECOMPUTE_SELECTIVE) attention_core_forward(m, layer);
}

/* A row-parallel layer's backward (no bias): its input and weight
 * gradients need the output gradient of all N rows. */
static void row_parallel_backward(mt_model *m, int u, int wk, const mt_fwd_ctx *fc, float *dinp, const float *dbranch,
                                  const float *inp, int IC, int C, int flags) {
    int N = m->acts.B * m->acts.T;
    const float *dfull = mt_unit_tp_gather(m, dbranch, m->gs.gathered);
    mt_unit_linear_bwd(m, u, wk, fc, dinp, NULL, dfull, inp, N, IC, C, flags);
}

static void block_backward(mt_model *m, int layer, const mt_fwd_ctx *fc) {
    mt_acts *a = &m->acts;
    mt_grad_scratch *gs = &m->gs;
    const int U = 1 + layer;
    mt_block_acts *ba = &a->blocks[layer];
    mt_llama_block_index ix = mt_llama_block_tensors(&m->cfg);
    dims d = local_dims(m);
    int N = a->B * a->T, n = mt_unit_resid_n(m), C = d.C;
    const float *x = block_input(m, layer);
    int dwf = m->grad_fresh[1 + layer] ? MT_SET_DW : 0; /* the matrices' gradients (grad_by_one_gemm) */
#define P(i) mt_model_tensor_data(m, U, i)
#define G(i) mt_model_tensor_grad_or_sink(m, U, i)
    /* MLP branch: dresid holds dL/dres3, the branch output's gradient too */
    if (d.E) {
        const float *dfull = mt_unit_tp_gather(m, gs->dresid, gs->gathered);
        if (dfull == gs->gathered) { /* sequence parallelism: x2 is gathered into the same buffer next */
            op_copy(m->be, gs->dtmp, dfull, (size_t)N * C);
            dfull = gs->dtmp;
        }
        const float *x2 = mt_unit_tp_gather(m, ba->b[LB_X2], gs->gathered);
        moe_backward(m, layer, fc, x2, dfull, gs->dln, dwf);
    } else {
        row_parallel_backward(m, U, ix.down, fc, gs->f[LS_DH], gs->dresid, ba->b[LB_H], d.F, C, dwf);
        MT_TIMED(m->prof, MT_PROF_GELU, op_swiglu_backward(m->be, gs->f[LS_DGU], gs->f[LS_DH], ba->b[LB_GU], N, d.F));
        const float *x2 = mt_unit_tp_gather(m, ba->b[LB_X2], gs->gathered); /* sequence parallelism: gathered again */
        mt_unit_linear_bwd(m, U, ix.gate, fc, gs->dln, NULL, gs->f[LS_DGU], x2, N, C, 2 * d.F, dwf);
    }
    mt_unit_tp_scatter(m, gs->dln);
    MT_TIMED(m->prof, MT_PROF_LAYERNORM,
             op_rmsnorm_backward(m->be, gs->dresid, G(ix.post_norm), gs->dln, ba->b[LB_RES2], P(ix.post_norm),
                                 ba->b[LB_RSTD2], n, C));
    /* attention branch: dresid now holds dL/dres2 */
    row_parallel_backward(m, U, ix.o, fc, gs->f[LS_DATTY], gs->dresid, ba->b[LB_ATTY], d.nh * d.hd, C, dwf);
    mt_attn_dropout none = {{0.0f, m->seed, 0, (uint32_t)layer, MT_DROPOUT_ATTN_PROBS}, a->sample_ids, 0,
                            a->packed ? a->doc_start : NULL};
    if (m->cp)
        MT_TIMED(m->prof, MT_PROF_ATTENTION,
                 mt_cp_attention_backward(m->be, m->cp, gs->f[LS_DQKV], gs->f[LS_DATTY], ba->b[LB_QKV], ba->b[LB_ATTY],
                                            ba->b[LB_LSE], a->B, a->T / 2, d.nh, d.nkv, d.hd, &none, gs->attn_scratch));
    else
        MT_TIMED(m->prof, MT_PROF_ATTENTION,
                 op_attention_backward_gqa(m->be, gs->f[LS_DQKV], gs->f[LS_DATTY], ba->b[LB_QKV], ba->b[LB_ATTY],
                                           ba->b[LB_LSE], a->B, a->T, d.nh, d.nkv, d.hd, &none, gs->attn_scratch));
    rope(m, gs->f[LS_DQKV], &d, 1);
    if (ix.qn >= 0) {
        const float *pre = ba->b[LB_QKN], *rstd = pre + (size_t)N * (d.nh + d.nkv) * d.hd;
        int QW = d.nh * d.hd, KW = d.nkv * d.hd, tp = m->layout.tp;
        float *dot = gs->f[LS_DATTY]; /* free once attention's backward ran */
        MT_TIMED(m->prof, MT_PROF_LAYERNORM,
                 op_qk_norm_backward_dot(m->be, dot, gs->f[LS_DQKV], pre, rstd, P(ix.qn), P(ix.kn), N, QW, KW,
                                         (size_t)d.qkv));
        if (tp > 1) mt_tp_allreduce(m->tp, dot, 2 * (size_t)N); /* the sums over all heads (qk_norm_forward) */
        MT_TIMED(m->prof, MT_PROF_LAYERNORM,
                 op_qk_norm_backward_apply(m->be, gs->f[LS_DQKV], mt_model_tensor_grad(m, U, ix.qn),
                                           mt_model_tensor_grad(m, U, ix.kn), pre, rstd, dot, P(ix.qn), P(ix.kn), N, QW,
                                           KW, (size_t)d.qkv, (float)QW * tp, (float)KW * tp));
    }
    const float *x1 = mt_unit_tp_gather(m, ba->b[LB_X1], gs->gathered);
    mt_unit_linear_bwd(m, U, ix.q, fc, gs->dln, ix.qb >= 0 ? mt_model_tensor_grad(m, U, ix.qb) : NULL, gs->f[LS_DQKV], x1,
                       N, C, d.qkv, dwf);
    mt_unit_tp_scatter(m, gs->dln);
    MT_TIMED(m->prof, MT_PROF_LAYERNORM,
             op_rmsnorm_backward(m->be, gs->dresid, G(ix.in_norm), gs->dln, x, P(ix.in_norm), ba->b[LB_RSTD1], n, C));
#undef P
#undef G
}

/* The head's weight: its own lm_head (tensor 1 of the output unit), or the embedding it is tied to. */
static const mt_tensor *head_weight(const mt_model *m, int *unit, int *decl) { return mt_unit_output_weight(m, 1, unit, decl); }

static double output_forward(mt_model *m, const mt_fwd_ctx *fc, float dlogits_scale) {
    (void)fc;
    mt_acts *a = &m->acts;
    int H = m->layout.n_units - 1, L = m->cfg.n_layer, wu, wk;
    const mt_tensor *wt = head_weight(m, &wu, &wk);
    MT_TIMED(m->prof, MT_PROF_LAYERNORM,
             op_rmsnorm_forward(m->be, a->head[LH_XF], a->head[LH_RSTDF], a->blocks[L - 1].b[LB_RES3],
                                mt_model_tensor_data(m, H, 0), mt_unit_resid_n(m), m->cfg.n_embd, m->cfg.norm_eps));
    return mt_unit_logits_loss(m, a->head[LH_XF], mt_model_tensor_data(m, wu, wk), (int)wt->shape[0], dlogits_scale);
}

static void output_backward(mt_model *m, const mt_fwd_ctx *fc) {
    (void)fc;
    mt_acts *a = &m->acts;
    int H = m->layout.n_units - 1, L = m->cfg.n_layer, n = mt_unit_resid_n(m), C = m->cfg.n_embd, wu, wk;
    const mt_tensor *wt = head_weight(m, &wu, &wk);
    mt_unit_logits_backward(m, a->head[LH_XF], mt_model_tensor_data(m, wu, wk), mt_model_tensor_grad(m, wu, wk),
                            (int)wt->shape[0], m->grad_fresh[wu] ? MT_SET_DW : 0);
    double t0 = mt_prof_begin(m->prof);
    op_zero_bytes(m->be, m->gs.dresid, (size_t)n * C * sizeof(float));
    op_rmsnorm_backward(m->be, m->gs.dresid, mt_model_tensor_grad_or_sink(m, H, 0), m->gs.dln,
                        a->blocks[L - 1].b[LB_RES3], mt_model_tensor_data(m, H, 0), a->head[LH_RSTDF], n, C);
    mt_prof_end(m->prof, MT_PROF_LAYERNORM, t0);
}

/* ---- the family table ---- */

static const mt_act_buf block_bufs[LB_COUNT] = {
    [LB_X1] = {"rmsnorm 1", MT_OWN(1, 1, 0), MT_ACT_GEMM_INPUT},
    [LB_RSTD1] = {"rmsnorm 1 rstd", MT_OWN(1, 1, 0), MT_ACT_KEEP},
    [LB_QKV] = {"qkv (rotated)", MT_OWN(1, 1, 0), MT_ACT_LOSSY},       /* attention's backward */
    [LB_ATTY] = {"attention output", MT_OWN(1, 0, 0), MT_ACT_LOSSY},   /* o_proj's input and attention's backward */
    [LB_LSE] = {"attention lse", MT_OWN(1, 0, 0), MT_ACT_KEEP},
    [LB_RES2] = {"residual 2", MT_OWN(1, 1, 0), MT_ACT_LOSSY},         /* rmsnorm 2's backward */
    [LB_X2] = {"rmsnorm 2", MT_OWN(1, 1, 0), MT_ACT_GEMM_INPUT},       /* (with experts: the router's input too) */
    [LB_RSTD2] = {"rmsnorm 2 rstd", MT_OWN(1, 1, 0), MT_ACT_KEEP},
    [LB_GU] = {"gate|up", MT_OWN(1, 1, 0), MT_ACT_LOSSY},              /* SwiGLU's backward */
    [LB_H] = {"swiglu", MT_OWN(1, 1, 0), MT_ACT_GEMM_INPUT},
    [LB_RES3] = {"residual 3", MT_OWN(1, 1, 1), MT_ACT_KEEP},          /* the block output: the next block's input */
    [LB_ROUTER] = {"moe router", MT_OWN(1, 1, 0), MT_ACT_KEEP},
    [LB_ROUTE] = {"moe routing", MT_OWN(1, 1, 0), MT_ACT_KEEP},        /* integers */
    [LB_Y] = {"moe expert outputs", MT_OWN(1, 1, 0), MT_ACT_KEEP},
    [LB_XS] = {"moe dispatched rows", MT_OWN(1, 1, 0), MT_ACT_GEMM_INPUT}, /* {ep}: the experts' gate|up input */
    [LB_SGU] = {"moe shared gate|up", MT_OWN(1, 1, 0), MT_ACT_LOSSY},
    [LB_SH] = {"moe shared swiglu", MT_OWN(1, 1, 0), MT_ACT_GEMM_INPUT},
    [LB_SY] = {"moe shared output", MT_OWN(1, 1, 0), MT_ACT_KEEP}, /* and its gate */
    [LB_QKN] = {"q|k before qk-norm", MT_OWN(1, 1, 0), MT_ACT_KEEP}, /* and its rstd */
};

static size_t block_buf_floats(const mt_model *m, int i, size_t N) {
    dims d = local_dims(m);
    size_t n = mt_tp_sp(m->tp) ? N / (size_t)m->layout.tp : N;
    switch (i) {
    case LB_RSTD1: case LB_RSTD2: return n;
    case LB_QKV: return N * (size_t)d.qkv;
    case LB_ATTY: return N * (size_t)(d.nh * d.hd);
    case LB_LSE: return N * (size_t)d.nh;
    case LB_GU: return N * (d.E ? (size_t)d.M : 1) * 2 * (size_t)d.F;
    case LB_H: return N * (d.E ? (size_t)d.M : 1) * (size_t)d.F;
    case LB_ROUTER: return d.E ? N * ((size_t)d.E + 1 + (size_t)d.K) : 0;
    case LB_ROUTE: /* int32s */
        return !d.E ? 0 : N * 3 * (size_t)d.K + (size_t)d.E + 1 + (d.ep > 1 ? (size_t)d.E + 2 * N * (size_t)d.M : 0);
    case LB_Y: return d.E ? N * (size_t)d.K * (size_t)d.C : 0;
    case LB_XS: return d.E && d.ep > 1 ? N * (size_t)d.M * (size_t)d.C : 0;
    case LB_SGU: return N * 2 * (size_t)d.Fs;
    case LB_SH: return N * (size_t)d.Fs;
    case LB_SY: return d.Fs ? N * ((size_t)d.C + 1) : 0;
    case LB_QKN: return m->cfg.qk_norm ? N * ((size_t)(d.nh + d.nkv) * (size_t)d.hd + 2) : 0;
    default: return n * (size_t)d.C;
    }
}

/* {compress-activations} int8: one scale per residual-stream row, per head (each of q, k, v's heads; the
 * attention output), and per ffn/heads MLP columns when the heads divide the MLP width -- groups no tp cut
 * splits, as tp divides the heads -- else per rank's MLP row (then tp changes the groups). */
static size_t block_buf_group(const mt_model *m, int i) {
    dims d = local_dims(m);
    const mt_model_config *c = &m->cfg;
    int ffn = c->num_experts ? c->moe_ffn_dim : c->ffn_dim;
    switch (i) {
    case LB_QKV: case LB_ATTY: return (size_t)d.hd;
    case LB_GU: case LB_H: return ffn % c->n_head ? (size_t)d.F : (size_t)(ffn / c->n_head);
    case LB_SGU: case LB_SH: /* (empty without a shared expert: any group) */
        if (!d.Fs) return (size_t)d.C;
        return c->moe_shared_ffn_dim % c->n_head ? (size_t)d.Fs : (size_t)(c->moe_shared_ffn_dim / c->n_head);
    default: return (size_t)d.C;
    }
}

static const mt_act_buf head_bufs[LH_COUNT] = {[LH_XF] = {"final rmsnorm", 0, MT_ACT_KEEP}, [LH_RSTDF] = {"final rmsnorm rstd", 0, MT_ACT_KEEP}};

static size_t head_buf_floats(const mt_model *m, int i, size_t N) {
    size_t n = mt_tp_sp(m->tp) ? N / (size_t)m->layout.tp : N;
    return i == LH_XF ? n * (size_t)m->cfg.n_embd : n;
}

static void scratch_floats(const mt_model *m, size_t N, size_t out[MT_FAMILY_SCRATCH]) {
    dims d = local_dims(m);
    out[LS_DATTY] = N * (size_t)(d.nh * d.hd);
    out[LS_DQKV] = N * (size_t)d.qkv;
    out[LS_DGU] = N * 2 * (size_t)d.F;
    out[LS_DH] = N * (size_t)d.F;
    if (d.E) { /* experts: dy and dxs, the gathered rows [N K, C]; dgu, dtopw, dlogits; dh */
        size_t MC = N * (size_t)d.M * (size_t)d.C;
        if (MC > out[LS_DATTY]) out[LS_DATTY] = MC;
        if (MC > out[LS_DQKV]) out[LS_DQKV] = MC;
        out[LS_DGU] = N * (size_t)d.M * 2 * (size_t)d.F + N * (size_t)d.K + N * (size_t)d.E;
        out[LS_DH] = N * (size_t)d.M * (size_t)d.F;
        /* the shared expert's backward after the routed one's: dys and dg, dgu, dh */
        if (N * 2 * (size_t)d.Fs > out[LS_DGU]) out[LS_DGU] = N * 2 * (size_t)d.Fs;
        if (N * (size_t)d.Fs > out[LS_DH]) out[LS_DH] = N * (size_t)d.Fs;
    }
    out[LS_COS] = out[LS_SIN] = (size_t)mt_unit_seq_len(m) * (size_t)(d.hd / 2);
}

/* The RoPE tables of the context's positions (with the config's frequency scaling). */
static void init_model(mt_model *m) {
    const mt_model_config *c = &m->cfg;
    const int T = mt_unit_seq_len(m); /* the whole sequence's positions (context parallelism: not just acts.T) */
    mt_rope_scaling s = mt_llama_rope_scaling(c, T);
    op_rope_tables(m->be, m->gs.f[LS_COS], m->gs.f[LS_SIN], T, mt_model_head_dim(c), c->rope_theta, &s);
    if (c->num_experts)
        m->moe_load = mt_xcalloc((size_t)c->n_layer * (size_t)c->num_experts, sizeof(int64_t), "expert loads");
    if (c->num_experts && m->ep)
        m->moe_ep_rows = mt_xcalloc((size_t)mt_comm_size(m->ep), sizeof(int64_t), "expert-parallel rows");
}

static size_t attention_scratch_floats(const mt_model *m, int B, int T) {
    dims d = local_dims(m);
    return op_attention_scratch_floats_gqa(m->be, B, T, d.nh, d.nkv, d.hd);
}

static void gemm_extents(const mt_model *m, int own_output, size_t *wmax, size_t *wnum) {
    dims d = local_dims(m);
    size_t C = (size_t)d.C, qkv = (size_t)d.qkv, gu = 2 * (size_t)d.F, o = (size_t)(d.nh * d.hd);
    *wmax = C;
    size_t widths[7] = {qkv, gu, o, (size_t)d.F, (size_t)d.E, 2 * (size_t)d.Fs, (size_t)d.Fs};
    for (int i = 0; i < 7; i++) *wmax = widths[i] > *wmax ? widths[i] : *wmax;
    *wnum = qkv * C > gu * C ? qkv * C : gu * C;
    if (2 * (size_t)d.Fs * C > *wnum) *wnum = 2 * (size_t)d.Fs * C;
    if ((size_t)d.E * C > *wnum) *wnum = (size_t)d.E * C;
    if (o * C > *wnum) *wnum = o * C;
    if (own_output) {
        size_t vl = (size_t)mt_model_vocab_rows(&m->cfg, m->layout.tp) / (size_t)m->layout.tp;
        *wmax = vl > *wmax ? vl : *wmax;
        *wnum = vl * C > *wnum ? vl * C : *wnum;
    }
}

/* 6 x (matrix parameters without the embedding lookup, with the head) +
 * attention's 6 L T (n_head hd) (QK^T and PV, forward and backward,
 * causal-unmasked count as in GPT-2's 12 L C T). */
static double flops_per_token(const mt_model_config *cfg, const mt_layout *l, int T) {
    double emb = (double)mt_unit_tensor(&l->units[0], MT_L_EMBED)->gnumel;
    double n = (double)(l->gtotal_params + l->gtotal_frozen) - emb;
    if (cfg->tie_embeddings) n += emb; /* the head's GEMM */
    if (cfg->num_experts) /* a token runs k of the E experts */
        n -= (double)cfg->n_layer * (cfg->num_experts - cfg->moe_top_k) * 3.0 * cfg->moe_ffn_dim * cfg->n_embd;
    return 6.0 * n - 2.0 * mt_layout_frozen_matrix_params(l) + 12.0 * cfg->n_layer * (double)cfg->n_head * mt_model_head_dim(cfg) * (double)T;
}

/* The planner's forward FLOPs per token of a block's matrices: 2 x the block's parameters (what it
 * assumes without this entry), less the experts a token does not run. */
static double plan_block_matrix_flops(const mt_model_config *cfg) {
    mt_layout l;
    mt_model_layout_build(cfg, 1, 0, &l);
    double w = 2.0 * (double)l.units[1].gnumel;
    mt_layout_free(&l);
    if (cfg->num_experts)
        w -= 2.0 * (cfg->num_experts - cfg->moe_top_k) * 3.0 * cfg->moe_ffn_dim * cfg->n_embd;
    return w;
}

size_t mt_llama_decode_cache_floats(const mt_model_config *cfg);
void mt_llama_decode_step(struct mt_decoder *d, int32_t token);

const mt_family mt_family_llama = {
    .name = "llama",
    .tp_check = mt_llama_tp_check,
    .build_layout = mt_llama_build_layout,
    .n_block_bufs = LB_COUNT,
    .block_bufs = block_bufs,
    .block_out = LB_RES3,
    .block_buf_floats = block_buf_floats,
    .block_buf_group = block_buf_group,
    .n_head_bufs = LH_COUNT,
    .head_bufs = head_bufs,
    .head_park = LH_XF,
    .head_buf_floats = head_buf_floats,
    .scratch_floats = scratch_floats,
    .gemm_extents = gemm_extents,
    .attention_scratch_floats = attention_scratch_floats,
    .init_model = init_model,
    .input_forward = input_forward,
    .block_forward = block_forward,
    .output_forward = output_forward,
    .output_backward = output_backward,
    .block_recompute = block_recompute,
    .block_backward = block_backward,
    .input_backward = input_backward,
    .flops_per_token = flops_per_token,
    .plan_block_matrix_flops = plan_block_matrix_flops,
    .decode_cache_floats = mt_llama_decode_cache_floats,
    .hf_name = mt_llama_hf_name,
    .hf_config_write = mt_llama_hf_config_write,
    .hf_config_read = mt_llama_hf_config_read,
    .hf_export_check = mt_llama_hf_export_check,
    .decode_step = mt_llama_decode_step,
    .lora_targets = "q_proj,v_proj",
    .peft_module_prefix = "",
    .ia3_feedforward = "down_proj",
    .ia3_targets = "k_proj,v_proj,down_proj",
    .hf_model_types = "llama,qwen2,mixtral,qwen2_moe,olmoe",
    .hf_ignored = "",
    .preset_names = "llama-tiny,llama3.2-1b,qwen2.5-0.5b",
    .preset = mt_llama_preset,
    .config_defaults = mt_llama_config_defaults,
    .config_validate = mt_llama_config_validate,
    .config_write_json = mt_llama_config_write_json,
    .config_read_json = mt_llama_config_read_json,
};
