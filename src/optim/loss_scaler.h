/* Dynamic loss scaling for fp16 training (groundwork: not wired into the
 * trainer yet).
 *
 * fp16 gradients underflow unless the loss is multiplied by a large scale S
 * before backward (and the gradients by 1/S before the optimizer). S is kept
 * as large as the gradients allow:
 *   - a step whose gradients hold an inf or NaN on ANY rank is skipped (no
 *     optimizer update, on every rank) and S is halved (not below min_scale);
 *   - after `window` consecutive clean steps S is doubled (not above
 *     max_scale) and the count starts again;
 *   - an overflow resets the count of clean steps.
 * The scale is a power of two when initial, min and max are, so scaling and
 * unscaling are exact. Typical values: initial 2^16, window 1000 (DeepSpeed;
 * PyTorch's GradScaler uses 2000), min 1, max 2^24.
 *
 * One decision for all ranks. Each rank scans only the gradients it holds
 * (its ZeRO shard, its pipeline stage), so ranks can disagree about "found a
 * non-finite value"; if one skipped and another stepped, the replicas would
 * diverge. mt_loss_scaler_agree takes the MAX of the local flag over a
 * communicator (the world: every rank that applies an update), so every rank
 * feeds the same flag to mt_loss_scaler_update and their states stay equal.
 *
 * How the trainer calls it:
 *   init:  mt_loss_scaler_init(&ls, 65536, window, 1, 1 << 24, err)
 *   step:  loss *= ls.st.scale before backward; after the gradient
 *          reductions, found = mt_found_nonfinite(g, n) OR-ed over the
 *          gradient ranges this rank holds; then
 *          if (mt_loss_scaler_decide(&ls, world, found, step, rank == 0 ? stdout : NULL)
 *              == MT_LOSS_SCALE_SKIP) skip the update (and the clipping);
 *          else unscale by 1/scale (the scale used for THIS step: read it
 *          before deciding, since deciding may double it) and update.
 *   checkpoint: mt_loss_scaler_write_json into the state JSON; on resume
 *          mt_loss_scaler_init with the run's flags, then mt_loss_scaler_read_json. */
#ifndef MT_OPTIM_LOSS_SCALER_H
#define MT_OPTIM_LOSS_SCALER_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "comm/comm.h"
#include "core/nonfinite.h" /* mt_found_nonfinite */
#include "core/error.h"
#include "core/json.h"

/* What a checkpoint must keep to resume the scaler bit-identically. */
typedef struct {
    float scale;          /* the current loss scale */
    int64_t clean_steps;  /* consecutive clean steps since the last overflow or growth */
    int64_t skipped;      /* steps skipped for overflow since the start of the run */
} mt_loss_scaler_state;

typedef struct {
    float min_scale, max_scale; /* the scale stays in [min_scale, max_scale] */
    int64_t window;             /* clean steps per doubling */
    mt_loss_scaler_state st;
} mt_loss_scaler;

typedef enum { MT_LOSS_SCALE_APPLY = 0, MT_LOSS_SCALE_SKIP = 1 } mt_loss_scale_action;

/* Checks 0 < min_scale <= initial <= max_scale (finite, min_scale a normal
 * float) and window >= 1; returns 0, or -1 with err naming the bad value. */
int mt_loss_scaler_init(mt_loss_scaler *s, float initial, int64_t window, float min_scale, float max_scale,
                        mt_error *err);

/* One step's transition, given the flag every rank agreed on (overflow != 0:
 * some rank found an inf/NaN gradient). Overflow: halve (capped at
 * min_scale), reset the clean count, count the skip, return SKIP. Clean:
 * count it; at `window` clean steps double (capped at max_scale) and reset
 * the count; return APPLY. */
mt_loss_scale_action mt_loss_scaler_update(mt_loss_scaler *s, int overflow);

/* The agreed flag: MAX of local_found (0/1) over the members of c, one
 * collective (call it on every member). *first_rank (may be NULL) gets the
 * lowest group rank that found a non-finite value, -1 if none did. */
int mt_loss_scaler_agree(mt_comm *c, int local_found, int *first_rank);

/* mt_loss_scaler_agree over c, then mt_loss_scaler_update. On a skip, when
 * log is not NULL (pass it on one rank only), prints one line: the step, the
 * lowest rank that found the value, the scale before and after, the skips so
 * far, and a hint when the scale is already at min_scale. */
mt_loss_scale_action mt_loss_scaler_decide(mt_loss_scaler *s, mt_comm *c, int local_found, int64_t step,
                                           FILE *log);

/* Checkpoint state: get/set copy the struct; set (and read_json) refuse a
 * non-finite or non-positive scale or a negative count, and clamp the scale
 * into this run's [min_scale, max_scale] (the flags may have changed since
 * the save). A clean count >= this run's window makes the next clean step
 * double the scale. */
void mt_loss_scaler_get_state(const mt_loss_scaler *s, mt_loss_scaler_state *out);
int mt_loss_scaler_set_state(mt_loss_scaler *s, const mt_loss_scaler_state *in, mt_error *err);
/* {"scale": S, "clean_steps": N, "skipped": K}, the scale with 17 digits
 * (exact round trip). */
void mt_loss_scaler_write_json(mt_json_writer *w, const mt_loss_scaler *s);
int mt_loss_scaler_read_json(const mt_json *obj, mt_loss_scaler *s, mt_error *err);

#endif
