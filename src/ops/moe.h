/* Mixture-of-experts kernels (fp32, raw pointers, deterministic for any
 * thread count): routing (softmax + top-k), the dispatch plan that sorts
 * the (token, choice) pairs by expert, the gather of token rows into that
 * order, the weighted combine back into token order, and the backward of
 * each; the auxiliary losses (load balancing, router z-loss); the shared
 * expert's sigmoid gate.
 *
 * Shapes: N token rows, E experts, K choices per token (top-k), C the
 * row width. A "slot" is one (token n, choice k) pair, index n*K + k. The
 * sorted order holds the kept slots expert by expert, tokens in increasing
 * order within an expert, so every layout that routes the same tokens
 * builds the same order. */
#ifndef MT_OPS_MOE_H
#define MT_OPS_MOE_H
#include "device/backend.h"
#include <stddef.h>
#include <stdint.h>

#define MT_MOE_MAX_EXPERTS 256

/* Routing conventions:
 *   MT_MOE_ROUTER_TOPK_SOFTMAX  (Mixtral) the k largest logits, weights the
 *                               softmax over those k logits;
 *   MT_MOE_ROUTER_SOFTMAX_TOPK  (Qwen-MoE, OLMoE) the softmax over all E,
 *                               the k largest probabilities as weights,
 *                               divided by their sum when norm_topk. */
typedef enum { MT_MOE_ROUTER_TOPK_SOFTMAX = 0, MT_MOE_ROUTER_SOFTMAX_TOPK = 1 } mt_moe_router;

/* probs [N,E] holds the router logits on entry and their softmax over all E
 * on return; lse [N] the logits' log-sum-exp; topk [N,K] the chosen experts
 * in decreasing logit order (ties: the lower expert index first); topw
 * [N,K] their weights by the convention above. */
void op_moe_route_forward(mt_backend *be, float *probs, float *lse, int32_t *topk, float *topw, int N, int E, int K,
                          mt_moe_router router, int norm_topk);

/* The dispatch plan of topk [N,K]: offsets [E+1] (expert e's sorted rows
 * are [offsets[e], offsets[e+1])), slot [N*K] each slot's sorted row or -1
 * when dropped, order [N*K] the token of each sorted row (the first
 * offsets[E] used). capacity > 0 keeps at most that many slots per expert
 * (the lowest token indices, as Switch Transformer drops the late ones);
 * <= 0 drops nothing. Returns the number of dropped slots. */
int64_t op_moe_dispatch_plan(mt_backend *be, int32_t *offsets, int32_t *slot, int32_t *order, const int32_t *topk,
                             int N, int E, int K, int capacity);
/* xs[m] = x[order[m]] for the M sorted rows (C floats each). */
void op_moe_gather(mt_backend *be, float *xs, const float *x, const int32_t *order, int M, int C);
/* out[n] = sum_k topw[n,k] * y[slot[n,k]] over the kept slots (in k order;
 * a token whose slots were all dropped gets 0). */
void op_moe_combine_forward(mt_backend *be, float *out, const float *y, const float *topw, const int32_t *slot, int N,
                            int K, int C);
/* Its backward: dy[slot[n,k]] = topw[n,k] * dout[n]; dtopw[n,k] = dout[n] . y[slot[n,k]]
 * (0 for a dropped slot). */
void op_moe_combine_backward(mt_backend *be, float *dy, float *dtopw, const float *dout, const float *y,
                             const float *topw, const int32_t *slot, int N, int K, int C);
/* The gather's backward: dx[n] = sum_k dxs[slot[n,k]] over the kept slots (set, not added). */
void op_moe_scatter_rows(mt_backend *be, float *dx, const float *dxs, const int32_t *slot, int N, int K, int C);

/* The auxiliary losses of one routing (Switch/GShard load balancing, as
 * Megatron-LM normalises it: 1 when the load and the probabilities are
 * uniform; ST-MoE's router z-loss):
 *   aux = E * sum_e f_e P_e,  f_e = (slots choosing e) / (N K),  P_e = mean_n probs[n,e]
 *   z   = mean_n lse[n]^2
 * (f_e counts the routing's choices, dropped slots included). */
void op_moe_aux_losses(mt_backend *be, double *aux, double *z, const float *probs, const float *lse,
                       const int32_t *topk, int N, int E, int K);
/* The router's backward: dlogits [N,E] (set) from dtopw [N,K] (the loss's
 * gradient with respect to the routing weights), plus ga * daux/dlogits and
 * gz * dz/dlogits (ga, gz: the loss's gradient with respect to aux and z). */
void op_moe_route_backward(mt_backend *be, float *dlogits, const float *dtopw, const float *probs, const float *lse,
                           const int32_t *topk, const float *topw, int N, int E, int K, mt_moe_router router,
                           int norm_topk, float ga, float gz);

/* The shared expert's gate (Qwen2-MoE's shared_expert_gate): g [N] holds
 * the gate's logits on entry and their sigmoid on return, and
 * out[n] += g[n] * ys[n] (ys [N, C] the shared expert's output). */
void op_moe_shared_gate_forward(mt_backend *be, float *out, const float *ys, float *g, int N, int C);
/* Its backward (g the forward's sigmoid): dys[n] = g[n] * dout[n] (set);
 * dg[n] = g[n] (1 - g[n]) (dout[n] . ys[n]), the gradient of the gate's
 * logit (set). */
void op_moe_shared_gate_backward(mt_backend *be, float *dys, float *dg, const float *dout, const float *ys,
                                 const float *g, int N, int C);

/* Expert parallelism: a rank receives its experts' rows source-major -- from
 * each of the P ranks of the ep group in turn, that rank's rows for local
 * expert 0, 1, ..., El-1, counts [P][El] of them -- and runs its GEMMs
 * expert-major (expert 0's rows from source 0, 1, ..., then expert 1's).
 * to_expert[m]: the source-major index of expert-major row m; to_source[i]:
 * the expert-major index of source-major row i (op_moe_gather with one or
 * the other moves rows between the two orders). */
void op_moe_ep_orders(mt_backend *be, int32_t *to_expert, int32_t *to_source, const int32_t *counts, int P, int El);

#endif
