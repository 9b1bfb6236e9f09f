/* The adapter spec: parsing, checks and its JSON form (see nn/adapter_spec.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "nn/adapter_spec.h"
#include "quant/qweight.h"
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[] = {"none", "lora", "ia3"};

int mt_peft_kind_parse(const char *s, mt_peft_kind *out, mt_error *err) {
    for (int k = 0; k < 3; k++)
        if (strcmp(s, kind_names[k]) == 0) {
            *out = (mt_peft_kind)k;
            return 0;
        }
    return mt_errorf(err, "unknown {peft} '%s' (choose none, lora or ia3)", s);
}

const char *mt_peft_kind_name(mt_peft_kind k) { return (unsigned)k < 3 ? kind_names[k] : "?"; }

float mt_lora_scale(const mt_adapter_spec *s) {
    return s->rslora ? s->alpha / sqrtf((float)s->r) : s->alpha / (float)s->r;
}

int mt_adapter_spec_validate(const mt_adapter_spec *s, mt_error *err) {
    if (s->kind == MT_PEFT_LORA) {
        if (s->r < 1) return mt_errorf(err, "{lora-r} must be at least 1 (got %d)", s->r);
        if (!(s->alpha > 0) || !isfinite(s->alpha)) return mt_errorf(err, "{lora-alpha} must be > 0 (got %g)", (double)s->alpha);
        if (!(s->dropout >= 0 && s->dropout < 1))
            return mt_errorf(err, "{lora-dropout} must be in [0, 1) (got %g)", (double)s->dropout);
    }
    if (s->quant && s->kind == MT_PEFT_NONE && !s->freeze[0])
        return mt_errorf(err, "{quantize-base} %s stores a frozen base: it needs {peft} lora or {freeze}",
                         mt_quant_kind_name((mt_quant_kind)s->quant));
    if (s->double_quant && s->quant != MT_QUANT_NF4) return mt_errorf(err, "{double-quant} goes with {quantize-base} nf4");
    if (s->quant == MT_QUANT_GPTQ && s->gptq_bits && /* 0: not known yet (the base's, read at the start) */
        ((s->gptq_bits != 4 && s->gptq_bits != 8) || s->gptq_group_size == 0 || s->gptq_group_size < -1))
        return mt_errorf(err, "{quantize-base} gptq: %d bits, group size %d (4 or 8 bits, a group size >= 1 or -1)",
                         s->gptq_bits, s->gptq_group_size);
    if (!(s->int8_threshold >= 0.0f) || isnan(s->int8_threshold))
        return mt_errorf(err, "{int8-threshold} must be >= 0 (got %g)", (double)s->int8_threshold);
    if (s->int8_threshold > 0.0f && s->quant != MT_QUANT_INT8)
        return mt_errorf(err, "{int8-threshold} goes with {quantize-base} int8");
    if (s->train_also[0] && s->kind == MT_PEFT_NONE) return mt_errorf(err, "{peft-train} goes with {peft} lora|ia3");
    for (int k = 0; k < 2; k++) {
        const char *pat = k ? s->train_also : s->freeze;
        if (!pat[0]) continue;
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof msg);
            return mt_errorf(err, "{%s} '%s': not a valid regular expression at offset %zu: %s", k ? "peft-train" : "freeze",
                             pat, (size_t)eo, (const char *)msg);
        }
        pcre2_code_free(re);
    }
    return 0;
}

void mt_adapter_spec_write_json(mt_json_writer *w, const mt_adapter_spec *s) {
    mt_jw_begin_object(w);
    mt_jw_key(w, "peft"); mt_jw_string(w, mt_peft_kind_name(s->kind));
    if (s->kind == MT_PEFT_LORA) {
        mt_jw_key(w, "r"); mt_jw_int(w, s->r);
        mt_jw_key(w, "alpha"); mt_jw_float(w, s->alpha);
        mt_jw_key(w, "dropout"); mt_jw_float(w, s->dropout);
        mt_jw_key(w, "rslora"); mt_jw_int(w, s->rslora);
    }
    mt_jw_key(w, "targets"); mt_jw_string(w, s->targets);
    if (s->kind == MT_PEFT_IA3) {
        mt_jw_key(w, "feedforward"); mt_jw_string(w, s->feedforward);
    }
    mt_jw_key(w, "freeze"); mt_jw_string(w, s->freeze);
    if (s->train_also[0]) {
        mt_jw_key(w, "train_also"); mt_jw_string(w, s->train_also);
    }
    if (s->quant) {
        mt_jw_key(w, "quantize_base"); mt_jw_string(w, mt_quant_kind_name((mt_quant_kind)s->quant));
        mt_jw_key(w, "double_quant"); mt_jw_int(w, s->double_quant);
        if (s->quant == MT_QUANT_GPTQ) {
            mt_jw_key(w, "gptq_bits"); mt_jw_int(w, s->gptq_bits);
            mt_jw_key(w, "gptq_group_size"); mt_jw_int(w, s->gptq_group_size);
        }
        if (s->int8_threshold > 0.0f) { /* absent: 0, as checkpoints from before it */
            mt_jw_key(w, "int8_threshold"); mt_jw_float(w, s->int8_threshold);
        }
    }
    mt_jw_end_object(w);
}

static int get_text(const mt_json *o, const char *key, char *dst, mt_error *err) {
    const char *v = NULL;
    if (mt_json_get_string(o, key, &v, err)) return -1;
    if (strlen(v) >= MT_ADAPTER_TEXT) return mt_errorf(err, "adapters.%s: longer than %d characters", key, MT_ADAPTER_TEXT - 1);
    snprintf(dst, MT_ADAPTER_TEXT, "%s", v);
    return 0;
}

int mt_adapter_spec_read_json(const mt_json *o, mt_adapter_spec *s, mt_error *err) {
    memset(s, 0, sizeof *s);
    const char *kind = NULL;
    if (!o || o->type != MT_JSON_OBJECT) return mt_errorf(err, "model config: \"adapters\" is not an object");
    if (mt_json_get_string(o, "peft", &kind, err) || mt_peft_kind_parse(kind, &s->kind, err)) return -1;
    if (s->kind == MT_PEFT_LORA) {
        int64_t r, rs;
        double a, d;
        if (mt_json_get_int64(o, "r", &r, err) || mt_json_get_double(o, "alpha", &a, err) ||
            mt_json_get_double(o, "dropout", &d, err) || mt_json_get_int64(o, "rslora", &rs, err))
            return -1;
        if (r < 1 || r > 1 << 20) return mt_errorf(err, "adapters.r %lld is out of range", (long long)r);
        s->r = (int)r, s->alpha = (float)a, s->dropout = (float)d, s->rslora = rs != 0;
    }
    if (get_text(o, "targets", s->targets, err) || get_text(o, "freeze", s->freeze, err)) return -1;
    if (s->kind == MT_PEFT_IA3 && get_text(o, "feedforward", s->feedforward, err)) return -1;
    if (mt_json_get(o, "train_also") && get_text(o, "train_also", s->train_also, err)) return -1;
    if (mt_json_get(o, "quantize_base")) {
        const char *q = NULL;
        int64_t dq = 0;
        mt_quant_kind k;
        if (mt_json_get_string(o, "quantize_base", &q, err) || mt_quant_kind_parse(q, &k, err) ||
            mt_json_get_int64(o, "double_quant", &dq, err))
            return -1;
        s->quant = (int)k, s->double_quant = dq != 0;
        double th = 0.0;
        if (mt_json_get(o, "int8_threshold") && mt_json_get_double(o, "int8_threshold", &th, err)) return -1;
        s->int8_threshold = (float)th;
        int64_t gb = 0, gg = 0;
        if (s->quant == MT_QUANT_GPTQ && (mt_json_get_int64(o, "gptq_bits", &gb, err) ||
                                          mt_json_get_int64(o, "gptq_group_size", &gg, err)))
            return -1;
        if (gb < 0 || gb > 8 || gg < -1 || gg > 1 << 30)
            return mt_errorf(err, "adapters.gptq_bits %lld / gptq_group_size %lld are out of range", (long long)gb,
                             (long long)gg);
        s->gptq_bits = (int)gb, s->gptq_group_size = (int)gg;
    }
    return mt_adapter_spec_validate(s, err);
}
