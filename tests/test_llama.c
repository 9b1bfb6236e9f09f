/* The Llama family: layout (names, shapes, the tied head as a shared
 * tensor), config and tensor-parallel errors, the RoPE tables (Llama 3.1
 * scaling), the whole model's backward against central finite differences
 * (GQA, untied; tied with q/k/v biases and rope scaling), and greedy
 * decoding with the KV cache against the argmax of a full forward at every
 * position. */
#include "models/decode.h"
#include "models/llama/llama.h"
#include "models/model.h"
#include "core/philox.h"
#include "ops/ops.h"
#include "testlib.h"
#include <stdlib.h>
#include <string.h>

static mt_model_config tiny(int tie, int bias, int scaling) {
    mt_model_config c;
    memset(&c, 0, sizeof c);
    mt_model_config_defaults(&c, MT_FAMILY_LLAMA);
    c.n_layer = 2;
    c.n_embd = 32;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.head_dim = 8;
    c.ffn_dim = 48;
    c.vocab_size = 61;
    c.padded_vocab = 64;
    c.seq_len = 64;
    c.max_pos = 64;
    c.rope_theta = 10000.0f;
    c.tie_embeddings = tie;
    c.qkv_bias = bias;
    if (scaling) {
        c.rope_scaling = 1;
        c.rope_factor = 8.0f;
        c.rope_low_freq_factor = 1.0f;
        c.rope_high_freq_factor = 4.0f;
        c.rope_original_max_pos = 16; /* small, so the scaling touches this head size */
    }
    return c;
}

static void test_layout_and_errors(void) {
    mt_model_config c = tiny(0, 1, 0);
    mt_error err;
    CHECK(mt_model_config_validate(&c, &err) == 0, "%s", err.msg);
    mt_layout l;
    mt_model_layout_build(&c, 1, 0, &l);
    CHECK(l.n_units == 4, "%d units", l.n_units);
    int u = -1;
    const mt_tensor *k = mt_layout_find_tensor(&l, "model.layers.1.self_attn.k_proj.weight", &u);
    CHECK(k && u == 2 && k->shape[0] == 16 && k->shape[1] == 32, "k_proj");
    const mt_tensor *q = mt_layout_find_tensor(&l, "model.layers.1.self_attn.q_proj.weight", NULL);
    const mt_tensor *v = mt_layout_find_tensor(&l, "model.layers.1.self_attn.v_proj.weight", NULL);
    CHECK(q && v && k->offset == q->offset + q->numel && v->offset == k->offset + k->numel, "q|k|v contiguous");
    CHECK(mt_layout_find_tensor(&l, "model.layers.0.self_attn.v_proj.bias", NULL) != NULL, "qkv bias");
    CHECK(mt_layout_find_tensor(&l, "lm_head.weight", &u) && u == 3, "untied head in the output unit");
    CHECK(l.units[3].shared_unit == -1, "untied: nothing shared");
    mt_layout_free(&l);
    c = tiny(1, 0, 0);
    mt_model_layout_build(&c, 1, 0, &l);
    CHECK(!mt_layout_find_tensor(&l, "lm_head.weight", NULL), "tied: no lm_head storage");
    CHECK(l.units[3].n_shared == 1 && l.units[3].shared_unit == 0 && !strcmp(l.units[3].shared[0].name, "lm_head.weight"),
          "tied head declared shared with the embedding");
    mt_layout_free(&l);
    /* tensor parallelism: tp 2 cuts q by heads and k/v by kv heads */
    mt_model_layout_build(&c, 2, 1, &l);
    k = mt_layout_find_tensor(&l, "model.layers.0.self_attn.k_proj.weight", NULL);
    CHECK(k->shape[0] == 8 && mt_tensor_row_origin(&l, k, 0) == 8 * 32, "tp rank 1's k rows");
    mt_layout_free(&l);
    /* tp 4 > kv 2: each kv head on 2 ranks; tp 3 neither divides the kv heads nor is a multiple */
    CHECK(mt_model_tp_check(&c, 4, &err) == 0, "tp 4 with 2 kv heads: %s", err.msg);
    mt_model_layout_build(&c, 4, 3, &l);
    k = mt_layout_find_tensor(&l, "model.layers.0.self_attn.k_proj.weight", NULL);
    CHECK(k->tp_replicas == 2 && k->shape[0] == 8 && mt_tensor_row_origin(&l, k, 0) == 8 * 32, "rank 3 holds kv head 1");
    mt_layout_free(&l);
    mt_model_config six = c;
    six.n_head = 6;
    six.head_dim = 8;
    CHECK(mt_model_tp_check(&six, 3, &err) != 0 && strstr(err.msg, "key/value heads"), "tp 3, 2 kv heads: %s", err.msg);
    mt_model_config bad = c;
    bad.n_kv_head = 3;
    char shown[MT_ERROR_LEN]; /* as the CLI says it: {option} names as --option */
    CHECK(mt_model_config_validate(&bad, &err) != 0 && (mt_render_options(err.msg, "--", shown, sizeof shown), 1) &&
              strstr(shown, "--kv-heads"), "%s", err.msg);
    bad = c;
    bad.head_dim = 7;
    CHECK(mt_model_config_validate(&bad, &err) != 0 && strstr(err.msg, "even"), "%s", err.msg);
    bad = c;
    bad.dropout = 0.1f;
    CHECK(mt_model_config_validate(&bad, &err) != 0 && strstr(err.msg, "dropout"), "%s", err.msg);
}

static void test_rope(void) {
    /* Llama 3.1 8B: theta 500000, factor 8, low 1, high 4, original 8192,
     * head_dim 128: high frequencies unchanged, low ones divided by 8 */
    float plain[64], scaled[64];
    mt_rope_scaling s = {.type = 1, .factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f, .original_max_position = 8192};
    op_rope_inv_freq(BE, plain, 128, 500000.0f, NULL);
    op_rope_inv_freq(BE, scaled, 128, 500000.0f, &s);
    CHECK(scaled[0] == plain[0] && scaled[10] == plain[10], "high frequencies kept");
    CHECK_CLOSE(scaled[63], plain[63] / 8.0f, 1e-7);
    int mid = 0;
    for (int j = 0; j < 64; j++) mid += scaled[j] != plain[j] && fabsf(scaled[j] - plain[j] / 8.0f) > 1e-12f * plain[j];
    CHECK(mid > 0, "some frequencies interpolated");
    /* rotation then inverse rotation is the identity; the rotation keeps norms */
    enum { T = 5, NH = 3, HS = 8 };
    float cs[T * HS / 2], sn[T * HS / 2], x[T * NH * HS], y[T * NH * HS];
    op_rope_table(BE, cs, sn, plain + 60, T, HS); /* any frequencies */
    for (int i = 0; i < T * NH * HS; i++) x[i] = y[i] = sinf(0.37f * (float)i) + 0.1f;
    op_rope_apply(BE, y, T, T, NH, HS, NH * HS, cs, sn, 0);
    double n0 = 0, n1 = 0, back = 0;
    for (int i = 0; i < T * NH * HS; i++) n0 += (double)x[i] * x[i], n1 += (double)y[i] * y[i];
    CHECK_CLOSE(n1, n0, 1e-6);
    /* position 0 is not rotated; the pair (j, j + HS/2) is */
    CHECK(y[0] == x[0] && y[HS / 2] == x[HS / 2], "position 0 unrotated");
    double a = (double)(1.0f * (plain + 60)[1]); /* position 1, pair 1 */
    double want = x[NH * HS + 1] * cos(a) - x[NH * HS + 1 + HS / 2] * sin(a);
    CHECK_CLOSE(y[NH * HS + 1], want, 1e-6);
    op_rope_apply(BE, y, T, T, NH, HS, NH * HS, cs, sn, 1);
    for (int i = 0; i < T * NH * HS; i++) back = fmax(back, fabs((double)y[i] - x[i]));
    CHECK(back < 1e-6, "inverse: %.3g", back);
}

static void fill_batch(mt_model *m, int V, uint64_t seed) {
    int N = m->acts.B * m->acts.T;
    for (int i = 0; i < N; i++) {
        mt_u32x4 r = mt_philox4x32((uint32_t)i, 9, 0, 0, (uint32_t)seed, 1);
        m->acts.tokens[i] = (int32_t)(r.v[0] % (uint32_t)V);
        m->acts.targets[i] = (int32_t)(r.v[1] % (uint32_t)V);
    }
    for (int b = 0; b < m->acts.B; b++) m->acts.sample_ids[b] = (uint64_t)b;
}

/* Central differences of the mean loss against the backward, a few entries
 * of every tensor. */
static void gradcheck(mt_model_config c, const char *what) {
    c.seq_len = 8;
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_model m;
    mt_model_create(&m, BE, &c, 2, 8, 7, &mem);
    for (int u = 0; u < m.layout.n_units; u++) /* larger weights than 0.02 so the loss moves measurably */
        for (size_t i = 0; i < m.layout.units[u].numel; i++) {
            mt_u32x4 r = mt_philox4x32((uint32_t)i, (uint32_t)u, 3, 0, 11, 0);
            m.params[u][i] = m.params[u][i] * 3.0f + 0.05f * ((float)(r.v[0] >> 8) / 16777216.0f - 0.5f);
        }
    fill_batch(&m, c.vocab_size, 3);
    mt_fwd_ctx fc = {1, 0, 0.0f, 0.0f};
    double count = 16;
    mt_model_zero_grads(&m);
    mt_model_forward(&m, &fc, (float)(1.0 / count));
    mt_model_backward(&m, &fc);
    int checked = 0, bad = 0;
    double worst = 0;
    for (int u = 0; u < m.layout.n_units; u++) {
        const mt_unit_layout *ul = &m.layout.units[u];
        for (int ti = 0; ti < ul->n_tensors; ti++) {
            const mt_tensor *t = &ul->t[ti];
            size_t lim = (size_t)t->init_rows * (size_t)t->shape[1];
            for (int k = 0; k < 4; k++) {
                size_t idx = t->offset + (size_t)((k * 7919u + 13u) % lim);
                float *p = &m.params[u][idx], old = *p, h = 2e-3f;
                *p = old + h;
                double lp = mt_model_forward(&m, &fc, 0.0f) / count;
                *p = old - h;
                double lm = mt_model_forward(&m, &fc, 0.0f) / count;
                *p = old;
                double fd = (lp - lm) / (2.0 * h), an = m.grads[u][idx];
                double err = fabs(fd - an) / fmax(1e-2, fabs(fd) + fabs(an));
                worst = fmax(worst, err);
                checked++;
                if (err > 1e-2) {
                    bad++;
                    fprintf(stderr, "  %s[%zu]: analytic %.6g finite-diff %.6g\n", t->name, idx - t->offset, an, fd);
                }
            }
        }
    }
    CHECK(bad == 0, "%s: %d of %d gradient entries disagree (worst rel %.3g)", what, bad, checked, worst);
    printf("gradcheck %s: %d entries, worst relative error %.3g\n", what, checked, worst);
    mt_model_free(&m);
}

/* Greedy decoding with the KV cache from a prompt equals, at every
 * position, the argmax of one full forward over the whole sequence. */
static void decode_vs_forward(mt_model_config c, const char *what) {
    enum { T = 64 };
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_model m;
    mt_model_create(&m, BE, &c, 1, T, 5, &mem);
    for (int u = 0; u < m.layout.n_units; u++) /* weights large enough for peaked, varied predictions */
        for (size_t i = 0; i < m.layout.units[u].numel; i++) m.params[u][i] *= 8.0f;
    mt_decoder d;
    mt_decoder_init(&d, BE, &c, &m.layout, m.params);
    int32_t seq[T + 1];
    seq[0] = 7;
    int distinct = 0;
    for (int t = 0; t < T; t++) {
        const float *lg = mt_decoder_step(&d, seq[t]);
        int best = 0;
        for (int i = 1; i < c.vocab_size; i++)
            if (lg[i] > lg[best]) best = i;
        seq[t + 1] = best;
        distinct += t == 0 || seq[t + 1] != seq[t];
    }
    CHECK(mt_decoder_step(&d, 1) == NULL, "context limit");
    for (int t = 0; t < T; t++) {
        m.acts.tokens[t] = seq[t];
        m.acts.targets[t] = 0;
    }
    m.acts.sample_ids[0] = 0;
    mt_fwd_ctx fc = {0, 0, 0.0f, 0.0f};
    mt_model_forward(&m, &fc, 0.0f);
    int agree = 0;
    for (int t = 0; t < T; t++) {
        const float *row = m.acts.logits + (size_t)t * c.padded_vocab;
        int best = 0;
        for (int i = 1; i < c.vocab_size; i++)
            if (row[i] > row[best]) best = i;
        agree += best == seq[t + 1];
    }
    CHECK(agree == T, "%s: greedy with the KV cache agrees with the full forward at %d of %d positions", what, agree, T);
    printf("decode %s: %d/%d positions agree, %d token changes\n", what, agree, T, distinct);
    mt_decoder_free(&d);
    mt_model_free(&m);
}

int main(void) {
    test_layout_and_errors();
    test_rope();
    gradcheck(tiny(0, 0, 0), "untied GQA");
    gradcheck(tiny(1, 1, 1), "tied, q/k/v biases, llama3 rope");
    decode_vs_forward(tiny(0, 0, 0), "untied");
    decode_vs_forward(tiny(1, 1, 1), "tied + biases + llama3 rope");
    TEST_MAIN_END("test_llama");
}
