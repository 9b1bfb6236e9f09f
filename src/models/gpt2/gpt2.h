/* The GPT-2 family: units [embedding (wte, wpe), block 0..L-1, head
 * (ln_f; the output layer is wte, declared as the shared "lm_head.weight")].
 * Tensor names are Hugging Face GPT-2 names; linear weights are stored as
 * [out, in] (PyTorch nn.Linear layout; HF's Conv1D is the transpose). The
 * tensor indices below are the family's own (its interop converters use
 * them too); nothing outside models/ and the GPT-2 converters names them. */
#ifndef MT_MODELS_GPT2_H
#define MT_MODELS_GPT2_H
#include "models/family.h"

enum { MT_T_WTE = 0, MT_T_WPE = 1 };
enum {
    MT_T_LN1_W = 0, MT_T_LN1_B, MT_T_QKV_W, MT_T_QKV_B, MT_T_ATTPROJ_W, MT_T_ATTPROJ_B,
    MT_T_LN2_W, MT_T_LN2_B, MT_T_FC_W, MT_T_FC_B, MT_T_FCPROJ_W, MT_T_FCPROJ_B, MT_T_BLOCK_COUNT
};
enum { MT_T_LNF_W = 0, MT_T_LNF_B = 1 };

extern const mt_family mt_family_gpt2;

/* The layout (also used by the GPT-2 converters through mt_family_get). */
int mt_gpt2_tp_check(const mt_model_config *cfg, int tp, mt_error *err);
void mt_gpt2_build_layout(const mt_model_config *cfg, int tp, int tp_rank, mt_layout *out);

/* Hugging Face names and config.json (gpt2/hf.c). */
void mt_gpt2_hf_name(const mt_model_config *cfg, const char *name, char *buf, size_t cap, int *transpose);
void mt_gpt2_hf_config_write(const mt_model_config *c, const char *torch_dtype, mt_json_writer *w);
int mt_gpt2_hf_config_read(const mt_json *o, mt_model_config *c, mt_error *err);

/* Presets, its check and the planner's figures (gpt2/config.c). */
int mt_gpt2_preset(const char *name, mt_model_config *cfg);
int mt_gpt2_config_validate(const mt_model_config *c, mt_error *err);
double mt_gpt2_plan_block_matrix_flops(const mt_model_config *cfg);
void mt_gpt2_plan_act_floats(const mt_model_config *cfg, int recompute, double N, double n, double t, double *per_block,
                             double *output);

#endif
