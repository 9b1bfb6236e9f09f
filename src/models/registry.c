/* The registry of model families: a family's id is its position here. */
#include "models/family.h"
#include "core/strlist.h"
#include "nn/adapters.h"
#include <stdio.h>
#include <string.h>
#include "models/gpt2/gpt2.h"
#include "models/llama/llama.h"
#include "models/falcon/falcon.h"

static const mt_family *const families[] = {
    [MT_FAMILY_GPT2] = &mt_family_gpt2,
    [MT_FAMILY_LLAMA] = &mt_family_llama,
    [MT_FAMILY_FALCON] = &mt_family_falcon,
};
#define N_FAMILIES ((int)(sizeof families / sizeof families[0]))

int mt_family_count(void) { return N_FAMILIES; }

const mt_family *mt_family_get(mt_family_id id) {
    if ((unsigned)id >= (unsigned)N_FAMILIES) mt_die("model family %d is not built into this meshtrain", (int)id);
    return families[id];
}

const char *mt_family_name(mt_family_id f) { return (unsigned)f < (unsigned)N_FAMILIES ? families[f]->name : "?"; }

enum { LIST_NAMES, LIST_PRESETS, LIST_HF_TYPES };

/* The items of one list of every family into buf: joined by sep, or with
 * sep NULL as "a, b or c" (for messages). */
static void join_lists(char *buf, size_t cap, int which, const char *sep) {
    const char *items[64];
    size_t lens[64];
    int n = 0;
    for (int i = 0; i < N_FAMILIES; i++) {
        const mt_family *f = families[i];
        const char *list = which == LIST_NAMES ? f->name : which == LIST_PRESETS ? f->preset_names : f->hf_model_types;
        const char *cur = list ? list : "", *item;
        size_t len;
        while (n < 64 && mt_strlist_next(&cur, &item, &len))
            if (len) items[n] = item, lens[n++] = len;
    }
    size_t at = 0;
    buf[0] = 0;
    for (int k = 0; k < n && at < cap; k++) {
        const char *between = k == 0 ? "" : sep ? sep : k == n - 1 ? " or " : ", ";
        at += (size_t)snprintf(buf + at, cap - at, "%s%.*s", between, (int)lens[k], items[k]);
    }
}

void mt_family_preset_list(char *buf, size_t cap, const char *sep) { join_lists(buf, cap, LIST_PRESETS, sep); }

int mt_family_parse(const char *name, mt_family_id *out, mt_error *err) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (!strcmp(name, families[i]->name)) {
            *out = (mt_family_id)i;
            return 0;
        }
    char list[256];
    join_lists(list, sizeof list, LIST_NAMES, NULL);
    return mt_errorf(err, "unknown model family '%s' (expected %s)", name, list);
}

int mt_family_of_hf_model_type(const char *model_type, mt_family_id *out, mt_error *err) {
    for (int i = 0; i < N_FAMILIES; i++) {
        const char *cur = families[i]->hf_model_types ? families[i]->hf_model_types : "", *item;
        size_t len;
        while (mt_strlist_next(&cur, &item, &len))
            if (len == strlen(model_type) && !strncmp(item, model_type, len)) {
                *out = (mt_family_id)i;
                return 0;
            }
    }
    char list[256];
    join_lists(list, sizeof list, LIST_HF_TYPES, NULL);
    return mt_errorf(err, "model_type '%s' is not supported (%s)", model_type, list);
}

static void family_hf_name(const void *ctx, const char *tensor, char *buf, size_t cap) {
    const mt_model_config *cfg = ctx;
    int transpose;
    mt_family_get(cfg->family)->hf_name(cfg, tensor, buf, cap, &transpose);
}

mt_adapter_names mt_model_adapter_names(const mt_model_config *cfg) {
    const mt_family *f = mt_family_get(cfg->family);
    return (mt_adapter_names){.ctx = cfg, .hf_name = family_hf_name, .lora_targets = f->lora_targets,
                              .ia3_targets = f->ia3_targets, .ia3_feedforward = f->ia3_feedforward,
                              .model_name = f->name};
}

void mt_model_layout_build(const mt_model_config *cfg, int tp, int tp_rank, mt_layout *out) {
    mt_family_get(cfg->family)->build_layout(cfg, tp, tp_rank, out);
    mt_adapter_names nm = mt_model_adapter_names(cfg);
    mt_adapters_apply(&cfg->adapters, &nm, out);
}

int mt_model_adapters_check(const mt_model_config *cfg, mt_error *err) {
    const mt_adapter_spec *s = &cfg->adapters;
    if (mt_adapter_spec_validate(s, err)) return -1;
    if (!mt_adapter_spec_active(s)) return 0;
    mt_model_config plain = *cfg;
    memset(&plain.adapters, 0, sizeof plain.adapters);
    mt_layout base, adapted; /* the targets are found in the base; something of the adapted must train */
    mt_model_layout_build(&plain, 1, 0, &base);
    mt_model_layout_build(cfg, 1, 0, &adapted);
    size_t trained = adapted.gtotal_params;
    mt_layout_free(&adapted);
    mt_adapter_names nm = mt_model_adapter_names(cfg);
    int rc = mt_adapters_check_targets(s, &nm, &base, trained, err);
    mt_layout_free(&base);
    return rc;
}

int mt_model_tp_check(const mt_model_config *cfg, int tp, mt_error *err) {
    return mt_family_get(cfg->family)->tp_check(cfg, tp, err);
}
