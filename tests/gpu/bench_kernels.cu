// The kernels of one GPT-2 124M bf16 training step, each timed alone on the
// GPU at the step's shapes (B 16, T 1024: N 16384 rows, C 768, 12 heads),
// with CUDA events over repeated launches after a warm-up: milliseconds per
// launch and TFLOP/s (GEMMs, attention) or GB/s moved (the rest), and the
// step's total for each kernel (launches per step x time). What the device
// run's profile part prints beside `meshtrain train --profile`, so that the
// slowest kernels are named without a profiler (ncu reads no counters on
// some of these machines). Needs a GPU: exit 77 without one.
#include "cuda/compat.h"
#include "cuda/kernels.h"
#include "cuda/gemm.h"
extern "C" {
#include "core/dtype.h"
}
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call)                                                                                  \
    do {                                                                                          \
        int e_ = (int)(call);                                                                     \
        if (e_) {                                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, mt_cuda_error_string(e_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static mt_cuda_ctx ctx;
static double total_ms;

static void *dalloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "FAIL: cudaMalloc %zu bytes\n", bytes);
        exit(1);
    }
    cudaMemset(p, 0, bytes);
    return p;
}

// fills with small values (0.01 x a pattern), fp32
__global__ static void fill(float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 0.01f * (float)((i * 2654435761u) % 1000) / 1000.0f;
}
// token ids with text's skew: log-uniform over [1, V] (the most frequent ~6% of rows, as "the" or
// "," in English text), since the embedding backward's cost depends on how often tokens repeat
__global__ static void fill_tokens(int32_t *tok, int n, int V) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float u = (float)(((unsigned)i * 2654435761u) >> 8) / 16777216.0f;
    int t = (int)expf(u * logf((float)V)) - 1;
    tok[i] = t < 0 ? 0 : t >= V ? V - 1 : t;
}
static float *dfloats(size_t n) {
    float *p = (float *)dalloc(n * 4);
    fill<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)ctx.stream>>>(p, n);
    return p;
}

#define TIME(name, per_step, flops, bytes, call)                                                             \
    do {                                                                                                     \
        for (int w_ = 0; w_ < 2; w_++) CK(call);                                                                \
        cudaEvent_t a_, b_;                                                                                    \
        cudaEventCreate(&a_);                                                                                 \
        cudaEventCreate(&b_);                                                                                 \
        const int reps_ = 10;                                                                                 \
        cudaEventRecord(a_, (cudaStream_t)ctx.stream);                                                        \
        for (int r_ = 0; r_ < reps_; r_++) CK(call);                                                             \
        cudaEventRecord(b_, (cudaStream_t)ctx.stream);                                                        \
        CK(cudaEventSynchronize(b_));                                                                         \
        float ms_ = 0;                                                                                        \
        cudaEventElapsedTime(&ms_, a_, b_);                                                                     \
        ms_ /= reps_;                                                                                          \
        total_ms += ms_ * (per_step);                                                                         \
        printf("%-44s %8.3f ms x %3d = %8.2f ms/step  %7.1f TFLOP/s  %7.0f GB/s\n", name, ms_, (int)(per_step), \
               ms_ * (per_step), (flops) / (ms_ * 1e9), (bytes) / (ms_ * 1e6));                                 \
        cudaEventDestroy(a_);                                                                                 \
        cudaEventDestroy(b_);                                                                                 \
    } while (0)

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    CK(mt_cuda_ctx_init(&ctx));
    const int B = 16, T = 1024, C = 768, NH = 12, HS = 64, L = 12, V = 50304, N = B * T;
    const double Nd = N;
    // GEMM operands: bf16 activations and weights, fp32 outputs (the bf16 linear layers)
    uint16_t *x16 = (uint16_t *)dalloc((size_t)N * 4 * C * 2), *w16 = (uint16_t *)dalloc((size_t)V * C * 2);
    uint16_t *d16 = (uint16_t *)dalloc((size_t)N * V * 2); // output gradients, the head's (N x V) the largest
    float *out = dfloats((size_t)N * V), *dw = dfloats((size_t)V * C), *dinp = dfloats((size_t)N * 4 * C);
    float *bias = dfloats(4 * C), *dbias = dfloats(4 * C);
    struct { const char *name; int in, oc, per_step; } lin[] = {
        {"qkv (768 -> 2304)", C, 3 * C, L}, {"attn proj (768 -> 768)", C, C, L}, {"fc (768 -> 3072)", C, 4 * C, L},
        {"mlp proj (3072 -> 768)", 4 * C, C, L}, {"lm head (768 -> 50304)", C, V, 1}};
    printf("GPT-2 124M, B %d T %d: each kernel alone (10 launches after 2 warm-ups, CUDA events)\n", B, T);
    for (auto &l : lin) {
        char nm[96];
        double f = 2.0 * Nd * l.in * l.oc;
        snprintf(nm, sizeof nm, "matmul bf16 fwd %s", l.name);
        TIME(nm, l.per_step, f, 2.0 * Nd * l.in + 2.0 * l.in * l.oc + 4.0 * Nd * l.oc,
             mt_cuda_matmul_forward_bf16(&ctx, out, x16, w16, l.oc <= 4 * C ? bias : NULL, N, l.in, l.oc));
        snprintf(nm, sizeof nm, "matmul bf16 bwd %s", l.name);
        TIME(nm, l.per_step, 2 * f, 4.0 * Nd * l.oc + 4.0 * Nd * l.in + 4.0 * l.in * l.oc,
             mt_cuda_matmul_backward_bf16(&ctx, dinp, dw, l.oc <= 4 * C ? dbias : NULL, d16, x16, w16, N, l.in, l.oc, 1));
    }
    // a square bf16 GEMM: the ceiling of this wrapper
    uint16_t *sq16 = (uint16_t *)dalloc((size_t)8192 * 8192 * 2);
    TIME("gemm bf16 8192^3 (ceiling)", 0, 2.0 * 8192 * 8192 * 8192, 0.0,
         mt_cuda_gemm(&ctx, 'N', 'N', 8192, 8192, 8192, 1.0f, sq16, MT_CUDA_BF16, 8192, 0, sq16, MT_CUDA_BF16, 8192, 0,
                      0.0f, out, MT_CUDA_F32, 8192, 0, 1));
    // attention, fp32 operands: full fp32 and TF32
    float *qkv = dfloats((size_t)N * 3 * C), *ao = dfloats((size_t)N * C), *lse = dfloats((size_t)B * NH * T);
    float *dqkv = dfloats((size_t)N * 3 * C), *dao = dfloats((size_t)N * C);
    float *scratch = (float *)dalloc(mt_cuda_attention_scratch_floats(B, T, NH, NH, HS) * 4);
    double af = 4.0 * B * NH * (double)T * T * HS; // QK^T and PV over the full T x T (the kernels compute it all)
    mt_cuda_attn_dropout nod;
    memset(&nod, 0, sizeof nod);
    for (int t = 0; t < 2; t++) {
        mt_cuda_ctx c2 = ctx;
        c2.tf32 = t;
        char nm[96];
        snprintf(nm, sizeof nm, "attention fwd (%s)", t ? "tf32" : "fp32");
        TIME(nm, 0, af, 0.0, mt_cuda_attention_forward_gqa(&c2, ao, lse, qkv, B, T, NH, NH, HS, &nod, scratch));
        snprintf(nm, sizeof nm, "attention bwd (%s)", t ? "tf32" : "fp32");
        TIME(nm, 0, 2.5 * af, 0.0,
             mt_cuda_attention_backward_gqa(&c2, dqkv, dao, qkv, ao, lse, B, T, NH, NH, HS, &nod, scratch));
    }
    // the tensor-core flash forms (bf16 mixed precision's; the scalar flash form, 38 ms / 334 ms here on an
    // H200, is no longer timed): WMMA tiles and register fragments (the one a step uses counted per step)
    float *ws = dfloats(mt_cuda_attention_mma_workspace_bytes(B, T, NH, NH, HS) / sizeof(float) + 1);
    TIME("attention fwd (bf16 mma registers)", L, af, 0.0,
         mt_cuda_attention_mma_forward_gqa(&ctx, ao, lse, qkv, B, T, NH, NH, HS, &nod, ws));
    TIME("attention bwd (bf16 mma registers)", L, 2.5 * af, 0.0,
         mt_cuda_attention_mma_backward_gqa(&ctx, dqkv, dao, qkv, ao, lse, B, T, NH, NH, HS, &nod, ws));
    // row and column kernels
    float *x = dfloats((size_t)N * C), *y = dfloats((size_t)N * C), *mean = dfloats(N), *rstd = dfloats(N);
    float *w = dfloats(C), *b = dfloats(C), *gw = dfloats(C), *gb = dfloats(C), *res = dfloats((size_t)N * C);
    double act = 4.0 * Nd * C;
    TIME("layernorm fwd", 2 * L, 0.0, 2 * act, mt_cuda_layernorm_forward(&ctx, y, mean, rstd, x, w, b, N, C));
    TIME("residual + layernorm fwd", L, 0.0, 4 * act,
         mt_cuda_residual_layernorm_forward(&ctx, res, y, mean, rstd, x, y, b, w, b, N, C));
    TIME("layernorm bwd", 2 * L + 1, 0.0, 4 * act,
         mt_cuda_layernorm_backward(&ctx, dinp, gw, gb, y, x, w, mean, rstd, N, C));
    float *pre = dfloats((size_t)N * 4 * C), *g = dfloats((size_t)N * 4 * C);
    TIME("bias + gelu fwd", L, 0.0, 3 * 4 * act, mt_cuda_bias_gelu_forward(&ctx, pre, g, NULL, bias, N, 4 * C));
    uint16_t *g16 = (uint16_t *)dalloc((size_t)N * 4 * C * sizeof(uint16_t));
    TIME("bias + gelu fwd, bf16 output only (lossless)", 0, 0.0, 10.0 * Nd * 4 * C,
         mt_cuda_bias_gelu_forward(&ctx, pre, NULL, g16, bias, N, 4 * C));
    TIME("gelu + bias bwd", L, 0.0, 3 * 4 * act, mt_cuda_gelu_bias_backward(&ctx, g, dbias, pre, dinp, N, 4 * C));
    int32_t *tok = (int32_t *)dalloc((size_t)N * 4), *tok0 = (int32_t *)dalloc((size_t)N * 4); // tok0: all token 0
    fill_tokens<<<(N + 255) / 256, 256, 0, (cudaStream_t)ctx.stream>>>(tok, N, 50257);
    TIME("softmax + xent (bf16 dlogits)", 1, 0.0, 6.0 * Nd * V,
         mt_cuda_softmax_xent_bf16(&ctx, out, d16, mean /* N losses */, tok, N, 50257, V, 1.0f / N));
    float *wte = dfloats((size_t)V * C), *wpe = dfloats((size_t)T * C);
    TIME("embed fwd", 1, 0.0, 3 * act, mt_cuda_embed_forward(&ctx, x, tok, wte, wpe, B, T, C, 0));
    TIME("embed bwd", 1, 0.0, 3 * act, mt_cuda_embed_backward(&ctx, wte, wpe, x, tok, B, T, C, 0));
    TIME("embed bwd, every row one token (worst case)", 0, 0.0, 3 * act,
         mt_cuda_embed_backward(&ctx, wte, wpe, x, tok0, B, T, C, 0));
    TIME("convert fp32 -> bf16 (N x C)", 8 * L, 0.0, 6.0 * Nd * C, mt_cuda_convert_to_16(&ctx, MT_BF16, x16, x, (size_t)N * C));
    printf("sum of the timed kernels per step: %.1f ms\n", total_ms);
    mt_cuda_ctx_destroy(&ctx);
    return 0;
}
