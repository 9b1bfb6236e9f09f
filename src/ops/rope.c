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
 * (angle -a): dpre = R^T dpost; with YaRN's attention factor m multiplying
 * cos and sin, R = m Rot and R^T = m Rot(-a), which the same inverse form
 * with the scaled tables gives. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <math.h>

/* Llama 3.1 (transformers' llama3 rope type): long wavelengths are slowed by
 * `factor`, short ones kept, those between interpolated:
 *   wavelen = 2 pi / f;  wavelen < orig/high: f;  wavelen > orig/low: f/factor;
 *   else s = (orig/wavelen - low)/(high - low), f = (1-s) f/factor + s f.
 * PyTorch evaluates `scalar / tensor` as reciprocal(tensor) * scalar, in
 * fp32, so the two divisions by a tensor are written that way: this gives
 * its frequencies bit for bit (2 pi / f rounded once differs in the last
 * bit for some f, and moves a few interpolated frequencies). */
static void scale_llama3(float *inv_freq, int h, const mt_rope_scaling *s) {
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

/* Dynamic NTK (transformers' dynamic rope type, as its forward computes it
 * from the batch's length, tensor arithmetic in fp32): for a sequence of
 * seq_len > orig the base becomes
 *   theta * (factor seq_len / orig - (factor - 1))^(HS/(HS-2));
 * up to orig the frequencies are the plain ones. */
static float dynamic_base(float theta, int HS, const mt_rope_scaling *s) {
    if (s->seq_len <= s->original_max_position) return theta;
    float grow = s->factor * (float)s->seq_len / (float)s->original_max_position - (float)(s->factor - 1.0);
    return theta * powf(grow, (float)((double)HS / (double)(HS - 2)));
}

/* YaRN (transformers' yarn rope type): dims that turn more than beta_fast
 * times over the original context keep their frequency (extrapolation),
 * those turning fewer than beta_slow times are divided by factor
 * (interpolation), a linear ramp over the dims between; the correction
 * range comes from double arithmetic as there, the ramp and the mix in fp32. */
static double yarn_correction_dim(double rotations, int HS, double theta, double orig) {
    return (HS * log(orig / (rotations * 2.0 * M_PI))) / (2.0 * log(theta));
}

static void scale_yarn(float *inv_freq, int HS, float theta, const mt_rope_scaling *s) {
    int h = HS / 2;
    double fast = s->beta_fast > 0.0f ? s->beta_fast : 32.0, slow = s->beta_slow > 0.0f ? s->beta_slow : 1.0;
    double orig = s->original_max_position;
    double lo = yarn_correction_dim(fast, HS, theta, orig), hi = yarn_correction_dim(slow, HS, theta, orig);
    if (s->truncate) lo = floor(lo), hi = ceil(hi);
    if (lo < 0.0) lo = 0.0;
    if (hi > HS - 1) hi = HS - 1;
    if (lo == hi) hi += 0.001;
    float flo = (float)lo, span = (float)(hi - lo);
    for (int j = 0; j < h; j++) {
        float pos_freq = powf(theta, (float)(2 * j) / (float)HS);
        float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (s->factor * pos_freq);
        float ramp = ((float)j - flo) / span;
        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        float keep = 1.0f - ramp; /* the extrapolation's share */
        inv_freq[j] = interpolation * (1.0f - keep) + extrapolation * keep;
    }
}

void op_rope_inv_freq(mt_backend *be, float *inv_freq, int HS, float theta, const mt_rope_scaling *s) {
    MT_DISPATCH(be, rope_inv_freq, be, inv_freq, HS, theta, s);
    int h = HS / 2;
    int type = s ? s->type : MT_ROPE_NONE;
    if (type == MT_ROPE_YARN) {
        scale_yarn(inv_freq, HS, theta, s);
        return;
    }
    float base = type == MT_ROPE_DYNAMIC ? dynamic_base(theta, HS, s) : theta;
    for (int j = 0; j < h; j++) inv_freq[j] = 1.0f / powf(base, (float)(2 * j) / (float)HS);
    if (type == MT_ROPE_LLAMA3) scale_llama3(inv_freq, h, s);
    if (type == MT_ROPE_LINEAR)
        for (int j = 0; j < h; j++) inv_freq[j] /= s->factor;
}

static double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0; }

float op_rope_attention_factor(mt_backend *be, const mt_rope_scaling *s) {
    MT_DISPATCH_RET(be, rope_attention_factor, be, s);
    if (!s || s->type != MT_ROPE_YARN) return 1.0f;
    if (s->attention_factor > 0.0f) return s->attention_factor;
    if (s->mscale != 0.0f && s->mscale_all_dim != 0.0f)
        return (float)(yarn_mscale(s->factor, s->mscale) / yarn_mscale(s->factor, s->mscale_all_dim));
    return (float)yarn_mscale(s->factor, 1.0);
}

void op_rope_tables(mt_backend *be, float *cos_t, float *sin_t, int T, int HS, float theta, const mt_rope_scaling *s) {
    MT_DISPATCH(be, rope_tables, be, cos_t, sin_t, T, HS, theta, s);
    float inv[512]; /* HS <= 1024 (the family's check) */
    op_rope_inv_freq(be, inv, HS, theta, s);
    op_rope_table(be, cos_t, sin_t, inv, T, HS);
    float a = op_rope_attention_factor(be, s);
    if (a == 1.0f) return;
    size_t n = (size_t)T * (size_t)(HS / 2);
    for (size_t i = 0; i < n; i++) cos_t[i] *= a, sin_t[i] *= a;
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
