/* Vectorisable single-precision exp for the kernels' inner loops (glibc's
 * expf does not vectorise without -ffast-math). Private to src/ops.
 * exp(x) = 2^n * e^r, n = round(x/ln2), r = x - n*ln2 (Cody-Waite two-part
 * ln2), e^r by a degree-7 Taylor polynomial on |r| <= ln2/2 (truncation
 * error < 6e-9 relative), 2^n built in the exponent bits. Max error about
 * 2 ulp. Inputs below -87 give 0, above 88 are clamped (no inf). */
#ifndef MT_OPS_VMATH_H
#define MT_OPS_VMATH_H
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float mt_vexpf(float x) {
    /* written as x < hi ? x : hi (minps/maxps form) and rintf: the forms
     * GCC 12 vectorises without -ffast-math */
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
    int32_t bits = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return x < -87.0f ? 0.0f : p * s;
}

#ifdef __AVX512F__
#include <immintrin.h>
/* mt_vexpf on 16 lanes with AVX-512 intrinsics: the same reduction and
 * polynomial, evaluated with fused multiply-adds (ISO C mode does not
 * contract the scalar form), so a lane may differ from mt_vexpf in the last
 * bit; same error bound. 512 bits wide wherever it is called (GCC's
 * vectoriser often keeps 256-bit vectors for the scalar form's loops). */
static inline __m512 mt_vexp16(__m512 x) {
    __m512 xc = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.0f)), _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.98412698412698e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.38888888888889e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.33333333333333e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16666666666667e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66666666666667e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    __m512 e = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
    __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(under, e, _mm512_setzero_ps());
}
#endif

#endif
