/* Falcon's Hugging Face names (ours are HF's) and config.json
 * (FalconForCausalLM; the older RefinedWeb / RefinedWebModel configs of the
 * first Falcon releases are read too: n_embed, n_head, n_layer, n_head_kv). */
#include "models/falcon/falcon.h"
#include <stdio.h>
#include <string.h>

void mt_falcon_hf_name(const mt_model_config *cfg, const char *name, char *buf, size_t cap, int *transpose) {
    (void)cfg;
    snprintf(buf, cap, "%s", name);
    *transpose = 0;
}

void mt_falcon_hf_config_write(const mt_model_config *c, const char *torch_dtype, mt_json_writer *w) {
    int kv = mt_model_kv_heads(c), new_arch = c->block_norms == 2 || (kv != 1 && kv != c->n_head);
    mt_jw_begin_object(w);
    mt_jw_key(w, "architectures");
    mt_jw_begin_array(w);
    mt_jw_string(w, "FalconForCausalLM");
    mt_jw_end_array(w);
    mt_jw_key(w, "model_type"); mt_jw_string(w, "falcon");
    mt_jw_key(w, "activation"); mt_jw_string(w, "gelu");
    mt_jw_key(w, "alibi"); mt_jw_bool(w, 0);
    mt_jw_key(w, "bias"); mt_jw_bool(w, c->linear_bias);
    mt_jw_key(w, "parallel_attn"); mt_jw_bool(w, 1);
    mt_jw_key(w, "new_decoder_architecture"); mt_jw_bool(w, new_arch);
    mt_jw_key(w, "multi_query"); mt_jw_bool(w, kv == 1);
    mt_jw_key(w, "num_kv_heads"); mt_jw_int(w, kv);
    if (new_arch) { mt_jw_key(w, "num_ln_in_parallel_attn"); mt_jw_int(w, c->block_norms); }
    mt_jw_key(w, "hidden_size"); mt_jw_int(w, c->n_embd);
    mt_jw_key(w, "ffn_hidden_size"); mt_jw_int(w, c->ffn_dim);
    mt_jw_key(w, "num_attention_heads"); mt_jw_int(w, c->n_head);
    mt_jw_key(w, "num_hidden_layers"); mt_jw_int(w, c->n_layer);
    mt_jw_key(w, "layer_norm_epsilon"); mt_jw_float(w, c->norm_eps);
    mt_jw_key(w, "rope_theta"); mt_jw_float(w, c->rope_theta);
    mt_jw_key(w, "rope_scaling"); mt_jw_null(w);
    mt_jw_key(w, "attention_dropout"); mt_jw_float(w, 0.0f);
    mt_jw_key(w, "hidden_dropout"); mt_jw_float(w, 0.0f);
    mt_jw_key(w, "tie_word_embeddings"); mt_jw_bool(w, c->tie_embeddings);
    mt_jw_key(w, "vocab_size"); mt_jw_int(w, c->vocab_size);
    mt_jw_key(w, "max_position_embeddings"); mt_jw_int(w, c->max_pos > c->seq_len ? c->max_pos : c->seq_len);
    mt_jw_key(w, "torch_dtype"); mt_jw_string(w, torch_dtype);
    mt_jw_end_object(w);
}

/* The first of keys present (Falcon's name, then RefinedWeb's) into *out. */
static int int_of(const mt_json *o, const char *key, const char *old_key, int required, int *out, mt_error *err) {
    const char *k = mt_json_get(o, key) ? key : old_key && mt_json_get(o, old_key) ? old_key : NULL;
    if (!k) return required ? mt_errorf(err, "%s is missing", key) : 0;
    const mt_json *j = mt_json_get(o, k);
    if (j->type == MT_JSON_NULL && !required) return 0;
    int64_t v;
    if (mt_json_get_int64(o, k, &v, err)) return -1;
    if (v < 1 || v > (1 << 24)) return mt_errorf(err, "%s = %lld is out of range", k, (long long)v);
    *out = (int)v;
    return 0;
}

/* A boolean entry (absent or null: dflt). */
static int flag_of(const mt_json *o, const char *key, int dflt, int *out, mt_error *err) {
    const mt_json *j = mt_json_get(o, key);
    *out = dflt;
    if (!j || j->type == MT_JSON_NULL) return 0;
    if (j->type != MT_JSON_BOOL) return mt_errorf(err, "%s must be true or false", key);
    *out = j->boolean;
    return 0;
}

static int float_of(const mt_json *o, const char *key, float *out, mt_error *err) {
    double d;
    const mt_json *j = mt_json_get(o, key);
    if (!j || j->type == MT_JSON_NULL) return 0;
    if (mt_json_get_double(o, key, &d, err)) return -1;
    *out = (float)d;
    return 0;
}

int mt_falcon_hf_config_read(const mt_json *o, mt_model_config *c, mt_error *err) {
    int alibi, bias, parallel, multi_query, new_arch; /* the caller set the family and its defaults */
    if (flag_of(o, "alibi", 0, &alibi, err) || flag_of(o, "bias", 0, &bias, err) ||
        flag_of(o, "parallel_attn", 1, &parallel, err) || flag_of(o, "multi_query", 1, &multi_query, err) ||
        flag_of(o, "new_decoder_architecture", 0, &new_arch, err) ||
        flag_of(o, "tie_word_embeddings", 1, &c->tie_embeddings, err))
        return -1;
    if (alibi) return mt_errorf(err, "alibi true is not supported (meshtrain's falcon uses rotary embeddings)");
    c->linear_bias = bias;
    if (!parallel)
        return mt_errorf(err, "parallel_attn false is not supported (meshtrain's falcon runs attention and MLP in "
                              "parallel)");
    const char *act = NULL;
    if (mt_json_get(o, "activation") && !mt_json_get_string(o, "activation", &act, NULL) && strcmp(act, "gelu"))
        return mt_errorf(err, "activation '%s' is not supported (falcon's exact gelu only)", act);
    const mt_json *rs = mt_json_get(o, "rope_scaling");
    if (rs && rs->type != MT_JSON_NULL) return mt_errorf(err, "rope_scaling is not supported by the falcon family");
    if (int_of(o, "hidden_size", "n_embed", 1, &c->n_embd, err) ||
        int_of(o, "num_attention_heads", "n_head", 1, &c->n_head, err) ||
        int_of(o, "num_hidden_layers", "n_layer", 1, &c->n_layer, err) || int_of(o, "vocab_size", NULL, 1, &c->vocab_size, err))
        return -1;
    if (new_arch) {
        c->n_kv_head = c->n_head;
        if (int_of(o, "num_kv_heads", "n_head_kv", 0, &c->n_kv_head, err)) return -1;
        c->block_norms = 2;
        if (int_of(o, "num_ln_in_parallel_attn", NULL, 0, &c->block_norms, err)) return -1;
        if (c->block_norms != 1 && c->block_norms != 2)
            return mt_errorf(err, "num_ln_in_parallel_attn %d is not supported (1 or 2)", c->block_norms);
    } else {
        c->n_kv_head = multi_query ? 1 : c->n_head;
        c->block_norms = 1;
    }
    c->head_dim = c->n_embd / c->n_head;
    if (c->head_dim * c->n_head != c->n_embd)
        return mt_errorf(err, "num_attention_heads %d does not divide hidden_size %d", c->n_head, c->n_embd);
    c->ffn_dim = 4 * c->n_embd;
    if (int_of(o, "ffn_hidden_size", NULL, 0, &c->ffn_dim, err) ||
        int_of(o, "max_position_embeddings", NULL, 0, &c->max_pos, err))
        return -1;
    if (float_of(o, "layer_norm_epsilon", &c->norm_eps, err) || float_of(o, "rope_theta", &c->rope_theta, err)) return -1;
    return 0;
}
