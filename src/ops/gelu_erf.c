/* GELU, exact form x * Phi(x) = x/2 (1 + erf(x/sqrt 2)) (PyTorch's
 * nn.functional.gelu default, Hugging Face's "gelu": Falcon's MLP),
 * element-wise over a flat array; libm's erff, exact to fp32 rounding. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <math.h>

#define PAR_MIN 16384
#define INV_SQRT2 0.70710678118654752f
#define INV_SQRT_2PI 0.39894228040143268f

void op_gelu_erf_forward(mt_backend *be, float *out, const float *inp, size_t n) {
    MT_DISPATCH(be, gelu_erf_forward, be, out, inp, n);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + erff(x * INV_SQRT2));
    }
}

/* gelu'(x) = Phi(x) + x phi(x), phi the standard normal density. */
void op_gelu_erf_backward(mt_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    MT_DISPATCH(be, gelu_erf_backward, be, dinp, inp, dout, n);
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cdf = 0.5f * (1.0f + erff(x * INV_SQRT2));
        float pdf = INV_SQRT_2PI * expf(-0.5f * x * x);
        dinp[i] = (cdf + x * pdf) * dout[i];
    }
}
