#include "models/config.h"
#include <math.h>
#include <string.h>

int mt_pad_vocab(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

static const char *const family_names[MT_N_FAMILIES] = {"gpt2", "llama"};

const char *mt_family_name(mt_family_id f) { return (unsigned)f < MT_N_FAMILIES ? family_names[f] : "?"; }

int mt_family_parse(const char *name, mt_family_id *out, mt_error *err) {
    for (int i = 0; i < MT_N_FAMILIES; i++)
        if (!strcmp(name, family_names[i])) {
            *out = (mt_family_id)i;
            return 0;
        }
    return mt_errorf(err, "unknown model family '%s' (expected gpt2 or llama)", name);
}

void mt_model_config_defaults(mt_model_config *c, mt_family_id family) {
    c->family = family;
    if (family != MT_FAMILY_LLAMA) return;
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->tie_embeddings = 0;
}

int mt_model_config_preset(const char *name, mt_model_config *cfg, mt_error *err) {
    static const struct { const char *name; int L, C, H; } gpt2[] = {
        {"gpt2", 12, 768, 12}, {"gpt2-medium", 24, 1024, 16},
        {"gpt2-large", 36, 1280, 20}, {"gpt2-xl", 48, 1600, 25},
    };
    for (size_t i = 0; i < sizeof gpt2 / sizeof gpt2[0]; i++) {
        if (strcmp(name, gpt2[i].name) == 0) {
            memset(cfg, 0, sizeof *cfg); /* a preset is the whole config: nothing left from before (adapters) */
            cfg->family = MT_FAMILY_GPT2;
            cfg->n_layer = gpt2[i].L;
            cfg->n_embd = gpt2[i].C;
            cfg->n_head = gpt2[i].H;
            cfg->vocab_size = 50257;
            cfg->padded_vocab = mt_pad_vocab(50257);
            cfg->seq_len = 1024;
            return 0;
        }
    }
    /* Llama shapes: a small one for tests and demos, and two published ones
     * (Llama 3.2 1B; Qwen2.5 0.5B with its q/k/v biases). */
    static const struct {
        const char *name;
        int L, C, H, KV, F, V, T, max_pos, tie, bias, scaling;
        float theta, eps, factor;
    } llama[] = {
        {"llama-tiny", 4, 256, 8, 4, 688, 256, 256, 256, 0, 0, 0, 10000.0f, 1e-5f, 0},
        {"llama3.2-1b", 16, 2048, 32, 8, 8192, 128256, 2048, 131072, 1, 0, 1, 500000.0f, 1e-5f, 32.0f},
        {"qwen2.5-0.5b", 24, 896, 14, 2, 4864, 151936, 2048, 32768, 1, 1, 0, 1000000.0f, 1e-6f, 0},
    };
    for (size_t i = 0; i < sizeof llama / sizeof llama[0]; i++) {
        if (strcmp(name, llama[i].name) == 0) {
            memset(cfg, 0, sizeof *cfg);
            mt_model_config_defaults(cfg, MT_FAMILY_LLAMA);
            cfg->n_layer = llama[i].L;
            cfg->n_embd = llama[i].C;
            cfg->n_head = llama[i].H;
            cfg->n_kv_head = llama[i].KV;
            cfg->head_dim = llama[i].C / llama[i].H;
            cfg->ffn_dim = llama[i].F;
            cfg->vocab_size = llama[i].V;
            cfg->padded_vocab = mt_pad_vocab(llama[i].V);
            cfg->seq_len = llama[i].T;
            cfg->max_pos = llama[i].max_pos;
            cfg->tie_embeddings = llama[i].tie;
            cfg->qkv_bias = llama[i].bias;
            cfg->rope_theta = llama[i].theta;
            cfg->norm_eps = llama[i].eps;
            cfg->dropout = 0.0f;
            if (llama[i].scaling) {
                cfg->rope_scaling = 1;
                cfg->rope_factor = llama[i].factor;
                cfg->rope_low_freq_factor = 1.0f;
                cfg->rope_high_freq_factor = 4.0f;
                cfg->rope_original_max_pos = 8192;
            }
            return 0;
        }
    }
    return mt_errorf(err, "unknown model preset '%s' (expected gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-tiny, "
                          "llama3.2-1b or qwen2.5-0.5b)", name);
}

static int validate_llama(const mt_model_config *c, mt_error *err) {
    if (c->n_kv_head < 1 || c->n_head % c->n_kv_head)
        return mt_errorf(err, "--kv-heads %d must be >= 1 and divide --heads %d (each kv head serves a whole group of "
                              "query heads)", c->n_kv_head, c->n_head);
    if (c->head_dim < 2 || c->head_dim % 2 || c->head_dim > 1024)
        return mt_errorf(err, "head dimension %d must be even and in 2..1024 (rotary embeddings rotate pairs)", c->head_dim);
    if (c->ffn_dim < 1 || c->ffn_dim > (1 << 20)) return mt_errorf(err, "--ffn-dim must be in 1..1048576, got %d", c->ffn_dim);
    if (!(c->norm_eps > 0.0f && c->norm_eps < 1.0f)) return mt_errorf(err, "--norm-eps must be in (0, 1), got %g", (double)c->norm_eps);
    if (!(c->rope_theta > 1.0f && isfinite(c->rope_theta)))
        return mt_errorf(err, "--rope-theta must be a finite number > 1, got %g", (double)c->rope_theta);
    if (c->rope_scaling != 0 && c->rope_scaling != 1) return mt_errorf(err, "unknown rope scaling type %d", c->rope_scaling);
    if (c->rope_scaling &&
        !(c->rope_factor >= 1.0f && c->rope_low_freq_factor > 0.0f &&
          c->rope_high_freq_factor > c->rope_low_freq_factor && c->rope_original_max_pos > 0))
        return mt_errorf(err, "llama3 rope scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor and "
                              "original_max_position_embeddings > 0 (got %g, %g, %g, %d)",
                         (double)c->rope_factor, (double)c->rope_low_freq_factor, (double)c->rope_high_freq_factor,
                         c->rope_original_max_pos);
    if (c->tie_embeddings != 0 && c->tie_embeddings != 1) return mt_errorf(err, "--tie-embeddings must be 0 or 1");
    if (c->dropout != 0.0f) return mt_errorf(err, "--dropout is not supported by the llama family (it trains without dropout)");
    return 0;
}

int mt_model_config_validate(const mt_model_config *c, mt_error *err) {
    if ((unsigned)c->family >= MT_N_FAMILIES) return mt_errorf(err, "unknown model family %d", (int)c->family);
    if (c->n_layer < 1 || c->n_layer > 4095) return mt_errorf(err, "--layers must be in 1..4095, got %d", c->n_layer);
    if (c->n_embd < 1 || c->n_embd > 65536) return mt_errorf(err, "--dim must be in 1..65536, got %d", c->n_embd);
    if (c->n_head < 1 || c->n_head > c->n_embd) return mt_errorf(err, "--heads must be in 1..dim (%d), got %d", c->n_embd, c->n_head);
    if (c->family == MT_FAMILY_GPT2 && c->n_embd % c->n_head != 0)
        return mt_errorf(err, "--dim %d is not divisible by --heads %d", c->n_embd, c->n_head);
    if (c->vocab_size < 2 || c->vocab_size > (1 << 24))
        return mt_errorf(err, "--vocab must be in 2..16777216, got %d", c->vocab_size);
    if (c->padded_vocab < c->vocab_size || c->padded_vocab > (1 << 24))
        return mt_errorf(err, "padded vocabulary %d is smaller than the vocabulary %d", c->padded_vocab, c->vocab_size);
    if (c->seq_len < 1 || c->seq_len > 65535) return mt_errorf(err, "--seq-len must be in 1..65535, got %d", c->seq_len);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f)) return mt_errorf(err, "--dropout must be in [0, 1), got %g", (double)c->dropout);
    return c->family == MT_FAMILY_LLAMA ? validate_llama(c, err) : 0;
}

void mt_model_config_write_json(mt_json_writer *w, const mt_model_config *c) {
    mt_jw_begin_object(w);
    if (c->family != MT_FAMILY_GPT2) {
        mt_jw_key(w, "family"); mt_jw_string(w, mt_family_name(c->family));
    }
    mt_jw_key(w, "n_layer"); mt_jw_int(w, c->n_layer);
    mt_jw_key(w, "n_embd"); mt_jw_int(w, c->n_embd);
    mt_jw_key(w, "n_head"); mt_jw_int(w, c->n_head);
    mt_jw_key(w, "vocab_size"); mt_jw_int(w, c->vocab_size);
    mt_jw_key(w, "padded_vocab"); mt_jw_int(w, c->padded_vocab);
    mt_jw_key(w, "seq_len"); mt_jw_int(w, c->seq_len);
    mt_jw_key(w, "dropout"); mt_jw_double(w, c->dropout);
    if (c->family == MT_FAMILY_LLAMA) {
        mt_jw_key(w, "n_kv_head"); mt_jw_int(w, c->n_kv_head);
        mt_jw_key(w, "head_dim"); mt_jw_int(w, c->head_dim);
        mt_jw_key(w, "ffn_dim"); mt_jw_int(w, c->ffn_dim);
        mt_jw_key(w, "norm_eps"); mt_jw_double(w, c->norm_eps);
        mt_jw_key(w, "rope_theta"); mt_jw_double(w, c->rope_theta);
        mt_jw_key(w, "max_pos"); mt_jw_int(w, c->max_pos);
        mt_jw_key(w, "tie_embeddings"); mt_jw_int(w, c->tie_embeddings);
        mt_jw_key(w, "qkv_bias"); mt_jw_int(w, c->qkv_bias);
        if (c->rope_scaling) {
            mt_jw_key(w, "rope_scaling");
            mt_jw_begin_object(w);
            mt_jw_key(w, "rope_type"); mt_jw_string(w, "llama3");
            mt_jw_key(w, "factor"); mt_jw_double(w, c->rope_factor);
            mt_jw_key(w, "low_freq_factor"); mt_jw_double(w, c->rope_low_freq_factor);
            mt_jw_key(w, "high_freq_factor"); mt_jw_double(w, c->rope_high_freq_factor);
            mt_jw_key(w, "original_max_position_embeddings"); mt_jw_int(w, c->rope_original_max_pos);
            mt_jw_end_object(w);
        }
    }
    if (mt_adapter_spec_active(&c->adapters)) {
        mt_jw_key(w, "adapters");
        mt_adapter_spec_write_json(w, &c->adapters);
    }
    mt_jw_end_object(w);
}

static int get_int(const mt_json *obj, const char *key, int *out, mt_error *err) {
    int64_t v;
    if (mt_json_get_int64(obj, key, &v, err)) return -1;
    if (v < 0 || v > (1 << 24)) return mt_errorf(err, "model config %s = %lld is out of range", key, (long long)v);
    *out = (int)v;
    return 0;
}

static int get_float(const mt_json *obj, const char *key, float *out, mt_error *err) {
    double d;
    if (mt_json_get_double(obj, key, &d, err)) return -1;
    *out = (float)d;
    return 0;
}

int mt_model_config_read_json(const mt_json *obj, mt_model_config *c, mt_error *err) {
    if (!obj || obj->type != MT_JSON_OBJECT) return mt_errorf(err, "model config is not a JSON object");
    memset(c, 0, sizeof *c);
    const char *fam = NULL;
    if (mt_json_get(obj, "family")) {
        if (mt_json_get_string(obj, "family", &fam, err) || mt_family_parse(fam, &c->family, err)) return -1;
    }
    mt_model_config_defaults(c, c->family);
    if (get_int(obj, "n_layer", &c->n_layer, err) || get_int(obj, "n_embd", &c->n_embd, err) ||
        get_int(obj, "n_head", &c->n_head, err) || get_int(obj, "vocab_size", &c->vocab_size, err) ||
        get_int(obj, "padded_vocab", &c->padded_vocab, err) || get_int(obj, "seq_len", &c->seq_len, err))
        return -1;
    if (mt_json_get(obj, "dropout") && get_float(obj, "dropout", &c->dropout, err)) return -1;
    if (c->family == MT_FAMILY_LLAMA) {
        if (get_int(obj, "n_kv_head", &c->n_kv_head, err) || get_int(obj, "head_dim", &c->head_dim, err) ||
            get_int(obj, "ffn_dim", &c->ffn_dim, err) || get_float(obj, "norm_eps", &c->norm_eps, err) ||
            get_float(obj, "rope_theta", &c->rope_theta, err) || get_int(obj, "max_pos", &c->max_pos, err) ||
            get_int(obj, "tie_embeddings", &c->tie_embeddings, err) || get_int(obj, "qkv_bias", &c->qkv_bias, err))
            return -1;
        const mt_json *rs = mt_json_get(obj, "rope_scaling");
        if (rs && rs->type == MT_JSON_OBJECT) {
            c->rope_scaling = 1;
            if (get_float(rs, "factor", &c->rope_factor, err) ||
                get_float(rs, "low_freq_factor", &c->rope_low_freq_factor, err) ||
                get_float(rs, "high_freq_factor", &c->rope_high_freq_factor, err) ||
                get_int(rs, "original_max_position_embeddings", &c->rope_original_max_pos, err))
                return -1;
        }
    }
    const mt_json *ad = mt_json_get(obj, "adapters");
    if (ad && mt_adapter_spec_read_json(ad, &c->adapters, err)) return -1;
    return mt_model_config_validate(c, err);
}
