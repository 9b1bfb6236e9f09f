#include "models/config.h"
#include "models/family.h"
#include <math.h>
#include <string.h>

int mt_pad_vocab(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

void mt_model_config_defaults(mt_model_config *c, mt_family_id family) {
    c->family = family;
    const mt_family *f = mt_family_get(family);
    if (f->config_defaults) f->config_defaults(c);
}

int mt_model_config_preset(const char *name, mt_model_config *cfg, mt_error *err) {
    for (int i = 0; i < mt_family_count(); i++) {
        const mt_family *f = mt_family_get((mt_family_id)i);
        mt_model_config c;
        memset(&c, 0, sizeof c); /* a preset is the whole config: nothing left from before (adapters) */
        mt_model_config_defaults(&c, (mt_family_id)i);
        if (f->preset && f->preset(name, &c)) {
            *cfg = c;
            return 0;
        }
    }
    char list[512];
    mt_family_preset_list(list, sizeof list, NULL);
    return mt_errorf(err, "unknown model preset '%s' (expected %s)", name, list);
}

int mt_model_config_validate(const mt_model_config *c, mt_error *err) {
    if ((unsigned)c->family >= (unsigned)mt_family_count()) return mt_errorf(err, "unknown model family %d", (int)c->family);
    if (c->n_layer < 1 || c->n_layer > 4095) return mt_errorf(err, "{layers} must be in 1..4095, got %d", c->n_layer);
    if (c->n_embd < 1 || c->n_embd > 65536) return mt_errorf(err, "{dim} must be in 1..65536, got %d", c->n_embd);
    if (c->n_head < 1 || c->n_head > c->n_embd) return mt_errorf(err, "{heads} must be in 1..dim (%d), got %d", c->n_embd, c->n_head);
    if (c->vocab_size < 2 || c->vocab_size > (1 << 24))
        return mt_errorf(err, "{vocab} must be in 2..16777216, got %d", c->vocab_size);
    if (c->padded_vocab < c->vocab_size || c->padded_vocab > (1 << 24))
        return mt_errorf(err, "padded vocabulary %d is smaller than the vocabulary %d", c->padded_vocab, c->vocab_size);
    if (c->seq_len < 1 || c->seq_len > (1 << 24))
        return mt_errorf(err, "{seq-len} must be in 1..16777216, got %d", c->seq_len);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f)) return mt_errorf(err, "{dropout} must be in [0, 1), got %g", (double)c->dropout);
    const mt_family *f = mt_family_get(c->family);
    return f->config_validate ? f->config_validate(c, err) : 0;
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
    const mt_family *f = mt_family_get(c->family);
    if (f->config_write_json) f->config_write_json(w, c);
    if (mt_adapter_spec_active(&c->adapters)) {
        mt_jw_key(w, "adapters");
        mt_adapter_spec_write_json(w, &c->adapters);
    }
    mt_jw_end_object(w);
}

int mt_model_config_get_int(const mt_json *obj, const char *key, int *out, mt_error *err) {
    int64_t v;
    if (mt_json_get_int64(obj, key, &v, err)) return -1;
    if (v < 0 || v > (1 << 24)) return mt_errorf(err, "model config %s = %lld is out of range", key, (long long)v);
    *out = (int)v;
    return 0;
}

int mt_model_config_get_float(const mt_json *obj, const char *key, float *out, mt_error *err) {
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
    if (mt_model_config_get_int(obj, "n_layer", &c->n_layer, err) || mt_model_config_get_int(obj, "n_embd", &c->n_embd, err) ||
        mt_model_config_get_int(obj, "n_head", &c->n_head, err) || mt_model_config_get_int(obj, "vocab_size", &c->vocab_size, err) ||
        mt_model_config_get_int(obj, "padded_vocab", &c->padded_vocab, err) || mt_model_config_get_int(obj, "seq_len", &c->seq_len, err))
        return -1;
    if (mt_json_get(obj, "dropout") && mt_model_config_get_float(obj, "dropout", &c->dropout, err)) return -1;
    const mt_family *f = mt_family_get(c->family);
    if (f->config_read_json && f->config_read_json(obj, c, err)) return -1;
    const mt_json *ad = mt_json_get(obj, "adapters");
    if (ad && mt_adapter_spec_read_json(ad, &c->adapters, err)) return -1;
    return mt_model_config_validate(c, err);
}
