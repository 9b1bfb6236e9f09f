/* Numeric kernels, fp32, on raw pointers: forward and backward of every op
 * of the GPT-2 model, and the optimizer updates on flat ranges. They never
 * see MPI, units or the model: callers pass shapes and buffers. Rows are
 * N = B*T tokens, row-major. Gradient outputs that can receive several
 * contributions (weights, biases, residual streams) ACCUMULATE (+=) where
 * stated; callers zero them when a new accumulation starts.
 * All kernels are deterministic for a fixed thread count. */
#ifndef MT_OPS_OPS_H
#define MT_OPS_OPS_H
#include <stddef.h>
#include <stdint.h>
#include "core/dtype.h"
#include "core/philox.h"
#include "device/backend.h"

/* ---- linear layer: out[N,OC] = inp[N,C] . w[OC,C]^T + bias[OC] (bias may be NULL)
 * The fp32 GEMMs run on the backend's library be->gemm (device/backend.h). */
/* Row-major C[M,N] = alpha op(A) op(B) + beta C with leading dimensions
 * (op: 'N' or 'T'), on the library's own threads: the strided GEMMs of
 * LoRA (a column block of a fused output) and of quantized weight tiles. */
void op_sgemm(mt_backend *be, char transa, char transb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);
void op_matmul_forward(mt_backend *be, float *out, const float *inp, const float *w, const float *bias, int N, int C,
                       int OC);
/* dinp[N,C] (+)= dout . w  (accumulates with MT_ACC_DINP in flags, else overwrites; NULL skips)
 * dw[OC,C] (+)= dout^T . inp  (accumulates unless MT_SET_DW);  dbias[OC] += column sums of dout (NULL skips) */
enum {
    MT_ACC_DINP = 1, /* dinp += instead of = */
    MT_SET_DW = 2    /* dw = instead of +=: its buffer need not be cleared first */
};
void op_matmul_backward(mt_backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC, int flags);

/* ---- LayerNorm over the last dim (eps 1e-5, biased variance as PyTorch)
 * mean/rstd [N] are saved for backward. */
void op_layernorm_forward(mt_backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C);
/* dinp[N,C] += ..., dw[C] += ..., db[C] += ... */
void op_layernorm_backward(mt_backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C);

/* ---- fused residual add + LayerNorm (one pass over the rows):
 * res = x + (branch + branch_bias)   (branch_bias [C] may be NULL)
 * out = layernorm(res) as op_layernorm_forward, mean/rstd saved.
 * Equals op_add followed by op_layernorm_forward (with the bias in the GEMM). */
void op_residual_layernorm_forward(mt_backend *be, float *res, float *out, float *mean, float *rstd, const float *x,
                                   const float *branch, const float *branch_bias, const float *w, const float *b, int N,
                                   int C);

/* ---- GELU, tanh approximation (GPT-2's "gelu_new") */
void op_gelu_forward(mt_backend *be, float *out, const float *inp, size_t n);
/* dinp = gelu'(inp) * dout (overwrites; dinp may alias dout) */
void op_gelu_backward(mt_backend *be, float *dinp, const float *inp, const float *dout, size_t n);
/* Fused bias + GELU on [N, OC] rows: pre += bias (the linear layer's bias,
 * so the GEMM runs without it; NULL skips), out = gelu(pre). */
void op_bias_gelu_forward(mt_backend *be, float *pre, float *out, uint16_t *out16, const float *bias, int N, int OC);
/* Its backward: dpre = gelu'(pre) * dout (dpre may alias dout) and
 * dbias[OC] += column sums of dpre (NULL skips), in one pass; the sums are
 * taken row by row in order, as op_matmul_backward's dbias. */
void op_gelu_bias_backward(mt_backend *be, float *dpre, float *dbias, const float *pre, const float *dout, int N,
                           int OC);

/* ---- causal multi-head self-attention core
 * qkv [B,T,3*NH*HS]: per row the Q block (NH heads of HS), then K, then V.
 * out [B,T,NH*HS] head-major per row. lse [B,NH,T]: log-sum-exp of the
 * scaled, masked scores, kept for backward (no T x T matrix is kept).
 * Optional dropout on the attention probabilities with global coordinates:
 * the mask of (sample, head, query i, key j) is drawn from the Philox
 * stream so backward regenerates it instead of storing it. */
typedef struct {
    mt_dropout d;               /* d.p == 0 disables; d.site = MT_DROPOUT_ATTN_PROBS */
    const uint64_t *sample_ids; /* [B] global sample index of each batch row */
    int head0;                  /* global index of local head 0 (tensor parallelism) */
    /* packed samples: [B*T] the position in its window where each row's
     * document begins; a query attends to the keys of its document only
     * (from there to itself). NULL: the window is one document. */
    const int32_t *doc_start;
} mt_attn_dropout;

/* Workspace in floats that the caller allocates once and passes to both passes. */
size_t op_attention_scratch_floats(mt_backend *be, int B, int T, int NH, int HS);
void op_attention_forward(mt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH, int HS,
                          const mt_attn_dropout *drop, float *scratch);
/* dqkv [B,T,3*NH*HS] is overwritten. */
void op_attention_backward(mt_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                           const float *lse, int B, int T, int NH, int HS, const mt_attn_dropout *drop, float *scratch);

/* Grouped-query attention (Llama): qkv rows [Q: NH*HS | K: NKV*HS | V: NKV*HS],
 * NH % NKV == 0, query head h reads kv head h / (NH/NKV) in place; out and
 * lse as above; dqkv (same layout as qkv) is overwritten, the dK/dV of a kv
 * head summing its NH/NKV query heads' in head order (thread-count
 * independent). op_attention_forward/backward are the NKV == NH case, bit
 * for bit. Dropout coordinates use the query head (head0 + h). Scratch:
 * op_attention_scratch_floats_gqa (the multi-head one plus, for NKV < NH,
 * 2 B (NH - NKV) T HS floats of partial dK/dV). */
size_t op_attention_scratch_floats_gqa(mt_backend *be, int B, int T, int NH, int NKV, int HS);
void op_attention_forward_gqa(mt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                              int HS, const mt_attn_dropout *drop, float *scratch);
void op_attention_backward_gqa(mt_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, int B, int T, int NH, int NKV, int HS, const mt_attn_dropout *drop,
                               float *scratch);

/* ---- generation: one query row's attention over the cached positions 0..t
 * (causal, scale 1/sqrt(hd)): out[hd] = softmax(q . K^T) V with K, V rows at
 * kc + j*ld and vc + j*ld (the kv head's columns); scores holds t + 1 floats. */
void op_attention_decode(mt_backend *be, const float *q, const float *kc, const float *vc, size_t ld, int t, int hd,
                         float *scores, float *out);

/* ---- one block pair of ring attention (context parallelism; attention_ring.c):
 * queries of global positions [q0, q0+nq) against keys/values of [k0, k0+nk),
 * causal in global positions, grouped-query as above. q rows at
 * q + (b*nq + i)*ldq + h*HS, k/v rows at k|v + (b*nk + j)*ldkv + kvh*HS.
 * Forward merges the block into out [B,nq,NH*HS] and lse [B,NH,nq] by the
 * log-sum-exp (start: out 0, lse -inf); backward, from the final out and
 * lse, adds the block's gradients into dq (ldq), dk and dv (ldkv). Dropout
 * as op_attention_forward's, with global positions; doc_start (packed
 * samples), when given, holds the [B*nq] query rows' document starts in
 * global positions. Scratch:
 * op_attention_block_scratch_floats(B, nk, NKV). */
void op_attention_block_forward(mt_backend *be, float *out, float *lse, const float *q, size_t ldq, const float *k,
                                const float *v, size_t ldkv, int B, int nq, int nk, int q0, int k0, int NH, int NKV,
                                int HS, const mt_attn_dropout *drop, float *scratch);
void op_attention_block_backward(mt_backend *be, float *dq, float *dk, float *dv, const float *dout, const float *out,
                                 const float *lse, const float *q, size_t ldq, const float *k, const float *v,
                                 size_t ldkv, int B, int nq, int nk, int q0, int k0, int NH, int NKV, int HS,
                                 const mt_attn_dropout *drop, float *scratch);
/* Sized for the backend's thread count. */
size_t op_attention_block_scratch_floats(mt_backend *be, int B, int nk, int NKV);
/* The running result before the first block: out 0, lse -inf. */
void op_attention_block_start(mt_backend *be, float *out, float *lse, size_t n_out, size_t n_lse);

/* ---- RMSNorm (Llama; statistics in fp32): rstd[n] = 1/sqrt(mean(x^2) + eps),
 * out = w * (x * rstd). Backward accumulates: dinp += ..., dw += ... (NULL skips). */
void op_rmsnorm_forward(mt_backend *be, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps);
void op_rmsnorm_backward(mt_backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int N, int C);
/* QK-norm (ops/qk_norm.c): RMSNorms of the q [QW] and k [KW] columns at the
 * start of each row of qkv (row stride ld), in place, over nq (nk) columns
 * in all (under tp a rank's QW are part of them: all-reduce the per-row sums
 * between the two steps). sumsq: ss [N, 2] the rows' sums of squares; apply:
 * turns ss into the rstd and keeps the inputs in pre [N, QW + KW]. The
 * backward: dot [N, 2] the rows' sums of dout * w * xh (all-reduced under
 * tp), then apply turns dqkv's q and k columns (the normed values'
 * gradients) into the inputs', SETS them, and adds into dwq, dwk (either may
 * be NULL: frozen). */
void op_qk_norm_sumsq(mt_backend *be, float *ss, const float *qkv, int N, int QW, int KW, size_t ld);
void op_qk_norm_apply(mt_backend *be, float *qkv, float *pre, float *ss_rstd, const float *wq, const float *wk, int N,
                      int QW, int KW, size_t ld, float nq, float nk, float eps);
void op_qk_norm_backward_dot(mt_backend *be, float *dot, const float *dqkv, const float *pre, const float *rstd,
                             const float *wq, const float *wk, int N, int QW, int KW, size_t ld);
void op_qk_norm_backward_apply(mt_backend *be, float *dqkv, float *dwq, float *dwk, const float *pre, const float *rstd,
                               const float *dot, const float *wq, const float *wk, int N, int QW, int KW, size_t ld,
                               float nq, float nk);

/* ---- rotary position embeddings, half-split pairs (j, j + HS/2) */
/* Frequency scalings as Hugging Face's rope_scaling names them (transformers'
 * modeling_rope_utils): llama3 (Llama 3.1), linear (position interpolation:
 * every frequency divided by factor), dynamic (NTK-aware: the base grows with
 * a sequence longer than original_max_position) and yarn (NTK-by-parts with an
 * attention factor multiplying cos and sin). */
enum { MT_ROPE_NONE = 0, MT_ROPE_LLAMA3 = 1, MT_ROPE_LINEAR = 2, MT_ROPE_DYNAMIC = 3, MT_ROPE_YARN = 4 };
typedef struct {
    int type;                 /* MT_ROPE_* */
    float factor, low_freq_factor, high_freq_factor; /* the last two: llama3 */
    int original_max_position; /* llama3, dynamic, yarn */
    float beta_fast, beta_slow; /* yarn (0: 32 and 1) */
    float attention_factor;   /* yarn: given, or 0: 0.1 ln(factor) + 1 (or its mscale form) */
    float mscale, mscale_all_dim; /* yarn (DeepSeek's form; 0: unused) */
    int truncate;             /* yarn: 1 rounds the ramp's ends to whole dims (transformers' default) */
    int seq_len;              /* dynamic: the sequence length the frequencies serve */
} mt_rope_scaling;
/* inv_freq[HS/2] = 1/theta^(2j/HS) (fp32), then the scaling s (NULL: none). */
void op_rope_inv_freq(mt_backend *be, float *inv_freq, int HS, float theta, const mt_rope_scaling *s);
/* The factor multiplying cos and sin (yarn's attention factor; 1 otherwise). */
float op_rope_attention_factor(mt_backend *be, const mt_rope_scaling *s);
/* The cos/sin tables [T][HS/2] of the scaling (frequencies, angles, attention factor). */
void op_rope_tables(mt_backend *be, float *cos_t, float *sin_t, int T, int HS, float theta, const mt_rope_scaling *s);
/* cos/sin tables [T][HS/2] of the angles (float)t * inv_freq[j]. */
void op_rope_table(mt_backend *be, float *cos_t, float *sin_t, const float *inv_freq, int T, int HS);
/* Rotates in place heads [0, nh) of HS dims at x + i*ld of each of N rows,
 * row i at position i % T; inverse rotates back (the backward). */
void op_rope_apply(mt_backend *be, float *x, int N, int T, int nh, int HS, size_t ld, const float *cos_t,
                   const float *sin_t, int inverse);

/* ---- SwiGLU: gate_up rows [gate F | up F]; out[N,F] = silu(gate) * up;
 * the backward overwrites dgate_up [N,2F]. */
void op_swiglu_forward(mt_backend *be, float *out, const float *gate_up, int N, int F);
void op_swiglu_backward(mt_backend *be, float *dgate_up, const float *dout, const float *gate_up, int N, int F);

/* ---- GELU, exact erf form (PyTorch's default, Falcon's "gelu"): out = x Phi(x);
 * the backward overwrites dinp = gelu'(inp) * dout (dinp may alias dout). */
void op_gelu_erf_forward(mt_backend *be, float *out, const float *inp, size_t n);
void op_gelu_erf_backward(mt_backend *be, float *dinp, const float *inp, const float *dout, size_t n);

/* ---- Falcon's fused q|k|v rows: grouped [N, n_groups (G + 2) hd], each group
 * G query heads, its key head, its value head; planar [N, n_groups (nq + 2) hd],
 * the groups' query heads [q0, q0 + nq), then the key heads, then the value
 * heads (the attention kernels' form). planar_to_grouped writes the other
 * query heads as zeros. dst and src must not overlap. */
void op_qkv_grouped_to_planar(mt_backend *be, float *planar, const float *grouped, int N, int n_groups, int G, int q0,
                              int nq, int hd);
void op_qkv_planar_to_grouped(mt_backend *be, float *grouped, const float *planar, int N, int n_groups, int G, int q0,
                              int nq, int hd);

/* ---- fused softmax + cross-entropy over the vocabulary
 * logits [N, Vp]; only the first V columns take part. targets[i] == -1 is
 * ignored (loss 0, gradient 0). losses[i] = logsumexp(logits[i,:V]) -
 * logits[i,target]. If dlogits_scale != 0 the logits are overwritten in
 * place with dL/dlogits = dlogits_scale * (softmax - onehot) (0 on padding
 * columns and ignored rows), so the probabilities are written once. */
void op_softmax_xent(mt_backend *be, float *logits, float *losses, const int32_t *targets, int N, int V, int Vp,
                     float dlogits_scale);
/* The same, the gradient written rounded to bf16 into dlogits [N, Vp] (bit
 * for bit op_softmax_xent's values, rounded) and the logits left as they
 * are: the bf16 head's GEMMs read it without a conversion pass over the
 * N x Vp floats. */
void op_softmax_xent_bf16(mt_backend *be, const float *logits, mt_bf16 *dlogits, float *losses, const int32_t *targets,
                          int N, int V, int Vp, float dlogits_scale);
/* Vocab-parallel form (a process holds logit columns [v0, v0 + Vl) of every
 * row, row stride ld; targets are global ids):
 * 1. op_xent_shard_stats: per row the shard's max mx[i], sum of exp(x - mx)
 *    se[i] and the target's logit xt[i] (0 when the target is elsewhere or
 *    ignored), in one read of the shard.
 * 2. the caller gathers the (mx, se) pairs of the S shards (shard s's
 *    values of row i at [s*ld + i], ld >= N) and sums xt;
 *    op_xent_combine_lse gives lse[i] = log sum_s se_s exp(mx_s);
 *    loss = lse - xt. A shard with no real column has se = 0.
 * 3. op_xent_shard_grad overwrites the shard with scale * (softmax - onehot)
 *    (0 on rows whose target is -1), writing each element once. */
void op_xent_shard_stats(mt_backend *be, const float *logits, float *mx, float *se, float *xt, const int32_t *targets,
                         int N, int Vl, int ld, int v0);
void op_xent_combine_lse(mt_backend *be, float *lse, const float *mx, const float *se, int S, int N, int ld);
void op_xent_shard_grad(mt_backend *be, float *logits, const float *lse, const int32_t *targets, int N, int Vl, int ld,
                        int v0, float scale);
/* 1 when this build's softmax gradients (op_softmax_xent, op_xent_shard_grad) take
 * exp with fused multiply-adds (ops/vmath.h's mt_vexp16, AVX-512 builds), 0 for
 * mt_vexpf's separate roundings: a device kernel that mirrors them asks, to
 * give the same bits. */
int mt_softmax_exp_fused(void);

/* ---- embeddings: out[b,t,:] = wte[tok[b,t],:] + wpe[pos0 + t,:] */
void op_embed_forward(mt_backend *be, float *out, const int32_t *tokens, const float *wte, const float *wpe, int B,
                      int T, int C, int pos0);
/* dwte[tok] += dout ; dwpe[pos0+t] += sum over b of dout  (deterministic) */
void op_embed_backward(mt_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T,
                       int C, int pos0);
/* Vocabulary-parallel forms: this process holds wte rows [v0, v0 + Vl).
 * out[n,:] = wte[tok[n] - v0,:] for tokens it holds, 0 for the others (the
 * tp ranks' outputs sum to the full lookup); the backward adds only to the
 * rows held (dwpe as op_embed_backward; NULL skips). */
void op_embed_shard_forward(mt_backend *be, float *out, const int32_t *tokens, const float *wte, int v0, int Vl, int N,
                            int C);
/* The same lookup from a 16-bit wte (dt bf16 or fp16), each row widened. */
void op_embed_shard_forward_16(mt_backend *be, float *out, const int32_t *tokens, mt_dtype dt, const uint16_t *wte,
                               int v0, int Vl, int N, int C);
void op_embed_shard_backward(mt_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int v0,
                             int Vl, int B, int T, int C);
/* out[i,:] += wpe[(row0 + i) % T,:] for the n rows i of a row range starting
 * at microbatch row row0 (rows are (sample, position) with T positions). */
void op_add_positions(mt_backend *be, float *out, const float *wpe, size_t row0, int n, int T, int C);

/* ---- element-wise helpers */
void op_add(mt_backend *be, float *out, const float *a, const float *b, size_t n); /* out = a + b */
/* res[N,C] = x + (branch + bias)  (bias [C] may be NULL: op_add) */
void op_residual_add(mt_backend *be, float *res, const float *x, const float *branch, const float *bias, int N, int C);
void op_accumulate(mt_backend *be, float *acc, const float *x, size_t n); /* acc += x */
void op_zero(mt_backend *be, float *x, size_t n);           /* x = 0 (threaded: a gradient buffer is hundreds of MB) */
void op_scale(mt_backend *be, float *x, float s, size_t n); /* x *= s */
double op_sumsq(mt_backend *be, const float *x, size_t n);  /* sum x^2 in double */
double op_sumsq_16(mt_backend *be, mt_dtype dt, const uint16_t *x, size_t n); /* the same for bf16/fp16 values */
/* dst = src rounded to dt (bf16/fp16), returning op_sumsq_16(be, dt, dst, n)
 * bit for bit, in one pass (the rounding of a gradient and its norm). */
double op_round_to_16_sumsq(mt_backend *be, mt_dtype dt, uint16_t *dst, const float *src, size_t n);

/* ---- tensor data movement (device memory under a device backend; host memory on the CPU) */
void op_copy(mt_backend *be, float *dst, const float *src, size_t n);              /* dst = src, n floats */
void op_copy_bytes(mt_backend *be, void *dst, const void *src, size_t bytes);      /* between device buffers */
void op_zero_bytes(mt_backend *be, void *x, size_t bytes);                         /* x = 0 bytewise */
void op_copy_to_host(mt_backend *be, void *host, const void *src, size_t bytes);   /* device -> host */
void op_copy_from_host(mt_backend *be, void *dst, const void *host, size_t bytes); /* host -> device */
/* nb batches of rows rows of width bytes each (cudaMemcpy2D per batch): row i of batch b from
 * src + b*src_batch + i*src_pitch to dst + b*dst_batch + i*dst_pitch (all in bytes); between
 * device buffers (ring attention's chunk-major copies of the local rows). */
void op_copy_rows(mt_backend *be, void *dst, size_t dst_pitch, size_t dst_batch, const void *src, size_t src_pitch,
                  size_t src_batch, size_t width, int rows, int nb);
/* x[i, c0 .. c0 + nc) = 0 for the N rows of stride ld (a shard's padding columns). */
void op_zero_cols(mt_backend *be, float *x, int N, size_t ld, int c0, int nc);
/* dst = src rounded to dt (MT_BF16 or MT_FP16, round to nearest even); and widened back. */
void op_to_16(mt_backend *be, mt_dtype dt, uint16_t *dst, const float *src, size_t n);
void op_from_16(mt_backend *be, mt_dtype dt, float *dst, const uint16_t *src, size_t n);
/* acc (16-bit, dt) = round(widen(acc) + x); dst += widen(src) (fp32) */
void op_accumulate_16(mt_backend *be, mt_dtype dt, uint16_t *acc, const float *x, size_t n);
void op_add_from_16(mt_backend *be, mt_dtype dt, float *dst, const uint16_t *src, size_t n);

/* ---- row-wise helpers of the layers ([N, C] rows, row-major)
 * x[i,:] *= keep/(1-p) for the n rows i starting at microbatch row row0; a
 * row is (sample_ids[row / T], position row % T) (residual-stream dropout). */
void op_dropout_rows(mt_backend *be, float *x, const mt_dropout *d, const uint64_t *sample_ids, size_t row0, int n,
                     int T, int C);
/* dst = src with an adapter's input dropout: row i is microbatch row i,
 * column j feature col0 + j, drawn at layer coordinate site_layer. */
void op_dropout_feature_rows(mt_backend *be, float *dst, const float *src, const mt_dropout *d,
                             const uint64_t *sample_ids, int N, int T, int C, uint32_t site_layer, uint32_t col0);
void op_add_bias_rows(mt_backend *be, float *x, const float *bias, int N, int C); /* x[i,:] += bias */
/* dst[i,j] = src[i,j] * l[j] ([N, C]) */
void op_scale_cols(mt_backend *be, float *dst, const float *src, const float *l, int N, int C);
/* x[i, col0 + j] *= l[j] for j < R, rows of stride ld */
void op_scale_cols_in_place(mt_backend *be, float *x, const float *l, int N, int ld, int col0, int R);
/* dst[i,j] (+)= src[i,j] * l[j] (accumulate != 0: added) */
void op_scale_cols_into(mt_backend *be, float *dst, const float *src, const float *l, int N, int C, int accumulate);
/* dl[j] += sum over rows i of a[i, col0 + j] * b[i, j] (a of stride lda, b of n), in double, rows in order */
void op_col_dot_acc(mt_backend *be, float *dl, const float *a, int lda, int col0, const float *b, int N, int n);
/* Vocabulary-parallel losses: losses[i] = lse[i] - (sum over the S shards'
 * target logits stats[s*3N + 2N + i], in shard order), 0 for target -1. */
void op_xent_losses_from_stats(mt_backend *be, float *losses, const float *lse, const float *stats, int S, int N,
                               const int32_t *targets, int V);

/* ---- reductions the host reads
 * sum of x in double, in order (a microbatch's loss sum; a sync point on a device) */
double op_sum(mt_backend *be, const float *x, size_t n);
/* be->scalars[slot] = 1 if any of x[0..n) is Inf or NaN (else unchanged):
 * read at the next mt_backend_read_scalars. */
void op_nonfinite_flag(mt_backend *be, mt_scalar slot, const float *x, size_t n);

/* ---- ZeRO++'s block quantizers (parallel/zeropp_quant.h: the definition): x[0..n) in blocks of
 * `block` elements, each with an fp32 scale (absmax / 127 or / 7) and int8 or packed int4 codes */
void op_block_quantize(mt_backend *be, const float *x, size_t n, size_t block, int bits, uint8_t *codes, float *scales);
void op_block_dequantize(mt_backend *be, const uint8_t *codes, const float *scales, size_t n, size_t block, int bits,
                         float *x);

/* ---- activation compression ({compress-activations}; models/act_compress.c says what is kept so):
 * `rows` rows of `cols` floats to int8 codes with one fp32 scale per row (absmax / 127; codes round half to
 * even, x * (127 / absmax)), and back (x = code * scale; an all-zero row has scale 0; a row holding Inf or NaN
 * has scale NaN and decodes to NaN). Rows are independent (split over threads), so the result does not depend
 * on the thread count. */
void op_act_int8_encode(mt_backend *be, int8_t *codes, float *scales, const float *x, size_t rows, size_t cols);
void op_act_int8_decode(mt_backend *be, float *x, const int8_t *codes, const float *scales, size_t rows, size_t cols);

/* ---- a GPTQ weight's rows ({quantize-base} gptq; quant/gptq.h describes the Hugging Face
 * layout): w [rows = out, cols = in] held as qweight int32 [cols / pack, rows] (pack = 32 / bits
 * codes per int32, the first in the lowest bits), qzeros int32 [groups, rows / pack] (zero
 * points minus one), scales fp16 [groups, rows] and g_idx int32 [cols] (each column's group;
 * act order makes it any permutation of groups). Rows [row0, row0 + nrows) of
 * w[o, c] = fp32(scales[g, o]) * (float)(q[o, c] - (qzeros' code + 1)), g = g_idx[c], go to
 * out with row stride ld (>= cols) -- the same numbers as the import's dequantization
 * (mt_gptq_unpack_dequant). g_idx entries must lie in [0, groups) (checked when loaded). */
void op_gptq_dequant_rows(mt_backend *be, const int32_t *qweight, const int32_t *qzeros, const uint16_t *scales,
                          const int32_t *g_idx, int bits, int64_t rows, int64_t cols, int64_t row0, int64_t nrows,
                          int64_t ld, float *out);

/* ---- a quantized base's row tiles ({quantize-base} nf4 / int8; quant/nf4.h and quant/int8.h define
 * the formats, bitsandbytes', and quantize on the host): rows [row0, row0 + nrows) of the [rows, cols]
 * matrix into out with row stride ld (>= cols), fp32 (dt MT_FP32) or rounded to bf16 (dt MT_BF16,
 * nearest even) -- the same numbers as mt_nf4_dequant_rows(_bf16) and mt_int8w_dequant_rows(_bf16).
 * NF4: w = code_map[code] * absmax_b in fp32, absmax_b = absmax[b], or with double quantization
 * nested_map[absmax_code[b]] * nested_absmax[b / 256] + offset (fp32, in that order); b = element / 64,
 * codes packed two a byte, the even element in the high nibble. The pointers are the device's (a
 * device backend's copy of the codes and of the maps). */
typedef struct {
    const uint8_t *packed;        /* ceil(rows * cols / 2) bytes */
    const float *absmax;          /* [ceil(n / 64)], or NULL with double quantization */
    const uint8_t *absmax_code;   /* double quantization: [ceil(n / 64)] 8-bit codes */
    const float *nested_absmax;   /* double quantization: [ceil(n / (64 * 256))] */
    float offset;                 /* double quantization: the absmaxes' mean */
    const float *code_map;        /* the 16 NF4 values */
    const float *nested_map;      /* double quantization: the 256 values of the signed dynamic map */
    int64_t rows, cols;
} mt_nf4_codes;
void op_nf4_dequant_rows(mt_backend *be, const mt_nf4_codes *q, int64_t row0, int64_t nrows, int64_t ld, mt_dtype dt,
                         void *out);
/* int8 (bnb's vectorwise form): w[r, c] = (codes[r, c] * scb[r]) * fp32(1/127), in that order */
void op_int8_dequant_rows(mt_backend *be, const int8_t *codes, const float *scb, int64_t cols, int64_t row0,
                          int64_t nrows, int64_t ld, mt_dtype dt, void *out);

/* ---- optimizer updates on a flat range (PyTorch semantics).
 * grad_scale multiplies every gradient first (clipping coefficient).
 * step is 1-based (bias corrections). */
void op_adamw_update(mt_backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                     float beta2, float eps, float weight_decay, int64_t step, float grad_scale);
/* Adam with L2 penalty: g' = g*grad_scale + weight_decay * p */
void op_adam_update(mt_backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int64_t step, float grad_scale);
/* The same two updates under mixed precision, in one pass: the gradient g16
 * and the rounded result p16 are 16-bit of type dt (MT_BF16 or MT_FP16), p
 * the fp32 master; bitwise equal to widening g16, updating and rounding p. */
void op_adamw_update_16(mt_backend *be, float *p, const uint16_t *g16, uint16_t *p16, mt_dtype dt, float *m, float *v,
                        size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                        float grad_scale);
void op_adam_update_16(mt_backend *be, float *p, const uint16_t *g16, uint16_t *p16, mt_dtype dt, float *m, float *v,
                       size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                       float grad_scale);
/* SGD with momentum (PyTorch: buf = momentum*buf + g', first step buf = g';
 * p -= lr*buf), g' = g*grad_scale + weight_decay*p. */
void op_sgd_update(mt_backend *be, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                   float weight_decay, int64_t step, float grad_scale);
/* AdaGrad (PyTorch torch.optim.Adagrad): g' = g*grad_scale + weight_decay*p;
 * sum = initial_accumulator + g'*g' on step 1 (the fresh state is zeros),
 * sum += g'*g' after; p += (-clr * g') / (sqrt(sum) + eps) with
 * clr = lr / (1 + (step - 1) * lr_decay) computed in double. */
void op_adagrad_update(mt_backend *be, float *p, const float *g, float *sum, size_t n, float lr, float lr_decay,
                       float initial_accumulator, float eps, float weight_decay, int64_t step, float grad_scale);

/* Adafactor (src/ops/adafactor_update.c) on one tensor's owned part: a
 * factored [rows, cols] matrix's elements [e0, e1) (row-major; g, p and m
 * point at element e0), or n elements of an unfactored tensor. Phase 1: the
 * matrix's row and column sums of (g*grad_scale)^2 + eps1 into rs[rows] and
 * cs[cols] (zeroed first; all zero when e0 == e1). Phase 2: R, C (or V)
 * = beta2 * old + (1 - beta2) * new statistics, mean(R) into *r_mean, and the
 * owned part's sum of squares of the unclipped update U, returned. Phase 3:
 * p = p * pdecay - lr * upd with upd = U * clip, or m = beta1 * m + (1 -
 * beta1) * U * clip when m is not NULL (momentum). col_factor: cols floats
 * of scratch. */
void op_adafactor_row_col_sums(mt_backend *be, double *rs, double *cs, const float *g, size_t e0, size_t e1,
                               size_t rows, size_t cols, float grad_scale, float eps1);
double op_adafactor_factored_moment(mt_backend *be, float *R, float *C, double *r_mean, const double *rs,
                                    const double *cs, size_t rows, size_t cols, double beta2, const float *g,
                                    size_t e0, size_t e1, float grad_scale, float *col_factor);
double op_adafactor_moment(mt_backend *be, float *V, const float *g, size_t n, float grad_scale, double beta2,
                           float eps1);
void op_adafactor_apply_factored(mt_backend *be, float *p, float *m, const float *g, const float *R, const float *C,
                                 double r_mean, size_t e0, size_t e1, size_t cols, float grad_scale, float clip,
                                 float beta1, float lr, float pdecay, float *col_factor);
void op_adafactor_apply(mt_backend *be, float *p, float *m, const float *g, const float *V, size_t n, float grad_scale,
                        float clip, float beta1, float lr, float pdecay);

/* 8-bit AdamW (src/ops/adamw8bit_update.c; the method and code maps: optim/adam8bit.h) on the
 * n elements [u0, u0 + n) of a unit: m and v one code per element, m_absmax and v_absmax one
 * per block of MT_Q8_BLOCK (ops/q8.h) from u0. Each block is dequantised, updated by AdamW as
 * op_adamw_update does (bitwise), with weight_decay on the elements of the spans[n_spans] whose
 * weight_decay is set (elements in no span stay as they are), and requantised with its new
 * absmax. The blocks run in parallel (OpenMP). */
typedef struct {
    size_t offset, numel; /* the tensor's elements in the unit */
    int weight_decay;
} mt_tensor_span;
void op_adamw8bit_update(mt_backend *be, float *p, const float *g, uint8_t *m, uint8_t *v, float *m_absmax,
                         float *v_absmax, size_t u0, size_t n, const mt_tensor_span *spans, int n_spans, float lr,
                         float beta1, float beta2, float eps, float weight_decay, int64_t step, float grad_scale);
/* x[n] <-> codes[n] and absmax[ceil(n / MT_Q8_BLOCK)], block by block (the checkpoint's fp32 streams):
 * the signed map (m) or the unsigned one (v); quantising then dequantising the result gives back the
 * same codes. */
void op_q8_quantize_blocks(mt_backend *be, int is_signed, const float *x, size_t n, uint8_t *codes, float *absmax);
void op_q8_dequantize_blocks(mt_backend *be, int is_signed, const uint8_t *codes, const float *absmax, size_t n,
                             float *x);

#endif
