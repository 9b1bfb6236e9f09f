/* Activation recomputation before a block's backward (see mt_recompute in
 * model.h). */
#include "model/model.h"
#include "ops/ops.h"
#include <string.h>

void mt_block_recompute(mt_model *m, int layer, const mt_fwd_ctx *fc) {
    if (m->recompute == MT_RECOMPUTE_FULL) {
        /* Reruns the block into the shared buffers; its output (the kept
         * res3) is rewritten with the same values. */
        mt_block_forward(m, layer, fc);
        return;
    }
    if (m->recompute != MT_RECOMPUTE_SELECTIVE) return;
    /* The attention core exactly as mt_block_forward runs it. */
    const mt_gpt_config *cfg = &m->layout.cfg;
    mt_acts *a = &m->acts;
    mt_block_acts *ba = &a->blocks[layer];
    float p = fc->training && cfg->dropout > 0.0f ? cfg->dropout : 0.0f;
    mt_attn_dropout ad = {{p, m->seed, fc->step, (uint32_t)layer, MT_DROPOUT_ATTN_PROBS}, a->sample_ids, 0};
    op_attention_forward(ba->atty, ba->att_lse, ba->qkv, a->B, a->T, cfg->n_head, cfg->n_embd / cfg->n_head, &ad,
                         m->gs.attn_scratch);
}

static const char *const recompute_names[] = {"none", "selective", "full"};

const char *mt_recompute_name(mt_recompute r) {
    return (unsigned)r < 3 ? recompute_names[r] : "?";
}

int mt_recompute_parse(const char *s, mt_recompute *out, mt_error *err) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, recompute_names[i])) {
            *out = (mt_recompute)i;
            return 0;
        }
    return mt_errorf(err, "--recompute must be none, selective or full, got '%s'", s);
}
