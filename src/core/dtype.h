/* Element types and conversions between fp32 and the two 16-bit formats.
 *
 * bf16: the top half of an fp32 (1 sign, 8 exponent, 7 mantissa bits).
 * fp16: IEEE binary16 (1, 5, 10; largest finite 65504, subnormals down to
 * 2^-24).
 *
 * Narrowing rounds to nearest, ties to even. NaN stays NaN with its sign,
 * made quiet (as the hardware instructions do, so both paths agree bit for
 * bit); out-of-range values become inf (fp16: |x| >= 65520, the midpoint
 * above 65504); fp16 subnormals are rounded correctly. Widening is exact
 * (an fp16 NaN comes back quiet, as vcvtph2ps does).
 *
 * The scalar functions below are the reference semantics; the array
 * functions in dtype.c are AVX-512 (AVX512_BF16, AVX512F's vcvtps2ph /
 * vcvtph2ps) where the compiler targets it and produce the same bits. */
#ifndef MT_CORE_DTYPE_H
#define MT_CORE_DTYPE_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint16_t mt_bf16;
typedef uint16_t mt_fp16;

typedef enum { MT_FP32 = 0, MT_BF16, MT_FP16 } mt_dtype;

/* "fp32", "bf16", "fp16" ("?" for anything else). */
const char *mt_dtype_name(mt_dtype t);
/* Parses those names; returns 0 and sets *t, or -1 for an unknown name. */
int mt_dtype_parse(const char *s, mt_dtype *t);
/* Bytes per element (0 for an unknown value). */
size_t mt_dtype_size(mt_dtype t);

static inline uint32_t mt_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float mt_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline mt_bf16 mt_fp32_to_bf16(float x) {
    uint32_t u = mt_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (mt_bf16)((u >> 16) | 0x40u); /* NaN: set the quiet bit */
    /* adding 0x7fff plus the kept part's lowest bit carries into the kept
     * part exactly when the dropped half is above one half, or equal to it
     * with an odd kept part: round to nearest even, for subnormals too,
     * and the largest finite values carry into inf */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (mt_bf16)(u >> 16);
}

static inline float mt_bf16_to_fp32(mt_bf16 h) { return mt_f32_from_bits((uint32_t)h << 16); }

static inline mt_fp16 mt_fp32_to_fp16(float x) {
    uint32_t u = mt_f32_bits(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (mt_fp16)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN, quiet */
    if (a >= 0x477ff000u) return (mt_fp16)(sign | 0x7c00u); /* >= 65520 (and inf) rounds to inf */
    if (a >= 0x38800000u) { /* >= 2^-14: normal; rebias the exponent by 127 - 15 and round 13 bits off */
        uint32_t r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return (mt_fp16)(sign | (r >> 13));
    }
    /* subnormal or zero: the result is round(|x| * 2^24) units of 2^-24;
     * |x| = m * 2^(e-150), so that is m >> (126 - e), rounded to even
     * (a shift of 25 or more leaves less than one half: 0) */
    int e = (int)(a >> 23), shift = 126 - e;
    if (shift > 24) return (mt_fp16)sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u, q = m >> shift, rem = m & ((1u << shift) - 1u),
             half = 1u << (shift - 1);
    q += rem > half || (rem == half && (q & 1u));
    return (mt_fp16)(sign | q); /* q == 0x400 is the smallest normal, encoded right */
}

static inline float mt_fp16_to_fp32(mt_fp16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return mt_f32_from_bits(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in fp32 */
        float v = (float)m * 0x1p-24f;
        return mt_f32_from_bits(sign | mt_f32_bits(v));
    }
    return mt_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* Array conversions, dst[i] = convert(src[i]) for i < n. Vectorised; large
 * arrays are split over the OpenMP threads (one parallel region; inside an
 * enclosing one they run on the calling thread). src and dst must not
 * overlap. */
void mt_convert_fp32_to_bf16(mt_bf16 *dst, const float *src, size_t n);
void mt_convert_bf16_to_fp32(float *dst, const mt_bf16 *src, size_t n);
void mt_convert_fp32_to_fp16(mt_fp16 *dst, const float *src, size_t n);
void mt_convert_fp16_to_fp32(float *dst, const mt_fp16 *src, size_t n);

/* The same for t = MT_BF16 or MT_FP16 (anything else is a programming
 * error and dies). */
void mt_convert_to_16(mt_dtype t, uint16_t *dst, const float *src, size_t n);
void mt_convert_from_16(mt_dtype t, float *dst, const uint16_t *src, size_t n);
/* dst[c*rows + r] = src[r*cols + c]: the transpose of the rows x cols matrix
 * src (interop: Hugging Face's Conv1D stores [in, out]); in 32 x 32 tiles. */
void mt_transpose_f32(float *dst, const float *src, int64_t rows, int64_t cols);
/* Mixed-precision storage (parallel/zero.c holds gradients in 16 bits):
 *   mt_accumulate_16: acc[i] = narrow(widen(acc[i]) + x[i])  (one rounding per call);
 *   mt_add_from_16:   dst[i] += widen(src[i]). */
void mt_accumulate_16(mt_dtype t, uint16_t *acc, const float *x, size_t n);
void mt_add_from_16(mt_dtype t, float *dst, const uint16_t *src, size_t n);

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512BF16__) && \
    defined(__AVX512DQ__)
#include <immintrin.h>
#define MT_BF16_X16 1
/* 16 lanes rounded to bf16 bit for bit as mt_fp32_to_bf16. vcvtneps2bf16
 * flushes subnormal inputs to signed zero; those (rare) lanes get the scalar
 * form's integer rounding instead. One vfpclassps (class 0x20: denormal)
 * finds them; two mask tests cost more than the conversion itself in L1
 * (measured). */
static inline __m256i mt_fp32_to_bf16_x16(__m512 v) {
    __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
    __mmask16 sub = _mm512_fpclass_ps_mask(v, 0x20);
    if (sub) {
        __m512i b = _mm512_castps_si512(v);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
        h = _mm256_mask_blend_epi16(sub, h, _mm512_cvtepi32_epi16(r));
    }
    return h;
}

/* 16 bf16 lanes widened to fp32 (exact). */
static inline __m512 mt_bf16_to_fp32_x16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#endif

#endif
