#include "model/gpt.h"
#include "core/philox.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_tensor(mt_unit_layout *u, const char *name, int64_t rows, int64_t cols, int ndim,
                       int decay, float std) {
    mt_tensor *t = &u->t[u->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = rows;
    t->shape[1] = ndim == 2 ? cols : 1;
    t->numel = (size_t)rows * (size_t)t->shape[1];
    t->offset = u->numel;
    t->weight_decay = decay;
    t->init_std = std;
    t->init_rows = rows;
    u->numel += t->numel;
}

void mt_gpt_layout_build(const mt_gpt_config *cfg, mt_gpt_layout *out) {
    memset(out, 0, sizeof *out);
    out->cfg = *cfg;
    int L = cfg->n_layer;
    int64_t C = cfg->n_embd;
    out->n_units = L + 2;
    out->units = mt_xcalloc((size_t)out->n_units, sizeof(mt_unit_layout), "model layout");
    float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)L);
    char name[MT_TENSOR_NAME_LEN];

    mt_unit_layout *e = &out->units[0];
    e->kind = MT_UNIT_EMBED;
    e->layer = -1;
    add_tensor(e, "wte.weight", cfg->padded_vocab, C, 2, 1, std);
    e->t[MT_T_WTE].init_rows = cfg->vocab_size;
    add_tensor(e, "wpe.weight", cfg->seq_len, C, 2, 1, std);

    for (int l = 0; l < L; l++) {
        mt_unit_layout *u = &out->units[1 + l];
        u->kind = MT_UNIT_BLOCK;
        u->layer = l;
#define T(suffix, rows, cols, nd, decay, sd) \
    snprintf(name, sizeof name, "h.%d.%s", l, suffix); add_tensor(u, name, rows, cols, nd, decay, sd)
        T("ln_1.weight", C, 1, 1, 0, -1.0f);
        T("ln_1.bias", C, 1, 1, 0, 0.0f);
        T("attn.c_attn.weight", 3 * C, C, 2, 1, std);
        T("attn.c_attn.bias", 3 * C, 1, 1, 0, 0.0f);
        T("attn.c_proj.weight", C, C, 2, 1, proj_std);
        T("attn.c_proj.bias", C, 1, 1, 0, 0.0f);
        T("ln_2.weight", C, 1, 1, 0, -1.0f);
        T("ln_2.bias", C, 1, 1, 0, 0.0f);
        T("mlp.c_fc.weight", 4 * C, C, 2, 1, std);
        T("mlp.c_fc.bias", 4 * C, 1, 1, 0, 0.0f);
        T("mlp.c_proj.weight", C, 4 * C, 2, 1, proj_std);
        T("mlp.c_proj.bias", C, 1, 1, 0, 0.0f);
#undef T
    }
    mt_unit_layout *h = &out->units[L + 1];
    h->kind = MT_UNIT_HEAD;
    h->layer = -1;
    add_tensor(h, "ln_f.weight", C, 1, 1, 0, -1.0f);
    add_tensor(h, "ln_f.bias", C, 1, 1, 0, 0.0f);
    for (int i = 0; i < out->n_units; i++) out->total_params += out->units[i].numel;
}

void mt_gpt_layout_free(mt_gpt_layout *l) {
    free(l->units);
    l->units = NULL;
    l->n_units = 0;
}

const mt_tensor *mt_gpt_find_tensor(const mt_gpt_layout *l, const char *name, int *unit) {
    for (int u = 0; u < l->n_units; u++)
        for (int i = 0; i < l->units[u].n_tensors; i++)
            if (strcmp(l->units[u].t[i].name, name) == 0) {
                if (unit) *unit = u;
                return &l->units[u].t[i];
            }
    return NULL;
}

void mt_gpt_init_unit(const mt_gpt_layout *l, int unit, float *params, uint64_t seed) {
    const mt_unit_layout *u = &l->units[unit];
    for (int i = 0; i < u->n_tensors; i++) {
        const mt_tensor *t = &u->t[i];
        float *dst = params + t->offset;
        if (t->init_std > 0) {
            size_t drawn = (size_t)t->init_rows * (size_t)t->shape[1];
            mt_init_normal(dst, drawn, 0, seed, t->name, t->init_std);
            for (size_t j = drawn; j < t->numel; j++) dst[j] = 0.0f;
        } else {
            float v = t->init_std < 0 ? 1.0f : 0.0f;
            for (size_t j = 0; j < t->numel; j++) dst[j] = v;
        }
    }
}
