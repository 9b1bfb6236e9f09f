/* Model configuration shared by every family: the shape fields all
 * transformer LMs have, plus the ones a family reads (Llama: grouped-query
 * attention, SwiGLU width, RoPE, RMSNorm). Presets and the JSON form stored
 * in checkpoints live here; what a field means for the computation is the
 * family's (models/family.h). */
#ifndef MT_MODELS_CONFIG_H
#define MT_MODELS_CONFIG_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "core/json.h"
#include "nn/adapter_spec.h"

/* A family's position in the registry's table (models/registry.c); the two
 * names are for the code that means one of them (family-specific flags). */
typedef enum { MT_FAMILY_GPT2 = 0, MT_FAMILY_LLAMA = 1, MT_FAMILY_FALCON = 2 } mt_family_id;

typedef struct {
    int n_layer;
    int n_embd;       /* C: the residual stream's width */
    int n_head;
    int vocab_size;   /* V: real vocabulary; softmax runs over these */
    int padded_vocab; /* Vp >= V: rows of the embedding (extra rows are zero and unused) */
    int seq_len;      /* T: context length (GPT-2: rows of the position table) */
    float dropout;    /* GPT-2: embedding, attention-probability and residual dropout */
    mt_family_id family; /* after the GPT-2 fields: a positional GPT-2 initialiser stays one */
    /* Llama family */
    int n_kv_head;    /* grouped-query attention: key/value heads (n_head % n_kv_head == 0) */
    int head_dim;     /* per head (default n_embd / n_head) */
    int ffn_dim;      /* SwiGLU intermediate size */
    float norm_eps;   /* RMSNorm epsilon */
    float rope_theta;
    int rope_scaling; /* ops/ops.h's MT_ROPE_*: 0 none, 1 llama3, 2 linear, 3 dynamic, 4 yarn */
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    int max_pos;      /* max_position_embeddings (exported; >= seq_len) */
    int tie_embeddings; /* 1: the output head is the token embedding */
    int qkv_bias;     /* 1: q, k and v projections have biases (Qwen2) */
    /* Falcon family (also n_kv_head, head_dim, ffn_dim, norm_eps, rope_theta, max_pos, tie_embeddings) */
    int block_norms;  /* LayerNorms before the parallel attention and MLP: 1 shared (Falcon-7B), 2 (ln_attn, ln_mlp) */
    int linear_bias;  /* 1: every linear of a block has a bias (Falcon's bias: true) */
    /* Mixture of experts (Llama family; num_experts 0: the dense SwiGLU MLP).
     * The MLP becomes num_experts SwiGLU experts of width moe_ffn_dim and a
     * linear router choosing moe_top_k of them per token (ops/moe.h). */
    int num_experts;
    int moe_top_k;
    int moe_ffn_dim;
    int moe_router;      /* mt_moe_router: 0 Mixtral (softmax over the top-k logits), 1 softmax then top-k */
    int moe_norm_topk;   /* router 1: the k weights divided by their sum (norm_topk_prob) */
    float moe_aux_coef;  /* load-balancing loss coefficient (per block, added to the loss) */
    float moe_z_coef;    /* router z-loss coefficient */
    float moe_capacity;  /* capacity factor: each expert keeps ceil(factor N K / E) slots; 0: dropless */
    int moe_shared_ffn_dim; /* > 0: a shared expert (Qwen2-MoE's shared_expert) of this SwiGLU width that every
                               token runs, its output scaled by sigmoid(shared_expert_gate . x); 0: none */
    int qk_norm; /* Llama family, 1: RMSNorms of the whole q and k projection outputs (OLMoE's q_norm, k_norm; widths
                    heads x head_dim and kv_heads x head_dim, eps norm_eps) before RoPE */
    /* yarn's further rope_scaling keys (0: transformers' defaults; rope_truncate 1 = true) */
    float rope_beta_fast, rope_beta_slow, rope_attention_factor, rope_mscale, rope_mscale_all_dim;
    int rope_truncate;
    /* What is trained: frozen tensors and adapters (nn/adapter_spec.h); all zero: everything */
    mt_adapter_spec adapters;
} mt_model_config;

/* Dimension of one attention head (head_dim, or n_embd / n_head when unset). */
static inline int mt_model_head_dim(const mt_model_config *c) { return c->head_dim > 0 ? c->head_dim : c->n_embd / c->n_head; }
/* Key/value heads (n_kv_head, or n_head when unset: plain multi-head attention). */
static inline int mt_model_kv_heads(const mt_model_config *c) { return c->n_kv_head > 0 ? c->n_kv_head : c->n_head; }

/* Rows of the embedding (and an untied head) under tensor parallelism tp:
 * padded_vocab when tp divides it (every layout that existed before keeps
 * its numbers bit for bit), else padded further to a multiple of 128 tp as
 * Megatron pads per layout, so any tp that divides the heads can cut it.
 * The extra rows are zero and never scored, and checkpoints keep
 * padded_vocab rows (mt_tensor.ckpt_rows): a checkpoint moves between tp
 * sizes and the loss never depends on the padding. */
static inline int mt_model_vocab_rows(const mt_model_config *c, int tp) {
    int m = 128 * (tp > 0 ? tp : 1);
    return tp <= 1 || c->padded_vocab % tp == 0 ? c->padded_vocab : (c->padded_vocab + m - 1) / m * m;
}

/* Rounds V up to a multiple of 128 (as llm.c does) for GEMM alignment and
 * tensor-parallel divisibility. */
int mt_pad_vocab(int vocab_size);
/* Family by name ("gpt2", "llama"); -1 with err listing the names. */
int mt_family_parse(const char *name, mt_family_id *out, mt_error *err);
const char *mt_family_name(mt_family_id f);
/* Family defaults for the fields a caller did not set (a config of that
 * family with zeros where nothing was given). */
void mt_model_config_defaults(mt_model_config *cfg, mt_family_id family);
/* Fills a preset (the whole config; every other field zero): GPT-2 "gpt2" (124M), "gpt2-medium", "gpt2-large",
 * "gpt2-xl"; Llama "llama-tiny", "llama3.2-1b", "qwen2.5-0.5b". */
int mt_model_config_preset(const char *name, mt_model_config *cfg, mt_error *err);
/* Checks ranges and divisibility (C % heads, heads % kv heads, positive
 * sizes, Vp >= V); messages speak the flag names. */
int mt_model_config_validate(const mt_model_config *cfg, mt_error *err);
/* A model-config JSON field into *out: an int in 0..2^24, or a float (for the families' readers). */
int mt_model_config_get_int(const mt_json *obj, const char *key, int *out, mt_error *err);
int mt_model_config_get_float(const mt_json *obj, const char *key, float *out, mt_error *err);
/* One JSON object; a GPT-2 config writes exactly its historical keys. */
void mt_model_config_write_json(mt_json_writer *w, const mt_model_config *cfg);
int mt_model_config_read_json(const mt_json *obj, mt_model_config *cfg, mt_error *err);

#endif
