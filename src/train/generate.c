#include "train/generate.h"
#include "core/error.h"
#include "core/philox.h"
#include "ops/ops.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void mt_generator_init(mt_generator *g, const mt_gpt_layout *l, float *const *params) {
    memset(g, 0, sizeof *g);
    g->l = l;
    g->params = params;
    size_t C = (size_t)l->cfg.n_embd, T = (size_t)l->cfg.seq_len, L = (size_t)l->cfg.n_layer;
    g->kcache = mt_xcalloc(L * T * C, sizeof(float), "KV cache");
    g->vcache = mt_xcalloc(L * T * C, sizeof(float), "KV cache");
    g->x = mt_xcalloc(C, sizeof(float), "generation buffers");
    g->ln = mt_xcalloc(C, sizeof(float), "generation buffers");
    g->qkv = mt_xcalloc(3 * C, sizeof(float), "generation buffers");
    g->att = mt_xcalloc(C, sizeof(float), "generation buffers");
    g->tmp = mt_xcalloc(C, sizeof(float), "generation buffers");
    g->fc = mt_xcalloc(4 * C, sizeof(float), "generation buffers");
    g->fcg = mt_xcalloc(4 * C, sizeof(float), "generation buffers");
    g->logits = mt_xcalloc((size_t)l->cfg.padded_vocab, sizeof(float), "generation buffers");
    g->scores = mt_xcalloc(T, sizeof(float), "generation buffers");
    g->mean = mt_xcalloc(1, sizeof(float), "generation buffers");
    g->rstd = mt_xcalloc(1, sizeof(float), "generation buffers");
}

void mt_generator_free(mt_generator *g) {
    float *bufs[] = {g->kcache, g->vcache, g->x, g->ln, g->qkv, g->att, g->tmp, g->fc, g->fcg, g->logits,
                     g->scores, g->mean, g->rstd};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    memset(g, 0, sizeof *g);
}

const float *mt_generator_step(mt_generator *g, int32_t token) {
    const mt_gpt_config *cfg = &g->l->cfg;
    int C = cfg->n_embd, NH = cfg->n_head, HS = C / NH, T = cfg->seq_len, t = g->pos;
    if (t >= T || token < 0 || token >= cfg->vocab_size) return NULL;
    const mt_unit_layout *eu = &g->l->units[0];
    const float *wte = g->params[0] + eu->t[MT_T_WTE].offset, *wpe = g->params[0] + eu->t[MT_T_WPE].offset;
    for (int c = 0; c < C; c++) g->x[c] = wte[(size_t)token * C + c] + wpe[(size_t)t * C + c];
    for (int l = 0; l < cfg->n_layer; l++) {
        const mt_unit_layout *u = &g->l->units[1 + l];
        const float *p = g->params[1 + l];
#define P(i) (p + u->t[i].offset)
        float *kc = g->kcache + (size_t)l * T * C, *vc = g->vcache + (size_t)l * T * C;
        op_layernorm_forward(g->ln, g->mean, g->rstd, g->x, P(MT_T_LN1_W), P(MT_T_LN1_B), 1, C);
        op_matmul_forward(MT_GEMM_DEFAULT, g->qkv, g->ln, P(MT_T_QKV_W), P(MT_T_QKV_B), 1, C, 3 * C);
        memcpy(kc + (size_t)t * C, g->qkv + C, (size_t)C * sizeof(float));
        memcpy(vc + (size_t)t * C, g->qkv + 2 * C, (size_t)C * sizeof(float));
        float scale = 1.0f / sqrtf((float)HS);
        for (int h = 0; h < NH; h++) {
            const float *q = g->qkv + h * HS;
            float mx = -INFINITY;
            for (int j = 0; j <= t; j++) {
                float s = 0;
                for (int d = 0; d < HS; d++) s += q[d] * kc[(size_t)j * C + h * HS + d];
                g->scores[j] = s * scale;
                mx = fmaxf(mx, g->scores[j]);
            }
            float sum = 0;
            for (int j = 0; j <= t; j++) sum += (g->scores[j] = expf(g->scores[j] - mx));
            float *o = g->att + h * HS;
            for (int d = 0; d < HS; d++) o[d] = 0;
            for (int j = 0; j <= t; j++) {
                float w = g->scores[j] / sum;
                for (int d = 0; d < HS; d++) o[d] += w * vc[(size_t)j * C + h * HS + d];
            }
        }
        op_matmul_forward(MT_GEMM_DEFAULT, g->tmp, g->att, P(MT_T_ATTPROJ_W), P(MT_T_ATTPROJ_B), 1, C, C);
        for (int c = 0; c < C; c++) g->x[c] += g->tmp[c];
        op_layernorm_forward(g->ln, g->mean, g->rstd, g->x, P(MT_T_LN2_W), P(MT_T_LN2_B), 1, C);
        op_matmul_forward(MT_GEMM_DEFAULT, g->fc, g->ln, P(MT_T_FC_W), P(MT_T_FC_B), 1, C, 4 * C);
        op_gelu_forward(g->fcg, g->fc, (size_t)4 * C);
        op_matmul_forward(MT_GEMM_DEFAULT, g->tmp, g->fcg, P(MT_T_FCPROJ_W), P(MT_T_FCPROJ_B), 1, 4 * C, C);
        for (int c = 0; c < C; c++) g->x[c] += g->tmp[c];
#undef P
    }
    const mt_unit_layout *hu = &g->l->units[cfg->n_layer + 1];
    const float *hp = g->params[cfg->n_layer + 1];
    op_layernorm_forward(g->ln, g->mean, g->rstd, g->x, hp + hu->t[MT_T_LNF_W].offset, hp + hu->t[MT_T_LNF_B].offset,
                         1, C);
    op_matmul_forward(MT_GEMM_DEFAULT, g->logits, g->ln, wte, NULL, 1, C, cfg->padded_vocab);
    g->pos++;
    return g->logits;
}

int32_t mt_sample(const float *logits, int V, float temperature, int top_k, uint64_t seed, uint64_t index,
                  float *work) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0.0f) return best;
    float thr = -INFINITY;
    if (top_k > 0 && top_k < V) {
        /* k-th largest logit by partial selection over a copy */
        memcpy(work, logits, (size_t)V * sizeof(float));
        int lo = 0, hi = V - 1, k = top_k - 1;
        while (lo < hi) {
            float pivot = work[(lo + hi) / 2];
            int i = lo, j = hi;
            while (i <= j) {
                while (work[i] > pivot) i++;
                while (work[j] < pivot) j--;
                if (i <= j) { float tmp = work[i]; work[i] = work[j]; work[j] = tmp; i++; j--; }
            }
            if (k <= j) hi = j;
            else if (k >= i) lo = i;
            else break;
        }
        thr = work[k];
    }
    double sum = 0;
    float mx = logits[best];
    for (int i = 0; i < V; i++) sum += logits[i] >= thr ? exp((logits[i] - mx) / temperature) : 0.0;
    mt_u32x4 r = mt_philox4x32((uint32_t)index, (uint32_t)(index >> 32), 0x53414D50u, 0, (uint32_t)seed,
                               (uint32_t)(seed >> 32));
    double u = ((double)r.v[0] + 0.5) / 4294967296.0 * sum, acc = 0;
    for (int i = 0; i < V; i++) {
        if (logits[i] < thr) continue;
        acc += exp((logits[i] - mx) / temperature);
        if (acc >= u) return i;
    }
    return best;
}
