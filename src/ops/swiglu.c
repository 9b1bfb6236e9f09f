/* SwiGLU, the Llama MLP's activation: a row of gate_up [N, 2F] holds the
 * gate (F values) then the up projection (F values);
 *   out = silu(g) * u,  silu(g) = g * sigmoid(g)
 *   dg = dout * u * sigmoid(g) * (1 + g (1 - sigmoid(g))),  du = dout * silu(g)
 * sigmoid(g) = 1 / (1 + exp(-g)) with ops/vmath.h's exp, which clamps
 * instead of overflowing, so the sigmoid stays finite in [0, 1]. */
#include "ops/ops.h"
#include "ops/vmath.h"

void op_swiglu_forward(float *out, const float *gate_up, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = gate_up + (size_t)i * 2 * F, *u = g + F;
        float *o = out + (size_t)i * F;
#pragma omp simd
        for (int j = 0; j < F; j++) {
            float s = 1.0f / (1.0f + mt_vexpf(-g[j]));
            o[j] = g[j] * s * u[j];
        }
    }
}

void op_swiglu_backward(float *dgate_up, const float *dout, const float *gate_up, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = gate_up + (size_t)i * 2 * F, *u = g + F, *d = dout + (size_t)i * F;
        float *dg = dgate_up + (size_t)i * 2 * F, *du = dg + F;
#pragma omp simd
        for (int j = 0; j < F; j++) {
            float s = 1.0f / (1.0f + mt_vexpf(-g[j]));
            float dj = d[j];
            dg[j] = dj * u[j] * s * (1.0f + g[j] * (1.0f - s));
            du[j] = dj * g[j] * s;
        }
    }
}
