// Token + position embeddings (cuda/kernels.h). The backward has no
// atomics and adds each gradient row in row order, the CPU's order, so the
// gradients are the CPU's bits: for the token table, a thread per (column,
// token stripe) walks all rows (their tokens staged in shared memory) and
// adds only the rows whose token falls in its stripe (token % EMB_STRIPES),
// so every (token, column) has one thread; for the position table, a thread
// per (position, column) sums its B rows.
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

#define EMB_STRIPE_Y 8                          // stripes per block (threadIdx.y)
#define EMB_STRIPES (EMB_STRIPE_Y * 8)           // stripes in all: gridDim.y = 8
#define EMB_CHUNK (MT_COL_GROUP * EMB_STRIPE_Y)  // tokens staged per pass: one per thread

// block: MT_COL_GROUP columns x EMB_STRIPE_Y stripes; grid: column groups x 8
__global__ static void embed_bwd_wte(float *dwte, const float *dout, const int32_t *tokens, int v0, int Vl, int N,
                                     int C) {
    __shared__ int tk[EMB_CHUNK];
    int c = blockIdx.x * MT_COL_GROUP + threadIdx.x, stripe = blockIdx.y * EMB_STRIPE_Y + threadIdx.y;
    int t = threadIdx.y * MT_COL_GROUP + threadIdx.x;
    for (int n0 = 0; n0 < N; n0 += EMB_CHUNK) {
        __syncthreads(); // the last chunk's tokens are read
        if (n0 + t < N) tk[t] = tokens[n0 + t] - v0;
        __syncthreads();
        int m = N - n0 < EMB_CHUNK ? N - n0 : EMB_CHUNK;
        if (c < C)
            for (int k = 0; k < m; k++) {
                int r = tk[k];
                if (r >= 0 && r < Vl && r % EMB_STRIPES == stripe) dwte[(size_t)r * C + c] += dout[(size_t)(n0 + k) * C + c];
            }
    }
}

// a thread per (position, column): the rows of that position, in order
__global__ static void embed_bwd_wpe(float *dwpe, const float *dout, int N, int T, int C, int pos0) {
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (size_t)T * C) return;
    int p = (int)(e / C), c = (int)(e % C);
    float *d = dwpe + (size_t)(pos0 + p) * C + c;
    for (int n = p; n < N; n += T) *d += dout[(size_t)n * C + c];
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
    if (C <= 0 || N <= 0) return 0;
    if (dwte)
        MT_LAUNCH(embed_bwd_wte, dim3(mt_blocks_for(C, MT_COL_GROUP), EMB_STRIPES / EMB_STRIPE_Y),
                  dim3(MT_COL_GROUP, EMB_STRIPE_Y), 0, mt_stream(c), dwte, dout, tokens, v0, Vl, N, C);
    if (dwpe) {
        size_t n = (size_t)(T < N ? T : N) * C;
        MT_LAUNCH(embed_bwd_wpe, mt_blocks_for(n, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), dwpe, dout, N, T, C,
                  pos0);
    }
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
