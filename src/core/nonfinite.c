#include "core/nonfinite.h"
#include <stdint.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

/* ---- non-finite scan ----
 * A float is inf or NaN exactly when its exponent bits are all ones, i.e.
 * when its bits without the sign, read as an unsigned integer, are >=
 * 0x7f800000. Taking the maximum of those integers needs no floating-point
 * instruction, so nothing can raise FE_INVALID (a float compare would, on a
 * signalling NaN). */
#define NONFINITE_MIN 0x7f800000u

/* may_alias: the scalar path reads the floats' bits through this type */
typedef uint32_t __attribute__((may_alias)) u32_alias;

static int scan_range(const float *x, size_t n) {
    size_t i = 0;
    uint32_t acc = 0;
#ifdef __AVX512F__
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0; /* four chains: loads, not latency, bound it */
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_max_epu32(a0, _mm512_and_si512(_mm512_loadu_si512(x + i), abs_mask));
        a1 = _mm512_max_epu32(a1, _mm512_and_si512(_mm512_loadu_si512(x + i + 16), abs_mask));
        a2 = _mm512_max_epu32(a2, _mm512_and_si512(_mm512_loadu_si512(x + i + 32), abs_mask));
        a3 = _mm512_max_epu32(a3, _mm512_and_si512(_mm512_loadu_si512(x + i + 48), abs_mask));
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_max_epu32(a0, _mm512_and_si512(_mm512_loadu_si512(x + i), abs_mask));
    if (i < n) { /* masked load: lanes past the end are not read (no fault) and come back as 0 */
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        a1 = _mm512_max_epu32(a1, _mm512_and_si512(_mm512_maskz_loadu_epi32(k, x + i), abs_mask));
        i = n;
    }
    a0 = _mm512_max_epu32(_mm512_max_epu32(a0, a1), _mm512_max_epu32(a2, a3));
    acc = _mm512_reduce_max_epu32(a0);
#endif
    const u32_alias *u = (const u32_alias *)x;
    for (; i < n; i++) {
        uint32_t b = u[i] & 0x7fffffffu;
        acc = b > acc ? b : acc;
    }
    return acc >= NONFINITE_MIN;
}

/* Blocks of MT_NONFINITE_BLOCK floats over OpenMP threads from
 * MT_NONFINITE_PARALLEL_MIN floats up (see nonfinite.h). */
int mt_found_nonfinite(const float *x, size_t n) {
    if (n < MT_NONFINITE_PARALLEL_MIN) return scan_range(x, n);
    size_t nb = (n + MT_NONFINITE_BLOCK - 1) / MT_NONFINITE_BLOCK;
    int found = 0;
#pragma omp parallel for schedule(static) reduction(| : found)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * MT_NONFINITE_BLOCK, len = n - lo < MT_NONFINITE_BLOCK ? n - lo : MT_NONFINITE_BLOCK;
        found |= scan_range(x + lo, len);
    }
    return found;
}
