/* The kernel table of a device backend other than the CPU: one function
 * pointer per op_* of ops.h, matmul_lowp.h, matmul_int8.h, positions.h and
 * moe.h, with the op's signature.
 *
 * Why a table and not a link-time choice: one binary runs either device
 * ({device} cpu or cuda), the GPU tests compare each CUDA kernel with its
 * CPU op in one process, and an op a device does not have yet is a NULL
 * entry that fails with one line naming it rather than a link error or a
 * host loop on device memory. Callers never see the table: they call the
 * op_* names with the backend, and each CPU op begins with MT_DISPATCH,
 * which hands the call to be->kernels when the backend has a table (NULL
 * for the CPU backend: one predictable branch per kernel call, nothing per
 * element). A CUDA backend fills a table with its launchers (src/cuda/)
 * and sets mt_backend.kernels to it. */
#ifndef MT_OPS_KERNEL_TABLE_H
#define MT_OPS_KERNEL_TABLE_H
#include "device/backend.h"
#include "ops/matmul_int8.h"
#include "ops/matmul_lowp.h"
#include "ops/moe.h"
#include "ops/ops.h"
#include "ops/positions.h"

struct mt_kernel_table {
    /* ops/ops.h */
    void (*sgemm)(mt_backend *be, char transa, char transb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc);
    void (*matmul_forward)(mt_backend *be, float *out, const float *inp, const float *w, const float *bias, int N,
                           int C, int OC);
    void (*matmul_backward)(mt_backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                            const float *w, int N, int C, int OC, int flags);
    void (*layernorm_forward)(mt_backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                              const float *b, int N, int C);
    void (*layernorm_backward)(mt_backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                               const float *w, const float *mean, const float *rstd, int N, int C);
    void (*residual_layernorm_forward)(mt_backend *be, float *res, float *out, float *mean, float *rstd, const float *x,
                                       const float *branch, const float *branch_bias, const float *w, const float *b,
                                       int N, int C);
    void (*gelu_forward)(mt_backend *be, float *out, const float *inp, size_t n);
    void (*gelu_backward)(mt_backend *be, float *dinp, const float *inp, const float *dout, size_t n);
    void (*bias_gelu_forward)(mt_backend *be, float *pre, float *out, uint16_t *out16, const float *bias, int N, int OC);
    void (*gelu_bias_backward)(mt_backend *be, float *dpre, float *dbias, const float *pre, const float *dout, int N,
                               int OC);
    size_t (*attention_scratch_floats)(mt_backend *be, int B, int T, int NH, int HS);
    void (*attention_forward)(mt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH, int HS,
                              const mt_attn_dropout *drop, float *scratch);
    void (*attention_backward)(mt_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *lse, int B, int T, int NH, int HS, const mt_attn_dropout *drop,
                               float *scratch);
    size_t (*attention_scratch_floats_gqa)(mt_backend *be, int B, int T, int NH, int NKV, int HS);
    void (*attention_forward_gqa)(mt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH,
                                  int NKV, int HS, const mt_attn_dropout *drop, float *scratch);
    void (*attention_backward_gqa)(mt_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int NH, int NKV, int HS, const mt_attn_dropout *drop,
                                   float *scratch);
    void (*attention_block_forward)(mt_backend *be, float *out, float *lse, const float *q, size_t ldq, const float *k,
                                    const float *v, size_t ldkv, int B, int nq, int nk, int q0, int k0, int NH,
                                    int NKV, int HS, const mt_attn_dropout *drop, float *scratch);
    void (*attention_block_backward)(mt_backend *be, float *dq, float *dk, float *dv, const float *dout,
                                     const float *out, const float *lse, const float *q, size_t ldq, const float *k,
                                     const float *v, size_t ldkv, int B, int nq, int nk, int q0, int k0, int NH,
                                     int NKV, int HS, const mt_attn_dropout *drop, float *scratch);
    size_t (*attention_block_scratch_floats)(mt_backend *be, int B, int nk, int NKV);
    void (*attention_block_start)(mt_backend *be, float *out, float *lse, size_t n_out, size_t n_lse);
    void (*attention_decode)(mt_backend *be, const float *q, const float *kc, const float *vc, size_t ld, int t, int hd,
                             float *scores, float *out);
    void (*rmsnorm_forward)(mt_backend *be, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                            float eps);
    void (*rmsnorm_backward)(mt_backend *be, float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const float *rstd, int N, int C);
    void (*qk_norm_sumsq)(mt_backend *be, float *ss, const float *qkv, int N, int QW, int KW, size_t ld);
    void (*qk_norm_apply)(mt_backend *be, float *qkv, float *pre, float *ss_rstd, const float *wq, const float *wk,
                          int N, int QW, int KW, size_t ld, float nq, float nk, float eps);
    void (*qk_norm_backward_dot)(mt_backend *be, float *dot, const float *dqkv, const float *pre, const float *rstd,
                                 const float *wq, const float *wk, int N, int QW, int KW, size_t ld);
    void (*qk_norm_backward_apply)(mt_backend *be, float *dqkv, float *dwq, float *dwk, const float *pre,
                                   const float *rstd, const float *dot, const float *wq, const float *wk, int N, int QW,
                                   int KW, size_t ld, float nq, float nk);
    void (*rope_inv_freq)(mt_backend *be, float *inv_freq, int HS, float theta, const mt_rope_scaling *s);
    float (*rope_attention_factor)(mt_backend *be, const mt_rope_scaling *s);
    void (*rope_tables)(mt_backend *be, float *cos_t, float *sin_t, int T, int HS, float theta,
                        const mt_rope_scaling *s);
    void (*rope_table)(mt_backend *be, float *cos_t, float *sin_t, const float *inv_freq, int T, int HS);
    void (*rope_apply)(mt_backend *be, float *x, int N, int T, int nh, int HS, size_t ld, const float *cos_t,
                       const float *sin_t, int inverse);
    void (*swiglu_forward)(mt_backend *be, float *out, const float *gate_up, int N, int F);
    void (*swiglu_backward)(mt_backend *be, float *dgate_up, const float *dout, const float *gate_up, int N, int F);
    void (*gelu_erf_forward)(mt_backend *be, float *out, const float *inp, size_t n);
    void (*gelu_erf_backward)(mt_backend *be, float *dinp, const float *inp, const float *dout, size_t n);
    void (*qkv_grouped_to_planar)(mt_backend *be, float *planar, const float *grouped, int N, int n_groups, int G,
                                  int q0, int nq, int hd);
    void (*qkv_planar_to_grouped)(mt_backend *be, float *grouped, const float *planar, int N, int n_groups, int G,
                                  int q0, int nq, int hd);
    void (*softmax_xent)(mt_backend *be, float *logits, float *losses, const int32_t *targets, int N, int V, int Vp,
                         float dlogits_scale);
    void (*softmax_xent_bf16)(mt_backend *be, const float *logits, mt_bf16 *dlogits, float *losses,
                              const int32_t *targets, int N, int V, int Vp, float dlogits_scale);
    void (*xent_shard_stats)(mt_backend *be, const float *logits, float *mx, float *se, float *xt,
                             const int32_t *targets, int N, int Vl, int ld, int v0);
    void (*xent_combine_lse)(mt_backend *be, float *lse, const float *mx, const float *se, int S, int N, int ld);
    void (*xent_shard_grad)(mt_backend *be, float *logits, const float *lse, const int32_t *targets, int N, int Vl,
                            int ld, int v0, float scale);
    void (*embed_forward)(mt_backend *be, float *out, const int32_t *tokens, const float *wte, const float *wpe, int B,
                          int T, int C, int pos0);
    void (*embed_backward)(mt_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B,
                           int T, int C, int pos0);
    void (*embed_shard_forward)(mt_backend *be, float *out, const int32_t *tokens, const float *wte, int v0, int Vl,
                                int N, int C);
    void (*embed_shard_forward_16)(mt_backend *be, float *out, const int32_t *tokens, mt_dtype dt, const uint16_t *wte,
                                   int v0, int Vl, int N, int C);
    void (*embed_shard_backward)(mt_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                 int v0, int Vl, int B, int T, int C);
    void (*add_positions)(mt_backend *be, float *out, const float *wpe, size_t row0, int n, int T, int C);
    void (*add)(mt_backend *be, float *out, const float *a, const float *b, size_t n);
    void (*residual_add)(mt_backend *be, float *res, const float *x, const float *branch, const float *bias, int N,
                         int C);
    void (*accumulate)(mt_backend *be, float *acc, const float *x, size_t n);
    void (*zero)(mt_backend *be, float *x, size_t n);
    void (*scale)(mt_backend *be, float *x, float s, size_t n);
    double (*sumsq)(mt_backend *be, const float *x, size_t n);
    double (*sumsq_16)(mt_backend *be, mt_dtype dt, const uint16_t *x, size_t n);
    double (*round_to_16_sumsq)(mt_backend *be, mt_dtype dt, uint16_t *dst, const float *src, size_t n);
    void (*copy)(mt_backend *be, float *dst, const float *src, size_t n);
    void (*copy_bytes)(mt_backend *be, void *dst, const void *src, size_t bytes);
    void (*copy_rows)(mt_backend *be, void *dst, size_t dst_pitch, size_t dst_batch, const void *src,
                      size_t src_pitch, size_t src_batch, size_t width, int rows, int nb);
    void (*zero_bytes)(mt_backend *be, void *x, size_t bytes);
    void (*copy_to_host)(mt_backend *be, void *host, const void *src, size_t bytes);
    void (*copy_from_host)(mt_backend *be, void *dst, const void *host, size_t bytes);
    void (*zero_cols)(mt_backend *be, float *x, int N, size_t ld, int c0, int nc);
    void (*to_16)(mt_backend *be, mt_dtype dt, uint16_t *dst, const float *src, size_t n);
    void (*from_16)(mt_backend *be, mt_dtype dt, float *dst, const uint16_t *src, size_t n);
    void (*accumulate_16)(mt_backend *be, mt_dtype dt, uint16_t *acc, const float *x, size_t n);
    void (*add_from_16)(mt_backend *be, mt_dtype dt, float *dst, const uint16_t *src, size_t n);
    void (*dropout_rows)(mt_backend *be, float *x, const mt_dropout *d, const uint64_t *sample_ids, size_t row0, int n,
                         int T, int C);
    void (*dropout_feature_rows)(mt_backend *be, float *dst, const float *src, const mt_dropout *d,
                                 const uint64_t *sample_ids, int N, int T, int C, uint32_t site_layer, uint32_t col0);
    void (*add_bias_rows)(mt_backend *be, float *x, const float *bias, int N, int C);
    void (*scale_cols)(mt_backend *be, float *dst, const float *src, const float *l, int N, int C);
    void (*scale_cols_in_place)(mt_backend *be, float *x, const float *l, int N, int ld, int col0, int R);
    void (*scale_cols_into)(mt_backend *be, float *dst, const float *src, const float *l, int N, int C, int accumulate);
    void (*col_dot_acc)(mt_backend *be, float *dl, const float *a, int lda, int col0, const float *b, int N, int n);
    void (*xent_losses_from_stats)(mt_backend *be, float *losses, const float *lse, const float *stats, int S, int N,
                                   const int32_t *targets, int V);
    double (*sum)(mt_backend *be, const float *x, size_t n);
    void (*nonfinite_flag)(mt_backend *be, mt_scalar slot, const float *x, size_t n);
    void (*block_quantize)(mt_backend *be, const float *x, size_t n, size_t block, int bits, uint8_t *codes,
                           float *scales);
    void (*block_dequantize)(mt_backend *be, const uint8_t *codes, const float *scales, size_t n, size_t block,
                             int bits, float *x);
    void (*act_int8_encode)(mt_backend *be, int8_t *codes, float *scales, const float *x, size_t rows, size_t cols);
    void (*act_int8_decode)(mt_backend *be, float *x, const int8_t *codes, const float *scales, size_t rows,
                            size_t cols);
    void (*gptq_dequant_rows)(mt_backend *be, const int32_t *qweight, const int32_t *qzeros, const uint16_t *scales,
                              const int32_t *g_idx, int bits, int64_t rows, int64_t cols, int64_t row0, int64_t nrows,
                              int64_t ld, float *out);
    void (*nf4_dequant_rows)(mt_backend *be, const mt_nf4_codes *q, int64_t row0, int64_t nrows, int64_t ld,
                             mt_dtype dt, void *out);
    void (*int8_dequant_rows)(mt_backend *be, const int8_t *codes, const float *scb, int64_t cols, int64_t row0,
                              int64_t nrows, int64_t ld, mt_dtype dt, void *out);
    void (*adamw_update)(mt_backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                         float beta2, float eps, float weight_decay, int64_t step, float grad_scale);
    void (*adam_update)(mt_backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                        float beta2, float eps, float weight_decay, int64_t step, float grad_scale);
    void (*adamw_update_16)(mt_backend *be, float *p, const uint16_t *g16, uint16_t *p16, mt_dtype dt, float *m,
                            float *v, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                            int64_t step, float grad_scale);
    void (*adam_update_16)(mt_backend *be, float *p, const uint16_t *g16, uint16_t *p16, mt_dtype dt, float *m,
                           float *v, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                           int64_t step, float grad_scale);
    void (*sgd_update)(mt_backend *be, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                       float weight_decay, int64_t step, float grad_scale);
    void (*adagrad_update)(mt_backend *be, float *p, const float *g, float *sum, size_t n, float lr, float lr_decay,
                           float initial_accumulator, float eps, float weight_decay, int64_t step, float grad_scale);
    double (*adafactor_factored_moment)(mt_backend *be, float *R, float *C, double *r_mean, const double *rs,
                                        const double *cs, size_t rows, size_t cols, double beta2, const float *g,
                                        size_t e0, size_t e1, float grad_scale, float *col_factor);
    void (*adafactor_row_col_sums)(mt_backend *be, double *rs, double *cs, const float *g, size_t e0, size_t e1,
                                   size_t rows, size_t cols, float grad_scale, float eps1);
    double (*adafactor_moment)(mt_backend *be, float *V, const float *g, size_t n, float grad_scale, double beta2,
                               float eps1);
    void (*adafactor_apply_factored)(mt_backend *be, float *p, float *m, const float *g, const float *R,
                                     const float *C, double r_mean, size_t e0, size_t e1, size_t cols,
                                     float grad_scale, float clip, float beta1, float lr, float pdecay,
                                     float *col_factor);
    void (*adafactor_apply)(mt_backend *be, float *p, float *m, const float *g, const float *V, size_t n,
                            float grad_scale, float clip, float beta1, float lr, float pdecay);
    void (*adamw8bit_update)(mt_backend *be, float *p, const float *g, uint8_t *m, uint8_t *v, float *m_absmax,
                             float *v_absmax, size_t u0, size_t n, const mt_tensor_span *spans, int n_spans, float lr,
                             float beta1, float beta2, float eps, float weight_decay, int64_t step,
                             float grad_scale);
    void (*q8_quantize_blocks)(mt_backend *be, int is_signed, const float *x, size_t n, uint8_t *codes,
                               float *absmax);
    void (*q8_dequantize_blocks)(mt_backend *be, int is_signed, const uint8_t *codes, const float *absmax, size_t n,
                                 float *x);
    /* ops/matmul_lowp.h */
    void (*matmul_forward_bf16)(mt_backend *be, float *out, const mt_bf16 *inp, const mt_bf16 *w, const float *bias,
                                int N, int C, int OC);
    void (*matmul_backward_bf16)(mt_backend *be, float *dinp, float *dw, float *dbias, const mt_bf16 *dout,
                                 const mt_bf16 *inp, const mt_bf16 *w, int N, int C, int OC, int flags);
    void (*gemm_bf16)(mt_backend *be, char transa, char transb, int M, int N, int K, const mt_bf16 *A, int lda,
                      const mt_bf16 *B, int ldb, float beta, float *C, int ldc);
    /* ops/matmul_int8.h */
    size_t (*int8_outlier_scratch_bytes)(mt_backend *be, int N, int C);
    int (*int8_outlier_matmul)(mt_backend *be, float *out, int ldo, const float *x, int N, int C, const int8_t *wq,
                               const float *scb, int R, float threshold, void *scratch);
    /* ops/positions.h */
    void (*rope_apply_at)(mt_backend *be, float *x, int N, int nh, int HS, size_t ld, const float *cos_t,
                          const float *sin_t, int inverse, const int32_t *pos);
    void (*add_positions_at)(mt_backend *be, float *out, const float *wpe, const int32_t *pos, int n, int C);
    void (*positions_backward_at)(mt_backend *be, float *dwpe, const float *dout, const int32_t *pos, int N, int C);
    /* ops/moe.h */
    void (*moe_route_forward)(mt_backend *be, float *probs, float *lse, int32_t *topk, float *topw, int N, int E, int K,
                              mt_moe_router router, int norm_topk);
    int64_t (*moe_dispatch_plan)(mt_backend *be, int32_t *offsets, int32_t *slot, int32_t *order, const int32_t *topk,
                                 int N, int E, int K, int capacity);
    void (*moe_gather)(mt_backend *be, float *xs, const float *x, const int32_t *order, int M, int C);
    void (*moe_combine_forward)(mt_backend *be, float *out, const float *y, const float *topw, const int32_t *slot,
                                int N, int K, int C);
    void (*moe_combine_backward)(mt_backend *be, float *dy, float *dtopw, const float *dout, const float *y,
                                 const float *topw, const int32_t *slot, int N, int K, int C);
    void (*moe_scatter_rows)(mt_backend *be, float *dx, const float *dxs, const int32_t *slot, int N, int K, int C);
    void (*moe_aux_losses)(mt_backend *be, double *aux, double *z, const float *probs, const float *lse,
                           const int32_t *topk, int N, int E, int K);
    void (*moe_route_backward)(mt_backend *be, float *dlogits, const float *dtopw, const float *probs, const float *lse,
                               const int32_t *topk, const float *topw, int N, int E, int K, mt_moe_router router,
                               int norm_topk, float ga, float gz);
    void (*moe_ep_orders)(mt_backend *be, int32_t *to_expert, int32_t *to_source, const int32_t *counts, int P, int El);
    void (*moe_shared_gate_forward)(mt_backend *be, float *out, const float *ys, float *g, int N, int C);
    void (*moe_shared_gate_backward)(mt_backend *be, float *dys, float *dg, const float *dout, const float *ys,
                                     const float *g, int N, int C);
};
typedef struct mt_kernel_table mt_kernel_table;

/* Dies with one line: op_<name> has no kernel on be's device yet. */
void mt_kernel_missing(const mt_backend *be, const char *name);

/* The first statement of a CPU op: with a table, its entry runs instead. */
#define MT_DISPATCH(be, name, ...)                                                                                     \
    do {                                                                                                               \
        if ((be)->kernels) {                                                                                           \
            if (!(be)->kernels->name) mt_kernel_missing((be), #name);                                                  \
            (be)->kernels->name(__VA_ARGS__);                                                                          \
            return;                                                                                                    \
        }                                                                                                              \
    } while (0)
#define MT_DISPATCH_RET(be, name, ...)                                                                                 \
    do {                                                                                                               \
        if ((be)->kernels) {                                                                                           \
            if (!(be)->kernels->name) mt_kernel_missing((be), #name);                                                  \
            return (be)->kernels->name(__VA_ARGS__);                                                                   \
        }                                                                                                              \
    } while (0)

#endif
