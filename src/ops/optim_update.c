/* Optimizer updates on a flat fp32 range, following PyTorch 1.13's
 * single-tensor torch.optim.AdamW / Adam / SGD:
 *   AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
 *          p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)
 *   Adam:  g += wd*p, then the same without the decoupled decay
 *   SGD:   g += wd*p; buf = g (first step) or momentum*buf + g; p -= lr*buf
 *   AdaGrad: g += wd*p; sum += g*g (first step: init + g*g); p += (-clr*g) / (sqrt(sum) + eps)
 * with bc_i = 1 - beta_i^step computed in double (as Python does) and every
 * gradient first multiplied by grad_scale. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <math.h>
#include <omp.h>

#define PAR_MIN 16384

/* The step's constants of Adam / AdamW. */
typedef struct {
    float beta1, beta2, omb1, omb2, eps, step_size, bc2_sqrt, pdecay, l2_wd, grad_scale;
} adam_consts;

static adam_consts adam_setup(float lr, float beta1, float beta2, float eps, float decoupled_wd, float l2_wd,
                              int64_t step, float grad_scale) {
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    return (adam_consts){beta1, beta2, (float)(1.0 - (double)beta1), (float)(1.0 - (double)beta2), eps,
                         (float)((double)lr / bc1), (float)sqrt(bc2), (float)(1.0 - (double)lr * (double)decoupled_wd),
                         l2_wd, grad_scale};
}

/* One element's update: returns the new parameter, updates *m and *v. */
static inline float adam_element(const adam_consts *c, float pi, float gi, float *m, float *v) {
    gi = gi * c->grad_scale + c->l2_wd * pi;
    pi *= c->pdecay;
    float mi = *m * c->beta1 + c->omb1 * gi;
    float vi = *v * c->beta2 + c->omb2 * gi * gi;
    *m = mi;
    *v = vi;
    float denom = sqrtf(vi) / c->bc2_sqrt + c->eps;
    return pi - c->step_size * (mi / denom);
}

static void adam_core(float *p, const float *g, float *m, float *v, size_t n, adam_consts c) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) p[i] = adam_element(&c, p[i], g[i], &m[i], &v[i]);
}

void op_adamw_update(mt_backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                     float beta2, float eps, float weight_decay, int64_t step, float grad_scale) {
    MT_DISPATCH(be, adamw_update, be, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
    adam_core(p, g, m, v, n, adam_setup(lr, beta1, beta2, eps, weight_decay, 0.0f, step, grad_scale));
}

void op_adam_update(mt_backend *be, float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int64_t step, float grad_scale) {
    MT_DISPATCH(be, adam_update, be, p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
    adam_core(p, g, m, v, n, adam_setup(lr, beta1, beta2, eps, 0.0f, weight_decay, step, grad_scale));
}

/* Element i of the bf16 one-pass update (adam_core_16). */
static inline void adam_element_bf16(const adam_consts *c, float *p, const uint16_t *g16, uint16_t *p16, float *m,
                                     float *v, size_t i) {
    p[i] = adam_element(c, p[i], mt_bf16_to_fp32(g16[i]), &m[i], &v[i]);
    p16[i] = mt_fp32_to_bf16(p[i]);
}

#ifdef MT_BF16_X16
/* adam_element on 16 lanes: the same operations in the same order (the
 * build does not contract a*b + c into fused multiply-adds), so the same
 * bits. */
static inline __m512 adam_x16(const adam_consts *c, __m512 p, __m512 g, float *m, float *v) {
    g = _mm512_add_ps(_mm512_mul_ps(g, _mm512_set1_ps(c->grad_scale)), _mm512_mul_ps(_mm512_set1_ps(c->l2_wd), p));
    p = _mm512_mul_ps(p, _mm512_set1_ps(c->pdecay));
    __m512 mi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(m), _mm512_set1_ps(c->beta1)),
                              _mm512_mul_ps(_mm512_set1_ps(c->omb1), g));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v), _mm512_set1_ps(c->beta2)),
                              _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(c->omb2), g), g));
    _mm512_storeu_ps(m, mi);
    _mm512_storeu_ps(v, vi);
    __m512 denom =
        _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), _mm512_set1_ps(c->bc2_sqrt)), _mm512_set1_ps(c->eps));
    return _mm512_sub_ps(p, _mm512_mul_ps(_mm512_set1_ps(c->step_size), _mm512_div_ps(mi, denom)));
}

/* The bf16 update of [lo, hi): the 16-bit parameters are written with
 * streaming stores where aligned -- the next forward reads them long after,
 * and skipping the read-for-ownership of their lines saved 3-10% of this
 * memory-bound pass (measured, 124M elements). */
static void adam_bf16_range(float *p, const uint16_t *g16, uint16_t *p16, float *m, float *v, size_t lo, size_t hi,
                            const adam_consts *c) {
    size_t i = lo;
    for (; i < hi && ((uintptr_t)(p16 + i) & 31); i++) adam_element_bf16(c, p, g16, p16, m, v, i); /* to 32 bytes */
    for (; i + 16 <= hi; i += 16) {
        __m512 g = mt_bf16_to_fp32_x16(_mm256_loadu_si256((const __m256i *)(g16 + i)));
        __m512 pi = adam_x16(c, _mm512_loadu_ps(p + i), g, m + i, v + i);
        _mm512_storeu_ps(p + i, pi);
        _mm256_stream_si256((__m256i *)(p16 + i), mt_fp32_to_bf16_x16(pi));
    }
    _mm_sfence(); /* streaming stores are weakly ordered: visible before p16 is read */
    for (; i < hi; i++) adam_element_bf16(c, p, g16, p16, m, v, i);
}
#endif

/* Mixed precision in one pass: the gradient read in 16 bits, the updated
 * fp32 master also rounded into the 16-bit parameters. The conversions are
 * the scalar forms of core/dtype.h (or their 16-lane forms), which round
 * exactly alike, so the result is bitwise that of widening, updating and
 * rounding in separate passes -- without the passes (~30% of a bf16 update
 * measured on GPT-2 124M). */
static void adam_core_16(float *p, const uint16_t *g16, uint16_t *p16, mt_dtype dt, float *m, float *v, size_t n,
                         adam_consts c) {
#ifdef MT_BF16_X16
    if (dt == MT_BF16) {
#pragma omp parallel if (n >= PAR_MIN)
        {
            size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
            adam_bf16_range(p, g16, p16, m, v, n * t / nt, n * (t + 1) / nt, &c);
        }
        return;
    }
#endif
    if (dt == MT_BF16) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= PAR_MIN)
        for (size_t i = 0; i < n; i++) adam_element_bf16(&c, p, g16, p16, m, v, i);
    } else {
#pragma omp parallel for simd schedule(static) if (parallel : n >= PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            float pi = adam_element(&c, p[i], mt_fp16_to_fp32(g16[i]), &m[i], &v[i]);
            p[i] = pi;
            p16[i] = mt_fp32_to_fp16(pi);
        }
    }
}

void op_adamw_update_16(mt_backend *be, float *p, const uint16_t *g16, uint16_t *p16, mt_dtype dt, float *m, float *v,
                        size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                        float grad_scale) {
    MT_DISPATCH(be, adamw_update_16, be, p, g16, p16, dt, m, v, n, lr, beta1, beta2, eps, weight_decay, step,
                grad_scale);
    adam_core_16(p, g16, p16, dt, m, v, n, adam_setup(lr, beta1, beta2, eps, weight_decay, 0.0f, step, grad_scale));
}

void op_adam_update_16(mt_backend *be, float *p, const uint16_t *g16, uint16_t *p16, mt_dtype dt, float *m, float *v,
                       size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                       float grad_scale) {
    MT_DISPATCH(be, adam_update_16, be, p, g16, p16, dt, m, v, n, lr, beta1, beta2, eps, weight_decay, step,
                grad_scale);
    adam_core_16(p, g16, p16, dt, m, v, n, adam_setup(lr, beta1, beta2, eps, 0.0f, weight_decay, step, grad_scale));
}

void op_sgd_update(mt_backend *be, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                   float weight_decay, int64_t step, float grad_scale) {
    MT_DISPATCH(be, sgd_update, be, p, g, buf, n, lr, momentum, weight_decay, step, grad_scale);
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

/* PyTorch 1.13's _single_tensor_adagrad: state_sum starts at
 * initial_accumulator and takes addcmul_(g, g, value=1); the parameter takes
 * addcdiv_(g, sqrt(sum) + eps, value=-clr), which computes p + (-clr * g) / std
 * in float with clr rounded from Python's double. The fresh state here is
 * zeros (ZeRO padding, disk offload), so step 1 writes init + g*g -- the same
 * bits as PyTorch's init + 1*g*g. The weight decay (PyTorch's add with
 * alpha, an explicit fmadd in its vector kernel) and the sum (its addcmul,
 * contracted into a fused multiply-add where PyTorch's kernels are compiled
 * with FMA) are fused here too: bitwise PyTorch's results on an FMA CPU
 * (tests/check_adagrad.sh counts the unequal elements). */
void op_adagrad_update(mt_backend *be, float *p, const float *g, float *sum, size_t n, float lr, float lr_decay,
                       float initial_accumulator, float eps, float weight_decay, int64_t step, float grad_scale) {
    MT_DISPATCH(be, adagrad_update, be, p, g, sum, n, lr, lr_decay, initial_accumulator, eps, weight_decay, step,
                grad_scale);
    float neg_clr = (float)-((double)lr / (1.0 + (double)(step - 1) * (double)lr_decay));
    int first = step <= 1;
#pragma omp parallel for simd schedule(static) if (parallel : n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float gi = fmaf(p[i], weight_decay, g[i] * grad_scale);
        float s = fmaf(gi, gi, first ? initial_accumulator : sum[i]);
        sum[i] = s;
        p[i] = p[i] + neg_clr * gi / (sqrtf(s) + eps);
    }
}
