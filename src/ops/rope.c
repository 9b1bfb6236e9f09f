/* Rotary position embeddings, Hugging Face's half-split ("rotate_half")
 * convention: within a head of HS dims, dims j and j + HS/2 (j < HS/2) form
 * a pair rotated by the angle pos * inv_freq[j]:
 *   x'[j] = x[j] cos - x[j+h] sin,   x'[j+h] = x[j+h] cos + x[j] sin.
 * The frequencies and angles are computed in fp32 the way transformers does
 * (1 / theta^(2j/HS); angle = (float)pos * inv_freq): against PyTorch 1.13
 * the angles agree bit for bit, the frequencies too but where its pow is
 * one ulp off the rounded one (1 of 64 seen); cos/sin of the fp32 angle
 * come from double, correctly rounded, within one ulp of torch's.
 * The rotation is orthogonal, so the backward is the inverse rotation
 * (angle -a): dpre = R^T dpost. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <math.h>

void op_rope_inv_freq(mt_backend *be, float *inv_freq, int HS, float theta, const mt_rope_scaling *s) {
    MT_DISPATCH(be, rope_inv_freq, be, inv_freq, HS, theta, s);
    int h = HS / 2;
    for (int j = 0; j < h; j++) inv_freq[j] = 1.0f / powf(theta, (float)(2 * j) / (float)HS);
    if (!s || s->type != 1) return;
    /* Llama 3.1 (transformers' llama3 rope type): long wavelengths are
     * slowed by `factor`, short ones kept, those between interpolated:
     *   wavelen = 2 pi / f;  wavelen < orig/high: f;  wavelen > orig/low: f/factor;
     *   else s = (orig/wavelen - low)/(high - low), f = (1-s) f/factor + s f.
     * PyTorch evaluates `scalar / tensor` as reciprocal(tensor) * scalar, in
     * fp32, so the two divisions by a tensor are written that way: this
     * gives its frequencies bit for bit (2 pi / f rounded once differs in
     * the last bit for some f, and moves a few interpolated frequencies). */
    float old = (float)s->original_max_position;
    float low_wavelen = old / s->low_freq_factor, high_wavelen = old / s->high_freq_factor;
    for (int j = 0; j < h; j++) {
        float f = inv_freq[j], wavelen = (1.0f / f) * (float)(2.0 * M_PI);
        if (wavelen < high_wavelen) continue;
        if (wavelen > low_wavelen) {
            inv_freq[j] = f / s->factor;
            continue;
        }
        float smooth = ((1.0f / wavelen) * old - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
        inv_freq[j] = (1.0f - smooth) * f / s->factor + smooth * f;
    }
}

void op_rope_table(mt_backend *be, float *cos_t, float *sin_t, const float *inv_freq, int T, int HS) {
    MT_DISPATCH(be, rope_table, be, cos_t, sin_t, inv_freq, T, HS);
    int h = HS / 2;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < h; j++) {
            float a = (float)t * inv_freq[j];
            cos_t[(size_t)t * h + j] = (float)cos((double)a);
            sin_t[(size_t)t * h + j] = (float)sin((double)a);
        }
}

void op_rope_apply(mt_backend *be, float *x, int N, int T, int nh, int HS, size_t ld, const float *cos_t,
                   const float *sin_t, int inverse) {
    MT_DISPATCH(be, rope_apply, be, x, N, T, nh, HS, ld, cos_t, sin_t, inverse);
    int h = HS / 2;
    float sgn = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *c = cos_t + (size_t)(i % T) * h, *s = sin_t + (size_t)(i % T) * h;
        for (int k = 0; k < nh; k++) {
            float *a = x + (size_t)i * ld + (size_t)k * HS, *b = a + h;
#pragma omp simd
            for (int j = 0; j < h; j++) {
                float sj = sgn * s[j], aj = a[j], bj = b[j];
                a[j] = aj * c[j] - bj * sj;
                b[j] = bj * c[j] + aj * sj;
            }
        }
    }
}
