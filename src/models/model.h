/* The model runtime, shared by every family: per-unit parameter and
 * gradient buffers, the activations of one microbatch, and forward/backward
 * per unit through the family's table (models/family.h). The model knows
 * nothing of data parallelism or ZeRO: the pipeline executor calls the unit
 * functions in order and may run hooks between them (gather a unit's
 * parameters before its forward, reduce its gradients after its backward). */
#ifndef MT_MODEL_MODEL_H
#define MT_MODEL_MODEL_H
#include <stdint.h>
#include "core/error.h"
#include "core/dtype.h"
#include "core/mem.h"
#include "core/philox.h"
#include "core/profile.h"
#include "models/config.h"
#include "models/family.h"
#include "nn/unit.h"
#include "ops/ops.h"
#include "comm/tp.h"
#include "models/ring_attention.h"

/* A block's activations: the family's buffers (mt_family.block_bufs), by index. */
typedef struct {
    float *b[MT_MAX_BLOCK_BUFS];
    /* {compress-activations}: the compressed copy of b[k] kept for backward (NULL: b[k] itself is kept); b[k]
       then is the fp32 working buffer every block shares (m->shared), decoded before the block's backward */
    void *z[MT_MAX_BLOCK_BUFS];
    float *zscale[MT_MAX_BLOCK_BUFS]; /* int8: one scale per group of block_buf_group columns */
    /* bit k: z[k], bf16, was written in this block's last training forward by the linear layer that read b[k]
       (its GEMM operand, mt_act_compress_kept16), so it is neither encoded nor decoded: the backward's linear
       layers read z[k] itself */
    unsigned zdirect;
    unsigned zrounded; /* bit k: ... and the kernel producing b[k] wrote z[k] in its place (b[k] was not written) */
} mt_block_acts;

/* Activations of one microbatch of B sequences of T tokens (N = B*T rows).
 * Under tensor parallelism the sliced tensors (attention, MLP, logits) hold
 * this rank's heads / MLP columns / vocabulary columns; with sequence
 * parallelism the residual-stream tensors (the input unit's output, norms,
 * residuals and their statistics) hold only this rank's n = N/tp rows. */
typedef struct {
    int B, T;
    int32_t *tokens, *targets;  /* [N] */
    uint64_t *sample_ids;       /* [B] global sample index of each row (dropout coordinates) */
    /* packed samples (several documents a window), filled with the tokens:
     * each row's document's first index in its window and the row's
     * position in its document; used only when packed is set (pos also
     * under context parallelism: the rows' positions in the sequence) */
    int32_t *doc_start, *pos;   /* [N] */
    /* the same five as the host writes them (the loader): the buffers themselves on the CPU, a host
     * copy on a device, sent over by mt_model_upload_batch (device memory is not the host's to write) */
    int32_t *h_tokens, *h_targets, *h_doc_start, *h_pos;
    uint64_t *h_sample_ids;
    int packed;
    float *encoded;             /* the input unit's output [N,C] */
    mt_block_acts *blocks;      /* [L] */
    float *head[MT_MAX_HEAD_BUFS]; /* the output unit's buffers (mt_family.head_bufs) */
    float *logits;              /* [N,Vp]; overwritten by dlogits in backward */
    float *losses;              /* [N] */
    /* {partition-activations} (m->partition): this rank's N/tp rows of each
     * block's input [L][N/tp, C] -- the only per-block activation kept; NULL otherwise */
    float **kept;
    size_t bytes;               /* activation bytes held (accounted as MT_MEM_ACTS) */
} mt_acts;

/* Scratch for backward, shared across units (one microbatch in flight). */
typedef struct {
    float *dresid;            /* running gradient of the residual stream [N,C] */
    float *dtmp;              /* [N,C] */
    float *dln;               /* [N,C] */
    float *f[MT_FAMILY_SCRATCH]; /* the family's (mt_family.scratch_floats) */
    float *drop_row;          /* [max(C, T)] dropout scales of one row */
    float *gathered;          /* [N,C] sequence parallelism: all-gathered rows (LayerNorm outputs, gradients) */
    float *xent_stats;        /* [tp][3][N] vocabulary-parallel cross-entropy: max, sum-exp, target logit */
    float *xent_lse;          /* [N] */
    float *attn_scratch;
    size_t attn_scratch_floats;
} mt_grad_scratch;

/* Activation recomputation ({recompute}):
 *   none       every block keeps its activations for backward;
 *   selective  the attention core (output and log-sum-exp) is not kept per
 *              block: one buffer serves every block, and backward recomputes
 *              it from the kept q, k, v (mt_block_recompute);
 *   full       a block keeps only its output (the next block's input): its
 *              other activations live in one buffer set shared by every
 *              block and slot, and backward reruns the block's forward first.
 * Dropout masks come from global coordinates, so the recomputed values -- and
 * the gradients -- are bitwise those of `none`. */
typedef enum { MT_RECOMPUTE_NONE = 0, MT_RECOMPUTE_SELECTIVE, MT_RECOMPUTE_FULL } mt_recompute;

/* Activation compression ({compress-activations}; models/act_compress.c):
 * the activations a block keeps for backward (those its own mask keeps per
 * block under the recompute mode, and the family marks compressible) are
 * computed in fp32 as ever, encoded after the block's forward and decoded
 * before its recomputation / backward:
 *   off       kept in fp32 (bitwise today's run);
 *   lossless  only the linear layers' inputs (MT_ACT_GEMM_INPUT), in the 16-bit
 *             format {precision} bf16/fp16 rounds them to before the backward's
 *             GEMMs anyway: bitwise the same gradients;
 *   bf16      every compressible buffer in bf16;
 *   int8      every compressible buffer as int8 with one fp32 scale per group
 *             (mt_family.block_buf_group). */
typedef enum { MT_ACT_COMPRESS_OFF = 0, MT_ACT_COMPRESS_LOSSLESS, MT_ACT_COMPRESS_BF16, MT_ACT_COMPRESS_INT8 } mt_act_compress;
/* How one buffer is stored (mt_model.zenc). */
typedef enum { MT_ZENC_NONE = 0, MT_ZENC_BF16, MT_ZENC_FP16, MT_ZENC_INT8 } mt_zenc;

/* Partitioned activation checkpoints (ZeRO-R's P_a, Megatron's
 * distribute-saved-activations; {partition-activations}): under tensor
 * parallelism without sequence parallelism every tp rank holds the same
 * [N, C] residual stream, so under full recomputation each block's kept
 * input is replicated tp times. With it each rank keeps only rows
 * [r N/tp, (r+1) N/tp) of a block's input (acts.kept, copied out after the
 * forward that produced it), and the block's recomputation first
 * all-gathers them over tp into a full working buffer. The residual stream
 * lives in two such working buffers shared by all blocks and slots
 * (m->pwork: block l reads pwork[l % 2] and writes pwork[(l + 1) % 2]); the
 * output unit reads the last block's output straight after it (its forward
 * and backward run back to back), so it is not kept. Under pipelining a
 * chunk's boundary buffers stay whole and per slot: its first block reads
 * the received stage input (kept as it is, not partitioned), its last block
 * writes a stage output buffer that the send reads. Bitwise the same
 * values: the gather restores the exact rows. */

/* Sums over the MoE blocks' forwards since the trainer last cleared them. */
typedef struct {
    double loss_sum;   /* the auxiliary losses in loss-sum units: sum of rows x (aux coef x aux + z coef x z) */
    double aux, z;     /* the raw load-balancing and z losses, summed over blocks and microbatches */
    int64_t dropped;   /* (token, choice) slots over an expert's capacity */
    int64_t routed;    /* (token, choice) slots routed */
    int64_t max_load;  /* the most slots one expert received in one block's microbatch */
} mt_moe_stats;

#define MT_QTILE_FLOATS 65536
struct mt_qweight;

typedef struct mt_model {
    mt_model_config cfg;
    const mt_family *fam;
    mt_layout layout;
    float **params;   /* [n_units] flat parameter buffers (NULL: unit not held here, or not yet
                         materialised -- see mt_model_part.defer_params) */
    float **grads;    /* [n_units] flat gradient buffers */
    float **frozen;   /* [n_units] frozen stores (mt_unit_layout.ft; NULL: none or not held):
                         replicated over dp, never touched by ZeRO or the optimizer */
    uint16_t **frozen16; /* [n_units] their 16-bit copies under {precision} bf16/fp16 (made once per load) */
    uint64_t frozen_version; /* bumped when a frozen store is loaded (mt_model_frozen_changed) */
    uint64_t *frozen16_version;
    struct mt_qweight **qw; /* [n_units][n_frozen] quantized frozen weights ({quantize-base}; NULL: none) */
    float *qtile;     /* a dequantized row tile of a quantized weight (MT_QTILE_FLOATS or one row) */
    size_t qtile_floats;
    uint16_t *qtile16; /* the same tile in bf16 ({precision} bf16: dequantized straight into the GEMM's operand) */
    float *qrow;      /* one whole row of a quantized weight cut by columns (tp), its slice then copied */
    int qcols;        /* the most input columns of a quantized weight */
    void *i8scratch;  /* {int8-threshold} > 0: LLM.int8()'s int8 activations and outlier columns */
    size_t qrow_floats;
    float *gsink;     /* where the backward of a frozen norm or bias writes its (unused) gradient */
    float *lora_scratch; /* LoRA's [N, in] dropped-out input and [N, r] x2 (NULL: no adapters) */
    size_t lora_scratch_floats[2]; /* its [N, in] and [N, r] parts */
    float *ia3_x, *ia3_d, *ia3_y; /* IA3: a scaled input / its gradient [N, in], dy * l [N, OC], W x + b [N, rows]
                                     (NULL: no IA3 adapters) */
    unsigned char *held; /* [n_units] 1: the unit is part of this process's model */
    /* [n_units] 1: grads[u] is fresh for this backward -- cleared except
     * where its grad_by_one_gemm tensors lie, which the unit's backward
     * writes with MT_SET_DW instead of adding into; 0 (the default): the
     * backward adds into every element. Set by the ZeRO layer. */
    unsigned char *grad_fresh;
    mt_acts acts;     /* the activation slot in use (a copy of slots[k]) */
    mt_acts *slots;   /* [n_slots] activations of microbatches in flight (pipeline) */
    int n_slots;
    mt_grad_scratch gs;
    mt_recompute recompute;
    mt_act_compress compress;               /* {compress-activations} */
    unsigned char zenc[MT_MAX_BLOCK_BUFS];  /* each block buffer's encoding (mt_zenc) */
    int zdecoded;                           /* the block whose kept buffers were decoded last (-1: none) */
    mt_block_acts shared; /* the buffers every block shares under recomputation (NULL fields otherwise) */
    mt_mem_arena act_arena; /* every activation buffer of every slot and the logits: one allocation, made once */
    int partition;        /* {partition-activations}: see above */
    float *pwork[2];      /* partition: the residual stream's two full [N, C] working buffers (scratch) */
    uint64_t seed;    /* init and dropout seed */
    mt_mem *mem;
    mt_profile *prof; /* kernel time by category ({profile}); NULL = off; not owned */
    const mt_tp *tp;  /* tensor parallelism (NULL: none); not owned */
    struct mt_comm *ep; /* expert parallelism (NULL: none; see mt_model_part.ep); not owned */
    /* context parallelism (NULL: none; not owned): acts.T is then this
     * rank's 2 chunks of each sample (seq_len / cp rows, models/ring_attention.h),
     * acts.pos their positions in the sequence, and attention runs over the ring */
    const mt_cp *cp;
    /* {precision} (model/linear.c): GEMM operands in 16 bits */
    mt_dtype precision;
    mt_backend *be;         /* the backend every kernel runs on (device/backend.h); not owned */
    uint16_t **w16;         /* [n_units] bf16/fp16 copies of the parameters (NULL fields under fp32) */
    uint64_t *w16_version;  /* [n_units] param_version each copy was made at */
    uint64_t param_version; /* bumped by mt_model_params_changed */
    uint16_t *op16[2];      /* 16-bit operand scratch: [0] layer input, [1] output gradient */
    int dlogits16;          /* 1: the last head forward (bf16, tp 1) wrote dL/dlogits into op16[1]
                               in bf16 and left acts.logits as logits */
    float *opf[2], *wbuf;   /* fp16: the rounded operands and weight in fp32 */
    /* Calibration (GPTQ: train/gptq_run.h): sees the input [N, C] of every
     * linear layer mt_unit_linear_fwd runs (declared tensors k..k+n-1 of unit
     * u) before its GEMM; NULL: none. */
    void (*linear_input_hook)(void *ctx, int u, int k, int n, const float *inp, int N, int C);
    void *linear_input_ctx;
    /* Mixture of experts: what the blocks' forwards (not their
     * recomputation) add up; the trainer reads and clears them. */
    mt_moe_stats moe;
    int64_t *moe_load; /* [n_layer][num_experts] rows each expert received (NULL: dense); the trainer clears it */
    int64_t *moe_ep_rows; /* expert parallelism: [ep] token rows the forwards sent each ep rank (this rank
                             included; NULL without ep); the trainer clears it */
} mt_model;

/* The part of the model one process holds (a pipeline stage, or several
 * chunks of the interleaved schedule). */
typedef struct {
    const unsigned char *own_layer; /* [n_layer]: 1 = block held here; NULL = every block */
    int own_input;                  /* the input unit (0) */
    int own_output;                 /* the output unit (L+1) and the loss; with it the units whose
                                       tensors it shares (a tied head: unit 0) are held as well */
    int act_slots;                  /* microbatches whose activations are held at once (>= 1) */
    mt_recompute recompute;
    const mt_tp *tp;                /* tensor parallelism (NULL: none): the layout is this tp rank's slice */
    mt_dtype precision;             /* GEMM operand type (MT_FP32: plain fp32) */
    mt_backend *be;                 /* the backend of the kernels (not owned; must outlive the model) */
    struct mt_comm *ep;             /* expert parallelism (NULL or size 1: none): the group the experts are
                                       sharded over (mt_layout_shard_experts) and tokens exchanged in */
    int defer_params;               /* 1: held units get no parameter or gradient buffers at creation;
                                       the ZeRO layer materialises one unit at a time
                                       (mt_model_materialize_unit) and keeps only its storage, so the
                                       full fp32 model never exists at once */
    mt_act_compress compress;       /* {compress-activations} (off: fp32) */
    const mt_cp *cp;                /* context parallelism (NULL: none): T is the rank's rows of a sample */
    int partition_acts;             /* {partition-activations}: with tp > 1, no sequence parallelism and
                                       {recompute} full; ignored otherwise */
    int dense_align;                /* expert parallelism: the experts of a unit start at a multiple of this
                                       (mt_layout_shard_experts; ZeRO's dp sharding of the dense part) */
} mt_model_part;

/* Builds the layout and allocates params, grads, activations for
 * microbatches of B x T and backward scratch. Parameters are initialised
 * from seed (a function of seed, tensor name and element index). */
void mt_model_create(mt_model *m, mt_backend *be, const mt_model_config *cfg, int B, int T, uint64_t seed, mt_mem *mem);
/* The same for part of the model: only the units of the part are allocated
 * (params[u] == NULL otherwise), and part->act_slots activation slots, each
 * with the activations of the held blocks, the input buffer of each held
 * block whose predecessor is not held (blocks[l-1].res3: the activation
 * received from the previous stage) and, with the head, the final LayerNorm
 * and losses (the logits buffer is shared by all slots: the head's forward
 * and backward run back to back). */
void mt_model_create_part(mt_model *m, const mt_model_config *cfg, int B, int T, uint64_t seed, mt_mem *mem,
                          const mt_model_part *part);
/* A held unit's initial fp32 parameters (allocated and drawn from the seed
 * now if the model was created with defer_params) and, with with_grads, a
 * zeroed gradient buffer; returns params[u] (NULL for a unit not held). */
float *mt_model_materialize_unit(mt_model *m, int u, int with_grads);
/* Sends a slot's host-written inputs (mt_acts.h_*) to its buffers; nothing on the CPU, where they are
 * the same. Synchronous: the host copies may be written again when it returns. */
void mt_model_upload_batch(mt_model *m, const mt_acts *a);
/* Declared tensor k of unit u (the family's index): its data in whichever
 * store holds it; its gradient (NULL when frozen); or, for a frozen tensor,
 * the gradient sink (norms and biases, whose kernels always write one). */
float *mt_model_tensor_data(const mt_model *m, int u, int k);
float *mt_model_tensor_grad(const mt_model *m, int u, int k);
float *mt_model_tensor_grad_or_sink(const mt_model *m, int u, int k);
/* Quantizes w (the whole of frozen tensor i of unit u, which the layout
 * marks quantized: every tp rank holds the whole quantized matrix and
 * dequantizes its slice, so every layout computes with the same values)
 * into the model's quantized store. */
int mt_model_set_quantized(mt_model *m, int u, int i, const float *w, mt_error *err);
/* Frozen tensor i of unit u ({quantize-base} gptq) takes the GPTQ layer g
 * whole (the codes as its directory holds them; g's arrays now belong to the
 * model, g is cleared): -1 when its shape is not the tensor's. */
struct mt_gptqw;
int mt_model_set_gptq(mt_model *m, int u, int i, struct mt_gptqw *g, mt_error *err);
/* Tells the model a frozen store was (re)loaded: 16-bit copies are remade. */
void mt_model_frozen_changed(mt_model *m);
/* Rows of the residual stream this rank holds (N, or N/tp with sequence
 * parallelism) times C: the floats of a block's input or output, which is
 * what pipeline stages send each other. */
size_t mt_model_resid_floats(const mt_model *m);
/* Tensor parallelism: sums the gradients of unit u that tp ranks hold in
 * part -- under sequence parallelism the norm and row-parallel bias
 * gradients (this rank's rows), and the pieces several ranks hold
 * (tp_replicas; over the piece group) -- a no-op otherwise. Call before
 * the unit's gradient is reduced over dp. */
void mt_model_tp_reduce_grads(mt_model *m, int u);
/* Tells the model its parameters changed (an optimizer step, a load): the
 * 16-bit copies of {precision} bf16/fp16 are remade on their next use. */
void mt_model_params_changed(mt_model *m);
/* The linear layers at m->precision (model/linear.c), with the semantics
 * (and backward flags: MT_ACC_DINP, MT_SET_DW) of op_matmul_forward /
 * op_matmul_backward; w must lie in a unit's parameters. */
void mt_linear_forward(mt_model *m, float *out, const float *inp, const float *w, const float *bias, int N, int C,
                       int OC);
void mt_linear_backward(mt_model *m, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int C, int OC, int flags);
/* mt_linear_backward at bf16 precision with the output gradient already in
 * bf16 (dout, N x OC; no bias). */
void mt_linear_backward_dout_bf16(mt_model *m, float *dinp, float *dw, const mt_bf16 *dout, const float *inp,
                                  const float *w, int N, int C, int OC, int flags);
/* {precision} bf16 with the layer's bf16 input kept for the backward (models/act_compress.c): the forward
 * rounds inp into inp16 (N x C) and multiplies that; the backward takes it instead of rounding inp again.
 * The same bits as mt_linear_forward / mt_linear_backward. */
void mt_linear_forward_keep16(mt_model *m, float *out, const float *inp, uint16_t *inp16, const float *w,
                              const float *bias, int N, int C, int OC);
/* ... with inp16 already holding the rounded input (written by the kernel that produced it). */
void mt_linear_forward16(mt_model *m, float *out, const uint16_t *inp16, const float *w, const float *bias, int N,
                         int C, int OC);
void mt_linear_backward_kept16(mt_model *m, float *dinp, float *dw, float *dbias, const float *dout,
                               const uint16_t *inp16, const float *w, int N, int C, int OC, int flags);
/* The 16-bit form (bf16 or fp16 by m->precision) of parameter element *w,
 * which must lie in a unit's parameters. */
const uint16_t *mt_model_weight16(mt_model *m, const float *w);
/* Makes activation slot k the one the unit functions use. */
void mt_model_use_slot(mt_model *m, int k);
int mt_recompute_parse(const char *s, mt_recompute *out, mt_error *err);
int mt_act_compress_parse(const char *s, mt_act_compress *out, mt_error *err);
const char *mt_act_compress_name(mt_act_compress c);
/* The bytes of a compressed buffer of n floats in groups of g columns (encoding e). */
size_t mt_act_compress_bytes(mt_zenc e, size_t n, size_t g);
/* Encodes block `layer`'s compressed buffers from their fp32 working copies (after its forward), and decodes
   them back (before its recomputation or backward; once per backward). */
/* Chooses m->zenc from m->compress, m->precision and m->recompute (model creation). */
void mt_act_compress_choose(mt_model *m);
void mt_act_compress_encode(mt_model *m, int layer);
/* The kept bf16 copy of block unit u's buffer that is the whole input inp (n floats) of one of its linear
 * layers, if that layer may round into it (its forward; marks it mt_block_acts.zdirect), the kernel producing
 * inp may write it instead of inp (marks it zdirect and zrounded), or the layer's backward may read it (marked
 * in the forward); NULL: round inp as ever. *rounded (if not NULL): whether the producer wrote it.
 * mt_act_compress_forward_begins clears the marks before a block's training forward. */
typedef enum { MT_KEPT16_BACKWARD = 0, MT_KEPT16_LINEAR, MT_KEPT16_PRODUCER } mt_kept16_use;
uint16_t *mt_act_compress_kept16(mt_model *m, int u, const float *inp, size_t n, mt_kept16_use use, int *rounded);
void mt_act_compress_forward_begins(mt_model *m, int layer);
void mt_act_compress_decode(mt_model *m, int layer);
const char *mt_recompute_name(mt_recompute r);
void mt_model_free(mt_model *m);
void mt_model_zero_grads(mt_model *m);

/* Forward context of one microbatch. */
typedef struct mt_fwd_ctx {
    int training;   /* dropout active when training and cfg.dropout > 0 */
    uint32_t step;  /* optimizer step (dropout key) */
    float dscale;   /* dL/d(loss sum) of the step (the output's dlogits_scale): what the backward of a loss
                       a block adds (MoE's auxiliary losses) scales by; 0 outside training */
    float block_loss_weight; /* the loss-sum weight of a loss a block adds for this microbatch (MoE's
                                auxiliary losses): the global batch's counted targets over its microbatches,
                                so they enter the mean loss as their mean over the microbatches (N rows
                                without a loss mask); 0: N */
} mt_fwd_ctx;

/* Unit u's forward, recomputation (before its backward; see mt_recompute)
 * and backward on m->acts (tokens/targets/sample_ids filled by the caller),
 * through the family. The output unit's forward is mt_model_loss_forward.
 * Backwards run in reverse unit order and accumulate into m->grads (a unit
 * whose grad_fresh is set writes its grad_by_one_gemm tensors instead). */
void mt_unit_forward(mt_model *m, int u, const mt_fwd_ctx *fc);
void mt_unit_recompute(mt_model *m, int u, const mt_fwd_ctx *fc);
void mt_unit_backward(mt_model *m, int u, const mt_fwd_ctx *fc);
/* The output unit's forward: the per-row losses; when dlogits_scale != 0 it
 * also leaves dL/dlogits for its backward (fused softmax + cross-entropy).
 * Returns the sum of the row losses (double). */
double mt_model_loss_forward(mt_model *m, const mt_fwd_ctx *fc, float dlogits_scale);
/* The residual stream after block `layer` (the next block's input; what a
 * pipeline stage sends), and the output unit's parking buffer for
 * dL/d(last block output) (see mt_family.head_park). */
static inline float *mt_model_block_out(const mt_model *m, int layer) { return m->acts.blocks[layer].b[m->fam->block_out]; }
static inline float *mt_model_park(const mt_model *m) { return m->acts.head[m->fam->head_park]; }

/* Whole-model helpers (forward of every unit; forward+backward). */
double mt_model_forward(mt_model *m, const mt_fwd_ctx *fc, float dlogits_scale);
void mt_model_backward(mt_model *m, const mt_fwd_ctx *fc);

/* Model FLOPs per token for training (the family's count). */
double mt_model_flops_per_token(const mt_model *m, int T);

#endif
