// Token + position embeddings (cuda/kernels.h). The backward has no
// atomics: a thread per column walks all rows in order and adds each to
// the row of its token (and position), the CPU's order, so the gradients
// are the CPU's bits; parallel over columns only (C threads), which is the
// price of determinism without sorting the tokens first.
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"
#include <limits.h>

__global__ static void embed_fwd(float *out, const int32_t *tokens, const float *wte, const float *wpe, int v0, int Vl,
                                 size_t n, int T, int C, int pos0) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    size_t row = e / C;
    int c = (int)(e % C), r = tokens[row] - v0;
    if (!wpe) { // the shard form: 0 for tokens held elsewhere
        out[e] = r >= 0 && r < Vl ? wte[(size_t)r * C + c] : 0.0f;
        return;
    }
    out[e] = wte[(size_t)r * C + c] + wpe[(size_t)(pos0 + (int)(row % T)) * C + c];
}

__global__ static void embed_fwd_16(float *out, const int32_t *tokens, int dt, const uint16_t *wte, int v0, int Vl,
                                    size_t n, int C) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    int r = tokens[e / C] - v0;
    out[e] = r >= 0 && r < Vl ? mt_dev_widen16(dt, wte[(size_t)r * C + e % C]) : 0.0f;
}

__global__ static void add_positions(float *out, const float *wpe, size_t row0, size_t n, int T, int C) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n) return;
    out[e] += wpe[((row0 + e / C) % (size_t)T) * C + e % C];
}

__global__ static void embed_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int v0, int Vl,
                                 int N, int T, int C, int pos0) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int n = 0; n < N; n++) {
        float d = dout[(size_t)n * C + c];
        int r = tokens[n] - v0;
        if (dwte && r >= 0 && r < Vl) dwte[(size_t)r * C + c] += d;
        if (dwpe) dwpe[(size_t)(pos0 + n % T) * C + c] += d;
    }
}

static int fwd(const mt_cuda_ctx *c, float *out, const int32_t *tokens, const float *wte, const float *wpe, int v0,
               int Vl, int N, int T, int C, int pos0) {
    size_t n = (size_t)N * C;
    if (n) MT_LAUNCH(embed_fwd, mt_blocks_for(n, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), out, tokens, wte, wpe,
                     v0, Vl, n, T, C, pos0);
    return mt_launch_status();
}

static int bwd(const mt_cuda_ctx *c, float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int v0,
               int Vl, int N, int T, int C, int pos0) {
    if (C > 0 && N > 0) MT_LAUNCH(embed_bwd, mt_blocks_for(C, MT_COL_THREADS), MT_COL_THREADS, 0, mt_stream(c), dwte,
                                  dwpe, dout, tokens, v0, Vl, N, T, C, pos0);
    return mt_launch_status();
}

extern "C" int mt_cuda_embed_forward(const mt_cuda_ctx *c, float *out, const int32_t *tokens, const float *wte,
                                     const float *wpe, int B, int T, int C, int pos0) {
    return fwd(c, out, tokens, wte, wpe, 0, INT_MAX, B * T, T, C, pos0);
}

extern "C" int mt_cuda_embed_backward(const mt_cuda_ctx *c, float *dwte, float *dwpe, const float *dout,
                                      const int32_t *tokens, int B, int T, int C, int pos0) {
    return bwd(c, dwte, dwpe, dout, tokens, 0, INT_MAX, B * T, T, C, pos0);
}

extern "C" int mt_cuda_embed_shard_forward(const mt_cuda_ctx *c, float *out, const int32_t *tokens, const float *wte,
                                           int v0, int Vl, int N, int C) {
    return fwd(c, out, tokens, wte, NULL, v0, Vl, N, 1, C, 0);
}

extern "C" int mt_cuda_embed_shard_backward(const mt_cuda_ctx *c, float *dwte, float *dwpe, const float *dout,
                                            const int32_t *tokens, int v0, int Vl, int B, int T, int C) {
    return bwd(c, dwte, dwpe, dout, tokens, v0, Vl, B * T, T, C, 0);
}

extern "C" int mt_cuda_embed_shard_forward_16(const mt_cuda_ctx *c, float *out, const int32_t *tokens, int dt,
                                              const uint16_t *wte, int v0, int Vl, int N, int C) {
    if (dt != 1 && dt != 2) return (int)cudaErrorInvalidValue;
    size_t n = (size_t)N * C;
    if (n) MT_LAUNCH(embed_fwd_16, mt_blocks_for(n, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), out, tokens, dt,
                     wte, v0, Vl, n, C);
    return mt_launch_status();
}

extern "C" int mt_cuda_add_positions(const mt_cuda_ctx *c, float *out, const float *wpe, size_t row0, int n_rows, int T,
                                     int C) {
    size_t n = (size_t)n_rows * C;
    if (n) MT_LAUNCH(add_positions, mt_blocks_for(n, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), out, wpe, row0,
                     n, T, C);
    return mt_launch_status();
}
