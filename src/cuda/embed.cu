// Token + position embeddings (cuda/kernels.h). The backward has no
// atomics and adds each gradient row in row order, the CPU's order, so the
// gradients are the CPU's bits. The token table: the rows are cut into
// chunks of EMB_SORT_ROWS; a block per chunk sorts the chunk's (token, row)
// keys in shared memory, then, chunk after chunk in row order, a thread per
// (run of equal tokens, column) adds the run's rows in row order onto the
// table -- the CPU's sequence of fp32 additions for every (token, column),
// with work proportional to the rows rather than rows x stripes. Any N: the
// chunks only bound the shared memory. The position table: a thread per
// (position, column) sums its B rows.
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

/* A row's sort key: (token - v0) << 32 | row, so sorted keys list each token's
 * rows in row order. EMB_NO_KEY (padding, tokens outside [v0, v0 + Vl)) sorts
 * last and its high half is no token: it is never added. */
typedef unsigned long long emb_key;
#define EMB_NO_KEY (~0ULL)
#define EMB_SORT_ROWS 4096   // rows a block sorts: 32 KiB of keys in (static) shared memory
#define EMB_SORT_THREADS 1024
#define EMB_RUN_Y 8          // sorted positions per block of the run kernel (x: MT_COL_GROUP columns)
#define EMB_RUN_UNROLL 16    // rows of a run loaded at once (the additions stay in order): a
                             // long run (a frequent token) is a chain of loads, 16 in flight

// block b: the keys of rows [n0 + b * EMB_SORT_ROWS, + EMB_SORT_ROWS) (padded with
// EMB_NO_KEY past N), bitonic-sorted, into out[b * EMB_SORT_ROWS, + EMB_SORT_ROWS)
__global__ static void __launch_bounds__(EMB_SORT_THREADS)
    embed_sort_rows(emb_key *out, const int32_t *tokens, int v0, int Vl, int n0, int N) {
    __shared__ emb_key k[EMB_SORT_ROWS];
    int base = n0 + (int)blockIdx.x * EMB_SORT_ROWS;
    for (int i = threadIdx.x; i < EMB_SORT_ROWS; i += EMB_SORT_THREADS) {
        emb_key v = EMB_NO_KEY;
        if (i < N - base) {
            int r = tokens[base + i] - v0;
            if (r >= 0 && r < Vl) v = (emb_key)(unsigned)r << 32 | (unsigned)(base + i);
        }
        k[i] = v;
    }
    for (int size = 2; size <= EMB_SORT_ROWS; size <<= 1)
        for (int j = size >> 1; j > 0; j >>= 1) {
            __syncthreads(); // the last pass's swaps are written
            for (int p = threadIdx.x; p < EMB_SORT_ROWS / 2; p += EMB_SORT_THREADS) {
                int i = 2 * p - (p & (j - 1)), l = i + j; // the pair (i, i + j), bit j of i clear
                emb_key a = k[i], b = k[l];
                if ((a > b) == ((i & size) == 0)) { // ascending where bit size of i is clear
                    k[i] = b;
                    k[l] = a;
                }
            }
        }
    __syncthreads();
    for (int i = threadIdx.x; i < EMB_SORT_ROWS; i += EMB_SORT_THREADS) out[(size_t)blockIdx.x * EMB_SORT_ROWS + i] = k[i];
}

// One sorted chunk ks[EMB_SORT_ROWS]: the thread of (sorted position s, column c)
// where s starts a run of one token adds the run's rows onto dwte one at a time,
// in row order, as the CPU does (not their sum: fp32 addition does not regroup).
// block: MT_COL_GROUP columns x EMB_RUN_Y positions
__global__ static void embed_add_runs(float *dwte, const float *dout, const emb_key *ks, int C) {
    int c = blockIdx.x * MT_COL_GROUP + threadIdx.x, s = blockIdx.y * EMB_RUN_Y + threadIdx.y;
    if (c >= C || s >= EMB_SORT_ROWS) return;
    emb_key k = ks[s];
    unsigned tok = (unsigned)(k >> 32);
    if (k == EMB_NO_KEY || (s > 0 && (unsigned)(ks[s - 1] >> 32) == tok)) return; // padding, or inside a run
    float *g = dwte + (size_t)tok * C + c, d = *g;
    for (;;) { // a run's keys are contiguous: the first key of another token ends it
        float v[EMB_RUN_UNROLL];
        int m = 0;
        MT_UNROLL
        for (int u = 0; u < EMB_RUN_UNROLL; u++) {
            emb_key q = s + u < EMB_SORT_ROWS ? ks[s + u] : EMB_NO_KEY;
            bool in = (unsigned)(q >> 32) == tok;
            v[u] = in ? dout[(size_t)(unsigned)q * C + c] : 0.0f;
            m += in;
        }
        MT_UNROLL
        for (int u = 0; u < EMB_RUN_UNROLL; u++)
            if (u < m) d += v[u];
        if (m < EMB_RUN_UNROLL) break;
        s += EMB_RUN_UNROLL;
    }
    *g = d;
}

/* The token table's gradient. The keys live in the context's col_scratch: only
 * the column-sum kernels use it, on this same stream, so they never overlap. */
#define EMB_SCRATCH_CHUNKS ((int)(MT_CUDA_COL_SCRATCH * sizeof(float) / (sizeof(emb_key) * EMB_SORT_ROWS)))
static_assert(EMB_SCRATCH_CHUNKS >= 1, "the column scratch holds at least one sorted chunk");
static void embed_bwd_wte(const mt_cuda_ctx *c, float *dwte, const float *dout, const int32_t *tokens, int v0, int Vl,
                          int N, int C) {
    emb_key *keys = (emb_key *)c->col_scratch;
    int chunks = (N + EMB_SORT_ROWS - 1) / EMB_SORT_ROWS;
    for (int b0 = 0; b0 < chunks; b0 += EMB_SCRATCH_CHUNKS) {
        int nb = chunks - b0 < EMB_SCRATCH_CHUNKS ? chunks - b0 : EMB_SCRATCH_CHUNKS;
        MT_LAUNCH(embed_sort_rows, nb, EMB_SORT_THREADS, 0, mt_stream(c), keys, tokens, v0, Vl, b0 * EMB_SORT_ROWS, N);
        for (int b = 0; b < nb; b++) { // in row order: each chunk adds after the ones before
            int rows = N - (b0 + b) * EMB_SORT_ROWS;
            if (rows > EMB_SORT_ROWS) rows = EMB_SORT_ROWS; // the sorted positions past them are padding
            MT_LAUNCH(embed_add_runs, dim3(mt_blocks_for(C, MT_COL_GROUP), mt_blocks_for(rows, EMB_RUN_Y)),
                      dim3(MT_COL_GROUP, EMB_RUN_Y), 0, mt_stream(c), dwte, dout, keys + (size_t)b * EMB_SORT_ROWS, C);
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
    if (dwte) embed_bwd_wte(c, dwte, dout, tokens, v0, Vl, N, C);
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
