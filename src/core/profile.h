/* Per-step time by category (`{profile}`). The model times its kernels
 * (GEMM, attention, ...), the trainer its optimizer, collectives and waits;
 * each adds seconds to the current step's row. At the end of a step the
 * trainer closes the row: what no category claimed is "other". A profile
 * also counts the FLOPs of the GEMMs it timed, for the achieved GFLOP/s.
 *
 * Off costs nothing: every function accepts a NULL profile and does nothing
 * (mt_prof_begin then returns 0 without reading the clock). No allocation:
 * a profile is a plain struct the caller owns. Single-threaded use (the
 * timed regions are whole ops, each opening its own parallel region). */
#ifndef MT_CORE_PROFILE_H
#define MT_CORE_PROFILE_H
#include <stdio.h>
#include "core/clock.h"
#include "core/error.h"

typedef enum {
    MT_PROF_GEMM = 0,        /* linear layers (forward, dinp, dW, dbias); the tied head included */
    MT_PROF_ATTENTION,       /* attention core, forward and backward (its own small GEMMs included) */
    MT_PROF_LAYERNORM,       /* layernorm, incl. the fused residual-add + layernorm */
    MT_PROF_GELU,            /* GELU forward/backward */
    MT_PROF_SOFTMAX_XENT,    /* softmax + cross-entropy over the vocabulary */
    MT_PROF_ELEMENTWISE,     /* embeddings, residual adds, dropout, copies */
    MT_PROF_OPTIMIZER,       /* optimizer update, gradient norm, zeroing */
    MT_PROF_ALLREDUCE,       /* time inside each collective (blocking, or starting a non-blocking one) */
    MT_PROF_REDUCE_SCATTER,
    MT_PROF_ALLGATHER,
    MT_PROF_BROADCAST,
    MT_PROF_SENDRECV,
    MT_PROF_ALLTOALL,        /* expert parallelism's token exchanges (counts and rows), blocking */
    MT_PROF_WAIT,            /* waiting for non-blocking collectives or peers: exposed communication */
    MT_PROF_OTHER,           /* the step's time no category claimed (set by mt_profile_end_step) */
    MT_PROF_NCAT
} mt_prof_cat;

/* The ring of context parallelism (models/ring_attention.c) as measured
 * under {profile}, in seconds summed over its ring steps (one step: the
 * messages of one shift of K|V and dK|dV, started before a block compute
 * and waited for after it):
 *   wait      time in the step's communication calls (posting and waiting):
 *             the exposed wait
 *   in_flight first message posted to the last wait's return, as the wait saw
 *             it; compute = in_flight - wait, the block compute it overlapped
 *   comm      the same messages exchanged again alone, blocking, right after
 *             the pass (the probe: the fastest of a few exchanges, each
 *             started together after a barrier): what the communication
 *             costs when nothing hides it
 *   hidden    per step clamp(comm - wait, 0, compute): the part of comm the
 *             compute absorbed; exposed = comm - hidden, so hidden + exposed
 *             = comm and 0 <= hidden <= comm. Waiting beyond comm (a late
 *             peer) is in wait, not in exposed.
 *   probe     the probe's own time (its barriers included); it is taken out
 *             of the attention category, so it lands in "other"
 *   steps     ring steps measured */
typedef struct {
    double comm, hidden, exposed, wait, compute, in_flight, probe, steps;
} mt_prof_ring;

typedef struct {
    double sec[MT_PROF_NCAT];   /* current step */
    double gemm_flops;          /* current step */
    double step_s;              /* last closed step: wall time */
    double last[MT_PROF_NCAT];  /* last closed step, by category */
    double last_gemm_flops;
    double total[MT_PROF_NCAT]; /* sums over closed steps */
    double total_gemm_flops;
    double total_step_s;
    long steps;                 /* closed steps */
    long step_id;               /* id of the last closed step (as the trainer numbers them) */
    mt_prof_ring ring, last_ring, total_ring; /* current step, last closed step, sums (steps == 0: no ring) */
} mt_profile;

void mt_profile_init(mt_profile *p);
const char *mt_prof_cat_name(mt_prof_cat c); /* "gemm", "attention", ... (JSON keys) */

/* t0 = mt_prof_begin(p); ...; mt_prof_end(p, cat, t0); */
static inline double mt_prof_begin(const mt_profile *p) { return p ? mt_clock_s() : 0.0; }
static inline void mt_prof_end(mt_profile *p, mt_prof_cat c, double t0) {
    if (p) p->sec[c] += mt_clock_s() - t0;
}
static inline void mt_prof_add(mt_profile *p, mt_prof_cat c, double seconds) {
    if (p) p->sec[c] += seconds;
}
static inline void mt_prof_add_gemm_flops(mt_profile *p, double flops) {
    if (p) p->gemm_flops += flops;
}

/* Closes the current step (wall time step_s, numbered step_id): "other" =
 * step_s minus the categories (at least 0); the row moves to `last` and into
 * the totals; the current row restarts at zero. */
void mt_profile_end_step(mt_profile *p, long step_id, double step_s);
/* Prints the last closed step as a table: ms and % of the step per
 * category (zero rows omitted) and the GEMMs' achieved GFLOP/s; after it,
 * when the ring was measured, one line of its numbers. */
void mt_profile_print_step(const mt_profile *p, FILE *f);
/* The same table for the mean over all closed steps. */
void mt_profile_print_summary(const mt_profile *p, FILE *f);
/* One JSON object on one line: {"step", "ms", "gemm_gflops", "ms_by_category":
 * {"gemm": ..., ...}} for the last step (summary = 0) or {"steps",
 * "ms_per_step", "gemm_gflops", "ms_by_category"} with per-step means
 * (summary = 1); when the ring was measured also "ring": {"steps",
 * "comm_ms", "hidden_ms", "exposed_ms", "hidden_pct", "wait_ms",
 * "compute_ms", "in_flight_ms", "probe_ms"} (mt_prof_ring, hidden_pct =
 * 100 hidden / comm). Returns -1 with err if writing fails. */
int mt_profile_write_json(const mt_profile *p, FILE *f, int summary, mt_error *err);

/* Adds one ring step (seconds): its wait and in-flight time, and the
 * probe's comm time; derives compute, hidden and exposed (mt_prof_ring). */
void mt_prof_ring_step(mt_profile *p, double wait_s, double in_flight_s, double comm_s);
/* 100 hidden / comm; 0 without ring communication. */
double mt_prof_ring_hidden_pct(const mt_prof_ring *r);

/* Times one call into profile category cat (no-op without a profile). */
#define MT_TIMED(prof, cat, call)                         \
    do {                                                  \
        double t0_ = mt_prof_begin(prof);                 \
        call;                                             \
        mt_prof_end(prof, cat, t0_);                      \
    } while (0)

#endif
