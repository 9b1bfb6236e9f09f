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

#endif
