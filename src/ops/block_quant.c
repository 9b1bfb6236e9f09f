/* ZeRO++'s block quantizers (parallel/zeropp_quant.h says what they compute and which
 * layers use them); the CPU backend's kernels. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <math.h>
#include <string.h>

void op_block_quantize(mt_backend *be, const float *x, size_t n, size_t block, int bits, uint8_t *codes,
                       float *scales) {
    MT_DISPATCH(be, block_quantize, be, x, n, block, bits, codes, scales);
    const float qmax = bits == 8 ? 127.0f : 7.0f;
    if (bits == 4) memset(codes, 0, (n + 1) / 2);
    for (size_t b = 0; b * block < n; b++) {
        size_t lo = b * block, hi = lo + block < n ? lo + block : n;
        float amax = 0.0f;
        for (size_t i = lo; i < hi; i++) amax = fmaxf(amax, fabsf(x[i]));
        float scale = amax / qmax;
        scales[b] = scale;
        for (size_t i = lo; i < hi; i++) {
            float q = scale > 0.0f ? nearbyintf(x[i] / scale) : 0.0f; /* the default rounding: half to even */
            q = fminf(fmaxf(q, -qmax), qmax);
            int c = (int)q;
            if (bits == 8) codes[i] = (uint8_t)(int8_t)c;
            else codes[i / 2] |= (uint8_t)((c & 0xF) << (4 * (i & 1)));
        }
    }
}

void op_block_dequantize(mt_backend *be, const uint8_t *codes, const float *scales, size_t n, size_t block, int bits,
                         float *x) {
    MT_DISPATCH(be, block_dequantize, be, codes, scales, n, block, bits, x);
    for (size_t i = 0; i < n; i++) {
        int c;
        if (bits == 8) c = (int8_t)codes[i];
        else {
            c = (codes[i / 2] >> (4 * (i & 1))) & 0xF;
            c = c >= 8 ? c - 16 : c;
        }
        x[i] = (float)c * scales[i / block];
    }
}
