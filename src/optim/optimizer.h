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
#include "nn/unit.h"

/* ADAFACTOR and ADAMW8BIT keep their state in their own structures and are
 * updated by mt_adafactor_update (optim/adafactor.h) and mt_adam8bit_update
 * (optim/adam8bit.h); mt_opt_update_range refuses them. */
typedef enum { MT_OPT_ADAMW = 0, MT_OPT_ADAM, MT_OPT_SGD, MT_OPT_ADAFACTOR, MT_OPT_ADAMW8BIT } mt_opt_kind;

typedef struct {
    mt_opt_kind kind;
    float lr, beta1, beta2, eps, weight_decay, momentum;
} mt_opt_hparams;

int mt_opt_kind_parse(const char *s, mt_opt_kind *out, mt_error *err);
const char *mt_opt_kind_name(mt_opt_kind k);
/* Number of fp32 state buffers per parameter: 2 (Adam m, v), 1 (momentum).
 * For the lean optimizers this is the number of fp32 checkpoint streams
 * (their get_state/set_state functions): 2, "m" and "v" (8-bit AdamW: the
 * dequantised moments; Adafactor: the momentum, zero without beta1, and the
 * second moment with each factored matrix's row and column vectors packed at
 * the start of its slot, see optim/adafactor.h). */
int mt_opt_state_count(mt_opt_kind k);
const char *mt_opt_state_name(mt_opt_kind k, int i); /* "m", "v", "momentum" */
/* 1 for the kinds whose state is not plain fp32 per parameter (Adafactor,
 * 8-bit AdamW): the caller uses their own modules instead of opt_state. */
int mt_opt_is_lean(mt_opt_kind k);

/* Updates params[i] for i in [begin, end) of unit `unit` (indices into the
 * unit's flat buffer); p, g, state[k] point at element `begin`. lr is this
 * step's rate; step is 1-based; grad_scale multiplies gradients (clipping). */
void mt_opt_update_range(const mt_opt_hparams *h, const mt_unit_layout *unit, size_t begin, size_t end,
                         float *p, const float *g, float *const *state, float lr, int64_t step,
                         float grad_scale);
/* Mixed precision (Adam and AdamW: mt_opt_has_update_16): the same update
 * with the gradient read from g16 and the updated fp32 master p rounded
 * into p16 in the same pass (16-bit type dt; g16 and p16 point at element
 * `begin` like p). Bitwise equal to widening, mt_opt_update_range and
 * rounding. */
int mt_opt_has_update_16(mt_opt_kind k);
void mt_opt_update_range_16(const mt_opt_hparams *h, const mt_unit_layout *unit, size_t begin, size_t end, float *p,
                            const uint16_t *g16, uint16_t *p16, mt_dtype dt, float *const *state, float lr,
                            int64_t step, float grad_scale);

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
