/* The model flags train and plan share: a preset or family, the shape
 * (--layers --dim --heads --vocab --seq-len --dropout) and the Llama
 * and Falcon families' own (--kv-heads, --ffn-dim, RoPE, --block-norms, ...), and how they make a
 * model config. */
#ifndef MT_CLI_MODEL_FLAGS_H
#define MT_CLI_MODEL_FLAGS_H
#include "cli/args.h"
#include "models/config.h"

typedef struct {
    const char *preset, *family, *rope_scaling;
    int layers, dim, heads, vocab, seq_len;
    float dropout;
    int kv_heads, head_dim, ffn_dim, tie, qkv_bias, rope_orig, block_norms, linear_bias;
    float rope_theta, norm_eps, rope_factor, rope_low, rope_high;
    int moe_experts, moe_top_k, moe_ffn_dim, moe_norm_topk, moe_shared_ffn_dim, qk_norm;
    const char *moe_router;
    char preset_help[512];
} mt_model_flags;

#define MT_MODEL_FLAG_COUNT 30
/* The flags' entries (MT_MODEL_FLAG_COUNT of them) into out, bound to mf;
 * with_defaults: the help texts name train's defaults of the shape. */
void mt_model_flags_spec(mt_model_flags *mf, mt_arg out[MT_MODEL_FLAG_COUNT], int with_defaults);
/* cfg from the flags given (spec: the parsed table): the preset (or, with
 * base_given, cfg as it is: a Hugging Face config.json read into it), the
 * family, then each shape flag given; unset Llama shapes follow the width.
 * The vocabulary, dropout and the final check are the caller's. */
int mt_model_flags_apply(const mt_model_flags *mf, const mt_arg *spec, int nspec, int base_given, mt_model_config *cfg,
                         mt_error *err);

#endif
