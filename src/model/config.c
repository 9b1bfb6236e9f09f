#include "model/gpt.h"
#include <string.h>

int mt_gpt_pad_vocab(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

int mt_gpt_config_preset(const char *name, mt_gpt_config *cfg, mt_error *err) {
    static const struct { const char *name; int L, C, H; } presets[] = {
        {"gpt2", 12, 768, 12}, {"gpt2-medium", 24, 1024, 16},
        {"gpt2-large", 36, 1280, 20}, {"gpt2-xl", 48, 1600, 25},
    };
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(name, presets[i].name) == 0) {
            cfg->n_layer = presets[i].L;
            cfg->n_embd = presets[i].C;
            cfg->n_head = presets[i].H;
            cfg->vocab_size = 50257;
            cfg->padded_vocab = mt_gpt_pad_vocab(50257);
            cfg->seq_len = 1024;
            return 0;
        }
    }
    return mt_errorf(err, "unknown model preset '%s' (expected gpt2, gpt2-medium, gpt2-large or gpt2-xl)", name);
}

int mt_gpt_config_validate(const mt_gpt_config *c, mt_error *err) {
    if (c->n_layer < 1 || c->n_layer > 4095) return mt_errorf(err, "--layers must be in 1..4095, got %d", c->n_layer);
    if (c->n_embd < 1 || c->n_embd > 65536) return mt_errorf(err, "--dim must be in 1..65536, got %d", c->n_embd);
    if (c->n_head < 1 || c->n_head > c->n_embd) return mt_errorf(err, "--heads must be in 1..dim (%d), got %d", c->n_embd, c->n_head);
    if (c->n_embd % c->n_head != 0)
        return mt_errorf(err, "--dim %d is not divisible by --heads %d", c->n_embd, c->n_head);
    if (c->vocab_size < 2 || c->vocab_size > (1 << 24))
        return mt_errorf(err, "--vocab must be in 2..16777216, got %d", c->vocab_size);
    if (c->padded_vocab < c->vocab_size || c->padded_vocab > (1 << 24))
        return mt_errorf(err, "padded vocabulary %d is smaller than the vocabulary %d", c->padded_vocab, c->vocab_size);
    if (c->seq_len < 1 || c->seq_len > 65535) return mt_errorf(err, "--seq-len must be in 1..65535, got %d", c->seq_len);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f)) return mt_errorf(err, "--dropout must be in [0, 1), got %g", (double)c->dropout);
    return 0;
}

void mt_gpt_config_write_json(mt_json_writer *w, const mt_gpt_config *c) {
    mt_jw_begin_object(w);
    mt_jw_key(w, "n_layer"); mt_jw_int(w, c->n_layer);
    mt_jw_key(w, "n_embd"); mt_jw_int(w, c->n_embd);
    mt_jw_key(w, "n_head"); mt_jw_int(w, c->n_head);
    mt_jw_key(w, "vocab_size"); mt_jw_int(w, c->vocab_size);
    mt_jw_key(w, "padded_vocab"); mt_jw_int(w, c->padded_vocab);
    mt_jw_key(w, "seq_len"); mt_jw_int(w, c->seq_len);
    mt_jw_key(w, "dropout"); mt_jw_double(w, c->dropout);
    mt_jw_end_object(w);
}

int mt_gpt_config_read_json(const mt_json *obj, mt_gpt_config *c, mt_error *err) {
    if (!obj || obj->type != MT_JSON_OBJECT) return mt_errorf(err, "model config is not a JSON object");
    int64_t v[6];
    const char *keys[6] = {"n_layer", "n_embd", "n_head", "vocab_size", "padded_vocab", "seq_len"};
    for (int i = 0; i < 6; i++) {
        if (mt_json_get_int64(obj, keys[i], &v[i], err)) return -1;
        if (v[i] < 0 || v[i] > (1 << 24)) return mt_errorf(err, "model config %s = %lld is out of range", keys[i], (long long)v[i]);
    }
    double d = 0;
    if (mt_json_get(obj, "dropout") && mt_json_get_double(obj, "dropout", &d, err)) return -1;
    c->n_layer = (int)v[0]; c->n_embd = (int)v[1]; c->n_head = (int)v[2];
    c->vocab_size = (int)v[3]; c->padded_vocab = (int)v[4]; c->seq_len = (int)v[5];
    c->dropout = (float)d;
    return mt_gpt_config_validate(c, err);
}
