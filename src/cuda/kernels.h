/* The CUDA kernels of one training step of GPT-2 and Llama, fp32 (and bf16
 * storage where natural), as C-callable launchers. Each mirrors the CPU op
 * of ops/ops.h of the same name: the context first (cuda/context.h), then
 * the CPU op's arguments in its order, device pointers for tensors (host
 * scalars stay host scalars). Launchers only queue work on ctx->stream and
 * return 0 or an error code (mt_cuda_error_string). No launcher allocates:
 * workspaces are sized by the *_scratch functions and passed in.
 *
 * Numerics (tests/gpu/test_kernels.cu checks each against the CPU op):
 *  - element-wise kernels are the CPU's operations in the CPU's order
 *    (no fused multiply-add: nvcc -fmad=false, host -ffp-contract=off; the
 *    CPU's own exp, cuda/device_math.h), so their results are bitwise the
 *    CPU's: GELU, bias+GELU, SwiGLU, RoPE, residual adds, dropout (the
 *    same Philox coordinates, cuda/philox_device.h), AdamW/Adam/SGD and
 *    their 16-bit forms, bf16/fp16 conversions;
 *  - column sums taken row by row in order (bias gradients, LayerNorm and
 *    RMSNorm weight gradients, embedding gradients) are bitwise too;
 *  - row reductions (norm statistics, softmax) use a fixed tree over the
 *    block: deterministic, within a few ulp of the CPU's order;
 *  - sums of squares: two stages in a fixed order, in double;
 *  - GEMMs (cuBLAS, fp32 accumulation, no TF32) round as cuBLAS does.
 * No atomics anywhere: every result is the same from run to run. */
#ifndef MT_CUDA_KERNELS_H
#define MT_CUDA_KERNELS_H
#include <stddef.h>
#include <stdint.h>
#include "cuda/context.h"
#include "cuda/gemm.h"
#ifdef __cplusplus
extern "C" {
#endif
#include "core/philox.h" /* mt_dropout (a C header: C linkage) */

/* ---- linear layers through the GEMM wrapper (row-major as the CPU ops) */
int mt_cuda_matmul_forward(const mt_cuda_ctx *c, float *out, const float *inp, const float *w, const float *bias,
                           int N, int C, int OC);
/* flags: 1 = dinp accumulates (MT_ACC_DINP), 2 = dw overwritten (MT_SET_DW); NULL outputs are skipped */
int mt_cuda_matmul_backward(const mt_cuda_ctx *c, float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int C, int OC, int flags);
/* bf16 operands (inp, w), fp32 accumulation, fp32 out (ops/matmul_lowp.h's op_matmul_forward_bf16); bias fp32 or NULL */
int mt_cuda_matmul_forward_bf16(const mt_cuda_ctx *c, float *out, const uint16_t *inp, const uint16_t *w,
                                const float *bias, int N, int C, int OC);
/* the same with the output rounded to bf16 (cuBLAS's bf16 C: alpha * acc rounded once, then + bias rounded) */
int mt_cuda_matmul_forward_bf16_out16(const mt_cuda_ctx *c, uint16_t *out, const uint16_t *inp, const uint16_t *w,
                                      const float *bias, int N, int C, int OC);
/* dinp (fp32) = dout16 . w16 (accumulates with flag 1); dw (fp32) (+)= dout16^T inp16; dbias += column sums */
int mt_cuda_matmul_backward_bf16(const mt_cuda_ctx *c, float *dinp, float *dw, float *dbias, const uint16_t *dout,
                                 const uint16_t *inp, const uint16_t *w, int N, int C, int OC, int flags);

/* ---- normalisation */
int mt_cuda_layernorm_forward(const mt_cuda_ctx *c, float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C);
int mt_cuda_layernorm_backward(const mt_cuda_ctx *c, float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean, const float *rstd, int N, int C);
int mt_cuda_residual_layernorm_forward(const mt_cuda_ctx *c, float *res, float *out, float *mean, float *rstd,
                                       const float *x, const float *branch, const float *branch_bias, const float *w,
                                       const float *b, int N, int C);
int mt_cuda_rmsnorm_forward(const mt_cuda_ctx *c, float *out, float *rstd, const float *inp, const float *w, int N,
                            int C, float eps);
int mt_cuda_rmsnorm_backward(const mt_cuda_ctx *c, float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const float *rstd, int N, int C);
/* res = x + branch; out = rmsnorm(res) (op_residual_add then op_rmsnorm_forward) */
int mt_cuda_residual_rmsnorm_forward(const mt_cuda_ctx *c, float *res, float *out, float *rstd, const float *x,
                                     const float *branch, const float *w, int N, int C, float eps);

/* ---- activations */
int mt_cuda_gelu_forward(const mt_cuda_ctx *c, float *out, const float *inp, size_t n);
int mt_cuda_gelu_backward(const mt_cuda_ctx *c, float *dinp, const float *inp, const float *dout, size_t n);
int mt_cuda_bias_gelu_forward(const mt_cuda_ctx *c, float *pre, float *out, uint16_t *out16, const float *bias, int N,
                              int OC);
int mt_cuda_gelu_bias_backward(const mt_cuda_ctx *c, float *dpre, float *dbias, const float *pre, const float *dout,
                               int N, int OC);
int mt_cuda_swiglu_forward(const mt_cuda_ctx *c, float *out, const float *gate_up, int N, int F);
int mt_cuda_swiglu_backward(const mt_cuda_ctx *c, float *dgate_up, const float *dout, const float *gate_up, int N,
                            int F);
/* tables from op_rope_table, copied to the device once */
int mt_cuda_rope_apply(const mt_cuda_ctx *c, float *x, int N, int T, int nh, int HS, size_t ld, const float *cos_t,
                       const float *sin_t, int inverse);
/* x[i,:] *= dropout scale of (sample_ids[(row0+i)/T], position (row0+i)%T, group 0, element c), as GPT-2's
 * residual dropout; sample_ids on the device */
int mt_cuda_dropout_rows(const mt_cuda_ctx *c, float *x, const mt_dropout *d, const uint64_t *sample_ids, size_t row0,
                         int n, int T, int C);

/* ---- causal attention with grouped-query heads (NKV == NH: multi-head),
 * qkv rows [Q: NH*HS | K: NKV*HS | V: NKV*HS]. The simple version: per query
 * head, strided-batched GEMMs over the batch and a softmax kernel, with a
 * B*T*T-float score matrix in the scratch (mt_cuda_attention_scratch_floats);
 * lse [B,NH,T] as the CPU's. */
typedef struct {
    mt_dropout d;               /* d.p == 0: no dropout */
    const uint64_t *sample_ids; /* [B], on the device */
    int head0;
} mt_cuda_attn_dropout;
size_t mt_cuda_attention_scratch_floats(int B, int T, int NH, int NKV, int HS);
int mt_cuda_attention_forward_gqa(const mt_cuda_ctx *c, float *out, float *lse, const float *qkv, int B, int T, int NH,
                                  int NKV, int HS, const mt_cuda_attn_dropout *drop, float *scratch);
int mt_cuda_attention_backward_gqa(const mt_cuda_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B, int T, int NH, int NKV, int HS,
                                   const mt_cuda_attn_dropout *drop, float *scratch);

/* The same without the T x T matrix and without scratch (attention_flash.cu:
 * the online softmax, a thread per query row, dK/dV by a thread per key row
 * over its query heads in order; HS <= MT_CUDA_FLASH_MAX_HS). Same outputs,
 * same dropout coordinates; out must be the forward's for the backward. */
#define MT_CUDA_FLASH_MAX_HS 128
int mt_cuda_attention_flash_forward_gqa(const mt_cuda_ctx *c, float *out, float *lse, const float *qkv, int B, int T,
                                        int NH, int NKV, int HS, const mt_cuda_attn_dropout *drop);
int mt_cuda_attention_flash_backward_gqa(const mt_cuda_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                         const float *out, const float *lse, int B, int T, int NH, int NKV, int HS,
                                         const mt_cuda_attn_dropout *drop);

/* The tensor-core form (bf16 mixed precision): the flash algorithm in tiles of 64 queries x 64 keys;
 * q, k, v, dout and P rounded to bf16 (the CPU's rounding) before each product, the softmax, lse and
 * accumulations in fp32. HS a multiple of 16, at most MT_CUDA_TC_MAX_HS; the same dropout coordinates
 * as the other forms; out must be the forward's for the backward. The forward (attention_mma.cu) and
 * the backward up to HS 96 (attention_mma_bwd.cu: D_i = dout_i.out_i, dK/dV by key tile over the
 * group's query heads in order, dQ by query tile: no atomics, deterministic) multiply m16n8k16 register
 * fragments, so scores, softmax and accumulators stay in registers; their operands are first prepared
 * as bf16 tiles (attention_mma_operands.h) in `workspace`, device memory of
 * mt_cuda_attention_mma_workspace_bytes (16-byte aligned), which the kernels copy to shared memory
 * asynchronously, a tile ahead. Above HS 96 the backward is the WMMA form (16 x 16 warp tiles through
 * shared memory, attention_tc_bwd.cu, no workspace): a warp's dK and dV accumulators would leave the
 * register form too few registers. */
#define MT_CUDA_TC_MAX_HS 128
int mt_cuda_attention_tc_supported(int HS);
size_t mt_cuda_attention_mma_workspace_bytes(int B, int T, int NH, int NKV, int HS);
int mt_cuda_attention_mma_forward_gqa(const mt_cuda_ctx *c, float *out, float *lse, const float *qkv, int B, int T,
                                      int NH, int NKV, int HS, const mt_cuda_attn_dropout *drop, void *workspace);
int mt_cuda_attention_mma_backward_gqa(const mt_cuda_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                       const float *out, const float *lse, int B, int T, int NH, int NKV, int HS,
                                       const mt_cuda_attn_dropout *drop, void *workspace);
int mt_cuda_attention_tc_backward_gqa(const mt_cuda_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                      const float *out, const float *lse, int B, int T, int NH, int NKV, int HS,
                                      const mt_cuda_attn_dropout *drop);

/* ---- fused softmax + cross-entropy (+ gradient in place, or rounded to bf16) */
int mt_cuda_softmax_xent(const mt_cuda_ctx *c, float *logits, float *losses, const int32_t *targets, int N, int V,
                         int Vp, float dlogits_scale);
int mt_cuda_softmax_xent_bf16(const mt_cuda_ctx *c, const float *logits, uint16_t *dlogits, float *losses,
                              const int32_t *targets, int N, int V, int Vp, float dlogits_scale);

/* ---- the vocabulary-parallel form ({tp} > 1; tp_ops.cu): a shard holds logit
 * columns [v0, v0 + Vl) of every row, row stride ld; as ops/ops.h's op_xent_*.
 * shard_stats: a block per row (mx, xt bitwise the CPU's; se by the block
 * tree: within 1e-6 of the exact sum, 4e-6 of the CPU's); combine_lse and losses_from_stats: the shards in
 * the CPU's order (bitwise but for logf's last bit on a GPU); shard_grad
 * bitwise, with the exp form of the CPU build passed in exp_fused
 * (mt_softmax_exp_fused: 1 mt_vexp16's fused multiply-adds, 0 mt_vexpf's).
 * A target at or past V gives a NaN loss (the CPU op stops the run). */
int mt_cuda_xent_shard_stats(const mt_cuda_ctx *c, const float *logits, float *mx, float *se, float *xt,
                             const int32_t *targets, int N, int Vl, int ld, int v0);
int mt_cuda_xent_combine_lse(const mt_cuda_ctx *c, float *lse, const float *mx, const float *se, int S, int N, int ld);
int mt_cuda_xent_shard_grad(const mt_cuda_ctx *c, float *logits, const float *lse, const int32_t *targets, int N,
                            int Vl, int ld, int v0, float scale, int exp_fused);
int mt_cuda_xent_losses_from_stats(const mt_cuda_ctx *c, float *losses, const float *lse, const float *stats, int S,
                                   int N, const int32_t *targets, int V);

/* ---- embeddings (backward without atomics: a thread per column walks the rows in order) */
int mt_cuda_embed_forward(const mt_cuda_ctx *c, float *out, const int32_t *tokens, const float *wte, const float *wpe,
                          int B, int T, int C, int pos0);
int mt_cuda_embed_backward(const mt_cuda_ctx *c, float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                           int B, int T, int C, int pos0);
int mt_cuda_embed_shard_forward(const mt_cuda_ctx *c, float *out, const int32_t *tokens, const float *wte, int v0,
                                int Vl, int N, int C);
/* the lookup from a 16-bit wte (dt 1 bf16, 2 fp16), each row widened */
int mt_cuda_embed_shard_forward_16(const mt_cuda_ctx *c, float *out, const int32_t *tokens, int dt, const uint16_t *wte,
                                   int v0, int Vl, int N, int C);
/* out[i,:] += wpe[(row0 + i) % T,:] for n rows */
int mt_cuda_add_positions(const mt_cuda_ctx *c, float *out, const float *wpe, size_t row0, int n, int T, int C);
int mt_cuda_embed_shard_backward(const mt_cuda_ctx *c, float *dwte, float *dwpe, const float *dout,
                                 const int32_t *tokens, int v0, int Vl, int B, int T, int C);

/* ---- element-wise helpers */
int mt_cuda_add(const mt_cuda_ctx *c, float *out, const float *a, const float *b, size_t n);
int mt_cuda_residual_add(const mt_cuda_ctx *c, float *res, const float *x, const float *branch, const float *bias,
                         int N, int C);
int mt_cuda_accumulate(const mt_cuda_ctx *c, float *acc, const float *x, size_t n);
int mt_cuda_zero(const mt_cuda_ctx *c, float *x, size_t n);
int mt_cuda_scale(const mt_cuda_ctx *c, float *x, float s, size_t n);
/* Falcon's q/k/v re-layouts (op_qkv_grouped_to_planar / op_qkv_planar_to_grouped), copies */
int mt_cuda_qkv_grouped_to_planar(const mt_cuda_ctx *c, float *planar, const float *grouped, int N, int n_groups,
                                  int G, int q0, int nq, int hd);
int mt_cuda_qkv_planar_to_grouped(const mt_cuda_ctx *c, float *grouped, const float *planar, int N, int n_groups,
                                  int G, int q0, int nq, int hd);
/* x[i, c0 .. c0 + nc) = 0 for N rows of stride ld; x[i,:] += bias[:] for N rows of C */
int mt_cuda_zero_cols(const mt_cuda_ctx *c, float *x, int N, size_t ld, int c0, int nc);
int mt_cuda_add_bias_rows(const mt_cuda_ctx *c, float *x, const float *bias, int N, int C);
/* dt: 1 bf16, 2 fp16 (mt_dtype's values), here and below; acc (16-bit) = round(widen(acc) + x),
 * dst (fp32) += widen(src) (op_accumulate_16, op_add_from_16) */
int mt_cuda_accumulate_16(const mt_cuda_ctx *c, int dt, uint16_t *acc, const float *x, size_t n);
int mt_cuda_add_from_16(const mt_cuda_ctx *c, int dt, float *dst, const uint16_t *src, size_t n);
int mt_cuda_convert_to_16(const mt_cuda_ctx *c, int dt, uint16_t *dst, const float *src, size_t n);
int mt_cuda_convert_from_16(const mt_cuda_ctx *c, int dt, float *dst, const uint16_t *src, size_t n);

/* ---- adapters (adapters.cu): LoRA's input dropout and IA3's column scalings, as ops/rows.c's
 * op_dropout_feature_rows, op_scale_cols, op_scale_cols_in_place, op_scale_cols_into and
 * op_col_dot_acc -- bitwise the CPU's (col_dot_acc: a thread per column sums its rows in order in
 * double, as the CPU). dropout_feature_rows: dst[i, c] = src[i, c] * the scale of (sample_ids[i / T],
 * position i % T, group site_layer, element col0 + c); sample_ids on the device; dst may be src. */
int mt_cuda_dropout_feature_rows(const mt_cuda_ctx *c, float *dst, const float *src, const mt_dropout *d,
                                 const uint64_t *sample_ids, int N, int T, int C, uint32_t site_layer, uint32_t col0);
int mt_cuda_scale_cols(const mt_cuda_ctx *c, float *dst, const float *src, const float *l, int N, int C);
int mt_cuda_scale_cols_in_place(const mt_cuda_ctx *c, float *x, const float *l, int N, int ld, int col0, int R);
int mt_cuda_scale_cols_into(const mt_cuda_ctx *c, float *dst, const float *src, const float *l, int N, int C,
                            int accumulate);
int mt_cuda_col_dot_acc(const mt_cuda_ctx *c, float *dl, const float *a, int lda, int col0, const float *b, int N,
                        int n);

/* ---- a quantized base's row tiles (quant.cu), as ops/ops.h's op_nf4_dequant_rows and
 * op_int8_dequant_rows, bitwise: a thread per element; dt 0 fp32 out, 1 bf16 (mt_dtype's values).
 * The struct mirrors ops.h's mt_nf4_codes (device pointers; absmax NULL with double quantization). */
typedef struct {
    const uint8_t *packed;
    const float *absmax;
    const uint8_t *absmax_code;
    const float *nested_absmax;
    float offset;
    const float *code_map;
    const float *nested_map;
    int64_t rows, cols;
} mt_cuda_nf4;
int mt_cuda_nf4_dequant_rows(const mt_cuda_ctx *c, const mt_cuda_nf4 *q, int64_t row0, int64_t nrows, int64_t ld,
                             int dt, void *out);
int mt_cuda_int8_dequant_rows(const mt_cuda_ctx *c, const int8_t *codes, const float *scb, int64_t cols, int64_t row0,
                              int64_t nrows, int64_t ld, int dt, void *out);

/* ---- reductions: *out (device double) = sum of x^2, in two fixed-order
 * stages (MT_CUDA_SUMSQ_BLOCKS partial sums in `partials`, then one block);
 * the same double for any run. */
#define MT_CUDA_SUMSQ_BLOCKS 256
int mt_cuda_sumsq(const mt_cuda_ctx *c, double *out, const float *x, size_t n, double *partials);
int mt_cuda_sumsq_16(const mt_cuda_ctx *c, double *out, int dt, const uint16_t *x, size_t n, double *partials);
/* dst = src rounded to dt, and *out = the sum of squares of the rounded values (as op_round_to_16_sumsq) */
int mt_cuda_round_to_16_sumsq(const mt_cuda_ctx *c, double *out, int dt, uint16_t *dst, const float *src, size_t n,
                              double *partials);
/* *flag (device int) is set to 1 when x holds an inf or NaN (left as it is otherwise: clear it once per step) */
int mt_cuda_nonfinite(const mt_cuda_ctx *c, int *flag, const float *x, size_t n);

/* ---- optimizer updates on a flat range (bitwise the CPU's) */
int mt_cuda_adamw_update(const mt_cuda_ctx *c, float *p, const float *g, float *m, float *v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, int64_t step, float grad_scale);
int mt_cuda_adam_update(const mt_cuda_ctx *c, float *p, const float *g, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay, int64_t step, float grad_scale);
int mt_cuda_adamw_update_16(const mt_cuda_ctx *c, float *p, const uint16_t *g16, uint16_t *p16, int dt, float *m,
                            float *v, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                            int64_t step, float grad_scale);
int mt_cuda_adam_update_16(const mt_cuda_ctx *c, float *p, const uint16_t *g16, uint16_t *p16, int dt, float *m,
                           float *v, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                           int64_t step, float grad_scale);
int mt_cuda_sgd_update(const mt_cuda_ctx *c, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                       float weight_decay, int64_t step, float grad_scale);

#ifdef __cplusplus
}
#endif
#endif
