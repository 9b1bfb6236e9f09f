/* One query row's causal attention over a KV cache (generation's decode
 * step): softmax(q . k_j / sqrt(hd)) over positions j <= t, times v_j. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <math.h>

void op_attention_decode(mt_backend *be, const float *q, const float *kc, const float *vc, size_t ld, int t, int hd,
                         float *scores, float *out) {
    MT_DISPATCH(be, attention_decode, be, q, kc, vc, ld, t, hd, scores, out);
    float scale = 1.0f / sqrtf((float)hd), mx = -INFINITY;
    for (int j = 0; j <= t; j++) {
        float s = 0;
        for (int e = 0; e < hd; e++) s += q[e] * kc[(size_t)j * ld + e];
        scores[j] = s * scale;
        mx = fmaxf(mx, scores[j]);
    }
    float sum = 0;
    for (int j = 0; j <= t; j++) sum += (scores[j] = expf(scores[j] - mx));
    for (int e = 0; e < hd; e++) out[e] = 0;
    for (int j = 0; j <= t; j++) {
        float w = scores[j] / sum;
        for (int e = 0; e < hd; e++) out[e] += w * vc[(size_t)j * ld + e];
    }
}
