// LayerNorm and RMSNorm (cuda/kernels.h): forward one block per row (the
// statistics by mt_block_sum's fixed tree), backward's dinp one block per
// row -- or, for rows of 4k floats at 16-byte aligned addresses, a warp a
// row with the row in registers (the warp forms, statistics by shuffles);
// the weight/bias gradients by column blocks of row lanes (launch_util.h:
// deterministic, within rounding of the CPU's row order).
#include "cuda/kernels.h"
#include "cuda/launch_util.h"

#define LN_EPS 1e-5f

// One row: res (if x) = x + (branch + bias) first; then the LayerNorm of the row.
__global__ static void layernorm_fwd(float *res, float *out, float *mean, float *rstd, const float *x,
                                     const float *branch, const float *branch_bias, const float *inp, const float *w,
                                     const float *b, int C) {
    __shared__ float red[MT_ROW_THREADS];
    size_t row = blockIdx.x;
    const float *xi = inp + row * C;
    if (res) { // fused residual: this thread's columns of res, read back only by this thread
        float *r = res + row * C;
        const float *a = x + row * C, *br = branch + row * C;
        for (int j = threadIdx.x; j < C; j += blockDim.x) r[j] = branch_bias ? a[j] + (br[j] + branch_bias[j]) : a[j] + br[j];
        xi = r;
    }
    float s = 0.0f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) s += xi[j];
    float m = mt_block_sum(s, red) / (float)C;
    float v = 0.0f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        float d = xi[j] - m;
        v += d * d;
    }
    float rs = 1.0f / sqrtf(mt_block_sum(v, red) / (float)C + LN_EPS);
    float *o = out + row * C;
    for (int j = threadIdx.x; j < C; j += blockDim.x) o[j] = (xi[j] - m) * rs * w[j] + b[j];
    if (threadIdx.x == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = rs;
    }
}

/* The same for rows of C = 4k floats, every pointer 16-byte aligned: a warp a row (MT_ROW_WARPS rows a
 * block), the row in the lanes' registers as float4s (lane l holds float4s l, l + 32, ..: V4 of them, C <=
 * 128 V4), both sums by warp shuffles; one read of the row instead of three, no block barriers. The
 * arithmetic per element is the block form's; the sums' order differs (within rounding of each other). */
template <int V4>
__global__ static void layernorm_fwd_warp(float *res, float *out, float *mean, float *rstd, const float *x,
                                          const float *branch, const float *branch_bias, const float *inp,
                                          const float *w, const float *b, int N, int C) {
    const int lane = threadIdx.x % 32, C4 = C / 4;
    const size_t row = (size_t)blockIdx.x * MT_ROW_WARPS + threadIdx.x / 32;
    if (row >= (size_t)N) return;
    float4 v[V4];
    float s = 0.0f;
MT_UNROLL
    for (int k = 0; k < V4; k++) {
        const int c4 = lane + 32 * k;
        v[k].x = v[k].y = v[k].z = v[k].w = 0.0f;
        if (c4 >= C4) continue;
        const size_t i = row * C4 + c4;
        if (res) { // fused residual: res = x + (branch + bias)
            float4 a = ((const float4 *)x)[i], br = ((const float4 *)branch)[i];
            if (branch_bias) {
                float4 bb = ((const float4 *)branch_bias)[c4];
                br.x += bb.x, br.y += bb.y, br.z += bb.z, br.w += bb.w;
            }
            a.x += br.x, a.y += br.y, a.z += br.z, a.w += br.w;
            ((float4 *)res)[i] = a;
            v[k] = a;
        } else v[k] = ((const float4 *)inp)[i];
        s += v[k].x + v[k].y + v[k].z + v[k].w;
    }
    const float m = mt_warp_sum(s) / (float)C;
    float q = 0.0f;
MT_UNROLL
    for (int k = 0; k < V4; k++) {
        if (lane + 32 * k >= C4) continue;
        float dx = v[k].x - m, dy = v[k].y - m, dz = v[k].z - m, dw = v[k].w - m;
        q += dx * dx + dy * dy + dz * dz + dw * dw;
    }
    const float rs = 1.0f / sqrtf(mt_warp_sum(q) / (float)C + LN_EPS);
MT_UNROLL
    for (int k = 0; k < V4; k++) {
        const int c4 = lane + 32 * k;
        if (c4 >= C4) continue;
        const float4 wk = ((const float4 *)w)[c4], bk = ((const float4 *)b)[c4];
        float4 o;
        o.x = (v[k].x - m) * rs * wk.x + bk.x, o.y = (v[k].y - m) * rs * wk.y + bk.y;
        o.z = (v[k].z - m) * rs * wk.z + bk.z, o.w = (v[k].w - m) * rs * wk.w + bk.w;
        ((float4 *)out)[row * C4 + c4] = o;
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = rs;
    }
}

/* The warp forms' float4s a lane for C: 1, 2, 4, 6, 8, 12 or 16 (C <= 128 of them); 0 where C or an
 * address rules the warp form out (the block form then runs). */
static int warp_v4(int C, uintptr_t addresses) {
    if (C <= 0 || C % 4 || addresses % 16 || C > 128 * 16) return 0;
    const int need = (C + 127) / 128, sizes[] = {1, 2, 4, 6, 8, 12, 16};
    for (int v : sizes)
        if (need <= v) return v;
    return 0;
}
// a warp-form kernel launched for V4 = v (one of warp_v4's sizes), MT_ROW_WARPS rows a block
#define MT_WARP_ROWS_LAUNCH(kernel, v, N, c, ...)                                                              \
    do {                                                                                                      \
        dim3 grid_(mt_blocks_for((size_t)(N), MT_ROW_WARPS)), block_(32 * MT_ROW_WARPS);                      \
        switch (v) {                                                                                          \
        case 1: MT_LAUNCH(kernel<1>, grid_, block_, 0, mt_stream(c), __VA_ARGS__); break;                     \
        case 2: MT_LAUNCH(kernel<2>, grid_, block_, 0, mt_stream(c), __VA_ARGS__); break;                     \
        case 4: MT_LAUNCH(kernel<4>, grid_, block_, 0, mt_stream(c), __VA_ARGS__); break;                     \
        case 6: MT_LAUNCH(kernel<6>, grid_, block_, 0, mt_stream(c), __VA_ARGS__); break;                     \
        case 8: MT_LAUNCH(kernel<8>, grid_, block_, 0, mt_stream(c), __VA_ARGS__); break;                     \
        case 12: MT_LAUNCH(kernel<12>, grid_, block_, 0, mt_stream(c), __VA_ARGS__); break;                   \
        default: MT_LAUNCH(kernel<16>, grid_, block_, 0, mt_stream(c), __VA_ARGS__); break;                   \
        }                                                                                                     \
    } while (0)

/* the warp form's launch where C and the pointers allow it (0 launched, 1 not: use the block form) */
static int layernorm_fwd_warp_launch(const mt_cuda_ctx *c, float *res, float *out, float *mean, float *rstd,
                                     const float *x, const float *branch, const float *branch_bias, const float *inp,
                                     const float *w, const float *b, int N, int C) {
    const int v = warp_v4(C, (uintptr_t)res | (uintptr_t)out | (uintptr_t)x | (uintptr_t)branch |
                                 (uintptr_t)branch_bias | (uintptr_t)inp | (uintptr_t)w | (uintptr_t)b);
    if (!v) return 1;
    MT_WARP_ROWS_LAUNCH(layernorm_fwd_warp, v, N, c, res, out, mean, rstd, x, branch, branch_bias, inp, w, b, N, C);
    return 0;
}

__global__ static void layernorm_bwd_rows(float *dinp, const float *dout, const float *inp, const float *w,
                                          const float *mean, const float *rstd, int C) {
    __shared__ float red[MT_ROW_THREADS];
    size_t row = blockIdx.x;
    const float *x = inp + row * C, *d = dout + row * C;
    float m = mean[row], r = rstd[row], sg = 0.0f, sgx = 0.0f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        float xh = (x[j] - m) * r, g = d[j] * w[j];
        sg += g;
        sgx += g * xh;
    }
    sg = mt_block_sum(sg, red) / (float)C;
    sgx = mt_block_sum(sgx, red) / (float)C;
    float *di = dinp + row * C;
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        float xh = (x[j] - m) * r;
        di[j] += r * (d[j] * w[j] - sg - xh * sgx);
    }
}

/* dinp of rows of C = 4k floats (aligned) by a warp a row, x-hat and dout w in registers: LayerNorm's, or
 * with mean NULL RMSNorm's (x-hat = x r, no mean term: the same operations with m and the mean of g at 0,
 * which change no bit) */
template <int V4>
__global__ static void norm_bwd_rows_warp(float *dinp, const float *dout, const float *inp, const float *w,
                                          const float *mean, const float *rstd, int N, int C) {
    const int lane = threadIdx.x % 32, C4 = C / 4;
    const size_t row = (size_t)blockIdx.x * MT_ROW_WARPS + threadIdx.x / 32;
    if (row >= (size_t)N) return;
    const float m = mean ? mean[row] : 0.0f, r = rstd[row];
    float4 xh[V4] = {}, g[V4] = {}; // (x - m) r and dout w
    float sg = 0.0f, sgx = 0.0f;
MT_UNROLL
    for (int k = 0; k < V4; k++) {
        const int c4 = lane + 32 * k;
        if (c4 >= C4) continue;
        const float4 x = ((const float4 *)inp)[row * C4 + c4], d = ((const float4 *)dout)[row * C4 + c4],
                     wk = ((const float4 *)w)[c4];
        xh[k].x = (x.x - m) * r, xh[k].y = (x.y - m) * r, xh[k].z = (x.z - m) * r, xh[k].w = (x.w - m) * r;
        g[k].x = d.x * wk.x, g[k].y = d.y * wk.y, g[k].z = d.z * wk.z, g[k].w = d.w * wk.w;
        sg += g[k].x + g[k].y + g[k].z + g[k].w;
        sgx += g[k].x * xh[k].x + g[k].y * xh[k].y + g[k].z * xh[k].z + g[k].w * xh[k].w;
    }
    sg = mean ? mt_warp_sum(sg) / (float)C : 0.0f;
    sgx = mt_warp_sum(sgx) / (float)C;
MT_UNROLL
    for (int k = 0; k < V4; k++) {
        const int c4 = lane + 32 * k;
        if (c4 >= C4) continue;
        float4 *di = (float4 *)dinp + row * C4 + c4, o = *di;
        o.x += r * (g[k].x - sg - xh[k].x * sgx), o.y += r * (g[k].y - sg - xh[k].y * sgx);
        o.z += r * (g[k].z - sg - xh[k].z * sgx), o.w += r * (g[k].w - sg - xh[k].w * sgx);
        *di = o;
    }
}

// a block of MT_COL_GROUP columns x MT_COL_LANES row lanes (launch_util.h)
// grid: column groups x row groups (mt_col_split); part: the dw partials, then the db partials
__global__ static void layernorm_bwd_cols(float *dw, float *db, float *part, mt_col_split sp, const float *dout,
                                          const float *inp, const float *mean, const float *rstd, int N, int C) {
    __shared__ float red[MT_COL_LANES][MT_COL_GROUP + 1];
    int j = blockIdx.x * MT_COL_GROUP + threadIdx.x, r0 = blockIdx.y * sp.rows;
    int r1 = r0 + sp.rows < N ? r0 + sp.rows : N;
    float aw = 0.0f, ab = 0.0f;
    if (j < C)
        for (int n = r0 + threadIdx.y; n < r1; n += MT_COL_LANES) {
            size_t i = (size_t)n * C + j;
            if (dw) aw += dout[i] * ((inp[i] - mean[n]) * rstd[n]);
            if (db) ab += dout[i];
        }
    aw = mt_col_lanes_sum(aw, red);
    ab = mt_col_lanes_sum(ab, red);
    if (j >= C || threadIdx.y) return;
    if (dw) mt_col_put(dw, part, sp.groups, C, j, aw);
    if (db) mt_col_put(db, part + (size_t)sp.groups * C, sp.groups, C, j, ab);
}

__global__ static void rmsnorm_fwd(float *res, float *out, float *rstd, const float *x, const float *branch,
                                   const float *inp, const float *w, int C, float eps) {
    __shared__ float red[MT_ROW_THREADS];
    size_t row = blockIdx.x;
    const float *xi = inp + row * C;
    if (res) {
        float *r = res + row * C;
        const float *a = x + row * C, *br = branch + row * C;
        for (int j = threadIdx.x; j < C; j += blockDim.x) r[j] = a[j] + br[j];
        xi = r;
    }
    float ss = 0.0f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) ss += xi[j] * xi[j];
    float r = 1.0f / sqrtf(mt_block_sum(ss, red) / (float)C + eps);
    float *o = out + row * C;
    for (int j = threadIdx.x; j < C; j += blockDim.x) o[j] = w[j] * (xi[j] * r);
    if (threadIdx.x == 0) rstd[row] = r;
}

/* RMSNorm's warp forward (as LayerNorm's above), with the optional residual res = x + branch; its
 * backward's dinp is norm_bwd_rows_warp's */
template <int V4>
__global__ static void rmsnorm_fwd_warp(float *res, float *out, float *rstd, const float *x, const float *branch,
                                        const float *inp, const float *w, int N, int C, float eps) {
    const int lane = threadIdx.x % 32, C4 = C / 4;
    const size_t row = (size_t)blockIdx.x * MT_ROW_WARPS + threadIdx.x / 32;
    if (row >= (size_t)N) return;
    float4 v[V4] = {};
    float ss = 0.0f;
MT_UNROLL
    for (int k = 0; k < V4; k++) {
        const int c4 = lane + 32 * k;
        if (c4 >= C4) continue;
        const size_t i = row * C4 + c4;
        if (res) {
            float4 a = ((const float4 *)x)[i];
            const float4 br = ((const float4 *)branch)[i];
            a.x += br.x, a.y += br.y, a.z += br.z, a.w += br.w;
            ((float4 *)res)[i] = a;
            v[k] = a;
        } else v[k] = ((const float4 *)inp)[i];
        ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
    const float r = 1.0f / sqrtf(mt_warp_sum(ss) / (float)C + eps);
MT_UNROLL
    for (int k = 0; k < V4; k++) {
        const int c4 = lane + 32 * k;
        if (c4 >= C4) continue;
        const float4 wk = ((const float4 *)w)[c4];
        float4 o;
        o.x = wk.x * (v[k].x * r), o.y = wk.y * (v[k].y * r), o.z = wk.z * (v[k].z * r), o.w = wk.w * (v[k].w * r);
        ((float4 *)out)[row * C4 + c4] = o;
    }
    if (lane == 0) rstd[row] = r;
}

__global__ static void rmsnorm_bwd_rows(float *dinp, const float *dout, const float *inp, const float *w,
                                        const float *rstd, int C) {
    __shared__ float red[MT_ROW_THREADS];
    size_t row = blockIdx.x;
    const float *x = inp + row * C, *d = dout + row * C;
    float r = rstd[row], sgx = 0.0f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) sgx += d[j] * w[j] * (x[j] * r);
    sgx = mt_block_sum(sgx, red) / (float)C;
    float *di = dinp + row * C;
    for (int j = threadIdx.x; j < C; j += blockDim.x) di[j] += r * (d[j] * w[j] - (x[j] * r) * sgx);
}

__global__ static void rmsnorm_bwd_cols(float *dw, float *part, mt_col_split sp, const float *dout, const float *inp,
                                        const float *rstd, int N, int C) {
    __shared__ float red[MT_COL_LANES][MT_COL_GROUP + 1];
    int j = blockIdx.x * MT_COL_GROUP + threadIdx.x, r0 = blockIdx.y * sp.rows;
    int r1 = r0 + sp.rows < N ? r0 + sp.rows : N;
    float a = 0.0f;
    if (j < C)
        for (int n = r0 + threadIdx.y; n < r1; n += MT_COL_LANES) {
            size_t i = (size_t)n * C + j;
            a += dout[i] * (inp[i] * rstd[n]);
        }
    a = mt_col_lanes_sum(a, red);
    if (j < C && !threadIdx.y) mt_col_put(dw, part, sp.groups, C, j, a);
}

extern "C" int mt_cuda_layernorm_forward(const mt_cuda_ctx *c, float *out, float *mean, float *rstd,
                                         const float *inp, const float *w, const float *b, int N, int C) {
    if (N > 0 && layernorm_fwd_warp_launch(c, NULL, out, mean, rstd, NULL, NULL, NULL, inp, w, b, N, C))
        MT_LAUNCH(layernorm_fwd, N, MT_ROW_THREADS, 0, mt_stream(c), (float *)NULL, out, mean, rstd,
                         (const float *)NULL, (const float *)NULL, (const float *)NULL, inp, w, b, C);
    return mt_launch_status();
}

extern "C" int mt_cuda_residual_layernorm_forward(const mt_cuda_ctx *c, float *res, float *out, float *mean,
                                                  float *rstd, const float *x, const float *branch,
                                                  const float *branch_bias, const float *w, const float *b, int N,
                                                  int C) {
    if (N > 0 && layernorm_fwd_warp_launch(c, res, out, mean, rstd, x, branch, branch_bias, res, w, b, N, C))
        MT_LAUNCH(layernorm_fwd, N, MT_ROW_THREADS, 0, mt_stream(c), res, out, mean, rstd, x, branch, branch_bias,
                  (const float *)res, w, b, C);
    return mt_launch_status();
}

extern "C" int mt_cuda_layernorm_backward(const mt_cuda_ctx *c, float *dinp, float *dw, float *db, const float *dout,
                                          const float *inp, const float *w, const float *mean, const float *rstd,
                                          int N, int C) {
    if (N <= 0) return 0;
    const int v = warp_v4(C, (uintptr_t)dinp | (uintptr_t)dout | (uintptr_t)inp | (uintptr_t)w);
    if (dinp && v) MT_WARP_ROWS_LAUNCH(norm_bwd_rows_warp, v, N, c, dinp, dout, inp, w, mean, rstd, N, C);
    else if (dinp) MT_LAUNCH(layernorm_bwd_rows, N, MT_ROW_THREADS, 0, mt_stream(c), dinp, dout, inp, w, mean, rstd, C);
    int e = mt_launch_status();
    if (e || (!dw && !db)) return e;
    mt_col_split sp = mt_col_split_for(N, C, 2);
    MT_LAUNCH(layernorm_bwd_cols, dim3(mt_blocks_for(C, MT_COL_GROUP), sp.groups), dim3(MT_COL_GROUP, MT_COL_LANES), 0,
              mt_stream(c), dw, db, c->col_scratch, sp, dout, inp, mean, rstd, N, C);
    mt_col_finish(c, dw, c->col_scratch, sp.groups, C);
    mt_col_finish(c, db, c->col_scratch + (size_t)sp.groups * C, sp.groups, C);
    return mt_launch_status();
}

extern "C" int mt_cuda_rmsnorm_forward(const mt_cuda_ctx *c, float *out, float *rstd, const float *inp,
                                       const float *w, int N, int C, float eps) {
    if (N <= 0) return 0;
    const int v = warp_v4(C, (uintptr_t)out | (uintptr_t)inp | (uintptr_t)w);
    if (v)
        MT_WARP_ROWS_LAUNCH(rmsnorm_fwd_warp, v, N, c, (float *)NULL, out, rstd, (const float *)NULL,
                            (const float *)NULL, inp, w, N, C, eps);
    else
        MT_LAUNCH(rmsnorm_fwd, N, MT_ROW_THREADS, 0, mt_stream(c), (float *)NULL, out, rstd, (const float *)NULL,
                  (const float *)NULL, inp, w, C, eps);
    return mt_launch_status();
}

extern "C" int mt_cuda_residual_rmsnorm_forward(const mt_cuda_ctx *c, float *res, float *out, float *rstd,
                                                const float *x, const float *branch, const float *w, int N, int C,
                                                float eps) {
    if (N <= 0) return 0;
    const int v = warp_v4(C, (uintptr_t)res | (uintptr_t)out | (uintptr_t)x | (uintptr_t)branch | (uintptr_t)w);
    if (v) MT_WARP_ROWS_LAUNCH(rmsnorm_fwd_warp, v, N, c, res, out, rstd, x, branch, (const float *)res, w, N, C, eps);
    else
        MT_LAUNCH(rmsnorm_fwd, N, MT_ROW_THREADS, 0, mt_stream(c), res, out, rstd, x, branch, (const float *)res, w,
                  C, eps);
    return mt_launch_status();
}

extern "C" int mt_cuda_rmsnorm_backward(const mt_cuda_ctx *c, float *dinp, float *dw, const float *dout,
                                        const float *inp, const float *w, const float *rstd, int N, int C) {
    if (N <= 0) return 0;
    const int v = warp_v4(C, (uintptr_t)dinp | (uintptr_t)dout | (uintptr_t)inp | (uintptr_t)w);
    if (dinp && v) MT_WARP_ROWS_LAUNCH(norm_bwd_rows_warp, v, N, c, dinp, dout, inp, w, (const float *)NULL, rstd, N, C);
    else if (dinp) MT_LAUNCH(rmsnorm_bwd_rows, N, MT_ROW_THREADS, 0, mt_stream(c), dinp, dout, inp, w, rstd, C);
    int e = mt_launch_status();
    if (e || !dw) return e;
    mt_col_split sp = mt_col_split_for(N, C, 1);
    MT_LAUNCH(rmsnorm_bwd_cols, dim3(mt_blocks_for(C, MT_COL_GROUP), sp.groups), dim3(MT_COL_GROUP, MT_COL_LANES), 0,
              mt_stream(c), dw, c->col_scratch, sp, dout, inp, rstd, N, C);
    mt_col_finish(c, dw, c->col_scratch, sp.groups, C);
    return mt_launch_status();
}
