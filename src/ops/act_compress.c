/* Activation compression's int8 row codec (ops/ops.h; models/act_compress.c
 * chooses which activations use it and with which row width). The loops are
 * `omp simd` (the build's -O2 does not vectorize them by itself): the absmax
 * is a max reduction, the rounding adds and subtracts 1.5 * 2^23, which
 * rounds |v| <= 127.5 to the nearest integer, half to even, in the default
 * rounding mode -- what nearbyintf gives, without a libm call per element. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <float.h>
#include <math.h>
#include <string.h>

#define ROUND_MAGIC 12582912.0f /* 1.5 * 2^23 */

void op_act_int8_encode(mt_backend *be, int8_t *codes, float *scales, const float *x, size_t rows, size_t cols) {
    MT_DISPATCH(be, act_int8_encode, be, codes, scales, x, rows, cols);
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        int8_t *cr = codes + r * cols;
        float amax = 0.0f;
        int bad = 0;
#pragma omp simd reduction(max : amax) reduction(| : bad)
        for (size_t i = 0; i < cols; i++) {
            float a = fabsf(xr[i]);
            bad |= !(a <= FLT_MAX); /* Inf or NaN */
            amax = a > amax ? a : amax;
        }
        if (bad) { /* a non-finite row decodes to NaN: the step's non-finite check sees it in the gradients */
            scales[r] = NAN;
            memset(cr, 0, cols);
            continue;
        }
        scales[r] = amax / 127.0f;
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
#pragma omp simd
        for (size_t i = 0; i < cols; i++) {
            float v = xr[i] * inv;
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
            cr[i] = (int8_t)(int)((v + ROUND_MAGIC) - ROUND_MAGIC);
        }
    }
}

void op_act_int8_decode(mt_backend *be, float *x, const int8_t *codes, const float *scales, size_t rows, size_t cols) {
    MT_DISPATCH(be, act_int8_decode, be, x, codes, scales, rows, cols);
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float s = scales[r];
        float *xr = x + r * cols;
        const int8_t *cr = codes + r * cols;
#pragma omp simd
        for (size_t i = 0; i < cols; i++) xr[i] = (float)cr[i] * s;
    }
}
