/* The Llama family's configuration facts: presets, defaults, checks and the
 * keys of its own fields in a checkpoint's model config. */
#include "models/llama/llama.h"
#include "ops/moe.h"
#include <math.h>
#include <string.h>

/* Llama shapes: a small one for tests and demos, and two published ones
 * (Llama 3.2 1B; Qwen2.5 0.5B with its q/k/v biases). */
static const struct {
    const char *name;
    int L, C, H, KV, F, V, T, max_pos, tie, bias, scaling;
    float theta, eps, factor;
} presets[] = {
    {"llama-tiny", 4, 256, 8, 4, 688, 256, 256, 256, 0, 0, 0, 10000.0f, 1e-5f, 0},
    {"llama3.2-1b", 16, 2048, 32, 8, 8192, 128256, 2048, 131072, 1, 0, 1, 500000.0f, 1e-5f, 32.0f},
    {"qwen2.5-0.5b", 24, 896, 14, 2, 4864, 151936, 2048, 32768, 1, 1, 0, 1000000.0f, 1e-6f, 0},
};

int mt_llama_preset(const char *name, mt_model_config *cfg) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(name, presets[i].name) != 0) continue;
        cfg->n_layer = presets[i].L;
        cfg->n_embd = presets[i].C;
        cfg->n_head = presets[i].H;
        cfg->n_kv_head = presets[i].KV;
        cfg->head_dim = presets[i].C / presets[i].H;
        cfg->ffn_dim = presets[i].F;
        cfg->vocab_size = presets[i].V;
        cfg->padded_vocab = mt_pad_vocab(presets[i].V);
        cfg->seq_len = presets[i].T;
        cfg->max_pos = presets[i].max_pos;
        cfg->tie_embeddings = presets[i].tie;
        cfg->qkv_bias = presets[i].bias;
        cfg->rope_theta = presets[i].theta;
        cfg->norm_eps = presets[i].eps;
        cfg->dropout = 0.0f;
        if (presets[i].scaling) {
            cfg->rope_scaling = 1;
            cfg->rope_factor = presets[i].factor;
            cfg->rope_low_freq_factor = 1.0f;
            cfg->rope_high_freq_factor = 4.0f;
            cfg->rope_original_max_pos = 8192;
        }
        return 1;
    }
    return 0;
}

void mt_llama_config_defaults(mt_model_config *c) {
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->tie_embeddings = 0;
}

int mt_llama_config_validate(const mt_model_config *c, mt_error *err) {
    if (c->n_kv_head < 1 || c->n_head % c->n_kv_head)
        return mt_errorf(err, "{kv-heads} %d must be >= 1 and divide {heads} %d (each kv head serves a whole group of "
                              "query heads)", c->n_kv_head, c->n_head);
    if (c->head_dim < 2 || c->head_dim % 2 || c->head_dim > 1024)
        return mt_errorf(err, "head dimension %d must be even and in 2..1024 (rotary embeddings rotate pairs)", c->head_dim);
    if (c->ffn_dim < 1 || c->ffn_dim > (1 << 20)) return mt_errorf(err, "{ffn-dim} must be in 1..1048576, got %d", c->ffn_dim);
    if (!(c->norm_eps > 0.0f && c->norm_eps < 1.0f)) return mt_errorf(err, "{norm-eps} must be in (0, 1), got %g", (double)c->norm_eps);
    if (!(c->rope_theta > 1.0f && isfinite(c->rope_theta)))
        return mt_errorf(err, "{rope-theta} must be a finite number > 1, got %g", (double)c->rope_theta);
    if (c->rope_scaling < MT_ROPE_NONE || c->rope_scaling > MT_ROPE_YARN)
        return mt_errorf(err, "unknown rope scaling type %d", c->rope_scaling);
    if (c->rope_scaling == MT_ROPE_LLAMA3 &&
        !(c->rope_factor >= 1.0f && c->rope_low_freq_factor > 0.0f &&
          c->rope_high_freq_factor > c->rope_low_freq_factor && c->rope_original_max_pos > 0))
        return mt_errorf(err, "llama3 rope scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor and "
                              "original_max_position_embeddings > 0 (got %g, %g, %g, %d)",
                         (double)c->rope_factor, (double)c->rope_low_freq_factor, (double)c->rope_high_freq_factor,
                         c->rope_original_max_pos);
    if (c->rope_scaling > MT_ROPE_LLAMA3 && !(c->rope_factor > 0.0f && isfinite(c->rope_factor)))
        return mt_errorf(err, "%s rope scaling needs a finite factor > 0, got %g", mt_llama_rope_type_name(c->rope_scaling),
                         (double)c->rope_factor);
    if ((c->rope_scaling == MT_ROPE_DYNAMIC || c->rope_scaling == MT_ROPE_YARN) && c->rope_original_max_pos < 1)
        return mt_errorf(err, "%s rope scaling needs {rope-original-max-pos} >= 1 (the pretrained context), got %d",
                         mt_llama_rope_type_name(c->rope_scaling), c->rope_original_max_pos);
    if (c->rope_scaling == MT_ROPE_DYNAMIC && c->head_dim < 4)
        return mt_errorf(err, "dynamic rope scaling needs a head dimension >= 4 (its exponent is hd/(hd-2)), got %d",
                         c->head_dim);
    if (c->rope_scaling == MT_ROPE_YARN &&
        !(c->rope_beta_fast >= 0.0f && c->rope_beta_slow >= 0.0f && c->rope_attention_factor >= 0.0f &&
          isfinite(c->rope_beta_fast) && isfinite(c->rope_beta_slow) && isfinite(c->rope_attention_factor) &&
          isfinite(c->rope_mscale) && isfinite(c->rope_mscale_all_dim)))
        return mt_errorf(err, "yarn rope scaling needs finite beta_fast, beta_slow, attention_factor >= 0 (got %g, %g, %g)",
                         (double)c->rope_beta_fast, (double)c->rope_beta_slow, (double)c->rope_attention_factor);
    if (c->tie_embeddings != 0 && c->tie_embeddings != 1) return mt_errorf(err, "{tie-embeddings} must be 0 or 1");
    if (c->dropout != 0.0f) return mt_errorf(err, "{dropout} is not supported by the llama family (it trains without dropout)");
    if (c->qk_norm != 0 && c->qk_norm != 1) return mt_errorf(err, "{qk-norm} must be 0 or 1, got %d", c->qk_norm);
    return mt_llama_moe_validate(c, err);
}

int mt_llama_moe_validate(const mt_model_config *c, mt_error *err) {
    if (c->num_experts == 0) {
        if (c->moe_aux_coef != 0.0f || c->moe_z_coef != 0.0f || c->moe_capacity != 0.0f)
            return mt_errorf(err, "{moe-aux-coef}, {moe-z-coef} and {moe-capacity-factor} apply to a mixture-of-experts "
                                  "model; this one is dense (no {moe-experts})");
        if (c->moe_shared_ffn_dim != 0)
            return mt_errorf(err, "{moe-shared-ffn-dim} %d: a shared expert belongs to a mixture-of-experts block; this "
                                  "model is dense (give {moe-experts} E, or drop it)", c->moe_shared_ffn_dim);
        return 0;
    }
    if (c->moe_shared_ffn_dim < 0 || c->moe_shared_ffn_dim > (1 << 20))
        return mt_errorf(err, "{moe-shared-ffn-dim} must be in 0..1048576 (0: no shared expert), got %d",
                         c->moe_shared_ffn_dim);
    if (c->num_experts < 1 || c->num_experts > MT_MOE_MAX_EXPERTS)
        return mt_errorf(err, "{moe-experts} must be in 1..%d, got %d", MT_MOE_MAX_EXPERTS, c->num_experts);
    if (c->moe_top_k < 1 || c->moe_top_k > c->num_experts)
        return mt_errorf(err, "{moe-top-k} %d must be in 1..%d (a token chooses among the %d experts of {moe-experts})",
                         c->moe_top_k, c->num_experts, c->num_experts);
    if (c->moe_ffn_dim < 1 || c->moe_ffn_dim > (1 << 20))
        return mt_errorf(err, "{moe-ffn-dim} must be in 1..1048576, got %d", c->moe_ffn_dim);
    if (c->moe_router != MT_MOE_ROUTER_TOPK_SOFTMAX && c->moe_router != MT_MOE_ROUTER_SOFTMAX_TOPK)
        return mt_errorf(err, "unknown {moe-router} %d", c->moe_router);
    if (c->moe_norm_topk != 0 && c->moe_norm_topk != 1) return mt_errorf(err, "{moe-norm-topk} must be 0 or 1");
    if (!(c->moe_aux_coef >= 0.0f && isfinite(c->moe_aux_coef)))
        return mt_errorf(err, "{moe-aux-coef} must be a finite number >= 0, got %g", (double)c->moe_aux_coef);
    if (!(c->moe_z_coef >= 0.0f && isfinite(c->moe_z_coef)))
        return mt_errorf(err, "{moe-z-coef} must be a finite number >= 0, got %g", (double)c->moe_z_coef);
    if (!(c->moe_capacity >= 0.0f && isfinite(c->moe_capacity)))
        return mt_errorf(err, "{moe-capacity-factor} must be a finite number > 0 (or absent: dropless), got %g",
                         (double)c->moe_capacity);
    return 0;
}

const char *mt_moe_router_name(int router) { return router == MT_MOE_ROUTER_TOPK_SOFTMAX ? "mixtral" : "softmax_topk"; }

int mt_moe_router_parse(const char *s, int *out, mt_error *err) {
    if (!strcmp(s, "mixtral")) *out = MT_MOE_ROUTER_TOPK_SOFTMAX;
    else if (!strcmp(s, "softmax_topk")) *out = MT_MOE_ROUTER_SOFTMAX_TOPK;
    else return mt_errorf(err, "{moe-router} '%s' is not one of mixtral, softmax_topk", s);
    return 0;
}

void mt_llama_config_write_json(mt_json_writer *w, const mt_model_config *c) {
    mt_jw_key(w, "n_kv_head"); mt_jw_int(w, c->n_kv_head);
    mt_jw_key(w, "head_dim"); mt_jw_int(w, c->head_dim);
    mt_jw_key(w, "ffn_dim"); mt_jw_int(w, c->ffn_dim);
    mt_jw_key(w, "norm_eps"); mt_jw_double(w, c->norm_eps);
    mt_jw_key(w, "rope_theta"); mt_jw_double(w, c->rope_theta);
    mt_jw_key(w, "max_pos"); mt_jw_int(w, c->max_pos);
    mt_jw_key(w, "tie_embeddings"); mt_jw_int(w, c->tie_embeddings);
    mt_jw_key(w, "qkv_bias"); mt_jw_int(w, c->qkv_bias);
    if (c->num_experts) { /* only for MoE configs: a dense config's JSON is unchanged */
        mt_jw_key(w, "num_experts"); mt_jw_int(w, c->num_experts);
        mt_jw_key(w, "moe_top_k"); mt_jw_int(w, c->moe_top_k);
        mt_jw_key(w, "moe_ffn_dim"); mt_jw_int(w, c->moe_ffn_dim);
        mt_jw_key(w, "moe_router"); mt_jw_string(w, mt_moe_router_name(c->moe_router));
        mt_jw_key(w, "moe_norm_topk"); mt_jw_int(w, c->moe_norm_topk);
        mt_jw_key(w, "moe_aux_coef"); mt_jw_double(w, c->moe_aux_coef);
        mt_jw_key(w, "moe_z_coef"); mt_jw_double(w, c->moe_z_coef);
        mt_jw_key(w, "moe_capacity"); mt_jw_double(w, c->moe_capacity);
        if (c->moe_shared_ffn_dim) { /* absent: none (checkpoints from before shared experts read the same) */
            mt_jw_key(w, "moe_shared_ffn_dim"); mt_jw_int(w, c->moe_shared_ffn_dim);
        }
    }
    if (c->qk_norm) { /* absent: none (a config without it reads and writes as before) */
        mt_jw_key(w, "qk_norm"); mt_jw_int(w, c->qk_norm);
    }
    if (c->rope_scaling) {
        mt_jw_key(w, "rope_scaling");
        mt_llama_rope_scaling_write(w, c, 0);
    }
}

int mt_llama_config_read_json(const mt_json *obj, mt_model_config *c, mt_error *err) {
#define INT(o, key, field) mt_model_config_get_int(o, key, &c->field, err)
#define FLOAT(o, key, field) mt_model_config_get_float(o, key, &c->field, err)
    if (INT(obj, "n_kv_head", n_kv_head) || INT(obj, "head_dim", head_dim) || INT(obj, "ffn_dim", ffn_dim) ||
        FLOAT(obj, "norm_eps", norm_eps) || FLOAT(obj, "rope_theta", rope_theta) || INT(obj, "max_pos", max_pos) ||
        INT(obj, "tie_embeddings", tie_embeddings) || INT(obj, "qkv_bias", qkv_bias))
        return -1;
    if (mt_json_get(obj, "num_experts")) {
        const char *router = NULL;
        if (INT(obj, "num_experts", num_experts) || INT(obj, "moe_top_k", moe_top_k) ||
            INT(obj, "moe_ffn_dim", moe_ffn_dim) || mt_json_get_string(obj, "moe_router", &router, err) ||
            mt_moe_router_parse(router, &c->moe_router, err) || INT(obj, "moe_norm_topk", moe_norm_topk) ||
            FLOAT(obj, "moe_aux_coef", moe_aux_coef) || FLOAT(obj, "moe_z_coef", moe_z_coef) ||
            FLOAT(obj, "moe_capacity", moe_capacity))
            return -1;
        if (mt_json_get(obj, "moe_shared_ffn_dim") && INT(obj, "moe_shared_ffn_dim", moe_shared_ffn_dim)) return -1;
    }
    if (mt_json_get(obj, "qk_norm") && INT(obj, "qk_norm", qk_norm)) return -1;
    const mt_json *rs = mt_json_get(obj, "rope_scaling");
    if (rs && rs->type == MT_JSON_OBJECT && mt_llama_rope_scaling_read(rs, c, 0, 0, err)) return -1;
#undef INT
#undef FLOAT
    return 0;
}

static const char *const rope_types[] = {"none", "llama3", "linear", "dynamic", "yarn"};

const char *mt_llama_rope_type_name(int type) {
    return type >= 0 && type <= MT_ROPE_YARN ? rope_types[type] : "unknown";
}

int mt_llama_rope_type_parse(const char *name, int *type) {
    for (int i = 0; i <= MT_ROPE_YARN; i++)
        if (!strcmp(name, rope_types[i])) return *type = i, 0;
    return -1;
}

mt_rope_scaling mt_llama_rope_scaling(const mt_model_config *c, int T) {
    mt_rope_scaling s = {c->rope_scaling, c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor,
                         c->rope_original_max_pos, c->rope_beta_fast, c->rope_beta_slow, c->rope_attention_factor,
                         c->rope_mscale, c->rope_mscale_all_dim, c->rope_truncate, T};
    return s;
}

/* Only the keys of the type, so that a config that names no yarn key reads
 * back as transformers reads it. hf: float-valued as config.json has them
 * (mt_jw_float), else as our checkpoints' doubles. */
void mt_llama_rope_scaling_write(mt_json_writer *w, const mt_model_config *c, int hf) {
#define NUM(key, v) (mt_jw_key(w, key), hf ? mt_jw_float(w, v) : mt_jw_double(w, v))
    mt_jw_begin_object(w);
    mt_jw_key(w, "rope_type"); mt_jw_string(w, mt_llama_rope_type_name(c->rope_scaling));
    NUM("factor", c->rope_factor);
    if (c->rope_scaling == MT_ROPE_LLAMA3) {
        NUM("low_freq_factor", c->rope_low_freq_factor);
        NUM("high_freq_factor", c->rope_high_freq_factor);
    }
    /* dynamic's original context is config.json's max_position_embeddings (hf.c writes it there) */
    if (c->rope_scaling == MT_ROPE_LLAMA3 || c->rope_scaling == MT_ROPE_YARN || (!hf && c->rope_scaling == MT_ROPE_DYNAMIC)) {
        mt_jw_key(w, "original_max_position_embeddings");
        mt_jw_int(w, c->rope_original_max_pos);
    }
    if (c->rope_scaling == MT_ROPE_YARN) {
        if (c->rope_beta_fast > 0.0f) NUM("beta_fast", c->rope_beta_fast);
        if (c->rope_beta_slow > 0.0f) NUM("beta_slow", c->rope_beta_slow);
        if (c->rope_attention_factor > 0.0f) NUM("attention_factor", c->rope_attention_factor);
        if (c->rope_mscale != 0.0f) NUM("mscale", c->rope_mscale);
        if (c->rope_mscale_all_dim != 0.0f) NUM("mscale_all_dim", c->rope_mscale_all_dim);
        mt_jw_key(w, "truncate"); mt_jw_bool(w, c->rope_truncate);
    }
    mt_jw_end_object(w);
#undef NUM
}

static int opt_float(const mt_json *o, const char *key, float *out, mt_error *err) {
    const mt_json *j = mt_json_get(o, key);
    if (!j || j->type == MT_JSON_NULL) return 0;
    double d;
    if (mt_json_get_double(o, key, &d, err)) return -1;
    if (!isfinite(d)) return mt_errorf(err, "rope_scaling.%s must be a finite number", key);
    *out = (float)d;
    return 0;
}

int mt_llama_rope_scaling_read(const mt_json *rs, mt_model_config *c, int hf, int max_pos, mt_error *err) {
    const char *rt = NULL;
    if (mt_json_get_string(rs, "rope_type", &rt, NULL) && mt_json_get_string(rs, "type", &rt, NULL))
        rt = hf ? NULL : "llama3"; /* our checkpoints before the other types held llama3 only */
    if (!rt) return mt_errorf(err, "rope_scaling has no rope_type");
    int type;
    if (mt_llama_rope_type_parse(rt, &type) && strcmp(rt, "default"))
        return mt_errorf(err, "rope_scaling type '%s' is not supported (llama3, linear, dynamic, yarn or default)", rt);
    if (!strcmp(rt, "default")) return c->rope_scaling = MT_ROPE_NONE, 0;
    c->rope_scaling = type;
    if (type == MT_ROPE_NONE) return 0;
    if (!mt_json_get(rs, "factor")) return mt_errorf(err, "rope_scaling (%s) has no factor", rt);
    if (opt_float(rs, "factor", &c->rope_factor, err)) return -1;
    int64_t orig = 0;
    const mt_json *oj = mt_json_get(rs, "original_max_position_embeddings");
    if (oj && oj->type != MT_JSON_NULL) {
        if (mt_json_get_int64(rs, "original_max_position_embeddings", &orig, err)) return -1;
        if (orig < 1 || orig > (1 << 24))
            return mt_errorf(err, "rope_scaling.original_max_position_embeddings = %lld is out of range", (long long)orig);
    }
    if (type == MT_ROPE_LLAMA3) {
        if (!orig) return mt_errorf(err, "rope_scaling (llama3) has no original_max_position_embeddings");
        if (opt_float(rs, "low_freq_factor", &c->rope_low_freq_factor, err) ||
            opt_float(rs, "high_freq_factor", &c->rope_high_freq_factor, err))
            return -1;
    }
    /* transformers: dynamic's original context is max_position_embeddings; yarn's the key, else that */
    c->rope_original_max_pos = orig ? (int)orig : max_pos;
    if (type == MT_ROPE_DYNAMIC && hf) c->rope_original_max_pos = max_pos;
    if (type == MT_ROPE_YARN) {
        c->rope_truncate = 1;
        const mt_json *t = mt_json_get(rs, "truncate");
        if (t && t->type != MT_JSON_NULL) {
            if (t->type != MT_JSON_BOOL) return mt_errorf(err, "rope_scaling.truncate must be true or false");
            c->rope_truncate = t->boolean;
        }
        if (opt_float(rs, "beta_fast", &c->rope_beta_fast, err) || opt_float(rs, "beta_slow", &c->rope_beta_slow, err) ||
            opt_float(rs, "attention_factor", &c->rope_attention_factor, err) ||
            opt_float(rs, "mscale", &c->rope_mscale, err) || opt_float(rs, "mscale_all_dim", &c->rope_mscale_all_dim, err))
            return -1;
    }
    return 0;
}
