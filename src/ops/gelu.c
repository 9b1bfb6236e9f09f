/* GELU, tanh approximation (GPT-2 "gelu_new"), element-wise over a flat
 * array; the math is in gelu_math.h (shared with the fused bias + GELU). */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "ops/gelu_math.h"

#define PAR_MIN 16384

void op_gelu_forward(mt_backend *be, float *out, const float *inp, size_t n) {
    MT_DISPATCH(be, gelu_forward, be, out, inp, n);
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = mt_gelu1(inp[i]);
}

void op_gelu_backward(mt_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    MT_DISPATCH(be, gelu_backward, be, dinp, inp, dout, n);
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) dinp[i] = mt_gelu_grad1(inp[i]) * dout[i];
}
