#include "model/gpt.h"
#include "core/philox.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Adds a tensor of full shape rows x cols, cut over tp ranks as `split`
 * says (parts: row blocks cut separately). */
static void add_tensor_split(mt_unit_layout *u, int tp, const char *name, int64_t rows, int64_t cols, int ndim,
                             int decay, float std, mt_tp_split split, int parts) {
    mt_tensor *t = &u->t[u->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->gshape[0] = rows;
    t->gshape[1] = ndim == 2 ? cols : 1;
    t->gnumel = (size_t)rows * (size_t)t->gshape[1];
    t->goffset = u->gnumel;
    u->gnumel += t->gnumel;
    t->split = tp > 1 ? split : MT_TP_REPLICATED;
    t->split_parts = parts;
    t->shape[0] = t->split == MT_TP_ROWS ? rows / tp : rows;
    t->shape[1] = t->split == MT_TP_COLS ? t->gshape[1] / tp : t->gshape[1];
    t->numel = (size_t)t->shape[0] * (size_t)t->shape[1];
    t->offset = u->numel;
    t->weight_decay = decay;
    t->init_std = std;
    t->init_rows = rows;
    u->numel += t->numel;
}

static void add_tensor(mt_unit_layout *u, const char *name, int64_t rows, int64_t cols, int ndim, int decay,
                       float std) {
    add_tensor_split(u, 1, name, rows, cols, ndim, decay, std, MT_TP_REPLICATED, 1);
}

int mt_gpt_tp_check(const mt_gpt_config *cfg, int tp, mt_error *err) {
    if (tp < 1) return mt_errorf(err, "--tp must be >= 1, got %d", tp);
    if (cfg->n_head % tp)
        return mt_errorf(err, "--tp %d does not divide the %d attention heads (each tp rank holds whole heads); "
                              "choose a tp that divides n_head",
                         tp, cfg->n_head);
    if ((4 * cfg->n_embd) % tp)
        return mt_errorf(err, "--tp %d does not divide the MLP width 4C = %d; choose a tp that divides it", tp,
                         4 * cfg->n_embd);
    if (cfg->padded_vocab % tp)
        return mt_errorf(err, "--tp %d does not divide the padded vocabulary %d (the embedding is split by rows); "
                              "choose a tp that divides it",
                         tp, cfg->padded_vocab);
    return 0;
}

void mt_gpt_layout_build(const mt_gpt_config *cfg, mt_gpt_layout *out) { mt_gpt_layout_build_tp(cfg, 1, 0, out); }

void mt_gpt_layout_build_tp(const mt_gpt_config *cfg, int tp, int tp_rank, mt_gpt_layout *out) {
    memset(out, 0, sizeof *out);
    out->cfg = *cfg;
    out->tp = tp;
    out->tp_rank = tp_rank;
    int L = cfg->n_layer;
    int64_t C = cfg->n_embd;
    out->n_units = L + 2;
    out->units = mt_xcalloc((size_t)out->n_units, sizeof(mt_unit_layout), "model layout");
    float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)L);
    char name[MT_TENSOR_NAME_LEN];

    mt_unit_layout *e = &out->units[0];
    e->kind = MT_UNIT_EMBED;
    e->layer = -1;
    add_tensor_split(e, tp, "wte.weight", cfg->padded_vocab, C, 2, 1, std, MT_TP_ROWS, 1);
    e->t[MT_T_WTE].init_rows = cfg->vocab_size;
    e->t[MT_T_WTE].read_16bit_only = 1;
    e->t[MT_T_WTE].grad_by_one_gemm = 1;
    add_tensor(e, "wpe.weight", cfg->seq_len, C, 2, 1, std);

    for (int l = 0; l < L; l++) {
        mt_unit_layout *u = &out->units[1 + l];
        u->kind = MT_UNIT_BLOCK;
        u->layer = l;
#define T(suffix, rows, cols, nd, decay, sd, split, parts) \
    snprintf(name, sizeof name, "h.%d.%s", l, suffix); add_tensor_split(u, tp, name, rows, cols, nd, decay, sd, split, parts)
        T("ln_1.weight", C, 1, 1, 0, -1.0f, MT_TP_REPLICATED, 1);
        T("ln_1.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED, 1);
        T("attn.c_attn.weight", 3 * C, C, 2, 1, std, MT_TP_ROWS, 3);
        T("attn.c_attn.bias", 3 * C, 1, 1, 0, 0.0f, MT_TP_ROWS, 3);
        T("attn.c_proj.weight", C, C, 2, 1, proj_std, MT_TP_COLS, 1);
        T("attn.c_proj.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED, 1);
        T("ln_2.weight", C, 1, 1, 0, -1.0f, MT_TP_REPLICATED, 1);
        T("ln_2.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED, 1);
        T("mlp.c_fc.weight", 4 * C, C, 2, 1, std, MT_TP_ROWS, 1);
        T("mlp.c_fc.bias", 4 * C, 1, 1, 0, 0.0f, MT_TP_ROWS, 1);
        T("mlp.c_proj.weight", C, 4 * C, 2, 1, proj_std, MT_TP_COLS, 1);
        T("mlp.c_proj.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED, 1);
#undef T
        u->t[MT_T_QKV_W].read_16bit_only = u->t[MT_T_ATTPROJ_W].read_16bit_only = 1;
        u->t[MT_T_FC_W].read_16bit_only = u->t[MT_T_FCPROJ_W].read_16bit_only = 1;
        u->t[MT_T_QKV_W].grad_by_one_gemm = u->t[MT_T_ATTPROJ_W].grad_by_one_gemm = 1;
        u->t[MT_T_FC_W].grad_by_one_gemm = u->t[MT_T_FCPROJ_W].grad_by_one_gemm = 1;
    }
    mt_unit_layout *h = &out->units[L + 1];
    h->kind = MT_UNIT_HEAD;
    h->layer = -1;
    add_tensor(h, "ln_f.weight", C, 1, 1, 0, -1.0f);
    add_tensor(h, "ln_f.bias", C, 1, 1, 0, 0.0f);
    for (int i = 0; i < out->n_units; i++) {
        out->total_params += out->units[i].numel;
        out->gtotal_params += out->units[i].gnumel;
    }
}

size_t mt_gpt_tensor_row_origin(const mt_gpt_layout *l, const mt_tensor *t, int64_t r) {
    int64_t gcols = t->gshape[1];
    if (t->split == MT_TP_ROWS) { /* row blocks of gshape[0]/parts rows, each cut into tp pieces */
        int64_t block = t->gshape[0] / t->split_parts, piece = block / l->tp;
        int64_t part = r / piece, within = r % piece;
        return (size_t)((part * block + (int64_t)l->tp_rank * piece + within) * gcols);
    }
    if (t->split == MT_TP_COLS) return (size_t)(r * gcols + (int64_t)l->tp_rank * t->shape[1]);
    return (size_t)(r * gcols);
}

/* Copies every local row of unit u to (to_full) or from its run in the full unit. */
static void copy_unit(const mt_gpt_layout *l, int u, float *local, float *full, int to_full) {
    const mt_unit_layout *ul = &l->units[u];
    for (int i = 0; i < ul->n_tensors; i++) {
        const mt_tensor *t = &ul->t[i];
        size_t w = (size_t)t->shape[1];
        for (int64_t r = 0; r < t->shape[0]; r++) {
            float *lo = local + t->offset + (size_t)r * w, *fu = full + t->goffset + mt_gpt_tensor_row_origin(l, t, r);
            memcpy(to_full ? fu : lo, to_full ? lo : fu, w * sizeof(float));
        }
    }
}

void mt_gpt_unit_to_full(const mt_gpt_layout *l, int u, const float *local, float *full) {
    copy_unit(l, u, (float *)local, full, 1); /* only read */
}

void mt_gpt_unit_from_full(const mt_gpt_layout *l, int u, const float *full, float *local) {
    copy_unit(l, u, local, (float *)full, 0); /* only read */
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
            /* Row by row from the full tensor's element indices; rows at or
             * past init_rows (wte's vocabulary padding) stay zero. */
            size_t w = (size_t)t->shape[1], gw = (size_t)t->gshape[1];
            for (int64_t r = 0; r < t->shape[0];) {
                /* rows whose full-tensor runs follow each other go in one call */
                size_t origin = mt_gpt_tensor_row_origin(l, t, r);
                int drawn = (int64_t)(origin / gw) < t->init_rows;
                int64_t e = r + 1;
                while (e < t->shape[0] && mt_gpt_tensor_row_origin(l, t, e) == origin + (size_t)(e - r) * w &&
                       ((int64_t)((origin + (size_t)(e - r) * w) / gw) < t->init_rows) == drawn)
                    e++;
                size_t n = (size_t)(e - r) * w;
                if (drawn) mt_init_normal(dst + (size_t)r * w, n, origin, seed, t->name, t->init_std);
                else memset(dst + (size_t)r * w, 0, n * sizeof(float));
                r = e;
            }
        } else {
            float v = t->init_std < 0 ? 1.0f : 0.0f;
            for (size_t j = 0; j < t->numel; j++) dst[j] = v;
        }
    }
}
