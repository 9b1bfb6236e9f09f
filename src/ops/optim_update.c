/* Optimizer updates on a flat fp32 range, following PyTorch 1.13's
 * single-tensor torch.optim.AdamW / Adam / SGD:
 *   AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
 *          p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)
 *   Adam:  g += wd*p, then the same without the decoupled decay
 *   SGD:   g += wd*p; buf = g (first step) or momentum*buf + g; p -= lr*buf
 * with bc_i = 1 - beta_i^step computed in double (as Python does) and every
 * gradient first multiplied by grad_scale. */
#include "ops/ops.h"
#include <math.h>

#define PAR_MIN 16384

static void adam_core(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                      float beta2, float eps, float decoupled_wd, float l2_wd, int64_t step, float grad_scale) {
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    float step_size = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float pdecay = (float)(1.0 - (double)lr * (double)decoupled_wd);
    float omb1 = (float)(1.0 - (double)beta1), omb2 = (float)(1.0 - (double)beta2);
#pragma omp parallel for simd schedule(static) if (parallel : n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float pi = p[i];
        float gi = g[i] * grad_scale + l2_wd * pi;
        pi *= pdecay;
        float mi = m[i] * beta1 + omb1 * gi;
        float vi = v[i] * beta2 + omb2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi - step_size * (mi / denom);
    }
}

void op_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                     float beta2, float eps, float weight_decay, int64_t step, float grad_scale) {
    adam_core(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, 0.0f, step, grad_scale);
}

void op_adam_update(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int64_t step, float grad_scale) {
    adam_core(p, g, m, v, n, lr, beta1, beta2, eps, 0.0f, weight_decay, step, grad_scale);
}

void op_sgd_update(float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                   float weight_decay, int64_t step, float grad_scale) {
    if (momentum == 0.0f || buf == NULL) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= PAR_MIN)
        for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] * grad_scale + weight_decay * p[i]);
        return;
    }
    int first = step <= 1;
#pragma omp parallel for simd schedule(static) if (parallel : n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale + weight_decay * p[i];
        float b = first ? gi : momentum * buf[i] + gi;
        buf[i] = b;
        p[i] -= lr * b;
    }
}
