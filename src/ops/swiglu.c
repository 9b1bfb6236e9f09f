/* SwiGLU, the Llama MLP's activation: a row of gate_up [N, 2F] holds the
 * gate (F values) then the up projection (F values);
 *   out = silu(g) * u,  silu(g) = g * sigmoid(g)
 *   dg = dout * u * sigmoid(g) * (1 + g (1 - sigmoid(g))),  du = dout * silu(g)
 * The sigmoid only ever takes exp of a non-positive number (no overflow, no
 * clamp): with e = exp(-|g|) and d = 1 + e,
 *   g >= 0: sigmoid = 1/d, silu = g/d   (torch's g / (1 + exp(-g)))
 *   g <  0: sigmoid = e/d, silu = g e/d
 * so a large negative gate gives sigmoid 0 and silu -0 instead of the
 * huge g * exp(-88) a clamped exp(-g) would. exp is ops/vmath.h's, which
 * vectorises (0 below -87, where the exact value is below 2^-125). */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "ops/vmath.h"

/* sigmoid(g) and silu(g) as above; branch-free selects, so loops over it vectorise. */
static inline float sig_silu(float g, float *silu) {
    float e = mt_vexpf(-fabsf(g)), d = 1.0f + e;
    int pos = g >= 0.0f;
    *silu = (pos ? g : g * e) / d;
    return (pos ? 1.0f : e) / d;
}

void op_swiglu_forward(mt_backend *be, float *out, const float *gate_up, int N, int F) {
    MT_DISPATCH(be, swiglu_forward, be, out, gate_up, N, F);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = gate_up + (size_t)i * 2 * F, *u = g + F;
        float *o = out + (size_t)i * F;
#pragma omp simd
        for (int j = 0; j < F; j++) {
            float si;
            (void)sig_silu(g[j], &si);
            o[j] = si * u[j];
        }
    }
}

void op_swiglu_backward(mt_backend *be, float *dgate_up, const float *dout, const float *gate_up, int N, int F) {
    MT_DISPATCH(be, swiglu_backward, be, dgate_up, dout, gate_up, N, F);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *g = gate_up + (size_t)i * 2 * F, *u = g + F, *d = dout + (size_t)i * F;
        float *dg = dgate_up + (size_t)i * 2 * F, *du = dg + F;
#pragma omp simd
        for (int j = 0; j < F; j++) {
            float si, s = sig_silu(g[j], &si), dj = d[j];
            dg[j] = dj * u[j] * s * (1.0f + g[j] * (1.0f - s));
            du[j] = dj * si;
        }
    }
}
