/* The registry of model families (--family NAME, the config's family). */
#include "models/family.h"
#include "adapters/adapters.h"
#include "models/gpt2/gpt2.h"
#include "models/llama/llama.h"

const mt_family *mt_family_get(mt_family_id id) {
    switch (id) {
    case MT_FAMILY_GPT2: return &mt_family_gpt2;
    case MT_FAMILY_LLAMA: return &mt_family_llama;
    default: mt_die("model family %s is not built into this meshtrain", mt_family_name(id));
    }
}

void mt_model_layout_build(const mt_model_config *cfg, int tp, int tp_rank, mt_layout *out) {
    mt_family_get(cfg->family)->build_layout(cfg, tp, tp_rank, out);
    mt_adapters_apply(cfg, out);
}

int mt_model_tp_check(const mt_model_config *cfg, int tp, mt_error *err) {
    return mt_family_get(cfg->family)->tp_check(cfg, tp, err);
}
