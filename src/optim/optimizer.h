/* Optimizers over flat fp32 ranges of units. An optimizer updates the
 * elements [begin, end) of a unit's flat buffer (the whole unit without
 * ZeRO; a rank's shard with it); weight decay follows the tensors that the
 * range crosses (2-D weights decay, biases and LayerNorm parameters don't). */
#ifndef MT_OPTIM_OPTIMIZER_H
#define MT_OPTIM_OPTIMIZER_H
#include <stddef.h>
#include <stdint.h>
#include "core/dtype.h"
#include "core/error.h"
#include "core/mem.h"
#include "device/backend.h"
#include "nn/unit.h"

typedef enum { MT_OPT_ADAMW = 0, MT_OPT_ADAM, MT_OPT_SGD, MT_OPT_ADAFACTOR, MT_OPT_ADAMW8BIT, MT_OPT_ADAGRAD } mt_opt_kind;
#define MT_OPT_N_KINDS 6

typedef struct {
    mt_opt_kind kind;
    float lr, beta1, beta2, eps, weight_decay, momentum;
    float lr_decay;            /* AdaGrad: this step's lr / (1 + (t - 1) * lr_decay) */
    float initial_accumulator; /* AdaGrad: the sum of squares' starting value */
} mt_opt_hparams;

int mt_opt_kind_parse(const char *s, mt_opt_kind *out, mt_error *err);
const char *mt_opt_kind_name(mt_opt_kind k);
/* The entry's number of state streams and their names (see mt_optimizer). */
int mt_opt_state_count(mt_opt_kind k);
const char *mt_opt_state_name(mt_opt_kind k, int i); /* "m", "v", "momentum", "sum" */
/* 1 for the kinds whose state is not plain fp32 per element (Adafactor,
 * 8-bit AdamW): not mt_optimizer.elementwise. */
int mt_opt_is_lean(mt_opt_kind k);

/* The per-element update of AdamW, Adam, SGD and AdaGrad: params[i] for i in
 * [begin, end) of unit `unit` (indices into the unit's flat buffer); p, g,
 * state[k] point at element `begin`. lr is this step's rate; step is
 * 1-based; grad_scale multiplies gradients (clipping). Other kinds die:
 * their state is not per element (use the table). */
void mt_opt_update_range(mt_backend *be, const mt_opt_hparams *h, const mt_unit_layout *unit, size_t begin, size_t end,
                         float *p, const float *g, float *const *state, float lr, int64_t step, float grad_scale);
/* Mixed precision (Adam and AdamW: mt_opt_has_update_16): the same update
 * with the gradient read from g16 and the updated fp32 master p rounded
 * into p16 in the same pass (16-bit type dt; g16 and p16 point at element
 * `begin` like p). Bitwise equal to widening, mt_opt_update_range and
 * rounding. */
int mt_opt_has_update_16(mt_opt_kind k);
void mt_opt_update_range_16(mt_backend *be, const mt_opt_hparams *h, const mt_unit_layout *unit, size_t begin,
                            size_t end, float *p, const uint16_t *g16, uint16_t *p16, mt_dtype dt, float *const *state,
                            float lr, int64_t step, float grad_scale);

/* ---- The optimizer table ----
 * An optimizer is an entry: its named state streams and the functions that
 * create the state of one unit range [begin, end) (a rank's ZeRO shard of
 * the unit; the whole unit without ZeRO), step it, and convert each stream
 * to and from fp32 (the checkpoint format: one fp32 per element of the
 * range, whatever the encoding in memory). The caller sees streams only;
 * optim/opt_state.h holds a rank's states of all units, in memory or in a
 * disk-offload file. */

/* Every entry's hyperparameters (each reads its own). */
typedef struct {
    mt_opt_hparams h;            /* lr, betas, eps, weight decay (on tensors that decay), SGD momentum */
    float adafactor_beta1;       /* Adafactor momentum on the clipped update (0: none) */
    int adafactor_scale_parameter; /* Adafactor: lr relative to each tensor's RMS */
    float adafactor_clip;        /* Adafactor update clipping threshold */
} mt_opt_config;

/* Refuses hyperparameters out of range or meant for another entry (the
 * messages name the train flags). */
int mt_opt_config_check(const mt_opt_config *c, mt_error *err);

/* How a stream is held in memory (its checkpoint form is always fp32 per element). */
typedef enum {
    MT_OPT_ENC_FP32 = 0, /* one float per element */
    MT_OPT_ENC_Q8,       /* one byte code per element + an fp32 absmax per block (optim/adam8bit.h) */
    MT_OPT_ENC_FACTORED, /* rows + cols floats per matrix, one float per element of the rest (optim/adafactor.h) */
} mt_opt_encoding;

#define MT_OPT_MAX_STREAMS 2
typedef struct {
    const char *name;    /* the checkpoint's optim/<name>/<tensor> */
    mt_opt_encoding enc;
} mt_opt_stream;

/* Sums buf[0..n) in place over the ranks sharing the unit (ZeRO's shard group). */
typedef void (*mt_allreduce_sum_fn)(void *ctx, double *buf, size_t n);

/* What a step updates: the owned range [begin, end) of a unit, as the
 * caller (the trainer, over ZeRO's buffers) holds it. */
typedef struct {
    float *p;                  /* the fp32 master at element begin */
    mt_dtype dt;               /* MT_FP32, or the 16-bit type of g16 and p16 (mixed precision) */
    const uint16_t *g16;       /* mixed precision: the 16-bit gradient at begin */
    uint16_t *p16;             /* mixed precision: the 16-bit parameters at begin */
    /* The fp32 gradient of elements [begin + off, begin + off + n) (valid
     * until the next call: under mixed precision a widened scratch copy). */
    const float *(*grad)(void *ctx, size_t off, size_t n);
    /* Rounds updated master elements [begin + off, ...) into the 16-bit
     * parameters (a no-op under fp32). */
    void (*round)(void *ctx, size_t off, size_t n, const float *master);
    void *ctx;
    mt_allreduce_sum_fn sum;   /* whole-tensor statistics (Adafactor); NULL: the range is the whole unit */
    void *sum_ctx;
    mt_backend *be;            /* the backend the update kernels run on */
} mt_opt_target;

typedef struct mt_opt_state mt_opt_state; /* one unit range's state, defined by its entry */

typedef struct {
    mt_opt_kind kind;
    const char *name;          /* the {optimizer} word and the checkpoint's "optimizer" */
    int n_streams;
    mt_opt_stream streams[MT_OPT_MAX_STREAMS];
    /* 1: every stream is fp32 per element and an update of any sub-range
     * equals the same elements of a whole-range update, so the streams may
     * live elsewhere (disk offload) and be stepped a chunk at a time
     * (step_streams). 0: the state has its own encoding (init/step). */
    int elementwise;
    /* 1: the step needs statistics of whole tensors; a tensor-parallel
     * slice would need a sum over tp that the step does not make. */
    int whole_tensors;
    /* State of [begin, end) of `unit`, zero-initialised (fresh); len >= end -
     * begin is the caller's stream length (ZeRO's padded shard, S floats).
     * Allocated under MT_MEM_OPTIM (scratch under MT_MEM_SCRATCH). */
    mt_opt_state *(*init)(const mt_opt_config *c, const mt_unit_layout *unit, size_t begin, size_t end, size_t len,
                          mt_mem *mem);
    void (*free)(mt_opt_state *s, mt_mem *mem);
    /* One step of the whole range; t is 1-based. Every rank sharing the
     * unit calls it, even with begin == end (whole-tensor sums). */
    void (*step)(mt_opt_state *s, const mt_opt_config *c, const mt_unit_layout *unit, const mt_opt_target *tg,
                 float lr, int64_t t, float grad_scale);
    /* Elementwise entries: the step of elements [begin + off, begin + off +
     * n) with streams st and master p given at that element (NULL otherwise). */
    void (*step_streams)(const mt_opt_config *c, const mt_unit_layout *unit, size_t begin, size_t off, size_t n,
                         const mt_opt_target *tg, float *p, float *const *st, float lr, int64_t t, float grad_scale);
    /* Stream k decoded to fp32: end - begin floats into dst. */
    void (*get_stream)(const mt_opt_state *s, const mt_unit_layout *unit, int k, float *dst);
    /* Stream k encoded from the unit's full fp32 stream (numel floats,
     * indexed by unit element; a factored matrix's statistics are read
     * whole, wherever the range starts). */
    void (*set_stream)(mt_opt_state *s, const mt_unit_layout *unit, int k, const float *full);
    /* Stream k held as len fp32 floats in memory (elementwise), or NULL. */
    float *(*fp32_stream)(mt_opt_state *s, int k);
    /* Entries with their own encoding (NULL for elementwise ones): a state
     * whose storage -- storage_bytes of it, all-zero bytes being the fresh
     * state -- the caller attaches before each use (disk offload pages it
     * in and out of one resident buffer); scratch is the state's own. */
    mt_opt_state *(*init_detached)(const mt_opt_config *c, const mt_unit_layout *unit, size_t begin, size_t end,
                                   mt_mem *mem);
    size_t (*storage_bytes)(const mt_opt_state *s);
    void (*attach)(mt_opt_state *s, void *storage);
} mt_optimizer;

/* The table: the entry of kind k (every mt_opt_kind has one). */
const mt_optimizer *mt_optimizer_get(mt_opt_kind k);
/* The entries that live in their own files. */
extern const mt_optimizer mt_optimizer_adafactor;
extern const mt_optimizer mt_optimizer_adamw8bit;

typedef enum { MT_LR_CONSTANT = 0, MT_LR_COSINE } mt_lr_kind;
typedef struct {
    mt_lr_kind kind;
    float lr, min_lr;
    int64_t warmup, total_steps;
} mt_lr_schedule;

int mt_lr_kind_parse(const char *s, mt_lr_kind *out, mt_error *err);
/* LR of (0-based) step: linear warmup lr*(step+1)/warmup over the first
 * `warmup` steps, then constant, or cosine decay to min_lr at total_steps. */
float mt_lr_at(const mt_lr_schedule *s, int64_t step);

/* PyTorch clip_grad_norm_ coefficient: min(1, max_norm / (norm + 1e-6)); 1 if max_norm <= 0. */
float mt_clip_coef(double norm, float max_norm);

#endif
