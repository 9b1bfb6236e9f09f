// The CUDA backend ({device} cuda): a kernel table (ops/kernel_table.h)
// whose entries adapt each op_* signature to its mt_cuda_* launcher
// (cuda/kernels.h), the allocator hook of core/mem (device, pinned), host
// <-> device copies, and the step's scalars. The same source builds with
// nvcc (`make gpu`) and against the CPU emulation (`make gpu-emu`).
//
// Ops without a CUDA kernel stay NULL: the op fails with one line naming
// it (mt_kernel_missing), and the trainer refuses the features that need
// them before the run starts (train/opts.c). Two set-up ops (the RoPE
// tables, computed once) and the decode step's attention run the CPU op on
// the host after a stream sync (the h_ adapters below).
//
// Device memory: MT_PLACE_DEVICE is cudaMalloc's. The host never reads or
// writes it directly: the token rows, initial values, checkpoint reads and
// writes and optimizer state go through host copies (op_copy_*_host); the
// emulation's MT_EMU_GUARD_HOST=1 makes any other host access stop the run.
// MT_CUDA_MANAGED=1 takes managed memory instead (cudaMallocManaged), to step
// around a host access this has missed.
#include "cuda/compat.h"
#include "cuda/kernels.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern "C" {
#include "comm/device.h"
#include "core/error.h"
#include "ops/kernel_table.h"
}

namespace {

struct cuda_state {
    mt_cuda_ctx ctx;
    mt_mem_allocator alloc;
    mt_kernel_table table;
    double *dev_partials; // MT_CUDA_SUMSQ_BLOCKS partial sums of the sum-of-squares kernels
    double *dev_out;      // [2]: a reduction's result (double), a non-finite flag (int)
    mt_comm_device comm;  // comm/'s staging hooks (copies and events on comm_stream)
    cudaStream_t comm_stream;
    int managed;        // MT_CUDA_MANAGED=1: device placement as managed memory (above)
};

cuda_state *state(const mt_backend *be) { return (cuda_state *)be->allocator->ctx; }
const mt_cuda_ctx *cx(const mt_backend *be) { return &state(be)->ctx; }

// A launcher's error is a programming or device error mid-step: one line, then exit.
void check(int rc, const char *what) {
    if (rc) mt_die("CUDA kernel %s failed: %s", what, mt_cuda_error_string(rc));
}
void check_rt(cudaError_t e, const char *what) {
    if (e != cudaSuccess) mt_die("CUDA %s failed: %s", what, cudaGetErrorString(e));
}
void sync(const mt_backend *be) { check(mt_cuda_sync(cx(be)), "stream synchronize"); }
cudaStream_t stream(const mt_backend *be) { return (cudaStream_t)cx(be)->stream; }

// ---- the allocator hook (core/mem.h): zeroed memory or NULL
void *dev_alloc(void *ctx, mt_mem_place pl, size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    if (pl == MT_PLACE_PINNED) {
        if (cudaMallocHost(&p, bytes) != cudaSuccess) return NULL;
        memset(p, 0, bytes);
        return p;
    }
    if (pl == MT_PLACE_HOST) return calloc(1, bytes);
    // never more than is free (managed memory could be asked for beyond what the GPU holds, and would
    // page or hang the GPU), so a model too large fails here with core/mem's "out of device memory"
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess || bytes > free_b) return NULL;
#ifdef MT_CUDA_EMU
    (void)ctx; // (the emulation's device memory is host memory either way)
#else
    if (((cuda_state *)ctx)->managed) {
        if (cudaMallocManaged(&p, bytes, cudaMemAttachGlobal) != cudaSuccess) return NULL;
    } else
#endif
        if (cudaMalloc(&p, bytes) != cudaSuccess) return NULL;
    if (cudaMemset(p, 0, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        cudaFree(p);
        return NULL;
    }
    return p;
}
void dev_free(void *, mt_mem_place pl, void *p) {
    if (!p) return;
    if (pl == MT_PLACE_PINNED) check_rt(cudaFreeHost(p), "cudaFreeHost");
    else if (pl == MT_PLACE_HOST) free(p);
    else {
        // a buffer may still be read by a queued kernel
        check_rt(cudaDeviceSynchronize(), "cudaDeviceSynchronize before cudaFree");
        check_rt(cudaFree(p), "cudaFree");
    }
}

// ---- adapters: op_* signature -> mt_cuda_* launcher
#define K(name, ...) check(mt_cuda_##name(cx(be), __VA_ARGS__), #name)

void k_matmul_forward(mt_backend *be, float *out, const float *inp, const float *w, const float *bias, int N, int C,
                      int OC) {
    K(matmul_forward, out, inp, w, bias, N, C, OC);
}
void k_matmul_backward(mt_backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                       const float *w, int N, int C, int OC, int flags) {
    K(matmul_backward, dinp, dw, dbias, dout, inp, w, N, C, OC, flags);
}
// row-major C[M,N] = alpha op(A) op(B) + beta C is, column-major, C^T = op(B)^T op(A)^T: swap the operands
void k_sgemm(mt_backend *be, char ta, char tb, int M, int N, int K_, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc) {
    check(mt_cuda_gemm(cx(be), tb, ta, N, M, K_, alpha, B, MT_CUDA_F32, ldb, 0, A, MT_CUDA_F32, lda, 0, beta, C,
                       MT_CUDA_F32, ldc, 0, 1),
          "sgemm");
}
void k_gemm_bf16(mt_backend *be, char ta, char tb, int M, int N, int K_, const mt_bf16 *A, int lda, const mt_bf16 *B,
                 int ldb, float beta, float *C, int ldc) {
    check(mt_cuda_gemm(cx(be), tb, ta, N, M, K_, 1.0f, B, MT_CUDA_BF16, ldb, 0, A, MT_CUDA_BF16, lda, 0, beta, C,
                       MT_CUDA_F32, ldc, 0, 1),
          "gemm_bf16");
}
void k_matmul_forward_bf16(mt_backend *be, float *out, const mt_bf16 *inp, const mt_bf16 *w, const float *bias, int N,
                           int C, int OC) {
    K(matmul_forward_bf16, out, inp, w, bias, N, C, OC);
}
void k_matmul_backward_bf16(mt_backend *be, float *dinp, float *dw, float *dbias, const mt_bf16 *dout,
                            const mt_bf16 *inp, const mt_bf16 *w, int N, int C, int OC, int flags) {
    K(matmul_backward_bf16, dinp, dw, dbias, dout, inp, w, N, C, OC, flags);
}
void k_layernorm_forward(mt_backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
                         const float *b, int N, int C) {
    K(layernorm_forward, out, mean, rstd, inp, w, b, N, C);
}
void k_layernorm_backward(mt_backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int N, int C) {
    K(layernorm_backward, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
void k_residual_layernorm_forward(mt_backend *be, float *res, float *out, float *mean, float *rstd, const float *x,
                                  const float *branch, const float *branch_bias, const float *w, const float *b, int N,
                                  int C) {
    K(residual_layernorm_forward, res, out, mean, rstd, x, branch, branch_bias, w, b, N, C);
}
void k_gelu_forward(mt_backend *be, float *out, const float *inp, size_t n) { K(gelu_forward, out, inp, n); }
void k_gelu_backward(mt_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    K(gelu_backward, dinp, inp, dout, n);
}
void k_bias_gelu_forward(mt_backend *be, float *pre, float *out, uint16_t *out16, const float *bias, int N, int OC) {
    K(bias_gelu_forward, pre, out, out16, bias, N, OC);
}
void k_gelu_bias_backward(mt_backend *be, float *dpre, float *dbias, const float *pre, const float *dout, int N,
                          int OC) {
    K(gelu_bias_backward, dpre, dbias, pre, dout, N, OC);
}
mt_cuda_attn_dropout attn_drop(const mt_attn_dropout *d) {
    mt_cuda_attn_dropout c;
    memset(&c, 0, sizeof c);
    // the trainer refuses packed samples on {device} cuda up front; this keeps a caller that did not from
    // silently attending across documents
    if (d && d->doc_start) mt_die("attention over packed documents has no kernel on the cuda backend yet");
    if (d) {
        c.d = d->d;
        c.sample_ids = d->sample_ids;
        c.head0 = d->head0;
    }
    return c;
}
// bf16 mixed precision (attention_mixed): the tensor-core flash kernels in their register form
// (attention_mma*.cu) where the head size allows (no scratch), else the simple kernels with TF32 GEMMs;
// fp32: the simple kernels in full fp32
static int use_tensor_cores(const mt_backend *be, int HS) {
    return be->attention_mixed && mt_cuda_attention_tc_supported(HS);
}

// the register form's bf16 operand tiles (cuda/kernels.h)
static size_t mma_workspace_floats(int B, int T, int NH, int NKV, int HS) {
    return (mt_cuda_attention_mma_workspace_bytes(B, T, NH, NKV, HS) + sizeof(float) - 1) / sizeof(float);
}
size_t k_attention_scratch_floats(mt_backend *be, int B, int T, int NH, int HS) {
    return use_tensor_cores(be, HS) ? mma_workspace_floats(B, T, NH, NH, HS)
                                    : mt_cuda_attention_scratch_floats(B, T, NH, NH, HS);
}
size_t k_attention_scratch_floats_gqa(mt_backend *be, int B, int T, int NH, int NKV, int HS) {
    return use_tensor_cores(be, HS) ? mma_workspace_floats(B, T, NH, NKV, HS)
                                    : mt_cuda_attention_scratch_floats(B, T, NH, NKV, HS);
}
void k_attention_forward_gqa(mt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                             int HS, const mt_attn_dropout *drop, float *scratch) {
    mt_cuda_attn_dropout d = attn_drop(drop);
    if (use_tensor_cores(be, HS)) {
        check(mt_cuda_attention_mma_forward_gqa(cx(be), out, lse, qkv, B, T, NH, NKV, HS, &d, scratch),
              "attention_mma_forward_gqa");
        return;
    }
    mt_cuda_ctx c = *cx(be);
    c.tf32 = be->attention_mixed;
    check(mt_cuda_attention_forward_gqa(&c, out, lse, qkv, B, T, NH, NKV, HS, &d, scratch), "attention_forward_gqa");
}
void k_attention_backward_gqa(mt_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                              const float *lse, int B, int T, int NH, int NKV, int HS, const mt_attn_dropout *drop,
                              float *scratch) {
    mt_cuda_attn_dropout d = attn_drop(drop);
    if (use_tensor_cores(be, HS)) {
        check(mt_cuda_attention_mma_backward_gqa(cx(be), dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS, &d, scratch),
              "attention_mma_backward_gqa");
        return;
    }
    mt_cuda_ctx c = *cx(be);
    c.tf32 = be->attention_mixed;
    check(mt_cuda_attention_backward_gqa(&c, dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS, &d, scratch),
          "attention_backward_gqa");
}
void k_attention_forward(mt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH, int HS,
                         const mt_attn_dropout *drop, float *scratch) {
    k_attention_forward_gqa(be, out, lse, qkv, B, T, NH, NH, HS, drop, scratch);
}
void k_attention_backward(mt_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *lse, int B, int T, int NH, int HS, const mt_attn_dropout *drop, float *scratch) {
    k_attention_backward_gqa(be, dqkv, dout, qkv, out, lse, B, T, NH, NH, HS, drop, scratch);
}
void k_rmsnorm_forward(mt_backend *be, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                       float eps) {
    K(rmsnorm_forward, out, rstd, inp, w, N, C, eps);
}
void k_rmsnorm_backward(mt_backend *be, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                        const float *rstd, int N, int C) {
    K(rmsnorm_backward, dinp, dw, dout, inp, w, rstd, N, C);
}
void k_rope_apply(mt_backend *be, float *x, int N, int T, int nh, int HS, size_t ld, const float *cos_t,
                  const float *sin_t, int inverse) {
    K(rope_apply, x, N, T, nh, HS, ld, cos_t, sin_t, inverse);
}
void k_swiglu_forward(mt_backend *be, float *out, const float *gate_up, int N, int F) {
    K(swiglu_forward, out, gate_up, N, F);
}
void k_swiglu_backward(mt_backend *be, float *dgate_up, const float *dout, const float *gate_up, int N, int F) {
    K(swiglu_backward, dgate_up, dout, gate_up, N, F);
}
void k_softmax_xent(mt_backend *be, float *logits, float *losses, const int32_t *targets, int N, int V, int Vp,
                    float scale) {
    K(softmax_xent, logits, losses, targets, N, V, Vp, scale);
}
void k_softmax_xent_bf16(mt_backend *be, const float *logits, mt_bf16 *dlogits, float *losses, const int32_t *targets,
                         int N, int V, int Vp, float scale) {
    K(softmax_xent_bf16, logits, dlogits, losses, targets, N, V, Vp, scale);
}
void k_embed_forward(mt_backend *be, float *out, const int32_t *tokens, const float *wte, const float *wpe, int B,
                     int T, int C, int pos0) {
    K(embed_forward, out, tokens, wte, wpe, B, T, C, pos0);
}
void k_embed_backward(mt_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T,
                      int C, int pos0) {
    K(embed_backward, dwte, dwpe, dout, tokens, B, T, C, pos0);
}
void k_embed_shard_forward(mt_backend *be, float *out, const int32_t *tokens, const float *wte, int v0, int Vl, int N,
                           int C) {
    K(embed_shard_forward, out, tokens, wte, v0, Vl, N, C);
}
void k_embed_shard_forward_16(mt_backend *be, float *out, const int32_t *tokens, mt_dtype dt, const uint16_t *wte,
                              int v0, int Vl, int N, int C) {
    K(embed_shard_forward_16, out, tokens, (int)dt, wte, v0, Vl, N, C);
}
void k_embed_shard_backward(mt_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int v0,
                            int Vl, int B, int T, int C) {
    K(embed_shard_backward, dwte, dwpe, dout, tokens, v0, Vl, B, T, C);
}
void k_add_positions(mt_backend *be, float *out, const float *wpe, size_t row0, int n, int T, int C) {
    K(add_positions, out, wpe, row0, n, T, C);
}
void k_add(mt_backend *be, float *out, const float *a, const float *b, size_t n) { K(add, out, a, b, n); }
void k_residual_add(mt_backend *be, float *res, const float *x, const float *branch, const float *bias, int N, int C) {
    K(residual_add, res, x, branch, bias, N, C);
}
void k_accumulate(mt_backend *be, float *acc, const float *x, size_t n) { K(accumulate, acc, x, n); }
void k_zero(mt_backend *be, float *x, size_t n) { K(zero, x, n); }
void k_scale(mt_backend *be, float *x, float s, size_t n) { K(scale, x, s, n); }
void k_to_16(mt_backend *be, mt_dtype dt, uint16_t *dst, const float *src, size_t n) {
    K(convert_to_16, (int)dt, dst, src, n);
}
void k_from_16(mt_backend *be, mt_dtype dt, float *dst, const uint16_t *src, size_t n) {
    K(convert_from_16, (int)dt, dst, src, n);
}
void k_dropout_rows(mt_backend *be, float *x, const mt_dropout *d, const uint64_t *sample_ids, size_t row0, int n,
                    int T, int C) {
    K(dropout_rows, x, d, sample_ids, row0, n, T, C);
}
// the vocabulary-parallel loss, the tensor-parallel layers' re-layouts and the 16-bit gradient accumulation
// ({grad-reduce-dtype} bf16) (cuda/tp_ops.cu)
void k_xent_shard_stats(mt_backend *be, const float *logits, float *mx, float *se, float *xt, const int32_t *targets,
                        int N, int Vl, int ld, int v0) {
    K(xent_shard_stats, logits, mx, se, xt, targets, N, Vl, ld, v0);
}
void k_xent_combine_lse(mt_backend *be, float *lse, const float *mx, const float *se, int S, int N, int ld) {
    K(xent_combine_lse, lse, mx, se, S, N, ld);
}
void k_xent_shard_grad(mt_backend *be, float *logits, const float *lse, const int32_t *targets, int N, int Vl, int ld,
                       int v0, float scale) {
    K(xent_shard_grad, logits, lse, targets, N, Vl, ld, v0, scale, mt_softmax_exp_fused());
}
void k_xent_losses_from_stats(mt_backend *be, float *losses, const float *lse, const float *stats, int S, int N,
                              const int32_t *targets, int V) {
    K(xent_losses_from_stats, losses, lse, stats, S, N, targets, V);
}
void k_qkv_grouped_to_planar(mt_backend *be, float *planar, const float *grouped, int N, int n_groups, int G, int q0,
                             int nq, int hd) {
    K(qkv_grouped_to_planar, planar, grouped, N, n_groups, G, q0, nq, hd);
}
void k_qkv_planar_to_grouped(mt_backend *be, float *grouped, const float *planar, int N, int n_groups, int G, int q0,
                             int nq, int hd) {
    K(qkv_planar_to_grouped, grouped, planar, N, n_groups, G, q0, nq, hd);
}
void k_zero_cols(mt_backend *be, float *x, int N, size_t ld, int c0, int nc) { K(zero_cols, x, N, ld, c0, nc); }
void k_add_bias_rows(mt_backend *be, float *x, const float *bias, int N, int C) { K(add_bias_rows, x, bias, N, C); }
void k_accumulate_16(mt_backend *be, mt_dtype dt, uint16_t *acc, const float *x, size_t n) {
    K(accumulate_16, (int)dt, acc, x, n);
}
void k_add_from_16(mt_backend *be, mt_dtype dt, float *dst, const uint16_t *src, size_t n) {
    K(add_from_16, (int)dt, dst, src, n);
}

// LoRA's input dropout, IA3's column scalings (cuda/adapters.cu) and a quantized base's row tiles
// (cuda/quant.cu; the codes are the device copy models/model.c made)
void k_dropout_feature_rows(mt_backend *be, float *dst, const float *src, const mt_dropout *d,
                            const uint64_t *sample_ids, int N, int T, int C, uint32_t site_layer, uint32_t col0) {
    K(dropout_feature_rows, dst, src, d, sample_ids, N, T, C, site_layer, col0);
}
void k_scale_cols(mt_backend *be, float *dst, const float *src, const float *l, int N, int C) {
    K(scale_cols, dst, src, l, N, C);
}
void k_scale_cols_in_place(mt_backend *be, float *x, const float *l, int N, int ld, int col0, int R) {
    K(scale_cols_in_place, x, l, N, ld, col0, R);
}
void k_scale_cols_into(mt_backend *be, float *dst, const float *src, const float *l, int N, int C, int accumulate) {
    K(scale_cols_into, dst, src, l, N, C, accumulate);
}
void k_col_dot_acc(mt_backend *be, float *dl, const float *a, int lda, int col0, const float *b, int N, int n) {
    K(col_dot_acc, dl, a, lda, col0, b, N, n);
}
void k_nf4_dequant_rows(mt_backend *be, const mt_nf4_codes *q, int64_t row0, int64_t nrows, int64_t ld, mt_dtype dt,
                        void *out) {
    if (dt != MT_FP32 && dt != MT_BF16) mt_die("op_nf4_dequant_rows: dtype %d (fp32 or bf16)", (int)dt);
    mt_cuda_nf4 c = {q->packed,   q->absmax,   q->absmax_code, q->nested_absmax, q->offset,
                     q->code_map, q->nested_map, q->rows,      q->cols};
    K(nf4_dequant_rows, &c, row0, nrows, ld, (int)dt, out);
}
void k_int8_dequant_rows(mt_backend *be, const int8_t *codes, const float *scb, int64_t cols, int64_t row0,
                         int64_t nrows, int64_t ld, mt_dtype dt, void *out) {
    if (dt != MT_FP32 && dt != MT_BF16) mt_die("op_int8_dequant_rows: dtype %d (fp32 or bf16)", (int)dt);
    K(int8_dequant_rows, codes, scb, cols, row0, nrows, ld, (int)dt, out);
}

// ---- copies (stream-ordered; a host-side copy waits for its data)
void k_copy_bytes(mt_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes) check_rt(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream(be)), "cudaMemcpyAsync");
}
void k_copy(mt_backend *be, float *dst, const float *src, size_t n) { k_copy_bytes(be, dst, src, n * sizeof(float)); }
// strided rows as one async copy per row (cudaMemcpy2DAsync per batch on a GPU would be fewer calls; the
// rows are few: a tensor-parallel layer's slices, a sequence-parallel region's token rows)
void k_copy_rows(mt_backend *be, void *dst, size_t dst_pitch, size_t dst_batch, const void *src, size_t src_pitch,
                 size_t src_batch, size_t width, int rows, int nb) {
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < rows; i++)
            k_copy_bytes(be, (char *)dst + (size_t)b * dst_batch + (size_t)i * dst_pitch,
                         (const char *)src + (size_t)b * src_batch + (size_t)i * src_pitch, width);
}
void k_zero_bytes(mt_backend *be, void *x, size_t bytes) {
    if (bytes) check_rt(cudaMemsetAsync(x, 0, bytes, stream(be)), "cudaMemsetAsync");
}
void k_copy_to_host(mt_backend *be, void *host, const void *src, size_t bytes) {
    if (!bytes) return;
    check_rt(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream(be)), "cudaMemcpyAsync to the host");
    sync(be);
}
void k_copy_from_host(mt_backend *be, void *dst, const void *host, size_t bytes) {
    if (!bytes) return;
    check_rt(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream(be)), "cudaMemcpyAsync from the host");
    sync(be); // the host buffer may be reused as soon as this returns
}

// ---- reductions the host reads (one sync each: see the note at the top)
double read_double(mt_backend *be) {
    double v;
    check_rt(cudaMemcpyAsync(&v, state(be)->dev_out, sizeof v, cudaMemcpyDeviceToHost, stream(be)),
             "cudaMemcpyAsync of a reduction");
    sync(be);
    return v;
}
double k_sumsq(mt_backend *be, const float *x, size_t n) {
    K(sumsq, state(be)->dev_out, x, n, state(be)->dev_partials);
    return read_double(be);
}
double k_sumsq_16(mt_backend *be, mt_dtype dt, const uint16_t *x, size_t n) {
    K(sumsq_16, state(be)->dev_out, (int)dt, x, n, state(be)->dev_partials);
    return read_double(be);
}
double k_round_to_16_sumsq(mt_backend *be, mt_dtype dt, uint16_t *dst, const float *src, size_t n) {
    K(round_to_16_sumsq, state(be)->dev_out, (int)dt, dst, src, n, state(be)->dev_partials);
    return read_double(be);
}
// op_sum's order: one thread, in order, in double (the CPU's loss sum, bitwise)
__global__ void sum_in_order(double *out, const float *x, size_t n) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i];
    *out = s;
}
double k_sum(mt_backend *be, const float *x, size_t n) {
    MT_LAUNCH(sum_in_order, 1, 1, 0, stream(be), state(be)->dev_out, x, n);
    check_rt(cudaGetLastError(), "launch of the loss sum");
    return read_double(be);
}
void k_nonfinite_flag(mt_backend *be, mt_scalar slot, const float *x, size_t n) {
    int *flag = (int *)(state(be)->dev_out + 1);
    int h = 0;
    check_rt(cudaMemsetAsync(flag, 0, sizeof(int), stream(be)), "cudaMemsetAsync of the non-finite flag");
    K(nonfinite, flag, x, n);
    check_rt(cudaMemcpyAsync(&h, flag, sizeof h, cudaMemcpyDeviceToHost, stream(be)), "cudaMemcpyAsync of the flag");
    sync(be);
    if (h) be->scalars[slot] = 1.0;
}

// ---- optimizer updates
void k_adamw_update(mt_backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
                    float b2, float eps, float wd, int64_t step, float gs) {
    K(adamw_update, p, g, m, v, n, lr, b1, b2, eps, wd, step, gs);
}
void k_adam_update(mt_backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                   float eps, float wd, int64_t step, float gs) {
    K(adam_update, p, g, m, v, n, lr, b1, b2, eps, wd, step, gs);
}
void k_adamw_update_16(mt_backend *be, float *p, const uint16_t *g16, uint16_t *p16, mt_dtype dt, float *m, float *v,
                       size_t n, float lr, float b1, float b2, float eps, float wd, int64_t step, float gs) {
    K(adamw_update_16, p, g16, p16, (int)dt, m, v, n, lr, b1, b2, eps, wd, step, gs);
}
void k_adam_update_16(mt_backend *be, float *p, const uint16_t *g16, uint16_t *p16, mt_dtype dt, float *m, float *v,
                      size_t n, float lr, float b1, float b2, float eps, float wd, int64_t step, float gs) {
    K(adam_update_16, p, g16, p16, (int)dt, m, v, n, lr, b1, b2, eps, wd, step, gs);
}
void k_sgd_update(mt_backend *be, float *p, const float *g, float *buf, size_t n, float lr, float momentum, float wd,
                  int64_t step, float gs) {
    K(sgd_update, p, g, buf, n, lr, momentum, wd, step, gs);
}

// ---- host ops: set-up tables computed once, on the host after a sync; inv_freq is host memory (the
// callers' own arrays), the tables are device buffers: computed into host memory and copied in
mt_backend host_of(const mt_backend *be) {
    sync(be);
    return mt_backend_cpu(MT_GEMM_DEFAULT);
}
void h_rope_inv_freq(mt_backend *be, float *inv_freq, int HS, float theta, const mt_rope_scaling *s) {
    mt_backend h = host_of(be);
    op_rope_inv_freq(&h, inv_freq, HS, theta, s);
}
// a host-computed cos/sin pair [T][HS/2] into the tables (cudaMemcpyDefault: device or host buffers alike)
static void rope_copy_in(mt_backend *be, float *cos_t, float *sin_t, const float *host, size_t n) {
    check_rt(cudaMemcpyAsync(cos_t, host, n * sizeof(float), cudaMemcpyDefault, stream(be)), "cudaMemcpyAsync (RoPE cos)");
    check_rt(cudaMemcpyAsync(sin_t, host + n, n * sizeof(float), cudaMemcpyDefault, stream(be)), "cudaMemcpyAsync (RoPE sin)");
    sync(be);
}
void h_rope_table(mt_backend *be, float *cos_t, float *sin_t, const float *inv_freq, int T, int HS) {
    mt_backend h = host_of(be);
    size_t n = (size_t)T * (size_t)(HS / 2);
    float *t = (float *)mt_xmalloc(2 * n * sizeof(float) + 1, "RoPE tables (host staging)");
    op_rope_table(&h, t, t + n, inv_freq, T, HS);
    rope_copy_in(be, cos_t, sin_t, t, n);
    free(t);
}
float h_rope_attention_factor(mt_backend *be, const mt_rope_scaling *s) {
    mt_backend h = host_of(be);
    return op_rope_attention_factor(&h, s);
}
void h_rope_tables(mt_backend *be, float *cos_t, float *sin_t, int T, int HS, float theta, const mt_rope_scaling *s) {
    mt_backend h = host_of(be);
    size_t n = (size_t)T * (size_t)(HS / 2);
    float *t = (float *)mt_xmalloc(2 * n * sizeof(float) + 1, "RoPE tables (host staging)");
    op_rope_tables(&h, t, t + n, T, HS, theta, s);
    rope_copy_in(be, cos_t, sin_t, t, n);
    free(t);
}

// ---- comm/'s hooks for collectives of device buffers (comm.h, "Streams and device buffers"):
// host-staged copies on a stream of their own, ordered against the compute stream by events
int c_is_device(void *, const void *p, size_t bytes) {
#ifdef MT_CUDA_EMU
    return mt_emu::is_device_range(p, bytes);
#else
    (void)bytes;
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); // a host pointer unknown to CUDA: not an error
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
#endif
}
void *c_pinned_alloc(void *, size_t bytes) {
    void *p = NULL;
    return cudaMallocHost(&p, bytes) == cudaSuccess ? p : NULL;
}
void c_pinned_free(void *, void *p) { check_rt(cudaFreeHost(p), "cudaFreeHost of a staging buffer"); }
void *c_event_create(void *) {
    cudaEvent_t e;
    check_rt(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate for a staged collective");
    return (void *)e;
}
void c_event_destroy(void *, void *e) { check_rt(cudaEventDestroy((cudaEvent_t)e), "cudaEventDestroy"); }
void c_event_record(void *, void *e, mt_comm_stream *s) {
    check_rt(cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s), "cudaEventRecord of a staged collective");
}
int c_event_done(void *, void *e) {
    cudaError_t r = cudaEventQuery((cudaEvent_t)e);
    if (r == cudaErrorNotReady) return 0;
    check_rt(r, "cudaEventQuery of a staged collective");
    return 1;
}
void c_stream_wait(void *, mt_comm_stream *s, void *e) {
    check_rt(cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0), "cudaStreamWaitEvent of a staged collective");
}
void c_copy(void *, void *dst, const void *src, size_t bytes, mt_comm_stream *s) {
    if (bytes)
        check_rt(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)s),
                 "cudaMemcpyAsync of a staged collective");
}
mt_comm_stream *c_stream_create(void *) {
    cudaStream_t s;
    check_rt(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate for an NCCL communicator");
    return (mt_comm_stream *)s;
}
void c_stream_destroy(void *, mt_comm_stream *s) {
    if (!s) return;
    check_rt(cudaStreamSynchronize((cudaStream_t)s), "cudaStreamSynchronize of an NCCL communicator's stream");
    check_rt(cudaStreamDestroy((cudaStream_t)s), "cudaStreamDestroy of an NCCL communicator's stream");
}

void fill_table(mt_kernel_table *t) {
    memset(t, 0, sizeof *t);
    t->sgemm = k_sgemm;
    t->matmul_forward = k_matmul_forward;
    t->matmul_backward = k_matmul_backward;
    t->layernorm_forward = k_layernorm_forward;
    t->layernorm_backward = k_layernorm_backward;
    t->residual_layernorm_forward = k_residual_layernorm_forward;
    t->gelu_forward = k_gelu_forward;
    t->gelu_backward = k_gelu_backward;
    t->bias_gelu_forward = k_bias_gelu_forward;
    t->gelu_bias_backward = k_gelu_bias_backward;
    t->attention_scratch_floats = k_attention_scratch_floats;
    t->attention_forward = k_attention_forward;
    t->attention_backward = k_attention_backward;
    t->attention_scratch_floats_gqa = k_attention_scratch_floats_gqa;
    t->attention_forward_gqa = k_attention_forward_gqa;
    t->attention_backward_gqa = k_attention_backward_gqa;
    t->rmsnorm_forward = k_rmsnorm_forward;
    t->rmsnorm_backward = k_rmsnorm_backward;
    t->rope_inv_freq = h_rope_inv_freq;
    t->rope_table = h_rope_table;
    t->rope_attention_factor = h_rope_attention_factor;
    t->rope_tables = h_rope_tables;
    t->rope_apply = k_rope_apply;
    t->swiglu_forward = k_swiglu_forward;
    t->swiglu_backward = k_swiglu_backward;
    t->softmax_xent = k_softmax_xent;
    t->softmax_xent_bf16 = k_softmax_xent_bf16;
    t->embed_forward = k_embed_forward;
    t->embed_backward = k_embed_backward;
    t->embed_shard_forward = k_embed_shard_forward;
    t->embed_shard_forward_16 = k_embed_shard_forward_16;
    t->embed_shard_backward = k_embed_shard_backward;
    t->add_positions = k_add_positions;
    t->add = k_add;
    t->residual_add = k_residual_add;
    t->accumulate = k_accumulate;
    t->zero = k_zero;
    t->scale = k_scale;
    t->sumsq = k_sumsq;
    t->sumsq_16 = k_sumsq_16;
    t->round_to_16_sumsq = k_round_to_16_sumsq;
    t->copy = k_copy;
    t->copy_bytes = k_copy_bytes;
    t->zero_bytes = k_zero_bytes;
    t->copy_to_host = k_copy_to_host;
    t->copy_from_host = k_copy_from_host;
    t->to_16 = k_to_16;
    t->from_16 = k_from_16;
    t->dropout_rows = k_dropout_rows;
    t->sum = k_sum;
    t->nonfinite_flag = k_nonfinite_flag;
    t->adamw_update = k_adamw_update;
    t->adam_update = k_adam_update;
    t->adamw_update_16 = k_adamw_update_16;
    t->adam_update_16 = k_adam_update_16;
    t->sgd_update = k_sgd_update;
    t->matmul_forward_bf16 = k_matmul_forward_bf16;
    t->matmul_backward_bf16 = k_matmul_backward_bf16;
    t->gemm_bf16 = k_gemm_bf16;
    t->copy_rows = k_copy_rows;
    t->xent_shard_stats = k_xent_shard_stats;
    t->xent_combine_lse = k_xent_combine_lse;
    t->xent_shard_grad = k_xent_shard_grad;
    t->xent_losses_from_stats = k_xent_losses_from_stats;
    t->qkv_grouped_to_planar = k_qkv_grouped_to_planar;
    t->qkv_planar_to_grouped = k_qkv_planar_to_grouped;
    t->zero_cols = k_zero_cols;
    t->add_bias_rows = k_add_bias_rows;
    t->accumulate_16 = k_accumulate_16;
    t->add_from_16 = k_add_from_16;
    t->dropout_feature_rows = k_dropout_feature_rows;
    t->scale_cols = k_scale_cols;
    t->scale_cols_in_place = k_scale_cols_in_place;
    t->scale_cols_into = k_scale_cols_into;
    t->col_dot_acc = k_col_dot_acc;
    t->nf4_dequant_rows = k_nf4_dequant_rows;
    t->int8_dequant_rows = k_int8_dequant_rows;
}

} // namespace

// Strong definitions of device/backend.c's weak hooks (the CPU build has
// only the weak ones, which refuse {device} cuda).
extern "C" int mt_cuda_backend_open(mt_backend *be, int local_rank, int gpus_per_node, mt_error *err) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1)
        return mt_errorf(err, "{device} cuda: no CUDA device is usable (%s): run on {device} cpu or on a machine with a GPU",
                         e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    if (gpus_per_node > n)
        return mt_errorf(err, "{gpus-per-node} %d, but this process sees %d GPU%s (CUDA_VISIBLE_DEVICES?): pass at most %d",
                         gpus_per_node, n, n == 1 ? "" : "s", n);
    // the node's ranks spread over its GPUs and share them when there are more ranks (host-staged collectives)
    int dev = local_rank % (gpus_per_node > 0 ? gpus_per_node : n);
    if ((e = cudaSetDevice(dev)) != cudaSuccess)
        return mt_errorf(err, "{device} cuda: cannot select GPU %d of %d for local rank %d: %s", dev, n, local_rank,
                         cudaGetErrorString(e));
    cuda_state *s = (cuda_state *)calloc(1, sizeof *s);
    if (!s) return mt_errorf(err, "{device} cuda: out of host memory for the backend state");
    int rc = mt_cuda_ctx_init(&s->ctx);
    if (rc) {
        free(s);
        return mt_errorf(err, "{device} cuda: cannot create the stream, the GEMM handle and the kernels' %zu-byte "
                              "scratch on GPU %d: %s", MT_CUDA_COL_SCRATCH * sizeof(float), dev, mt_cuda_error_string(rc));
    }
    if (cudaMalloc((void **)&s->dev_partials, MT_CUDA_SUMSQ_BLOCKS * sizeof(double)) != cudaSuccess ||
        cudaMalloc((void **)&s->dev_out, 2 * sizeof(double)) != cudaSuccess ||
        cudaStreamCreateWithFlags(&s->comm_stream, cudaStreamNonBlocking) != cudaSuccess) {
        mt_cuda_ctx_destroy(&s->ctx);
        free(s);
        return mt_errorf(err, "{device} cuda: cannot allocate the reduction buffers and the communication stream");
    }
    s->alloc.alloc = dev_alloc;
    s->alloc.free = dev_free;
    s->alloc.ctx = s;
    s->comm = mt_comm_device{s, c_is_device, c_pinned_alloc, c_pinned_free, c_event_create, c_event_destroy,
                             c_event_record, c_event_done, c_stream_wait, c_copy, (mt_comm_stream *)s->comm_stream,
                             c_stream_create, c_stream_destroy};
    const char *managed = getenv("MT_CUDA_MANAGED");
    s->managed = managed && *managed && strcmp(managed, "0") != 0;
    fill_table(&s->table);
    be->kind = MT_DEVICE_CUDA;
    be->nthreads = 1;
    be->stream = s->ctx.stream;
    be->gemm_handle = s->ctx.blas;
    be->kernels = &s->table;
    be->allocator = &s->alloc;
    be->comm_device = &s->comm;
    be->device_index = dev;
    be->device_count = n;
    return 0;
}

extern "C" void mt_cuda_backend_sync(mt_backend *be) { sync(be); }

extern "C" int mt_cuda_backend_used(mt_backend *be, size_t *used) {
    size_t free_b = 0, total_b = 0;
    sync(be);
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
    *used = total_b - free_b;
    return 0;
}

extern "C" void mt_cuda_backend_close(mt_backend *be) {
    if (be->kind != MT_DEVICE_CUDA || !be->allocator) return;
    cuda_state *s = state(be);
    sync(be);
    cudaFree(s->dev_partials);
    cudaFree(s->dev_out);
    cudaStreamSynchronize(s->comm_stream);
    cudaStreamDestroy(s->comm_stream);
    mt_cuda_ctx_destroy(&s->ctx);
    free(s);
    be->kernels = NULL;
    be->allocator = NULL;
    be->stream = be->gemm_handle = NULL;
    be->comm_device = NULL;
}
