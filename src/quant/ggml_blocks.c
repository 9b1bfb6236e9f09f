#include "quant/ggml_blocks.h"
#include "core/dtype.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

void mt_ggml_q8_0_encode(const float *x, size_t n, unsigned char *out) {
    for (size_t b = 0; b < n / MT_GGML_QK; b++, x += MT_GGML_QK, out += 2 + MT_GGML_QK) {
        float amax = 0.0f;
        for (int j = 0; j < MT_GGML_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        mt_fp16 h = mt_fp32_to_fp16(d);
        memcpy(out, &h, 2);
        for (int j = 0; j < MT_GGML_QK; j++) out[2 + j] = (unsigned char)(int8_t)roundf(x[j] * id);
    }
}

void mt_ggml_q4_0_encode(const float *x, size_t n, unsigned char *out) {
    for (size_t b = 0; b < n / MT_GGML_QK; b++, x += MT_GGML_QK, out += 2 + MT_GGML_QK / 2) {
        float amax = 0.0f, m = 0.0f; /* m: the value of largest magnitude, with its sign */
        for (int j = 0; j < MT_GGML_QK; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                m = x[j];
            }
        float d = m / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        mt_fp16 h = mt_fp32_to_fp16(d);
        memcpy(out, &h, 2);
        for (int j = 0; j < MT_GGML_QK / 2; j++) {
            int q0 = (int)(int8_t)(x[j] * id + 8.5f), q1 = (int)(int8_t)(x[MT_GGML_QK / 2 + j] * id + 8.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            out[2 + j] = (unsigned char)(q0 | (q1 << 4));
        }
    }
}

static float block_scale(const unsigned char *p) {
    mt_fp16 h;
    memcpy(&h, p, 2);
    return mt_fp16_to_fp32(h);
}

void mt_ggml_q8_0_decode(const unsigned char *in, size_t n, float *x) {
    for (size_t b = 0; b < n / MT_GGML_QK; b++, in += 2 + MT_GGML_QK, x += MT_GGML_QK) {
        float d = block_scale(in);
        for (int j = 0; j < MT_GGML_QK; j++) x[j] = d * (float)(int8_t)in[2 + j];
    }
}

void mt_ggml_q4_0_decode(const unsigned char *in, size_t n, float *x) {
    const int h = MT_GGML_QK / 2;
    for (size_t b = 0; b < n / MT_GGML_QK; b++, in += 2 + h, x += MT_GGML_QK) {
        float d = block_scale(in);
        for (int j = 0; j < h; j++) {
            x[j] = d * (float)((in[2 + j] & 15) - 8);
            x[h + j] = d * (float)((in[2 + j] >> 4) - 8);
        }
    }
}
