/* Staging for the tensor-core attention kernels (attention_tc_bwd.cu, attention_mma_operands.cu): 64 rows of one
 * head, HS fp32 columns at row stride ld, into shared memory as bf16 (round to nearest even) at row stride
 * ldd (a multiple of 8), rows past T as zeros. A block of MT_TC_THREADS threads; each thread issues all
 * its loads (float4 where the rows are 16-byte aligned) before it converts and stores any, so the loads'
 * latencies overlap instead of adding up. HS is a compile-time constant (a multiple of 16). */
#ifndef MT_CUDA_ATTENTION_TC_TILES_H
#define MT_CUDA_ATTENTION_TC_TILES_H
#include "cuda/compat.h"
#include "cuda/device_math.h"
#include "cuda/tensor_core.h"
#include <stdint.h>
#include <type_traits>

#define MT_TC_ROWS 64 /* queries per block, keys per tile */
#define MT_TC_WARPS 4
#define MT_TC_THREADS (32 * MT_TC_WARPS)

template <int HS>
__device__ static inline void mt_tc_stage_rows(uint16_t *dst, int ldd, const float *src, int ld, int r0, int T,
                                               bool vec) {
    if (vec) {
        // in groups of G float4: G loads in flight per thread, without holding a whole tile in registers
        // (the backward kernels, with their fragments, would spill)
        constexpr int Q4 = HS / 4, PER = MT_TC_ROWS * Q4 / MT_TC_THREADS, G = PER % 4 == 0 && PER > 4 ? 4 : 2;
        static_assert(PER % G == 0, "staging groups");
        for (int k0 = 0; k0 < PER; k0 += G) {
            float4 v[G];
            MT_UNROLL
            for (int k = 0; k < G; k++) {
                int e = (int)threadIdx.x + (k0 + k) * MT_TC_THREADS, r = e / Q4, c4 = e % Q4;
                if (r0 + r < T) v[k] = *(const float4 *)(src + (size_t)(r0 + r) * ld + 4 * c4);
                else v[k].x = v[k].y = v[k].z = v[k].w = 0.0f;
            }
            MT_UNROLL
            for (int k = 0; k < G; k++) {
                int e = (int)threadIdx.x + (k0 + k) * MT_TC_THREADS, r = e / Q4, c4 = e % Q4;
                ushort4 h;
                h.x = mt_tc_to_bf16(v[k].x), h.y = mt_tc_to_bf16(v[k].y), h.z = mt_tc_to_bf16(v[k].z),
                h.w = mt_tc_to_bf16(v[k].w);
                *(ushort4 *)(dst + r * ldd + 4 * c4) = h;
            }
        }
        return;
    }
    for (int e = threadIdx.x; e < MT_TC_ROWS * HS; e += MT_TC_THREADS) {
        int r = e / HS, k = e % HS;
        float v = r0 + r < T ? src[(size_t)(r0 + r) * ld + k] : 0.0f;
        dst[r * ldd + k] = mt_tc_to_bf16(v);
    }
}

/* f(std::integral_constant<int, HS>()) for a runtime head size HS, a multiple of 16 up to MAX (the
 * launchers' one switch from the runtime size to their kernel templates; sizes above MAX instantiate
 * nothing); cudaErrorInvalidValue for any other HS */
template <int MAX, class F> static inline int mt_tc_with_head_size(int HS, F f) {
    switch (HS) {
    case 16: return f(std::integral_constant<int, 16>());
    case 32: return f(std::integral_constant<int, 32>());
    case 48: return f(std::integral_constant<int, 48>());
    case 64: return f(std::integral_constant<int, 64>());
    }
    if constexpr (MAX >= 80) if (HS == 80) return f(std::integral_constant<int, 80>());
    if constexpr (MAX >= 96) if (HS == 96) return f(std::integral_constant<int, 96>());
    if constexpr (MAX >= 112) if (HS == 112) return f(std::integral_constant<int, 112>());
    if constexpr (MAX >= 128) if (HS == 128) return f(std::integral_constant<int, 128>());
    return (int)cudaErrorInvalidValue;
}

/* lse and D = dout.out (fp32) of query rows row0 .. row0 + 63 of (sample b, head h) into lsh and Dsh, 0
 * past T; two threads a row, each half the row (at ldo floats a row, head h's HS columns), added by one
 * shuffle; vec: the rows are 16-byte aligned (float4 loads) */
__device__ static inline void mt_tc_stage_lse_d(float *lsh, float *Dsh, const float *dout, const float *out,
                                                const float *lse, int b, int h, int row0, int T, int NH, int HS,
                                                int ldo, bool vec) {
    int r = threadIdx.x / 2, half = threadIdx.x % 2, i = row0 + r, n = HS / 2;
    float s = 0.0f;
    if (i < T) {
        size_t o = ((size_t)b * T + i) * ldo + (size_t)h * HS + (size_t)half * n;
        if (vec)
            for (int k = 0; k < n; k += 4) {
                float4 x = *(const float4 *)(dout + o + k), y = *(const float4 *)(out + o + k);
                s += x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
            }
        else
            for (int k = 0; k < n; k++) s += dout[o + k] * out[o + k];
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    if (half == 0) {
        Dsh[r] = s;
        lsh[r] = i < T ? lse[((size_t)b * NH + h) * T + i] : 0.0f;
    }
}
#endif
