/* The GPT-2 family's configuration facts: presets, its check, and what the
 * planner needs to know of this engine's GPT-2 (models/family.h). */
#include "models/gpt2/gpt2.h"
#include <string.h>

static const struct { const char *name; int L, C, H; } presets[] = {
    {"gpt2", 12, 768, 12}, {"gpt2-medium", 24, 1024, 16},
    {"gpt2-large", 36, 1280, 20}, {"gpt2-xl", 48, 1600, 25},
};

int mt_gpt2_preset(const char *name, mt_model_config *cfg) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(name, presets[i].name) != 0) continue;
        cfg->n_layer = presets[i].L;
        cfg->n_embd = presets[i].C;
        cfg->n_head = presets[i].H;
        cfg->vocab_size = 50257;
        cfg->padded_vocab = mt_pad_vocab(50257);
        cfg->seq_len = 1024;
        return 1;
    }
    return 0;
}

int mt_gpt2_config_validate(const mt_model_config *c, mt_error *err) {
    if (c->n_embd % c->n_head != 0) return mt_errorf(err, "{dim} %d is not divisible by {heads} %d", c->n_embd, c->n_head);
    return 0;
}

/* Megatron's count of a block's matrix FLOPs, 24 h^2 per token forward (the
 * planner's GPT-2 figures match Megatron's paper). */
double mt_gpt2_plan_block_matrix_flops(const mt_model_config *cfg) {
    double h = cfg->n_embd;
    return 24 * h * h;
}

/* The floats gpt2/forward_backward.c's buffer table keeps, per block and
 * microbatch of N rows (n local under sequence parallelism over t ranks;
 * C = h, a heads):
 *   none       4n + 4nC + (12 N C + N a) / t
 *   selective  4n + 4nC + 11 N C / t     (attention output and softmax statistics recomputed)
 *   full       n C                       (the block's output)
 * and the output unit's norm n (C + 2) and row losses N. */
void mt_gpt2_plan_act_floats(const mt_model_config *cfg, int recompute, double N, double n, double t, double *per_block,
                             double *output) {
    double h = cfg->n_embd, a = cfg->n_head;
    switch (recompute) {
    case 0: *per_block = 4 * n + 4 * n * h + (12 * N * h + N * a) / t; break;
    case 1: *per_block = 4 * n + 4 * n * h + 11 * N * h / t; break;
    default: *per_block = n * h; break;
    }
    *output = n * (h + 2) + N;
}
