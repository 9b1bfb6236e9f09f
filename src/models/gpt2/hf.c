/* GPT-2's Hugging Face names and config.json (GPT2LMHeadModel). Our names
 * are HF's without the "transformer." prefix (as the published gpt2 files
 * store them); c_attn, c_proj and c_fc are Conv1D there: [in, out]. */
#include "models/gpt2/gpt2.h"
#include <stdio.h>
#include <string.h>

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

void mt_gpt2_hf_name(const mt_model_config *cfg, const char *name, char *buf, size_t cap, int *transpose) {
    (void)cfg;
    snprintf(buf, cap, "%s", name);
    *transpose = strncmp(name, "h.", 2) == 0 &&
                 (ends_with(name, ".attn.c_attn.weight") || ends_with(name, ".attn.c_proj.weight") ||
                  ends_with(name, ".mlp.c_fc.weight") || ends_with(name, ".mlp.c_proj.weight"));
}

void mt_gpt2_hf_config_write(const mt_model_config *c, const char *torch_dtype, mt_json_writer *w) {
    mt_jw_begin_object(w);
    mt_jw_key(w, "architectures"); mt_jw_begin_array(w); mt_jw_string(w, "GPT2LMHeadModel"); mt_jw_end_array(w);
    mt_jw_key(w, "model_type"); mt_jw_string(w, "gpt2");
    mt_jw_key(w, "activation_function"); mt_jw_string(w, "gelu_new");
    mt_jw_key(w, "n_embd"); mt_jw_int(w, c->n_embd);
    mt_jw_key(w, "n_head"); mt_jw_int(w, c->n_head);
    mt_jw_key(w, "n_layer"); mt_jw_int(w, c->n_layer);
    mt_jw_key(w, "n_positions"); mt_jw_int(w, c->seq_len);
    mt_jw_key(w, "n_ctx"); mt_jw_int(w, c->seq_len);
    mt_jw_key(w, "n_inner"); mt_jw_null(w);
    mt_jw_key(w, "vocab_size"); mt_jw_int(w, c->vocab_size);
    mt_jw_key(w, "layer_norm_epsilon"); mt_jw_float(w, 1e-5f);
    mt_jw_key(w, "embd_pdrop"); mt_jw_float(w, c->dropout);
    mt_jw_key(w, "attn_pdrop"); mt_jw_float(w, c->dropout);
    mt_jw_key(w, "resid_pdrop"); mt_jw_float(w, c->dropout);
    mt_jw_key(w, "tie_word_embeddings"); mt_jw_bool(w, 1);
    mt_jw_key(w, "torch_dtype"); mt_jw_string(w, torch_dtype);
    mt_jw_end_object(w);
}

int mt_gpt2_hf_config_read(const mt_json *o, mt_model_config *c, mt_error *err) {
    int64_t v[4];
    const char *keys[4] = {"n_embd", "n_head", "n_layer", "vocab_size"};
    for (int i = 0; i < 4; i++)
        if (mt_json_get_int64(o, keys[i], &v[i], err)) return -1;
    int64_t T = 0;
    if (mt_json_get(o, "n_positions") && mt_json_get_int64(o, "n_positions", &T, err))
        return -1;
    const mt_json *tie = mt_json_get(o, "tie_word_embeddings");
    if (tie && tie->type == MT_JSON_BOOL && !tie->boolean)
        return mt_errorf(err, "tie_word_embeddings false: meshtrain's GPT-2 ties the head to wte");
    c->n_embd = (int)v[0];
    c->n_head = (int)v[1];
    c->n_layer = (int)v[2];
    c->vocab_size = (int)v[3];
    c->seq_len = (int)T;
    return 0;
}
