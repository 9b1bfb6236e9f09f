/* ZeRO's internals, shared by its parts: zero.c (the stages, the unit hooks,
 * the stage-3 gather sequence, the owned ranges the optimizer updates),
 * zero_mixed.c (16-bit parameters and gradients, the fp32 master),
 * zero_buckets.c (stage 0's flat gradient buckets), zero_ckpt.c (whole
 * units for checkpoints) and ZeRO++'s zero_hpz.c, zero_qwz.c, zero_qgz.c
 * (zero.h: enabling them). Nothing outside src/parallel/zero*.c includes
 * this. */
#ifndef MT_PARALLEL_ZERO_IMPL_H
#define MT_PARALLEL_ZERO_IMPL_H
#include "parallel/zero.h"

/* State unit k's padded length: its group's size times its shard. */
static inline size_t padded(const mt_zero *z, int k) { return (size_t)z->kn[k] * z->S[k]; }

/* Unit u's full (padded) length: its last state unit's padded end. */
static inline size_t unit_padded(const mt_zero *z, int u) {
    int k = z->first[u + 1] - 1;
    return z->off[k] + padded(z, k);
}

static inline int mixed(const mt_zero *z) { return z->mp.dt16 != MT_FP32; }

/* The owned range [b, e) of state unit k, in its unit's elements (empty on
 * ranks past a short part's end). */
static inline void owned_range(const mt_zero *z, int k, size_t *b, size_t *e) {
    size_t lo = z->off[k] + (size_t)z->kr[k] * z->S[k], end = z->off[k] + z->numel[k];
    size_t hi = lo + z->S[k] < end ? lo + z->S[k] : end;
    *b = lo;
    *e = hi > lo ? hi : lo;
}

/* Mixed precision: elements of unit u's 16-bit parameters (stages 0-2 the
 * full padded unit, stage 3 the shard) and gradient (stages 0-1 full, 2-3
 * the shard). */
static inline size_t p16_len(const mt_zero *z, int u) { return z->stage == 3 ? z->S[u] : padded(z, u); }
static inline size_t g16_len(const mt_zero *z, int u) { return z->stage >= 2 ? z->S[u] : padded(z, u); }

/* Where unit u's owned master elements start in its 16-bit parameters. */
static inline size_t own16(const mt_zero *z, int u) { return z->stage == 3 ? 0 : (size_t)z->r * z->S[u]; }

/* The gradient the optimizer reads under fp32: the owned shard (stages 2-3)
 * or the full gradient (stages 0-1). */
static inline float *grad_shard(const mt_zero *z, int u) { return z->stage >= 2 ? z->gshard[u] : z->full_g[u]; }

/* The maximal runs [b, e) of [0, end) outside the tensors of ul with
 * flag(t) set, in order:
 *   for (run_cursor c = {0, 0}; next_run(ul, end, flag, &c, &b, &e);) ... */
typedef struct {
    int i;       /* the next tensor to look at */
    size_t next; /* where the next run starts: the end of the last flagged tensor */
} run_cursor;

static inline int next_run(const mt_unit_layout *ul, size_t end, int (*flag)(const mt_tensor *), run_cursor *c,
                           size_t *b, size_t *e) {
    while (c->i <= ul->n_tensors) {
        const mt_tensor *t = c->i < ul->n_tensors ? &ul->t[c->i] : NULL;
        c->i++;
        if (t && !flag(t)) continue;
        *b = c->next;
        *e = t ? t->offset : end;
        c->next = t ? t->offset + t->numel : end;
        if (*e > *b) return 1;
    }
    return 0;
}

/* zero.c: points the model at unit u's fp32 parameters in buf (and, under
 * mixed precision, its 16-bit weights in w16). */
void mt_zero_bind_params(mt_zero *z, mt_model *m, int u, float *buf, uint16_t *w16);

/* zero_mixed.c */
void mt_zero_init_mixed(mt_zero *z, mt_model *m);
void mt_zero_free_mixed(mt_zero *z, mt_model *m);
void mt_zero_widen_unit(const mt_zero *z, const mt_model *m, int u, float *buf, const uint16_t *src);
void mt_zero_widen_for_unit(mt_zero *z, mt_model *m, int u);
/* The reduced gradient in unit v's slot (fp32; with bf16 reduction also in
 * mp.gslot16[v]) into its 16-bit gradient. */
void mt_zero_drain_mixed(mt_zero *z, int v, float *slot);
void mt_zero_post_backward_mixed(mt_zero *z, mt_model *m, int unit, int last);

/* zero_buckets.c */
void mt_zero_build_buckets(mt_zero *z, mt_model *m, size_t bytes);
/* The last microbatch, unit's backward ended: starts the all-reduce of every
 * message that lies at or above unit's offset (their units are done). */
void mt_zero_start_bucket(mt_zero *z, int unit);
/* Waits for every started message (timed as exposed communication); with
 * rewind, the step's messages are done and the next step starts at message 0. */
void mt_zero_wait_buckets(mt_zero *z, int rewind);
/* Tests the started messages (progress). */
void mt_zero_test_buckets(mt_zero *z);
void mt_zero_free_buckets(mt_zero *z);

/* zero_hpz.c, for zero.c's gather sequence: after a forward gather of unit u
 * landed in pool (its padded parameters, 16-bit under mixed precision), keep
 * the secondary part; and start unit u's backward gather into pool from it. */
void mt_zero_hpz_keep(mt_zero *z, int u, const void *pool);
void mt_zero_hpz_start_gather(mt_zero *z, int u, void *pool, mt_comm_req *req);
void mt_zero_hpz_free(mt_zero *z);

/* zero_qwz.c: a quantized gather of unit u's shard into gather slot slot,
 * and its records dequantized into pool once it arrived. */
void mt_zero_qwz_start_gather(mt_zero *z, int u, int slot, mt_comm_req *req);
void mt_zero_qwz_finish_gather(mt_zero *z, int u, int slot, void *pool);
void mt_zero_qwz_free(mt_zero *z);

/* zero_qgz.c: slot holds the unit's padded fp32 gradient; on return slot[0, S)
 * holds this rank's reduced shard. */
void mt_zero_qgz_reduce_scatter(mt_zero *z, int u, float *slot);
void mt_zero_qgz_free(mt_zero *z);

#endif
