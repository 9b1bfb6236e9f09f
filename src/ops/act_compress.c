/* Activation compression's int8 row codec (ops/ops.h; models/act_compress.c
 * chooses which activations use it and with which row width). */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <math.h>

void op_act_int8_encode(mt_backend *be, int8_t *codes, float *scales, const float *x, size_t rows, size_t cols) {
    MT_DISPATCH(be, act_int8_encode, be, codes, scales, x, rows, cols);
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        int8_t *cr = codes + r * cols;
        float amax = 0.0f;
        for (size_t i = 0; i < cols; i++) amax = fmaxf(amax, fabsf(xr[i]));
        scales[r] = amax / 127.0f;
        float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (size_t i = 0; i < cols; i++) {
            float q = nearbyintf(xr[i] * inv); /* the default rounding: half to even */
            cr[i] = (int8_t)fminf(fmaxf(q, -127.0f), 127.0f);
        }
    }
}

void op_act_int8_decode(mt_backend *be, float *x, const int8_t *codes, const float *scales, size_t rows, size_t cols) {
    MT_DISPATCH(be, act_int8_decode, be, x, codes, scales, rows, cols);
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        float s = scales[r];
        for (size_t i = 0; i < cols; i++) x[r * cols + i] = (float)codes[r * cols + i] * s;
    }
}
