/* Adafactor (Shazeer & Stern 2018) over a unit's owned range [begin, end).
 *
 * Per step t (1-based), with G = grad * grad_scale and beta2_t = 1 - t^decay_rate:
 *   matrix W [rows, cols] (both >= 2): factored second moment
 *     R = beta2_t R + (1 - beta2_t) * rowmean(G^2 + eps1)        (rows floats)
 *     C = beta2_t C + (1 - beta2_t) * colmean(G^2 + eps1)        (cols floats)
 *     U = G / sqrt(R C^T / mean(R))
 *   other tensors (1-D, or a dimension of 1): V = beta2_t V + (1 - beta2_t)(G^2 + eps1),
 *     U = G / sqrt(V)
 *   update clipping per tensor: U /= max(1, RMS(U) / clip_threshold)
 *   optional momentum (beta1 > 0): M = beta1 M + (1 - beta1) U, U = M
 *   lr_t = lr, or with scale_parameter lr * max(eps2, RMS(W)) (W before this step)
 *   W = W * (1 - lr_t * weight_decay) - lr_t * U   (decay only on decaying tensors)
 * The learning rate is the caller's schedule: with scale_parameter it is the
 * paper's relative step size rho_t (a fraction of each tensor's RMS), without
 * it an absolute step as in Adam. State:
 * (rows + cols) floats per matrix, replicated on every rank sharing the unit;
 * one float per owned element of the other tensors; plus one per owned
 * element with momentum.
 *
 * Sharding. R, C and RMS(U) need sums over whole tensors, which a ZeRO shard
 * (it may start or end in a row) does not hold. An update is therefore three
 * local phases separated by two sums across the ranks sharing the unit:
 *   1. mt_adafactor_row_col_sums: partial row/column sums of G^2 + eps1 over
 *      the owned elements -> sums[mt_adafactor_sums_len] (doubles)
 *      ... sums summed over the shard group ...
 *   2. mt_adafactor_second_moment: updates R, C (identically on every rank)
 *      and the owned V; partial sums of U^2 per tensor, then of W^2 per tensor
 *      (zeros without scale_parameter) -> sq[mt_adafactor_sq_len]
 *      ... sq summed over the shard group ...
 *   3. mt_adafactor_apply: the clipped (momentum) update of the owned params.
 * The lengths depend only on the unit's layout, so every rank makes the same
 * reductions with the same sizes whatever its shard (a rank owning nothing of
 * a tensor contributes zeros). mt_adafactor_update runs the three phases with
 * an allreduce callback; a caller may instead run phase 1 for all units,
 * sum all units' buffers in one collective, and so on (two collectives a step).
 *
 * The table entry mt_optimizer_adafactor (optim/optimizer.h) wraps this
 * module for the trainer (optim/opt_state.h); used directly:
 *   init:  mt_adafactor_hparams_default(&h), then set weight_decay (and beta1
 *          if momentum is wanted, scale_parameter, clip_threshold); per unit
 *          u, mt_adafactor_init(&s[u], &h, &layout.units[u], lo, hi, &mem)
 *          with [lo, hi) from mt_zero_owned.
 *   step:  mt_adafactor_update(&s[u], &h, &layout.units[u], p, g, lr, t, coef,
 *          allreduce_sum, ctx) with p, g from mt_zero_owned; allreduce_sum sums
 *          doubles in place over the shard group (a no-op for stage 0
 *          or a group of one; under hybrid sharding the replicas hold the same
 *          gradient shard and need no sum across them). Every rank of the
 *          shard group must call it for every unit, even with hi == lo.
 *   checkpoint (fp32 streams, names mt_opt_state_name: "m", "v"):
 *          k = 0 "m": the momentum per element (zeros without beta1);
 *          k = 1 "v": per element V for unfactored tensors; for a factored
 *                 matrix at offset o, R at [o, o+rows), C at [o+rows,
 *                 o+rows+cols), zeros in the rest of its slot.
 *          save: mt_adafactor_get_state(be, &s[u], &layout.units[u], k, buf) fills hi-lo floats of
 *                that stream; pad to S and use mt_zero_get_full_state (each
 *                rank contributes the slice of R, C inside its range; the
 *                ranks' copies are identical).
 *          load: mt_adafactor_set_state(be, &s[u], &layout.units[u], k, full) from the full
 *                stream (numel floats); R, C are taken whole.
 *   free:  mt_adafactor_free(&s[u], &mem). */
#ifndef MT_OPTIM_ADAFACTOR_H
#define MT_OPTIM_ADAFACTOR_H
#include <stddef.h>
#include <stdint.h>
#include "core/mem.h"
#include "nn/unit.h"
#include "optim/optimizer.h" /* mt_allreduce_sum_fn */

typedef struct {
    float beta1;          /* momentum on the clipped update; 0 = none (the default: the memory saving) */
    float decay_rate;     /* -0.8: beta2_t = 1 - t^decay_rate */
    float eps1;           /* 1e-30, added to G^2 */
    float clip_threshold; /* d = 1: update clipping by RMS */
    float weight_decay;   /* decoupled (AdamW-style) on tensors with weight_decay set */
    int scale_parameter;  /* 1: the paper's relative step, lr_t = lr * max(eps2, RMS(X)) per tensor */
    float eps2;           /* 1e-3: floor of RMS(X) under scale_parameter (zero-initialised biases) */
} mt_adafactor_hparams;

void mt_adafactor_hparams_default(mt_adafactor_hparams *h);

typedef struct {
    size_t begin, end;                     /* owned range of the unit */
    size_t numel;                          /* the unit's numel (layout check) */
    int n_tensors;
    /* per tensor of the unit ([n_tensors] each): */
    int *factored;
    size_t *rc_off;                        /* factored: R at rc + rc_off, C after it; the same offsets in sums */
    size_t *v_off;                         /* unfactored: the owned part of the tensor at v + v_off */
    double *r_mean;                        /* factored: mean(R) of this step (phase 2 -> 3) */
    size_t n_rc, n_v;
    float *rc, *v, *m;                     /* state (MT_MEM_OPTIM); m NULL without momentum */
    float *col_factor;                     /* scratch: 1/sqrt(C) of one matrix (MT_MEM_SCRATCH) */
    double *red;                           /* scratch: sums then sq for mt_adafactor_update (MT_MEM_SCRATCH) */
    size_t state_bytes, cf_len, red_len;
    size_t n_m;                            /* floats of m (0 without momentum) */
    int owns_storage;                      /* 0: rc, v, m point into storage attached by the caller (offload) */
} mt_adafactor;

void mt_adafactor_init(mt_adafactor *s, const mt_adafactor_hparams *h, const mt_unit_layout *unit, size_t begin,
                       size_t end, mt_mem *mem);
void mt_adafactor_free(mt_adafactor *s, mt_mem *mem);
/* Bytes of optimizer state (the MT_MEM_OPTIM part). */
size_t mt_adafactor_state_bytes(const mt_adafactor *s);

size_t mt_adafactor_sums_len(const mt_adafactor *s); /* doubles in phase 1's buffer */
size_t mt_adafactor_sq_len(const mt_adafactor *s);   /* doubles in phase 2's buffer */

/* Phases (see above; their loops are the op_adafactor_* kernels of
 * ops/ops.h); g, p point at element begin. */
void mt_adafactor_row_col_sums(mt_backend *be, const mt_adafactor *s, const mt_adafactor_hparams *h,
                               const mt_unit_layout *unit, const float *g, float grad_scale, double *sums);
void mt_adafactor_second_moment(mt_backend *be, mt_adafactor *s, const mt_adafactor_hparams *h,
                                const mt_unit_layout *unit, const float *p, const float *g, float grad_scale,
                                int64_t step, const double *sums, double *sq);
void mt_adafactor_apply(mt_backend *be, mt_adafactor *s, const mt_adafactor_hparams *h, const mt_unit_layout *unit,
                        float *p, const float *g, float grad_scale, float lr, const double *sq);

/* The three phases with allreduce_sum between them (NULL: no sharding). */
void mt_adafactor_update(mt_backend *be, mt_adafactor *s, const mt_adafactor_hparams *h, const mt_unit_layout *unit,
                         float *p, const float *g, float lr, int64_t step, float grad_scale,
                         mt_allreduce_sum_fn allreduce_sum, void *ctx);

/* Checkpoint streams, k = 0 ("m") or 1 ("v"), as described above. */
void mt_adafactor_get_state(mt_backend *be, const mt_adafactor *s, const mt_unit_layout *unit, int k, float *dst);
void mt_adafactor_set_state(mt_backend *be, mt_adafactor *s, const mt_unit_layout *unit, int k, const float *full);

#endif
