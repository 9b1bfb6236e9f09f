/* Staging for the tensor-core attention kernels (attention_tc.cu, attention_tc_bwd.cu): 64 rows of one
 * head, HS fp32 columns at row stride ld, into shared memory as bf16 (the CPU's rounding) at row stride
 * ldd (a multiple of 8), rows past T as zeros. A block of MT_TC_THREADS threads; each thread issues all
 * its loads (float4 where the rows are 16-byte aligned) before it converts and stores any, so the loads'
 * latencies overlap instead of adding up. HS is a compile-time constant (a multiple of 16). */
#ifndef MT_CUDA_ATTENTION_TC_TILES_H
#define MT_CUDA_ATTENTION_TC_TILES_H
#include "cuda/compat.h"
#include "cuda/device_math.h"
#include <stdint.h>

#define MT_TC_ROWS 64 /* queries per block, keys per tile */
#define MT_TC_WARPS 4
#define MT_TC_THREADS (32 * MT_TC_WARPS)

/* The same in two halves, for a prefetch: mt_tc_fetch_rows loads a thread's share of the 64 rows into
 * registers (float4; rows 16-byte aligned), mt_tc_put_rows converts and stores them, so a kernel can
 * fetch the next tile before it computes on the current one. */
template <int HS> struct mt_tc_rows_regs {
    float4 v[MT_TC_ROWS * HS / 4 / MT_TC_THREADS];
};
template <int HS>
__device__ static inline void mt_tc_fetch_rows(mt_tc_rows_regs<HS> &g, const float *src, int ld, int r0, int T) {
    constexpr int Q4 = HS / 4, PER = MT_TC_ROWS * Q4 / MT_TC_THREADS;
    MT_UNROLL
    for (int k = 0; k < PER; k++) {
        int e = (int)threadIdx.x + k * MT_TC_THREADS, r = e / Q4, c4 = e % Q4;
        if (r0 + r < T) g.v[k] = *(const float4 *)(src + (size_t)(r0 + r) * ld + 4 * c4);
        else g.v[k].x = g.v[k].y = g.v[k].z = g.v[k].w = 0.0f;
    }
}
template <int HS> __device__ static inline void mt_tc_put_rows(uint16_t *dst, int ldd, const mt_tc_rows_regs<HS> &g) {
    constexpr int Q4 = HS / 4, PER = MT_TC_ROWS * Q4 / MT_TC_THREADS;
    MT_UNROLL
    for (int k = 0; k < PER; k++) {
        int e = (int)threadIdx.x + k * MT_TC_THREADS, r = e / Q4, c4 = e % Q4;
        ushort4 h;
        h.x = mt_dev_fp32_to_bf16(g.v[k].x), h.y = mt_dev_fp32_to_bf16(g.v[k].y);
        h.z = mt_dev_fp32_to_bf16(g.v[k].z), h.w = mt_dev_fp32_to_bf16(g.v[k].w);
        *(ushort4 *)(dst + r * ldd + 4 * c4) = h;
    }
}

template <int HS>
__device__ static inline void mt_tc_stage_rows(uint16_t *dst, int ldd, const float *src, int ld, int r0, int T,
                                               bool vec) {
    if (vec) {
        mt_tc_rows_regs<HS> g;
        mt_tc_fetch_rows<HS>(g, src, ld, r0, T);
        mt_tc_put_rows<HS>(dst, ldd, g);
        return;
    }
    for (int e = threadIdx.x; e < MT_TC_ROWS * HS; e += MT_TC_THREADS) {
        int r = e / HS, k = e % HS;
        float v = r0 + r < T ? src[(size_t)(r0 + r) * ld + k] : 0.0f;
        dst[r * ldd + k] = mt_dev_fp32_to_bf16(v);
    }
}
#endif
