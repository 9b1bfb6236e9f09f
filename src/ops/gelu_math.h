/* GELU (tanh approximation) of one element and its derivative, shared by
 * the plain and the fused kernels so they agree bit for bit. Private to
 * src/ops. With 1 + tanh(u) = 2 s, s = sigmoid(2u) = 1 / (1 + exp(-2u)):
 *   gelu(x)  = x s,  u = sqrt(2/pi) (x + 0.044715 x^3)
 *   gelu'(x) = s + 2 x s (1 - s) u',  u' = sqrt(2/pi) (1 + 3*0.044715 x^2)
 * One vectorisable exp per element, no tanh call. */
#ifndef MT_OPS_GELU_MATH_H
#define MT_OPS_GELU_MATH_H
#include "ops/vmath.h"

#define MT_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define MT_GELU_A 0.044715f

static inline float mt_gelu1(float x) {
    float u = MT_GELU_K * (x + MT_GELU_A * x * x * x);
    float s = 1.0f / (1.0f + mt_vexpf(-2.0f * u));
    return x * s;
}

static inline float mt_gelu_grad1(float x) {
    float x2 = x * x;
    float u = MT_GELU_K * (x + MT_GELU_A * x2 * x);
    float du = MT_GELU_K * (1.0f + 3.0f * MT_GELU_A * x2);
    float s = 1.0f / (1.0f + mt_vexpf(-2.0f * u));
    return s + 2.0f * x * s * (1.0f - s) * du;
}

#endif
