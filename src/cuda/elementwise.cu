// Element-wise kernels (cuda/kernels.h): one thread per element, the CPU
// op's arithmetic (cuda/device_math.h); the bias-gradient sums by column
// blocks of row lanes (launch_util.h: deterministic, within rounding of the
// CPU's row order).
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"
#include "cuda/philox_device.h"

#define EW_INDEX(i, n)                                          \
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; \
    if (i >= (n)) return

__global__ static void gelu_fwd(float *out, const float *inp, size_t n) {
    EW_INDEX(i, n);
    out[i] = mt_dev_gelu(inp[i]);
}

__global__ static void gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n) {
    EW_INDEX(i, n);
    dinp[i] = mt_dev_gelu_grad(inp[i]) * dout[i];
}

// out and out16 (bf16, op_to_16's rounding: mt_dev_fp32_to_bf16) each optional
__global__ static void bias_gelu_fwd(float *pre, float *out, uint16_t *out16, const float *bias, size_t n, int OC) {
    EW_INDEX(i, n);
    float x = pre[i];
    if (bias) {
        x = x + bias[i % OC];
        pre[i] = x;
    }
    float g = mt_dev_gelu(x);
    if (out) out[i] = g;
    if (out16) out16[i] = mt_dev_fp32_to_bf16(g);
}

// four elements of one row a thread (OC % 4 == 0; pre, out, bias 16-byte and out16 8-byte aligned)
__global__ static void bias_gelu_fwd_x4(float *pre, float *out, uint16_t *out16, const float *bias, size_t n4,
                                        int OC4) {
    EW_INDEX(i, n4);
    float4 x = ((const float4 *)pre)[i];
    if (bias) {
        float4 b = ((const float4 *)bias)[i % OC4];
        x.x = x.x + b.x, x.y = x.y + b.y, x.z = x.z + b.z, x.w = x.w + b.w;
        ((float4 *)pre)[i] = x;
    }
    float4 g;
    g.x = mt_dev_gelu(x.x), g.y = mt_dev_gelu(x.y), g.z = mt_dev_gelu(x.z), g.w = mt_dev_gelu(x.w);
    if (out) ((float4 *)out)[i] = g;
    if (out16) {
        ushort4 o;
        o.x = mt_dev_fp32_to_bf16(g.x), o.y = mt_dev_fp32_to_bf16(g.y);
        o.z = mt_dev_fp32_to_bf16(g.z), o.w = mt_dev_fp32_to_bf16(g.w);
        ((ushort4 *)out16)[i] = o;
    }
}

// a block of MT_COL_GROUP columns x MT_COL_LANES row lanes (launch_util.h)
__global__ static void gelu_bias_bwd(float *dpre, float *dbias, float *part, mt_col_split sp, const float *pre,
                                     const float *dout, int N, int OC) {
    __shared__ float red[MT_COL_LANES][MT_COL_GROUP + 1];
    int j = blockIdx.x * MT_COL_GROUP + threadIdx.x, r0 = blockIdx.y * sp.rows;
    int r1 = r0 + sp.rows < N ? r0 + sp.rows : N;
    float acc = 0.0f;
    if (j < OC)
        for (int n = r0 + threadIdx.y; n < r1; n += MT_COL_LANES) {
            size_t i = (size_t)n * OC + j;
            float v = mt_dev_gelu_grad(pre[i]) * dout[i];
            dpre[i] = v;
            acc += v;
        }
    acc = mt_col_lanes_sum(acc, red);
    if (dbias && j < OC && !threadIdx.y) mt_col_put(dbias, part, sp.groups, OC, j, acc);
}

__global__ static void swiglu_fwd(float *out, const float *gate_up, size_t n, int F) {
    EW_INDEX(i, n);
    size_t row = i / F, j = i % F;
    const float *g = gate_up + row * 2 * F;
    float si;
    (void)mt_dev_sig_silu(g[j], &si);
    out[i] = si * g[F + j];
}

__global__ static void swiglu_bwd(float *dgate_up, const float *dout, const float *gate_up, size_t n, int F) {
    EW_INDEX(i, n);
    size_t row = i / F, j = i % F;
    const float *g = gate_up + row * 2 * F;
    float *dg = dgate_up + row * 2 * F;
    float si, s = mt_dev_sig_silu(g[j], &si), dj = dout[i];
    float gj = g[j], uj = g[F + j];
    dg[j] = dj * uj * s * (1.0f + gj * (1.0f - s));
    dg[F + j] = dj * si;
}

__global__ static void rope(float *x, size_t n, int T, int nh, int h, size_t ld, const float *cos_t,
                            const float *sin_t, float sgn) {
    EW_INDEX(e, n); // e = (row, head, j)
    int j = (int)(e % h);
    size_t rk = e / h;
    int k = (int)(rk % nh);
    size_t i = rk / nh;
    size_t tj = (size_t)(i % T) * h + j;
    float *a = x + i * ld + (size_t)k * 2 * h, *b = a + h;
    float sj = sgn * sin_t[tj], cj = cos_t[tj], aj = a[j], bj = b[j];
    a[j] = aj * cj - bj * sj;
    b[j] = bj * cj + aj * sj;
}

__global__ static void dropout_rows(float *x, mt_dev_dropout d, const uint64_t *sample_ids, size_t row0, size_t n,
                                    int T, int C) {
    EW_INDEX(e, n);
    size_t r = row0 + e / C;
    x[e] *= mt_dev_dropout_scale(&d, sample_ids[r / T], (uint32_t)(r % T), 0, (uint32_t)(e % C));
}

__global__ static void add(float *out, const float *a, const float *b, size_t n) {
    EW_INDEX(i, n);
    out[i] = a[i] + b[i];
}

__global__ static void residual_add(float *res, const float *x, const float *branch, const float *bias, size_t n,
                                    int C) {
    EW_INDEX(i, n);
    res[i] = x[i] + (branch[i] + bias[i % C]);
}

__global__ static void accumulate(float *acc, const float *x, size_t n) {
    EW_INDEX(i, n);
    acc[i] += x[i];
}

__global__ static void scale(float *x, float s, size_t n) {
    EW_INDEX(i, n);
    x[i] *= s;
}

__global__ static void to_16(int dt, uint16_t *dst, const float *src, size_t n) {
    EW_INDEX(i, n);
    dst[i] = mt_dev_narrow16(dt, src[i]);
}

// four elements a thread, one 16-byte load and one 8-byte store (src 16-, dst 8-byte aligned, n4 = n / 4)
__global__ static void to_16_x4(int dt, uint16_t *dst, const float *src, size_t n4) {
    EW_INDEX(i, n4);
    float4 v = ((const float4 *)src)[i];
    ushort4 o;
    o.x = mt_dev_narrow16(dt, v.x);
    o.y = mt_dev_narrow16(dt, v.y);
    o.z = mt_dev_narrow16(dt, v.z);
    o.w = mt_dev_narrow16(dt, v.w);
    ((ushort4 *)dst)[i] = o;
}

__global__ static void from_16(int dt, float *dst, const uint16_t *src, size_t n) {
    EW_INDEX(i, n);
    dst[i] = mt_dev_widen16(dt, src[i]);
}

// every thread that sees a non-finite value stores the same 1: no atomics needed
__global__ static void nonfinite(int *flag, const float *x, size_t n) {
    EW_INDEX(i, n);
    if ((mt_dev_f32_bits(x[i]) & 0x7f800000u) == 0x7f800000u) *flag = 1;
}

#define EW_LAUNCH(kernel, n, ...)                                                                       \
    do {                                                                                                \
        if ((n) > 0) MT_LAUNCH(kernel, mt_blocks_for((n), MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), __VA_ARGS__); \
        return mt_launch_status();                                                                      \
    } while (0)

extern "C" int mt_cuda_gelu_forward(const mt_cuda_ctx *c, float *out, const float *inp, size_t n) {
    EW_LAUNCH(gelu_fwd, n, out, inp, n);
}

extern "C" int mt_cuda_gelu_backward(const mt_cuda_ctx *c, float *dinp, const float *inp, const float *dout, size_t n) {
    EW_LAUNCH(gelu_bwd, n, dinp, inp, dout, n);
}

extern "C" int mt_cuda_bias_gelu_forward(const mt_cuda_ctx *c, float *pre, float *out, uint16_t *out16,
                                         const float *bias, int N, int OC) {
    size_t n = (size_t)N * OC;
    if (OC % 4 == 0 && ((uintptr_t)pre | (uintptr_t)out | (uintptr_t)bias) % 16 == 0 && (uintptr_t)out16 % 8 == 0)
        EW_LAUNCH(bias_gelu_fwd_x4, n / 4, pre, out, out16, bias, n / 4, OC / 4);
    EW_LAUNCH(bias_gelu_fwd, n, pre, out, out16, bias, n, OC);
}

extern "C" int mt_cuda_gelu_bias_backward(const mt_cuda_ctx *c, float *dpre, float *dbias, const float *pre,
                                          const float *dout, int N, int OC) {
    if (OC <= 0 || N <= 0) return 0;
    mt_col_split sp = mt_col_split_for(N, OC, 1);
    MT_LAUNCH(gelu_bias_bwd, dim3(mt_blocks_for(OC, MT_COL_GROUP), sp.groups), dim3(MT_COL_GROUP, MT_COL_LANES), 0,
              mt_stream(c), dpre, dbias, c->col_scratch, sp, pre, dout, N, OC);
    mt_col_finish(c, dbias, c->col_scratch, sp.groups, OC);
    return mt_launch_status();
}

extern "C" int mt_cuda_swiglu_forward(const mt_cuda_ctx *c, float *out, const float *gate_up, int N, int F) {
    size_t n = (size_t)N * F;
    EW_LAUNCH(swiglu_fwd, n, out, gate_up, n, F);
}

extern "C" int mt_cuda_swiglu_backward(const mt_cuda_ctx *c, float *dgate_up, const float *dout, const float *gate_up,
                                       int N, int F) {
    size_t n = (size_t)N * F;
    EW_LAUNCH(swiglu_bwd, n, dgate_up, dout, gate_up, n, F);
}

extern "C" int mt_cuda_rope_apply(const mt_cuda_ctx *c, float *x, int N, int T, int nh, int HS, size_t ld,
                                  const float *cos_t, const float *sin_t, int inverse) {
    int h = HS / 2;
    size_t n = (size_t)N * nh * h;
    float sgn = inverse ? -1.0f : 1.0f;
    EW_LAUNCH(rope, n, x, n, T, nh, h, ld, cos_t, sin_t, sgn);
}

extern "C" int mt_cuda_dropout_rows(const mt_cuda_ctx *c, float *x, const mt_dropout *d, const uint64_t *sample_ids,
                                    size_t row0, int n_rows, int T, int C) {
    if (d->p <= 0.0f) return 0;
    mt_dev_dropout dd = mt_dev_dropout_make(d->p, d->seed, d->step, d->layer, d->site);
    size_t n = (size_t)n_rows * C;
    EW_LAUNCH(dropout_rows, n, x, dd, sample_ids, row0, n, T, C);
}

extern "C" int mt_cuda_add(const mt_cuda_ctx *c, float *out, const float *a, const float *b, size_t n) {
    EW_LAUNCH(add, n, out, a, b, n);
}

extern "C" int mt_cuda_residual_add(const mt_cuda_ctx *c, float *res, const float *x, const float *branch,
                                    const float *bias, int N, int C) {
    size_t n = (size_t)N * C;
    if (!bias) EW_LAUNCH(add, n, res, x, branch, n);
    EW_LAUNCH(residual_add, n, res, x, branch, bias, n, C);
}

extern "C" int mt_cuda_accumulate(const mt_cuda_ctx *c, float *acc, const float *x, size_t n) {
    EW_LAUNCH(accumulate, n, acc, x, n);
}

extern "C" int mt_cuda_zero(const mt_cuda_ctx *c, float *x, size_t n) {
    return n ? (int)cudaMemsetAsync(x, 0, n * sizeof(float), mt_stream(c)) : 0;
}

extern "C" int mt_cuda_scale(const mt_cuda_ctx *c, float *x, float s, size_t n) { EW_LAUNCH(scale, n, x, s, n); }

extern "C" int mt_cuda_convert_to_16(const mt_cuda_ctx *c, int dt, uint16_t *dst, const float *src, size_t n) {
    // the vector form where the pointers allow it, the scalar form for the tail (and unaligned buffers)
    size_t n4 = ((uintptr_t)src % 16 == 0 && (uintptr_t)dst % 8 == 0) ? n / 4 : 0, tail = n - 4 * n4;
    if (n4) MT_LAUNCH(to_16_x4, mt_blocks_for(n4, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), dt, dst, src, n4);
    if (tail) MT_LAUNCH(to_16, mt_blocks_for(tail, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), dt, dst + 4 * n4,
                        src + 4 * n4, tail);
    return mt_launch_status();
}

extern "C" int mt_cuda_convert_from_16(const mt_cuda_ctx *c, int dt, float *dst, const uint16_t *src, size_t n) {
    EW_LAUNCH(from_16, n, dt, dst, src, n);
}

extern "C" int mt_cuda_nonfinite(const mt_cuda_ctx *c, int *flag, const float *x, size_t n) {
    EW_LAUNCH(nonfinite, n, flag, x, n);
}
