/* GPT-2's unit layout and tensor-parallel constraints. */
#include "models/gpt2/gpt2.h"
#include <math.h>
#include <stdio.h>

int mt_gpt2_tp_check(const mt_model_config *cfg, int tp, mt_error *err) {
    if (tp < 1) return mt_errorf(err, "{tp} must be >= 1, got %d", tp);
    if (cfg->n_head % tp)
        return mt_errorf(err, "{tp} %d does not divide the %d attention heads (each tp rank holds whole heads); "
                              "choose a tp that divides n_head",
                         tp, cfg->n_head);
    if ((4 * cfg->n_embd) % tp)
        return mt_errorf(err, "{tp} %d does not divide the MLP width 4C = %d; choose a tp that divides it", tp,
                         4 * cfg->n_embd);
    return 0;
}

void mt_gpt2_build_layout(const mt_model_config *cfg, int tp, int tp_rank, mt_layout *out) {
    int L = cfg->n_layer;
    int64_t C = cfg->n_embd;
    mt_layout_init(out, L + 2, tp, tp_rank);
    float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)L);
    char name[MT_TENSOR_NAME_LEN];

    out->units[0].role = MT_UNIT_INPUT;
    mt_tensor *wte = mt_unit_add_tensor(out, 0, "wte.weight", mt_model_vocab_rows(cfg, tp), C, 2, 1, std, MT_TP_ROWS);
    wte->init_rows = cfg->vocab_size;
    wte->ckpt_rows = cfg->padded_vocab;
    wte->read_16bit_only = 1;
    wte->grad_by_one_gemm = 1; /* by the tied head's GEMM, before the embedding's backward adds its rows */
    mt_unit_add_tensor(out, 0, "wpe.weight", cfg->seq_len, C, 2, 1, std, MT_TP_REPLICATED);

    const int64_t qkv_parts[3] = {C, C, C};
    for (int l = 0; l < L; l++) {
        int u = 1 + l;
        out->units[u].role = MT_UNIT_BLOCK;
        out->units[u].layer = l;
        out->units[u].sp_partial = 1;
#define T(suffix, rows, cols, nd, decay, sd, split) \
    (snprintf(name, sizeof name, "h.%d.%s", l, suffix), mt_unit_add_tensor(out, u, name, rows, cols, nd, decay, sd, split))
        T("ln_1.weight", C, 1, 1, 0, -1.0f, MT_TP_REPLICATED);
        T("ln_1.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED);
        mt_tensor *qkv = T("attn.c_attn.weight", 3 * C, C, 2, 1, std, MT_TP_ROWS);
        mt_tensor_set_parts(qkv, 3, qkv_parts);
        mt_tensor_set_parts(T("attn.c_attn.bias", 3 * C, 1, 1, 0, 0.0f, MT_TP_ROWS), 3, qkv_parts);
        mt_tensor *proj = T("attn.c_proj.weight", C, C, 2, 1, proj_std, MT_TP_COLS);
        T("attn.c_proj.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED);
        T("ln_2.weight", C, 1, 1, 0, -1.0f, MT_TP_REPLICATED);
        T("ln_2.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED);
        mt_tensor *fc = T("mlp.c_fc.weight", 4 * C, C, 2, 1, std, MT_TP_ROWS);
        T("mlp.c_fc.bias", 4 * C, 1, 1, 0, 0.0f, MT_TP_ROWS);
        mt_tensor *fcproj = T("mlp.c_proj.weight", C, 4 * C, 2, 1, proj_std, MT_TP_COLS);
        T("mlp.c_proj.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED);
#undef T
        mt_tensor *mats[4] = {qkv, proj, fc, fcproj};
        for (int i = 0; i < 4; i++) mats[i]->read_16bit_only = mats[i]->grad_by_one_gemm = 1;
    }
    int h = L + 1;
    out->units[h].role = MT_UNIT_OUTPUT;
    out->units[h].sp_partial = 1;
    mt_unit_add_tensor(out, h, "ln_f.weight", C, 1, 1, 0, -1.0f, MT_TP_REPLICATED);
    mt_unit_add_tensor(out, h, "ln_f.bias", C, 1, 1, 0, 0.0f, MT_TP_REPLICATED);
    mt_unit_add_shared(out, h, "lm_head.weight", "wte.weight");
    mt_layout_finish(out);
}
