/* Scalar math shared by the kernels, usable on the host and the device
 * (MT_HD), written as the CPU ops write it so that element-wise kernels
 * give the CPU's bits: the build has no contraction into fused
 * multiply-adds on either side (nvcc -fmad=false, host -ffp-contract=off).
 *  - mt_dev_expf: ops/vmath.h's mt_vexpf (Cody-Waite reduction, degree-7
 *    polynomial), operation for operation; mt_dev_expf_fused: its AVX-512
 *    form mt_vexp16 (the same with fused multiply-adds);
 *  - GELU (tanh form) and its derivative: ops/gelu_math.h;
 *  - the sigmoid/SiLU of ops/swiglu.c;
 *  - bf16 / fp16 rounding: core/dtype.h's integer forms (round to nearest
 *    even, NaN made quiet, fp16 subnormals rounded correctly), not the
 *    hardware instructions, whose NaN payloads may differ. */
#ifndef MT_CUDA_DEVICE_MATH_H
#define MT_CUDA_DEVICE_MATH_H
#include "cuda/compat.h"
#include <stdint.h>
#include <string.h>

MT_HD static inline uint32_t mt_dev_f32_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

MT_HD static inline float mt_dev_f32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

MT_HD static inline float mt_dev_expf(float x) {
    float xc = x < 88.0f ? x : 88.0f;
    xc = xc > -87.0f ? xc : -87.0f;
    float n = rintf(xc * 1.44269504088896341f);
    float r = xc - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.98412698412698e-4f;
    p = p * r + 1.38888888888889e-3f;
    p = p * r + 8.33333333333333e-3f;
    p = p * r + 4.16666666666667e-2f;
    p = p * r + 1.66666666666667e-1f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    float s = mt_dev_f32_from_bits((uint32_t)(((int32_t)n + 127) << 23));
    return x < -87.0f ? 0.0f : p * s;
}

/* mt_dev_expf with each a*b + c of the reduction and polynomial fused
 * (fmaf: one rounding), as ops/vmath.h's mt_vexp16 evaluates it on the CPU's
 * AVX-512 path (the clamp and the underflow test are the same ternaries:
 * NaN takes the 88 branch in both). Kernels that mirror an op whose CPU
 * form calls mt_vexp16 use it to give the CPU's bits. */
MT_HD static inline float mt_dev_expf_fused(float x) {
    float xc = x < 88.0f ? x : 88.0f;
    xc = xc > -87.0f ? xc : -87.0f;
    float n = rintf(xc * 1.44269504088896341f);
    float r = fmaf(-n, 0.693145751953125f, xc);
    r = fmaf(-n, 1.428606765330187045e-06f, r);
    float p = 1.98412698412698e-4f;
    p = fmaf(p, r, 1.38888888888889e-3f);
    p = fmaf(p, r, 8.33333333333333e-3f);
    p = fmaf(p, r, 4.16666666666667e-2f);
    p = fmaf(p, r, 1.66666666666667e-1f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    float s = mt_dev_f32_from_bits((uint32_t)(((int32_t)n + 127) << 23));
    return x < -87.0f ? 0.0f : p * s;
}

#define MT_DEV_GELU_K 0.7978845608028654f
#define MT_DEV_GELU_A 0.044715f

MT_HD static inline float mt_dev_gelu(float x) {
    float u = MT_DEV_GELU_K * (x + MT_DEV_GELU_A * x * x * x);
    float s = 1.0f / (1.0f + mt_dev_expf(-2.0f * u));
    return x * s;
}

MT_HD static inline float mt_dev_gelu_grad(float x) {
    float x2 = x * x;
    float u = MT_DEV_GELU_K * (x + MT_DEV_GELU_A * x2 * x);
    float du = MT_DEV_GELU_K * (1.0f + 3.0f * MT_DEV_GELU_A * x2);
    float s = 1.0f / (1.0f + mt_dev_expf(-2.0f * u));
    return s + 2.0f * x * s * (1.0f - s) * du;
}

/* sigmoid(g), and silu(g) into *silu, from exp(-|g|) only (no overflow) */
MT_HD static inline float mt_dev_sig_silu(float g, float *silu) {
    float e = mt_dev_expf(-fabsf(g)), d = 1.0f + e;
    int pos = g >= 0.0f;
    *silu = (pos ? g : g * e) / d;
    return (pos ? 1.0f : e) / d;
}

MT_HD static inline uint16_t mt_dev_fp32_to_bf16(float x) {
    uint32_t u = mt_dev_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

MT_HD static inline float mt_dev_bf16_to_fp32(uint16_t h) { return mt_dev_f32_from_bits((uint32_t)h << 16); }

MT_HD static inline uint16_t mt_dev_fp32_to_fp16(float x) {
    uint32_t u = mt_dev_f32_bits(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) {
        uint32_t r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    int e = (int)(a >> 23), shift = 126 - e;
    if (shift > 24) return (uint16_t)sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u, q = m >> shift, rem = m & ((1u << shift) - 1u),
             half = 1u << (shift - 1);
    q += rem > half || (rem == half && (q & 1u));
    return (uint16_t)(sign | q);
}

MT_HD static inline float mt_dev_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return mt_dev_f32_from_bits(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-08f; /* 2^-24 */
        return mt_dev_f32_from_bits(sign | mt_dev_f32_bits(v));
    }
    return mt_dev_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* The 16-bit type of a mixed-precision kernel: 1 bf16, 2 fp16 (mt_dtype's values). */
MT_HD static inline float mt_dev_widen16(int dt, uint16_t h) {
    return dt == 1 ? mt_dev_bf16_to_fp32(h) : mt_dev_fp16_to_fp32(h);
}
MT_HD static inline uint16_t mt_dev_narrow16(int dt, float x) {
    return dt == 1 ? mt_dev_fp32_to_bf16(x) : mt_dev_fp32_to_fp16(x);
}

#endif
