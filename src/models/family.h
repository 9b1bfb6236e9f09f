/* The model-family seam. A family (GPT-2, Llama) is a table of functions:
 * the unit layout from a config (tensors, tensor-parallel cuts, shared
 * tensors), the activation buffers of a block and of the output unit with
 * their sizes, forward / backward / recompute of each unit kind, FLOPs per
 * token, and one decode step with a KV cache for generation. The model
 * runtime (models/model.c), the pipeline executor, ZeRO, the trainer,
 * checkpoints and generation reach a model only through this table and the
 * unit description of nn/unit.h; adding a family is one new folder here.
 *
 * Every family's model has the same shape: an input unit (0), n_layer block
 * units (1..L) whose output is the residual stream the next block reads
 * (what pipeline stages send each other), and an output unit (L+1) ending in
 * the loss. */
#ifndef MT_MODELS_FAMILY_H
#define MT_MODELS_FAMILY_H
#include <stddef.h>
#include "core/error.h"
#include "core/json.h"
#include "models/config.h"
#include "nn/adapters.h"
#include "nn/unit.h"

struct mt_model;
struct mt_fwd_ctx;
struct mt_decoder;

/* One activation buffer of a block (or of the output unit): its name (for
 * the memory accounting) and the recomputation modes under which every
 * block keeps its own copy, bit 1 << mt_recompute (none, selective, full);
 * under the others one copy is shared by all blocks and slots. */
typedef struct {
    const char *name;
    int own;
    /* what {compress-activations} may do to it (models/act_compress.h): MT_ACT_KEEP (fp32: statistics, the block
       output, integers), MT_ACT_LOSSY (read by a backward kernel in fp32: compressed by bf16 and int8) or
       MT_ACT_GEMM_INPUT (read by backward only as a linear layer's input, which {precision} bf16/fp16 rounds to
       16 bits anyway: stored in that format it is exact, so {compress-activations} lossless keeps it so) */
    int comp;
} mt_act_buf;
#define MT_OWN(none, selective, full) ((none) | (selective) << 1 | (full) << 2)
enum { MT_ACT_KEEP = 0, MT_ACT_LOSSY, MT_ACT_GEMM_INPUT };
#define MT_MAX_BLOCK_BUFS 20
#define MT_MAX_HEAD_BUFS 4
#define MT_FAMILY_SCRATCH 6

typedef struct mt_family {
    const char *name;
    /* 1: the weights hold a table of seq_len positions, so the context is part of the model; 0: positions are
     * computed (RoPE), and a run from a checkpoint ({init-from}) may train at another context */
    int position_table;
    /* --- layout --- */
    /* Whether tp can cut this config; the message names the constraint. */
    int (*tp_check)(const mt_model_config *cfg, int tp, mt_error *err);
    void (*build_layout)(const mt_model_config *cfg, int tp, int tp_rank, mt_layout *out);
    /* --- activations of one microbatch of N rows --- */
    int n_block_bufs;
    const mt_act_buf *block_bufs;
    int block_out;  /* the block buffer holding its output (kept under every recompute mode) */
    size_t (*block_buf_floats)(const struct mt_model *m, int buf, size_t N);
    /* {compress-activations} int8: the columns sharing one scale in a compressed buffer (a row, or a row's
       piece that no tensor-parallel cut splits -- one head -- so every layout computes the same codes);
       NULL: the family compresses nothing (refused up front) */
    size_t (*block_buf_group)(const struct mt_model *m, int buf);
    int n_head_bufs; /* the output unit's (before the logits) */
    const mt_act_buf *head_bufs;
    int head_park;  /* a head buffer of residual-stream size, dead after the head's backward: the pipeline
                       parks dL/d(last block output) there until the blocks' backward */
    size_t (*head_buf_floats)(const struct mt_model *m, int buf, size_t N);
    /* backward scratch beyond the residual-stream buffers, in floats */
    void (*scratch_floats)(const struct mt_model *m, size_t N, size_t out[MT_FAMILY_SCRATCH]);
    /* widest GEMM operand row (input or output gradient) and largest weight
     * matrix of this rank, for the 16-bit operand scratch */
    void (*gemm_extents)(const struct mt_model *m, int own_output, size_t *max_width, size_t *max_weight);
    /* attention workspace in floats (NULL: op_attention_scratch_floats of the local heads) */
    size_t (*attention_scratch_floats)(const struct mt_model *m, int B, int T);
    /* after the buffers exist: fills what the family precomputes (NULL: nothing) */
    void (*init_model)(struct mt_model *m);
    /* --- compute, on m->acts --- */
    void (*input_forward)(struct mt_model *m, const struct mt_fwd_ctx *fc);
    void (*block_forward)(struct mt_model *m, int layer, const struct mt_fwd_ctx *fc);
    /* the loss sum; with dlogits_scale != 0 also dL/dlogits for the backward */
    double (*output_forward)(struct mt_model *m, const struct mt_fwd_ctx *fc, float dlogits_scale);
    void (*output_backward)(struct mt_model *m, const struct mt_fwd_ctx *fc);
    void (*block_recompute)(struct mt_model *m, int layer, const struct mt_fwd_ctx *fc);
    void (*block_backward)(struct mt_model *m, int layer, const struct mt_fwd_ctx *fc);
    void (*input_backward)(struct mt_model *m, const struct mt_fwd_ctx *fc);
    /* training FLOPs per token (6 x matrix parameters + attention) */
    double (*flops_per_token)(const mt_model_config *cfg, const mt_layout *l, int T);
    /* --- Hugging Face interop (interop/hf_model.c) --- */
    /* The HF name of tensor t (or of shared tensor name) into buf; *transpose
     * set when HF stores it as [in, out] (GPT-2's Conv1D). */
    void (*hf_name)(const mt_model_config *cfg, const char *name, char *buf, size_t cap, int *transpose);
    /* config.json: written whole (one object); read into cfg (padded_vocab
     * and seq_len left to the caller when absent). */
    void (*hf_config_write)(const mt_model_config *cfg, const char *torch_dtype, mt_json_writer *w);
    int (*hf_config_read)(const mt_json *obj, mt_model_config *cfg, mt_error *err);
    /* NULL, or -1 with err when cfg has no Hugging Face form (export refuses it before writing anything) */
    int (*hf_export_check)(const mt_model_config *cfg, mt_error *err);
    /* --- adapters: default target modules (HF names, PEFT's defaults) --- */
    const char *lora_targets;
    const char *ia3_targets;
    const char *ia3_feedforward;    /* IA3 targets scaled on their input (the MLP's down projection) */
    const char *peft_module_prefix; /* before our HF name in a PEFT adapter's keys (GPT-2: "transformer.") */
    int peft_fan_in_fan_out;        /* adapter_config.json's fan_in_fan_out (GPT-2's Conv1D: 1) */
    /* --- the family's facts beyond its computation --- */
    const char *hf_model_types; /* config.json model_type values it reads, comma-separated */
    const char *hf_ignored;     /* entries of its HF files that are not parameters, comma-separated
                                   (".suffix" matches a name's end, anything else the whole name) */
    const char *preset_names;   /* its presets, comma-separated */
    /* fills preset `name` into cfg (zeroed, with the family's defaults); 0 when it is not one of its presets */
    int (*preset)(const char *name, mt_model_config *cfg);
    /* its own fields: defaults, checks after the shared ones, and their keys in the model config's
       JSON after the shared keys (NULL: none) */
    void (*config_defaults)(mt_model_config *cfg);
    int (*config_validate)(const mt_model_config *cfg, mt_error *err);
    void (*config_write_json)(mt_json_writer *w, const mt_model_config *cfg);
    int (*config_read_json)(const mt_json *obj, mt_model_config *cfg, mt_error *err);
    /* --- the planner (plan/) --- */
    /* forward FLOPs per token of one block's matrices (NULL: 2 x the block's parameters) */
    double (*plan_block_matrix_flops)(const mt_model_config *cfg);
    /* this CPU engine's activation floats (fp32) of one block and of the output unit before the
       logits, for a microbatch of N rows, n of them local (sequence parallelism over t ranks),
       recompute 0 none, 1 selective, 2 full (NULL: the planner uses Megatron's formula) */
    void (*plan_act_floats)(const mt_model_config *cfg, int recompute, double N, double n, double t,
                            double *per_block, double *output);
    /* --- generation: one token through the model with a KV cache --- */
    size_t (*decode_cache_floats)(const mt_model_config *cfg);
    void (*decode_step)(struct mt_decoder *d, int32_t token);
} mt_family;

/* The registry (models/registry.c): a family's id is its position in the
 * table there; adding a family is a folder here plus one line of it. */
const mt_family *mt_family_get(mt_family_id id);
int mt_family_count(void);
/* The family whose hf_model_types lists model_type; -1 with err listing them. */
int mt_family_of_hf_model_type(const char *model_type, mt_family_id *out, mt_error *err);
/* Every family's presets, sep between them, into buf (for help texts). */
void mt_family_preset_list(char *buf, size_t cap, const char *sep);
/* The config's family's layout of tp rank tp_rank's slice (tp 1: the whole
 * model), and its tensor-parallel check. */
void mt_model_layout_build(const mt_model_config *cfg, int tp, int tp_rank, mt_layout *out);
int mt_model_tp_check(const mt_model_config *cfg, int tp, mt_error *err);
/* The family's names for the adapter transform (ctx: cfg, which must outlive it). */
mt_adapter_names mt_model_adapter_names(const mt_model_config *cfg);
/* The config's adapter spec is valid for its model: every target names a
 * linear module, and something is left to train. */
int mt_model_adapters_check(const mt_model_config *cfg, mt_error *err);

#endif
