/* GELU, tanh approximation (GPT-2 "gelu_new"):
 *   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
 * Using 1 + tanh(u) = 2 s with s = sigmoid(2u) = 1 / (1 + exp(-2u)):
 *   gelu(x)  = x s
 *   gelu'(x) = s + 2 x s (1 - s) u',  u' = sqrt(2/pi) (1 + 3*0.044715 x^2)
 * One vectorised exp per element, no tanh call. */
#include "ops/ops.h"
#include "ops/vmath.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f
#define PAR_MIN 16384

void op_gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + GELU_A * x * x * x);
        float s = 1.0f / (1.0f + mt_vexpf(-2.0f * u));
        out[i] = x * s;
    }
}

void op_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float x2 = x * x;
        float u = GELU_K * (x + GELU_A * x2 * x);
        float du = GELU_K * (1.0f + 3.0f * GELU_A * x2);
        float s = 1.0f / (1.0f + mt_vexpf(-2.0f * u));
        float g = s + 2.0f * x * s * (1.0f - s) * du;
        dinp[i] = g * dout[i];
    }
}
