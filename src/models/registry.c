/* The registry of model families (--family NAME, the config's family). */
#include "models/family.h"
#include "nn/adapters.h"
#include <string.h>
#include "models/gpt2/gpt2.h"
#include "models/llama/llama.h"

const mt_family *mt_family_get(mt_family_id id) {
    switch (id) {
    case MT_FAMILY_GPT2: return &mt_family_gpt2;
    case MT_FAMILY_LLAMA: return &mt_family_llama;
    default: mt_die("model family %s is not built into this meshtrain", mt_family_name(id));
    }
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
