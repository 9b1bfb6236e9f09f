/* The Falcon family (Hugging Face's FalconForCausalLM, model_type "falcon";
 * the older "RefinedWeb" / "RefinedWebModel" configs read too): units
 * [word_embeddings, block 0..L-1, (ln_f, lm_head)]. A block runs attention
 * and the MLP in parallel on the same input,
 *     out = x + dense(attn(rope(q), rope(k), v)) + mlp(ln_mlp(x)),
 *     q|k|v = query_key_value(ln_attn(x)),  mlp = dense_4h_to_h(gelu(dense_h_to_4h(.))),
 * with one LayerNorm shared by both branches (Falcon-7B, block_norms 1) or
 * two (new_decoder_architecture: ln_attn and ln_mlp, block_norms 2);
 * LayerNorms with bias (eps 1e-5), rotary embeddings in the half-split
 * convention, multi-query (one kv head) or grouped-query attention, exact
 * (erf) GELU, linear biases or none (bias: true / false), no dropout, the head tied to the embedding
 * or not. Tensor names are Hugging Face's; linear weights are [out, in].
 *
 * query_key_value is one tensor stored as Hugging Face stores it: per kv
 * head a group of (G query heads, the key head, the value head), G =
 * n_head / n_kv_head (multi-query is one group: all query heads, k, v).
 * Tensor parallelism cuts it by rows into whole groups, so a rank's slice
 * is its groups, contiguous; the forward converts the GEMM's grouped rows
 * to the planar q|k|v the attention kernels read (ops: qkv_groups). */
#ifndef MT_MODELS_FALCON_H
#define MT_MODELS_FALCON_H
#include "models/family.h"

enum { MT_F_EMBED = 0 };
extern const mt_family mt_family_falcon;

/* Index of a block tensor by role (ln_mlp_w/b are -1 with one norm; the
 * linears' biases -1 without linear_bias: each bias follows its weight). */
typedef struct {
    int ln_attn_w, ln_attn_b, ln_mlp_w, ln_mlp_b, qkv, qkv_b, dense, dense_b, h_to_4h, h_to_4h_b, four_h_to_h,
        four_h_to_h_b;
} mt_falcon_block_index;
mt_falcon_block_index mt_falcon_block_tensors(const mt_model_config *cfg);

int mt_falcon_tp_check(const mt_model_config *cfg, int tp, mt_error *err);
void mt_falcon_build_layout(const mt_model_config *cfg, int tp, int tp_rank, mt_layout *out);

/* Hugging Face names and config.json (falcon/hf.c). */
void mt_falcon_hf_name(const mt_model_config *cfg, const char *name, char *buf, size_t cap, int *transpose);
void mt_falcon_hf_config_write(const mt_model_config *c, const char *torch_dtype, mt_json_writer *w);
int mt_falcon_hf_config_read(const mt_json *o, mt_model_config *c, mt_error *err);

/* Presets, defaults, checks and checkpoint keys (falcon/config.c). */
int mt_falcon_preset(const char *name, mt_model_config *cfg);
void mt_falcon_config_defaults(mt_model_config *c);
int mt_falcon_config_validate(const mt_model_config *c, mt_error *err);
void mt_falcon_config_write_json(mt_json_writer *w, const mt_model_config *c);
int mt_falcon_config_read_json(const mt_json *obj, mt_model_config *c, mt_error *err);
/* This engine's activation floats of a block and of the output unit (mt_family.plan_act_floats). */
void mt_falcon_plan_act_floats(const mt_model_config *cfg, int recompute, double N, double n, double t,
                               double *per_block, double *output);

/* One decode step (falcon/decode.c). */
size_t mt_falcon_decode_cache_floats(const mt_model_config *cfg);
struct mt_decoder;
void mt_falcon_decode_step(struct mt_decoder *d, int32_t token);

#endif
