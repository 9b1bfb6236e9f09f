/* PEFT adapter directories (see interop/peft.h). */
#include "interop/peft.h"
#include "models/family.h"
#include "nn/adapter_spec.h"
#include "interop/hf_dir.h"
#include "interop/safetensors.h"
#include "core/fileio.h"
#include "core/strlist.h"
#include "optim/loss_scaler.h"
#include "quant/qweight.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prefixes err's message with `where` (formatting from a copy: the message is the argument). */
static int err_in(mt_error *err, const char *where) {
    char msg[MT_ERROR_LEN];
    snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
    return mt_errorf(err, "%s: %s", where, msg);
}

/* "base_model.model.<prefix><module>.lora_X.weight" of tensor t (ours: "<module>.lora_X.weight"). */
static void peft_key(const mt_model_config *cfg, const char *tensor, char *buf, size_t cap) {
    const mt_family *f = mt_family_get(cfg->family);
    char hf[160];
    int tr;
    f->hf_name(cfg, tensor, hf, sizeof hf, &tr);
    snprintf(buf, cap, "base_model.model.%s%s", f->peft_module_prefix, hf);
}

/* A comma-separated list as a JSON array (or the string "all-linear"). */
static void write_list(mt_json_writer *jw, const char *list) {
    if (!strcmp(list, "all-linear")) {
        mt_jw_string(jw, "all-linear");
        return;
    }
    mt_jw_begin_array(jw);
    const char *cur = list, *item;
    size_t len;
    while (mt_strlist_next(&cur, &item, &len)) {
        char one[MT_ADAPTER_TEXT];
        snprintf(one, sizeof one, "%.*s", (int)len, item);
        mt_jw_string(jw, one);
    }
    mt_jw_end_array(jw);
}

static int write_config(const char *dir, const mt_weights *w, mt_error *err) {
    const mt_adapter_spec *s = &w->cfg.adapters;
    const mt_family *f = mt_family_get(w->cfg.family);
    int ia3 = s->kind == MT_PEFT_IA3;
    mt_json_writer jw;
    mt_jw_init(&jw);
    mt_jw_begin_object(&jw);
    mt_jw_key(&jw, "peft_type"); mt_jw_string(&jw, ia3 ? "IA3" : "LORA");
    mt_jw_key(&jw, "task_type"); mt_jw_string(&jw, "CAUSAL_LM");
    mt_jw_key(&jw, "base_model_name_or_path"); mt_jw_string(&jw, w->base);
    if (!ia3) {
        mt_jw_key(&jw, "r"); mt_jw_int(&jw, s->r);
        mt_jw_key(&jw, "lora_alpha"); mt_jw_float(&jw, s->alpha);
        mt_jw_key(&jw, "lora_dropout"); mt_jw_float(&jw, s->dropout);
        mt_jw_key(&jw, "use_rslora"); mt_jw_bool(&jw, s->rslora);
        mt_jw_key(&jw, "bias"); mt_jw_string(&jw, "none");
    } else {
        mt_jw_key(&jw, "init_ia3_weights"); mt_jw_bool(&jw, 1);
    }
    mt_jw_key(&jw, "fan_in_fan_out"); mt_jw_bool(&jw, f->peft_fan_in_fan_out);
    mt_jw_key(&jw, "inference_mode"); mt_jw_bool(&jw, 1);
    mt_jw_key(&jw, "target_modules");
    write_list(&jw, s->targets[0] ? s->targets : ia3 ? f->ia3_targets : f->lora_targets);
    if (ia3) {
        mt_jw_key(&jw, "feedforward_modules");
        write_list(&jw, s->feedforward[0] ? s->feedforward : f->ia3_feedforward);
    }
    mt_jw_key(&jw, "modules_to_save"); /* base modules trained in full ({peft-train}), by HF module name */
    int any = 0;
    for (int u = 0; u < w->layout.n_units; u++)
        for (int i = 0; i < w->layout.units[u].n_tensors; i++) {
            const mt_tensor *t = &w->layout.units[u].t[i];
            if (t->adapter) continue;
            char hf[160];
            int tr;
            f->hf_name(&w->cfg, t->name, hf, sizeof hf, &tr);
            char *dot = strrchr(hf, '.');
            if (dot) *dot = 0;
            if (!any) mt_jw_begin_array(&jw);
            any = 1;
            mt_jw_string(&jw, hf);
        }
    if (any) mt_jw_end_array(&jw);
    else mt_jw_null(&jw);
    mt_jw_end_object(&jw);
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *tmp = NULL;
    FILE *fp = mt_fopen_temp(path, &tmp, err);
    int rc = -1;
    if (fp) {
        fprintf(fp, "%s\n", jw.buf);
        rc = mt_fcommit_temp(fp, tmp, path, 0, err);
    }
    mt_jw_free(&jw);
    return rc;
}

/* The shape a peft file gives adapter tensor t: LoRA's as they are, IA3's
 * vector (out, 1) for an output scaling and (1, in) for an input scaling. */
static int peft_shape(const mt_layout *l, const mt_tensor *t, int64_t shape[2]) {
    if (!t->adapter) { /* a base tensor trained in full (modules_to_save): HF's rows (no vocabulary padding) */
        shape[0] = t->init_rows, shape[1] = t->shape[1];
        return t->ndim;
    }
    shape[0] = t->shape[0], shape[1] = t->shape[1];
    size_t n = strlen(t->name);
    if (n < 6 || strcmp(t->name + n - 6, ".ia3_l")) return 2;
    char target[MT_TENSOR_NAME_LEN + 8];
    snprintf(target, sizeof target, "%.*s.weight", (int)(n - 6), t->name);
    const mt_tensor *g = mt_layout_find_tensor(l, target, NULL);
    if (g && g->ia3_input) shape[0] = 1, shape[1] = t->shape[0];
    else shape[0] = t->shape[0], shape[1] = 1;
    return 2;
}

int mt_peft_export(const char *dir, const mt_weights *w, mt_error *err) {
    if (w->cfg.adapters.kind == MT_PEFT_NONE)
        return mt_errorf(err, "{format} peft exports the adapters of a {peft} lora|ia3 run; this checkpoint %s",
                         w->cfg.adapters.freeze[0] ? "froze tensors by {freeze} (export it with {format} hf after training)"
                                                   : "has no adapters");
    if (mt_make_dirs(dir, "PEFT adapter directory", err)) return -1;
    int n = 0;
    for (int u = 0; u < w->layout.n_units; u++) n += w->layout.units[u].n_tensors;
    mt_st_spec *specs = mt_xcalloc((size_t)(n ? n : 1), sizeof *specs, "safetensors spec");
    char (*names)[200] = mt_xcalloc((size_t)(n ? n : 1), sizeof *names, "safetensors names");
    int k = 0;
    for (int u = 0; u < w->layout.n_units; u++)
        for (int i = 0; i < w->layout.units[u].n_tensors; i++, k++) {
            const mt_tensor *t = &w->layout.units[u].t[i];
            peft_key(&w->cfg, t->name, names[k], sizeof names[k]);
            specs[k].name = names[k];
            specs[k].ndim = peft_shape(&w->layout, t, specs[k].shape);
            char hf[160];
            int tr = 0;
            mt_family_get(w->cfg.family)->hf_name(&w->cfg, t->name, hf, sizeof hf, &tr);
            if (!t->adapter && tr) {
                free(specs);
                free(names);
                return mt_errorf(err, "%s is trained in full and stored transposed by Hugging Face (Conv1D): peft "
                                      "export does not transpose it; fold the run into its base with `meshtrain merge`",
                                 t->name);
            }
        }
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    const char *meta[2] = {"format", "pt"};
    mt_st_writer *sw = mt_st_writer_open(path, specs, n, meta, 1, err);
    int rc = sw ? 0 : -1;
    for (int u = 0; u < w->layout.n_units && !rc; u++)
        for (int i = 0; i < w->layout.units[u].n_tensors && !rc; i++)
            rc = mt_st_writer_put(sw, w->unit[u] + w->layout.units[u].t[i].offset,
                                  w->layout.units[u].t[i].adapter ? w->layout.units[u].t[i].numel
                                                                  : (size_t)w->layout.units[u].t[i].init_rows *
                                                                        (size_t)w->layout.units[u].t[i].shape[1], err);
    if (sw) {
        if (rc) mt_st_writer_abort(sw);
        else rc = mt_st_writer_close(sw, err);
    }
    free(specs);
    free(names);
    if (!rc) rc = write_config(dir, w, err);
    return rc;
}

/* adapter_config.json -> the adapter spec. */
/* The list builders below count the length their text would have and write only what fits, always
 * NUL-terminated: a caller sees n >= cap once it no longer fits (nothing is written, or pointed, past
 * the buffer's end). append_text adds text; append_char one character; append_listed ",item" (or
 * "item" first). */
static size_t append_text(char *buf, size_t cap, size_t n, const char *text) {
    if (n >= cap) return n + strlen(text);
    return n + (size_t)snprintf(buf + n, cap - n, "%s", text);
}
static size_t append_char(char *buf, size_t cap, size_t n, char c) {
    if (n + 1 < cap) buf[n] = c, buf[n + 1] = 0;
    return n + 1;
}
static size_t append_listed(char *buf, size_t cap, size_t n, const char *item) {
    return append_text(buf, cap, append_text(buf, cap, n, n ? "," : ""), item);
}

int mt_peft_read_config(const char *dir, mt_adapter_spec *s, mt_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    int missing;
    mt_json_doc *doc = mt_hf_read_json_file(path, &missing, err);
    if (!doc) return missing ? mt_errorf(err, "%s: no adapter_config.json (not a PEFT adapter directory)", dir) : -1;
    const mt_json *o = mt_json_root(doc);
    memset(s, 0, sizeof *s);
    const char *type = NULL;
    int64_t r;
    double a, d = 0;
    int rc = 0;
    int ia3 = 0;
    if (mt_json_get_string(o, "peft_type", &type, err)) rc = -1;
    else if (strcmp(type, "LORA") && strcmp(type, "IA3"))
        rc = mt_errorf(err, "%s: peft_type \"%s\" is not supported (meshtrain imports LORA and IA3 adapters)", path, type);
    else if ((ia3 = !strcmp(type, "IA3")))
        r = 1, a = 1;
    else if (mt_json_get_int64(o, "r", &r, err) || mt_json_get_double(o, "lora_alpha", &a, err))
        rc = err_in(err, path);
    else if (mt_json_get(o, "lora_dropout") && mt_json_get_double(o, "lora_dropout", &d, err))
        rc = err_in(err, path);
    if (!rc && (r < 1 || r > 65536)) rc = mt_errorf(err, "%s: r = %lld is out of range", path, (long long)r);
    if (!rc && ia3) {
        s->kind = MT_PEFT_IA3;
        const mt_json *ff = mt_json_get(o, "feedforward_modules");
        size_t n = 0;
        if (ff && ff->type == MT_JSON_STRING) n = (size_t)snprintf(s->feedforward, sizeof s->feedforward, "%s", ff->str);
        for (const mt_json *e = ff && ff->type == MT_JSON_ARRAY ? ff->child : NULL; e && !rc; e = e->next) {
            if (e->type != MT_JSON_STRING) rc = mt_errorf(err, "%s: feedforward_modules holds a non-string", path);
            else n = append_listed(s->feedforward, sizeof s->feedforward, n, e->str);
        }
        if (!rc && n >= sizeof s->feedforward) rc = mt_errorf(err, "%s: feedforward_modules is too long", path);
    }
    if (!rc) {
        if (!ia3) s->kind = MT_PEFT_LORA, s->r = (int)r, s->alpha = (float)a, s->dropout = (float)d;
        const mt_json *rs = mt_json_get(o, "use_rslora");
        s->rslora = rs && rs->type == MT_JSON_BOOL && rs->boolean;
        const mt_json *bias = mt_json_get(o, "bias");
        if (bias && bias->type == MT_JSON_STRING && strcmp(bias->str, "none"))
            rc = mt_errorf(err, "%s: bias \"%s\": only adapters without trained biases (\"none\") are supported", path, bias->str);
        const mt_json *tm = mt_json_get(o, "target_modules");
        size_t n = 0;
        if (!rc && tm && tm->type == MT_JSON_STRING) {
            n = (size_t)snprintf(s->targets, sizeof s->targets, "%s", tm->str);
        } else if (!rc && tm && tm->type == MT_JSON_ARRAY) {
            for (const mt_json *e = tm->child; e && !rc; e = e->next) {
                if (e->type != MT_JSON_STRING) rc = mt_errorf(err, "%s: target_modules holds a non-string", path);
                else n = append_listed(s->targets, sizeof s->targets, n, e->str);
            }
        } else if (!rc) {
            rc = mt_errorf(err, "%s: no target_modules", path);
        }
        if (!rc && n >= sizeof s->targets) rc = mt_errorf(err, "%s: target_modules is too long", path);
    }
    const mt_json *ms = rc ? NULL : mt_json_get(o, "modules_to_save");
    if (ms && ms->type == MT_JSON_ARRAY && ms->count) { /* -> a pattern over HF tensor names: module, then its parameter */
        size_t n = (size_t)snprintf(s->train_also, sizeof s->train_also, "(^|\\.)(");
        for (const mt_json *e = ms->child; e && !rc; e = e->next) {
            if (e->type != MT_JSON_STRING) {
                rc = mt_errorf(err, "%s: modules_to_save holds a non-string", path);
                break;
            }
            if (e != ms->child) n = append_char(s->train_also, sizeof s->train_also, n, '|');
            for (const char *c = e->str; *c; c++) { /* escape regex metacharacters */
                if (strchr("\\.^$|?*+()[]{}", *c)) n = append_char(s->train_also, sizeof s->train_also, n, '\\');
                n = append_char(s->train_also, sizeof s->train_also, n, *c);
            }
        }
        n = append_text(s->train_also, sizeof s->train_also, n, ")\\.[^.]+$");
        if (!rc && n >= sizeof s->train_also) rc = mt_errorf(err, "%s: modules_to_save is too long", path);
    } else if (ms && ms->type != MT_JSON_NULL && ms->type != MT_JSON_ARRAY) {
        rc = mt_errorf(err, "%s: modules_to_save is neither a list nor null", path);
    }
    mt_json_free(doc);
    return rc ? rc : mt_adapter_spec_validate(s, err);
}

int mt_peft_import(const char *dir, const char *base, mt_weights *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    mt_adapter_spec spec;
    char path[4200];
    if (mt_peft_read_config(dir, &spec, err)) return -1;
    mt_ckpt *ck = mt_ckpt_open(base, err);
    if (!ck) return -1;
    mt_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    const mt_json *c = mt_json_get(mt_ckpt_state(ck), "config");
    mt_error e;
    int rc = !c ? mt_errorf(err, "{base} %s: no model config in its state", base)
                : mt_model_config_read_json(c, &cfg, &e) ? mt_errorf(err, "{base} %s: %s", base, e.msg) : 0;
    mt_ckpt_close(ck);
    if (rc) return -1;
    if (mt_adapter_spec_active(&cfg.adapters))
        return mt_errorf(err, "{base} %s is itself a PEFT / {freeze} checkpoint: give the model it adapts", base);
    cfg.adapters = spec;
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    if (mt_model_adapters_check(&cfg, err)) return err_in(err, path);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    mt_st_file *f = mt_st_open(path, err);
    if (!f) return -1;
    mt_weights_alloc(out, &cfg);
    snprintf(out->base, sizeof out->base, "%s", base);
    int found = 0, nd;
    int64_t want[2];
    char key[200];
    for (int u = 0; u < out->layout.n_units && !rc; u++)
        for (int i = 0; i < out->layout.units[u].n_tensors && !rc; i++) {
            const mt_tensor *t = &out->layout.units[u].t[i];
            peft_key(&cfg, t->name, key, sizeof key);
            const mt_st_entry *en = mt_st_find(f, key);
            if (!en) {
                rc = mt_errorf(err, "%s has no tensor %s (the adapter_config.json's targets name it)", path, key);
            } else if (nd = peft_shape(&out->layout, t, want),
                       en->ndim != nd || en->shape[0] != want[0] || (nd == 2 && en->shape[1] != want[1])) {
                rc = mt_errorf(err, "%s: %s has shape [%lld, %lld], r = %d on this model needs [%lld, %lld] (a rank "
                                    "mismatch, or an adapter of another model)",
                               path, key, (long long)en->shape[0], (long long)(en->ndim > 1 ? en->shape[1] : 1), spec.r,
                               (long long)want[0], (long long)want[1]);
            } else {
                rc = mt_st_read_f32(f, en, out->unit[u] + t->offset, err);
                if (!rc && mt_found_nonfinite(out->unit[u] + t->offset, t->numel))
                    rc = mt_errorf(err, "%s: %s holds inf/NaN: refusing to import it", path, key);
                found++;
            }
        }
    for (int i = 0; i < mt_st_count(f) && !rc; i++) { /* tensors of modules this model lacks */
            const mt_st_entry *en = mt_st_entry_at(f, i);
            int match = 0;
            for (int u = 0; u < out->layout.n_units && !match; u++)
                for (int j = 0; j < out->layout.units[u].n_tensors && !match; j++) {
                    peft_key(&cfg, out->layout.units[u].t[j].name, key, sizeof key);
                    match = !strcmp(key, en->name);
                }
            if (!match)
                rc = mt_errorf(err, "%s: tensor %s belongs to no LoRA target of this %s model (a target module the "
                                    "model lacks, or an adapter of another model)",
                               path, en->name, mt_family_name(cfg.family));
        }
    mt_st_close(f);
    if (rc) mt_weights_free(out);
    return rc;
}

int mt_peft_merge(const mt_weights *w, mt_weights *out, mt_error *err) {
    mt_model_config cfg = w->cfg;
    memset(&cfg.adapters, 0, sizeof cfg.adapters);
    mt_weights_alloc(out, &cfg);
    float s = mt_lora_scale(&w->cfg.adapters);
    for (int u = 0; u < out->layout.n_units; u++)
        for (int i = 0; i < out->layout.units[u].n_tensors; i++) {
            const mt_tensor *t = &out->layout.units[u].t[i];
            float *dst = out->unit[u] + t->offset;
            int su;
            const mt_tensor *src = mt_layout_find_tensor(&w->layout, t->name, &su);
            if (!src || src->numel != t->numel) {
                mt_weights_free(out);
                return mt_errorf(err, "merge: tensor %s is missing from the adapted model", t->name);
            }
            const float *from = (src->trainable ? w->unit[su] : w->frozen[su]);
            if (!from) {
                mt_weights_free(out);
                return mt_errorf(err, "merge: the frozen tensors were not loaded");
            }
            memcpy(dst, from + src->offset, t->numel * sizeof(float));
            const mt_adapter_spec *sp = &w->cfg.adapters;
            if (sp->quant && sp->quant != MT_QUANT_GPTQ && !src->trainable && t->ndim == 2 &&
                out->layout.units[u].role == MT_UNIT_BLOCK) {
                /* the base as training saw it: quantized and dequantized (whole tensors, as tp 1 does); a
                 * GPTQ base's fp32 tensors are its codes dequantized already (the import's) */
                mt_qweight q;
                if (mt_qweight_init(&q, (mt_quant_kind)sp->quant, sp->double_quant, dst, t->shape[0], t->shape[1], err)) {
                    mt_weights_free(out);
                    return -1;
                }
                mt_qweight_rows(&q, 0, t->shape[0], t->shape[1], dst);
                mt_qweight_free(&q);
            }
            if (src->ia3) { /* fold the vector in: rows (output scaling, and its bias below) or columns (input) */
                const float *l = w->unit[su] + mt_unit_tensor(&w->layout.units[su], src->ia3 - 1)->offset;
                for (int64_t o = 0; o < t->shape[0]; o++)
                    for (int64_t c = 0; c < t->shape[1]; c++) dst[o * t->shape[1] + c] *= src->ia3_input ? l[c] : l[o];
                continue;
            }
            if (!src->lora_a) continue;
            const mt_unit_layout *ul = &w->layout.units[su];
            const mt_tensor *a = mt_unit_tensor(ul, src->lora_a - 1), *b = mt_unit_tensor(ul, src->lora_b - 1);
            const float *A = w->unit[su] + a->offset, *B = w->unit[su] + b->offset;
            int64_t O = t->shape[0], I = t->shape[1], r = a->shape[0];
            for (int64_t o = 0; o < O; o++)
                for (int64_t c = 0; c < I; c++) {
                    double acc = 0;
                    for (int64_t k = 0; k < r; k++) acc += (double)B[o * r + k] * (double)A[k * I + c];
                    dst[o * I + c] += (float)((double)s * acc);
                }
        }
    /* an output-scaled target's bias is scaled too: (W x + b) * l */
    for (int u = 0; u < w->layout.n_units; u++)
        for (int k = 0; k < w->layout.units[u].n_decl; k++) {
            const mt_tensor *t = mt_unit_tensor(&w->layout.units[u], k);
            if (!t->ia3 || t->ia3_input || !t->bias_of) continue;
            const mt_tensor *b = mt_unit_tensor(&w->layout.units[u], t->bias_of - 1);
            const float *l = w->unit[u] + mt_unit_tensor(&w->layout.units[u], t->ia3 - 1)->offset;
            float *dst = mt_weights_tensor(out, b->name, NULL);
            for (size_t j = 0; dst && j < b->numel; j++) dst[j] *= l[j];
        }
    return 0;
}
