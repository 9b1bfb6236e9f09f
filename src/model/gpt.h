/* GPT-2 model description: configuration, presets and the unit layout.
 * The model is an ordered list of units (embedding, one per transformer
 * block, head). Each unit owns one flat fp32 parameter buffer (and a
 * gradient buffer of the same shape) holding its tensors at fixed offsets.
 * Tensor names are Hugging Face GPT-2 names; linear weights are stored as
 * [out, in] (PyTorch nn.Linear layout; HF's Conv1D is the transpose). */
#ifndef MT_MODEL_GPT_H
#define MT_MODEL_GPT_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "core/json.h"

typedef struct {
    int n_layer;
    int n_embd;       /* C */
    int n_head;
    int vocab_size;   /* V: real vocabulary; softmax runs over these */
    int padded_vocab; /* Vp >= V: rows of wte (extra rows are zero and unused) */
    int seq_len;      /* T: context length = rows of wpe */
    float dropout;    /* embedding, attention-probability and residual dropout */
} mt_gpt_config;

/* Rounds V up to a multiple of 128 (as llm.c does) for GEMM alignment and
 * tensor-parallel divisibility. */
int mt_gpt_pad_vocab(int vocab_size);
/* Fills a GPT-2 preset: "gpt2" (124M), "gpt2-medium", "gpt2-large", "gpt2-xl". */
int mt_gpt_config_preset(const char *name, mt_gpt_config *cfg, mt_error *err);
/* Checks ranges and divisibility (C % heads, positive sizes, Vp >= V). */
int mt_gpt_config_validate(const mt_gpt_config *cfg, mt_error *err);
void mt_gpt_config_write_json(mt_json_writer *w, const mt_gpt_config *cfg); /* writes one object */
int mt_gpt_config_read_json(const mt_json *obj, mt_gpt_config *cfg, mt_error *err);

#define MT_MAX_UNIT_TENSORS 12
#define MT_TENSOR_NAME_LEN 48

typedef struct {
    char name[MT_TENSOR_NAME_LEN]; /* e.g. "h.3.attn.c_attn.weight" */
    int ndim;                      /* 1 or 2 */
    int64_t shape[2];              /* our layout; shape[1] = 1 for 1-D */
    size_t offset;                 /* element offset in the unit's flat buffer */
    size_t numel;
    int weight_decay;              /* 1 for 2-D weights (embeddings included) */
    float init_std;                /* > 0: N(0, std); 0: zeros; -1: ones */
    int64_t init_rows;             /* rows drawn from the RNG (wte: V; padding rows stay 0) */
} mt_tensor;

typedef enum { MT_UNIT_EMBED = 0, MT_UNIT_BLOCK = 1, MT_UNIT_HEAD = 2 } mt_unit_kind;

typedef struct {
    mt_unit_kind kind;
    int layer;      /* block index for MT_UNIT_BLOCK, -1 otherwise */
    int n_tensors;
    mt_tensor t[MT_MAX_UNIT_TENSORS];
    size_t numel;   /* elements in the flat buffer */
} mt_unit_layout;

/* Tensor order inside units (indices into mt_unit_layout.t). */
enum { MT_T_WTE = 0, MT_T_WPE = 1 };
enum {
    MT_T_LN1_W = 0, MT_T_LN1_B, MT_T_QKV_W, MT_T_QKV_B, MT_T_ATTPROJ_W, MT_T_ATTPROJ_B,
    MT_T_LN2_W, MT_T_LN2_B, MT_T_FC_W, MT_T_FC_B, MT_T_FCPROJ_W, MT_T_FCPROJ_B, MT_T_BLOCK_COUNT
};
enum { MT_T_LNF_W = 0, MT_T_LNF_B = 1 };

typedef struct {
    mt_gpt_config cfg;
    int n_units;            /* n_layer + 2: [embed, block 0..L-1, head] */
    mt_unit_layout *units;
    size_t total_params;    /* sum of unit numel (the tied head counted once) */
} mt_gpt_layout;

void mt_gpt_layout_build(const mt_gpt_config *cfg, mt_gpt_layout *out);
void mt_gpt_layout_free(mt_gpt_layout *l);
/* Finds a tensor by name; returns NULL if absent, else sets *unit. */
const mt_tensor *mt_gpt_find_tensor(const mt_gpt_layout *l, const char *name, int *unit);
/* Fills a unit's flat parameter buffer with its initial values (a function
 * of seed, tensor name and element index only). */
void mt_gpt_init_unit(const mt_gpt_layout *l, int unit, float *params, uint64_t seed);

#endif
