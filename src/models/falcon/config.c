/* The Falcon family's configuration facts: presets, defaults, checks and
 * the keys of its own fields in a checkpoint's model config. */
#include "models/falcon/falcon.h"
#include <math.h>
#include <string.h>

/* Falcon shapes: two small ones for tests and demos (multi-query with one
 * LayerNorm; grouped with two), and the published 7B and 40B. */
static const struct {
    const char *name;
    int L, C, H, KV, norms, F, V, T;
} presets[] = {
    {"falcon-tiny", 4, 256, 8, 1, 1, 1024, 256, 256},
    {"falcon-tiny-gqa", 4, 256, 8, 2, 2, 1024, 256, 256},
    {"falcon-7b", 32, 4544, 71, 1, 1, 18176, 65024, 2048},
    {"falcon-40b", 60, 8192, 128, 8, 2, 32768, 65024, 2048},
};

int mt_falcon_preset(const char *name, mt_model_config *cfg) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(name, presets[i].name) != 0) continue;
        cfg->n_layer = presets[i].L;
        cfg->n_embd = presets[i].C;
        cfg->n_head = presets[i].H;
        cfg->n_kv_head = presets[i].KV;
        cfg->block_norms = presets[i].norms;
        cfg->head_dim = presets[i].C / presets[i].H;
        cfg->ffn_dim = presets[i].F;
        cfg->vocab_size = presets[i].V;
        cfg->padded_vocab = mt_pad_vocab(presets[i].V);
        cfg->seq_len = presets[i].T;
        cfg->max_pos = presets[i].T;
        cfg->tie_embeddings = 1;
        cfg->rope_theta = 10000.0f;
        cfg->norm_eps = 1e-5f;
        cfg->dropout = 0.0f;
        return 1;
    }
    return 0;
}

void mt_falcon_config_defaults(mt_model_config *c) {
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->tie_embeddings = 1;
    c->block_norms = 1;
}

int mt_falcon_config_validate(const mt_model_config *c, mt_error *err) {
    if (c->n_kv_head < 1 || c->n_head % c->n_kv_head)
        return mt_errorf(err, "{kv-heads} %d must be >= 1 and divide {heads} %d (each kv head serves a whole group of "
                              "query heads)", c->n_kv_head, c->n_head);
    if (c->head_dim < 2 || c->head_dim % 2 || c->head_dim > 1024)
        return mt_errorf(err, "head dimension %d must be even and in 2..1024 (rotary embeddings rotate pairs)", c->head_dim);
    if (c->ffn_dim < 1 || c->ffn_dim > (1 << 20)) return mt_errorf(err, "{ffn-dim} must be in 1..1048576, got %d", c->ffn_dim);
    if (c->block_norms != 1 && c->block_norms != 2)
        return mt_errorf(err, "{block-norms} must be 1 (one input_layernorm) or 2 (ln_attn and ln_mlp), got %d",
                         c->block_norms);
    if (c->norm_eps != 1e-5f)
        return mt_errorf(err, "falcon layer_norm_epsilon %g is not supported (meshtrain's LayerNorm uses 1e-5, "
                              "Falcon's published value)", (double)c->norm_eps);
    if (!(c->rope_theta > 1.0f && isfinite(c->rope_theta)))
        return mt_errorf(err, "{rope-theta} must be a finite number > 1, got %g", (double)c->rope_theta);
    if (c->rope_scaling) return mt_errorf(err, "rope scaling is not supported by the falcon family");
    if (c->qkv_bias) return mt_errorf(err, "q/k/v-only biases are not a falcon form (linear_bias: every linear or none)");
    if (c->linear_bias != 0 && c->linear_bias != 1) return mt_errorf(err, "falcon linear_bias must be 0 or 1");
    if (c->tie_embeddings != 0 && c->tie_embeddings != 1) return mt_errorf(err, "{tie-embeddings} must be 0 or 1");
    if (c->dropout != 0.0f) return mt_errorf(err, "{dropout} is not supported by the falcon family (it trains without dropout)");
    return 0;
}

void mt_falcon_config_write_json(mt_json_writer *w, const mt_model_config *c) {
    mt_jw_key(w, "n_kv_head"); mt_jw_int(w, c->n_kv_head);
    mt_jw_key(w, "head_dim"); mt_jw_int(w, c->head_dim);
    mt_jw_key(w, "ffn_dim"); mt_jw_int(w, c->ffn_dim);
    mt_jw_key(w, "block_norms"); mt_jw_int(w, c->block_norms);
    mt_jw_key(w, "norm_eps"); mt_jw_double(w, c->norm_eps);
    mt_jw_key(w, "rope_theta"); mt_jw_double(w, c->rope_theta);
    mt_jw_key(w, "max_pos"); mt_jw_int(w, c->max_pos);
    mt_jw_key(w, "tie_embeddings"); mt_jw_int(w, c->tie_embeddings);
    if (c->linear_bias) { mt_jw_key(w, "linear_bias"); mt_jw_int(w, c->linear_bias); }
}

int mt_falcon_config_read_json(const mt_json *obj, mt_model_config *c, mt_error *err) {
#define INT(key, field) mt_model_config_get_int(obj, key, &c->field, err)
#define FLOAT(key, field) mt_model_config_get_float(obj, key, &c->field, err)
    if (INT("n_kv_head", n_kv_head) || INT("head_dim", head_dim) || INT("ffn_dim", ffn_dim) ||
        INT("block_norms", block_norms) || FLOAT("norm_eps", norm_eps) || FLOAT("rope_theta", rope_theta) ||
        INT("max_pos", max_pos) || INT("tie_embeddings", tie_embeddings))
        return -1;
    if (mt_json_get(obj, "linear_bias") && INT("linear_bias", linear_bias)) return -1;
#undef INT
#undef FLOAT
    return 0;
}

/* The floats falcon/forward_backward.c's buffer table keeps, per block and
 * microbatch of N rows (n local under sequence parallelism over t ranks;
 * k = block_norms, Q = n_head hd, W = (n_head + 2 kv) hd, a heads, F the MLP):
 *   none       k (n C + 2 n) + n C + N (W + Q + a + 2 F) / t
 *   selective  k (n C + 2 n) + n C + N (W + 2 F) / t   (attention output and lse recomputed)
 *   full       n C                                     (the block's output)
 * and the output unit's ln_f n (C + 2) and row losses N. */
void mt_falcon_plan_act_floats(const mt_model_config *cfg, int recompute, double N, double n, double t,
                               double *per_block, double *output) {
    double C = cfg->n_embd, hd = mt_model_head_dim(cfg), a = cfg->n_head, Q = a * hd,
           W = (a + 2.0 * mt_model_kv_heads(cfg)) * hd, F = cfg->ffn_dim, k = cfg->block_norms;
    double kept = k * (n * C + 2 * n) + n * C;
    switch (recompute) {
    case 0: *per_block = kept + N * (W + Q + a + 2 * F) / t; break;
    case 1: *per_block = kept + N * (W + 2 * F) / t; break;
    default: *per_block = n * C; break;
    }
    *output = n * (C + 2) + N;
}
