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

/* Megatron tensor parallelism cuts a tensor one of three ways:
 *   REPLICATED  every tp rank holds all of it (LayerNorms, wpe, the biases of
 *               row-parallel layers);
 *   ROWS        output rows split (column-parallel linears: c_attn with its
 *               q, k and v blocks cut separately, so a rank holds whole heads;
 *               c_fc; their biases; the vocabulary rows of wte);
 *   COLS        input columns split (row-parallel linears: attn.c_proj,
 *               mlp.c_proj), matching the ROWS cut of the layer before. */
typedef enum { MT_TP_REPLICATED = 0, MT_TP_ROWS, MT_TP_COLS } mt_tp_split;
#define MT_TENSOR_NAME_LEN 48

typedef struct {
    char name[MT_TENSOR_NAME_LEN]; /* e.g. "h.3.attn.c_attn.weight" */
    int ndim;                      /* 1 or 2 */
    int64_t shape[2];              /* our layout; shape[1] = 1 for 1-D */
    size_t offset;                 /* element offset in the unit's flat buffer */
    size_t numel;
    int weight_decay;              /* 1 for 2-D weights (embeddings included) */
    int read_16bit_only;           /* under --precision bf16/fp16 the model reads only the tensor's
                                      16-bit form (the block matrices: GEMM operands; wte: also the
                                      embedding lookup widens just the rows it needs) */
    int grad_by_one_gemm;          /* its gradient is written whole by one weight-gradient GEMM per
                                      backward (the block matrices; wte, by the tied head's, before the
                                      embedding's backward adds its rows): with a fresh gradient buffer
                                      (mt_model.grad_fresh) it needs no clearing */
    float init_std;                /* > 0: N(0, std); 0: zeros; -1: ones */
    int64_t init_rows;             /* rows drawn from the RNG (wte: V; padding rows stay 0) */
    /* Tensor parallelism: how this tensor is cut over the tp ranks, and
     * where the local slice sits in the full tensor. A local row is always
     * one contiguous run of the full tensor (mt_gpt_tensor_row_origin). */
    mt_tp_split split;
    int split_parts;               /* MT_TP_ROWS: blocks of rows cut separately (q, k, v: 3) */
    int64_t gshape[2];             /* full shape */
    size_t goffset, gnumel;        /* in the full (tp = 1) unit buffer */
} mt_tensor;

typedef enum { MT_UNIT_EMBED = 0, MT_UNIT_BLOCK = 1, MT_UNIT_HEAD = 2 } mt_unit_kind;

typedef struct {
    mt_unit_kind kind;
    int layer;      /* block index for MT_UNIT_BLOCK, -1 otherwise */
    int n_tensors;
    mt_tensor t[MT_MAX_UNIT_TENSORS];
    size_t numel;   /* elements in the flat buffer (this tp rank's slices) */
    size_t gnumel;  /* elements of the full unit (tp = 1) */
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
    size_t gtotal_params;   /* the same for the full model */
    int tp, tp_rank;        /* tensor-parallel degree and this rank's index (1, 0: whole model) */
} mt_gpt_layout;

/* The whole model (tp = 1). */
void mt_gpt_layout_build(const mt_gpt_config *cfg, mt_gpt_layout *out);
/* Checks that heads, 4C and the padded vocabulary divide by tp; the message
 * says which does not and what to change. */
int mt_gpt_tp_check(const mt_gpt_config *cfg, int tp, mt_error *err);
/* Tensor-parallel rank tp_rank's slice of the model (mt_gpt_tp_check must
 * pass): the same units and tensors with local shapes and offsets. */
void mt_gpt_layout_build_tp(const mt_gpt_config *cfg, int tp, int tp_rank, mt_gpt_layout *out);
/* Element index, in the full tensor, of the first element of local row r
 * (the row's shape[1] elements are contiguous there too). */
size_t mt_gpt_tensor_row_origin(const mt_gpt_layout *l, const mt_tensor *t, int64_t r);
/* Copies unit u between this rank's local buffer (numel) and the full
 * unit buffer (gnumel, full offsets): to_full writes only this rank's
 * slices (replicated tensors included); from_full reads them. */
void mt_gpt_unit_to_full(const mt_gpt_layout *l, int u, const float *local, float *full);
void mt_gpt_unit_from_full(const mt_gpt_layout *l, int u, const float *full, float *local);
void mt_gpt_layout_free(mt_gpt_layout *l);
/* Finds a tensor by name; returns NULL if absent, else sets *unit. */
const mt_tensor *mt_gpt_find_tensor(const mt_gpt_layout *l, const char *name, int *unit);
/* Fills a unit's flat parameter buffer with its initial values (a function
 * of seed, tensor name and full-tensor element index only, so every tp
 * slicing initialises the same model). */
void mt_gpt_init_unit(const mt_gpt_layout *l, int unit, float *params, uint64_t seed);

#endif
