/* The Llama family (Llama 2/3, Mistral, Qwen2): units [embed_tokens,
 * decoder layer 0..L-1, (model.norm, lm_head)]. RMSNorm (fp32 statistics),
 * rotary position embeddings in the half-split convention with rope_theta
 * and Llama 3.1 frequency scaling, grouped-query attention (query head h
 * reads kv head h * n_kv / n_head), SwiGLU MLP, optional q/k/v biases
 * (Qwen2), optional QK-norm before RoPE (OLMoE's q_norm, k_norm over the
 * whole q and k), a tied or untied head, no position table, no dropout. Tensor
 * names are Hugging Face's; linear weights are [out, in] as there.
 *
 * In a unit's flat buffer q, k and v (and gate and up) lie next to each
 * other, each cut over tp by rows, so a rank's slice of them is one
 * contiguous matrix: one GEMM computes a row's q|k|v (gate|up). */
#ifndef MT_MODELS_LLAMA_H
#define MT_MODELS_LLAMA_H
#include "models/family.h"
#include "ops/ops.h"

enum { MT_L_EMBED = 0 };
enum { MT_L_IN_NORM = 0, MT_L_Q_W, MT_L_K_W, MT_L_V_W, MT_L_Q_B, MT_L_K_B, MT_L_V_B }; /* biases: with qkv_bias */
extern const mt_family mt_family_llama;

int mt_llama_tp_check(const mt_model_config *cfg, int tp, mt_error *err);
void mt_llama_build_layout(const mt_model_config *cfg, int tp, int tp_rank, mt_layout *out);
/* Index of a block tensor by role (the bias entries exist only with qkv_bias). */
/* With experts (num_experts > 0) gate/up/down are -1 and the MLP is the
 * router [E, C], with a shared expert (moe_shared_ffn_dim Fs > 0) its gate
 * [Fs, C] and up [Fs, C] (adjacent: one GEMM) at shared, +1, its down
 * [C, Fs] at shared_down and its sigmoid gate [1, C] at shared_gate (all
 * -1 without), then, per expert e, its gate [Fe, C], up [Fe, C] (adjacent)
 * and down [C, Fe] at expert + 3e, +1, +2: the dense tensors before the
 * experts' (nn/layout.c shards those last ones over ep). */
typedef struct {
    int in_norm, q, k, v, qb, kb, vb, o, post_norm, gate, up, down, router, shared, shared_down, shared_gate, expert;
    int qn, kn; /* with qk_norm: q_norm [QW] and k_norm [KW], after the biases (else -1) */
} mt_llama_block_index;
mt_llama_block_index mt_llama_block_tensors(const mt_model_config *cfg);

/* Hugging Face names and config.json (llama/hf.c). */
void mt_llama_hf_name(const mt_model_config *cfg, const char *name, char *buf, size_t cap, int *transpose);
void mt_llama_hf_config_write(const mt_model_config *c, const char *torch_dtype, mt_json_writer *w);
int mt_llama_hf_config_read(const mt_json *o, mt_model_config *c, mt_error *err);
/* A config config.json cannot state: Mixtral's routing with a shared expert; QK-norm outside OLMoE's form. */
int mt_llama_hf_export_check(const mt_model_config *c, mt_error *err);

/* Presets, defaults, checks and checkpoint keys (llama/config.c). */
int mt_llama_preset(const char *name, mt_model_config *cfg);
void mt_llama_config_defaults(mt_model_config *c);
int mt_llama_config_validate(const mt_model_config *c, mt_error *err);
void mt_llama_config_write_json(mt_json_writer *w, const mt_model_config *c);
int mt_llama_config_read_json(const mt_json *obj, mt_model_config *c, mt_error *err);
/* The mixture-of-experts fields (num_experts 0: nothing to check). */
int mt_llama_moe_validate(const mt_model_config *c, mt_error *err);
/* {moe-router}'s words: "mixtral" (mt_moe_router 0), "softmax_topk" (1). */
const char *mt_moe_router_name(int router);
int mt_moe_router_parse(const char *s, int *out, mt_error *err);

/* RoPE scaling (llama/config.c): the type names of Hugging Face's rope_type
 * ("none" for no scaling), the ops' description for a context of T
 * positions, and the rope_scaling object of config.json (hf 1, whose
 * max_pos is its max_position_embeddings) or of our checkpoints (hf 0,
 * max_pos 0). */
const char *mt_llama_rope_type_name(int type);
int mt_llama_rope_type_parse(const char *name, int *type);
mt_rope_scaling mt_llama_rope_scaling(const mt_model_config *c, int T);
void mt_llama_rope_scaling_write(mt_json_writer *w, const mt_model_config *c, int hf);
int mt_llama_rope_scaling_read(const mt_json *rs, mt_model_config *c, int hf, int max_pos, mt_error *err);

#endif
