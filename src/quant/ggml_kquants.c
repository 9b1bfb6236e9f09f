/* K-quants: see ggml_kquants.h. Every expression keeps ggml's fp32
 * evaluation order (which operand is multiplied first, the sums' order):
 * a different order moves a candidate's error by an ulp and can pick
 * another grid. */
#include "quant/ggml_kquants.h"
#include "core/dtype.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

#define QK_K MT_GGML_QK_K

/* Round to nearest, ties to even, by adding 1.5 * 2^23 (|v| < 2^22). */
static int round_nearest(float v) {
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static void put_fp16(unsigned char *p, float v) {
    mt_fp16 h = mt_fp32_to_fp16(v);
    memcpy(p, &h, 2);
}
static float get_fp16(const unsigned char *p) {
    mt_fp16 h;
    memcpy(&h, p, 2);
    return mt_fp16_to_fp32(h);
}

/* Q4_K's sub-block fit: x ~ scale * q + min (q in 0..nmax, min <= 0) by
 * weighted squared error over the grids (nmax - 1 + 0.1 s) / (max - min),
 * s = 0..20, each refitted by least squares. Returns the scale, *neg_min
 * = -min, q in L. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, uint8_t *cand) {
    const float rmin = -1.0f, rdelta = 0.1f;
    const int nstep = 20;
    float lo = x[0], hi = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        memset(L, 0, (size_t)n);
        *neg_min = -lo;
        return 0.0f;
    }
    float iscale = nmax / (hi - lo), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clamp_int(round_nearest(iscale * (x[i] - lo)), 0, nmax);
        float diff = scale * L[i] + lo - x[i];
        best += w[i] * (diff * diff);
    }
    for (int s = 0; s <= nstep; s++) {
        iscale = (rmin + rdelta * s + nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clamp_int(round_nearest(iscale * (x[i] - lo)), 0, nmax);
            cand[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D <= 0) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D, this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * cand[i] + this_min - x[i];
            err += w[i] * (diff * diff);
        }
        if (err < best) {
            memcpy(L, cand, (size_t)n);
            best = err;
            scale = this_scale;
            lo = this_min;
        }
    }
    *neg_min = -lo;
    return scale;
}

/* The 6-bit scale and min of sub-block j from Q4_K's 12 packed bytes. */
static void q4_k_scale_min(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

void mt_ggml_q4_k_encode(const float *x, size_t n, unsigned char *out) {
    uint8_t L[QK_K], cand[32];
    float w[32], scales[QK_K / 32], mins[QK_K / 32];
    for (size_t b = 0; b < n / QK_K; b++, x += QK_K, out += MT_GGML_Q4_K_BYTES) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
            float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = fit_scale_min(32, 15, x + 32 * j, w, L + 32 * j, &mins[j], cand);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        uint8_t *packed = out + 4, *q = out + 16;
        memset(packed, 0, 12);
        float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f, inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < QK_K / 32; j++) {
            uint8_t ls = (uint8_t)round_nearest(inv_scale * scales[j]), lm = (uint8_t)round_nearest(inv_min * mins[j]);
            ls = ls < 63 ? ls : 63;
            lm = lm < 63 ? lm : 63;
            if (j < 4) {
                packed[j] = ls;
                packed[j + 4] = lm;
            } else {
                packed[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
                packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
                packed[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        put_fp16(out, max_scale / 63.f);
        put_fp16(out + 2, max_min / 63.f);
        float d_all = get_fp16(out), dmin_all = get_fp16(out + 2);
        for (int j = 0; j < QK_K / 32; j++) {
            int sc, m;
            q4_k_scale_min(j, packed, &sc, &m);
            float d = d_all * sc;
            if (!d) continue; /* the fit's values stay */
            float dm = dmin_all * m;
            for (int i = 0; i < 32; i++) L[32 * j + i] = (uint8_t)clamp_int(round_nearest((x[32 * j + i] + dm) / d), 0, 15);
        }
        for (int j = 0; j < QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

void mt_ggml_q4_k_decode(const unsigned char *in, size_t n, float *x) {
    for (size_t b = 0; b < n / QK_K; b++, in += MT_GGML_Q4_K_BYTES) {
        float d = get_fp16(in), dmin = get_fp16(in + 2);
        const uint8_t *packed = in + 4, *q = in + 16;
        for (int j = 0; j < QK_K / 32; j += 2, q += 32) {
            int sc0, m0, sc1, m1;
            q4_k_scale_min(j, packed, &sc0, &m0);
            q4_k_scale_min(j + 1, packed, &sc1, &m1);
            float d0 = d * sc0, n0 = dmin * m0, d1 = d * sc1, n1 = dmin * m1;
            for (int l = 0; l < 32; l++) *x++ = d0 * (q[l] & 0xF) - n0;
            for (int l = 0; l < 32; l++) *x++ = d1 * (q[l] >> 4) - n1;
        }
    }
}

/* Q6_K's sub-block scale: q = clamp(round(x / scale), -nmax, nmax - 1),
 * the grid -(nmax + 0.1 s) / max (s = -9..9) whose least-squares scale
 * (weights x^2) explains most; L holds q + nmax. */
static float fit_scale(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clamp_int(round_nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int s = -9; s <= 9; s++) {
        if (!s) continue;
        iscale = -(nmax + 0.1f * s) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clamp_int(round_nearest(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + clamp_int(round_nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

void mt_ggml_q6_k_encode(const float *x, size_t n, unsigned char *out) {
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (size_t b = 0; b < n / QK_K; b++, x += QK_K, out += MT_GGML_Q6_K_BYTES) {
        uint8_t *ql = out, *qh = out + 128;
        int8_t *sc = (int8_t *)(out + 192);
        float max_scale = 0, max_abs = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = fit_scale(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs) {
                max_abs = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_abs < 1e-15f) {
            memset(out, 0, MT_GGML_Q6_K_BYTES);
            continue;
        }
        float iscale = -128.f / max_scale;
        put_fp16(out + 208, 1 / iscale);
        for (int j = 0; j < QK_K / 16; j++) {
            int v = round_nearest(iscale * scales[j]);
            sc[j] = (int8_t)(v < 127 ? v : 127);
        }
        float d_all = get_fp16(out + 208);
        for (int j = 0; j < QK_K / 16; j++) {
            float d = d_all * sc[j];
            if (!d) continue; /* the fit's values stay */
            for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(clamp_int(round_nearest(x[16 * j + i] / d), -32, 31) + 32);
        }
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32)
            for (int l = 0; l < 32; l++) {
                int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
                ql[l] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
                ql[l + 32] = (uint8_t)((q2 & 0xF) | ((q4 & 0xF) << 4));
                qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
    }
}

void mt_ggml_q6_k_decode(const unsigned char *in, size_t n, float *x) {
    for (size_t b = 0; b < n / QK_K; b++, in += MT_GGML_Q6_K_BYTES) {
        float d = get_fp16(in + 208);
        const uint8_t *ql = in, *qh = in + 128;
        const int8_t *sc = (const int8_t *)(in + 192);
        for (int h = 0; h < QK_K; h += 128, x += 128, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                x[l] = d * sc[is] * q1;
                x[l + 32] = d * sc[is + 2] * q2;
                x[l + 64] = d * sc[is + 4] * q3;
                x[l + 96] = d * sc[is + 6] * q4;
            }
    }
}
