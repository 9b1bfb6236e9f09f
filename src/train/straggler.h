/* The straggler report: every rank's step time and its time waiting in
 * communication (compute = step - wait), brought to every rank by the step
 * boundary's all-reduce; rank 0 writes them into the {metrics} line and warns
 * about a rank whose compute time stays above the median of its peers.
 *
 * Rule of the warning: a rank is slow in a step when its compute time is
 * more than MT_STRAGGLER_RATIO times the median of its comparison group and
 * more than MT_STRAGGLER_MIN_MS above it. The group is the ranks of its
 * pipeline stage (they hold the same units: dp replicas and tp slices), or
 * every rank when each stage has one rank; the median of an even count is
 * the lower middle value. After MT_STRAGGLER_STEPS slow steps in a row one
 * line names the rank, its host and the numbers; the same rank is named
 * again at the earliest MT_STRAGGLER_REPEAT steps later (if still slow). */
#ifndef MT_TRAIN_STRAGGLER_H
#define MT_TRAIN_STRAGGLER_H
#include <stddef.h>
#include <stdint.h>
#include "comm/comm.h"
#include "parallel/mesh.h"

#define MT_STRAGGLER_RATIO 1.2
#define MT_STRAGGLER_MIN_MS 5.0
#define MT_STRAGGLER_STEPS 5
#define MT_STRAGGLER_REPEAT 100
#define MT_STRAGGLER_ARRAY_MAX 64 /* per-rank arrays in {metrics} up to this world size; a summary beyond */
#define MT_STRAGGLER_HOST_LEN 64

typedef struct {
    int n, rank;                         /* world size (1: the report is off), this rank */
    double *vec;                         /* [3 + 2n] the step boundary's all-reduce */
    double *step_ms, *wait_ms;           /* [n] every rank's last step (views into vec) */
    double *compute_ms, *scratch;        /* [n] */
    char (*host)[MT_STRAGGLER_HOST_LEN]; /* [n] */
    int *group, *group_size;             /* [n] each rank's comparison group and its size */
    int *streak;                         /* [n] slow steps in a row */
    int64_t *warned_at;                  /* [n] the step of the last warning naming the rank; -1: none */
    char *text;                          /* the {metrics} fields */
    size_t text_cap;
} mt_straggler;

#define MT_STRAGGLER_FLAGS 4

/* Collective over world (gathers the host names). */
void mt_straggler_init(mt_straggler *s, mt_comm *world, const mt_mesh_shape *shape);
void mt_straggler_free(mt_straggler *s);
/* The step boundary (collective over world): sums flags[0..MT_STRAGGLER_FLAGS)
 * over the ranks and brings every rank's step and wait times (ms) to every
 * rank, in one all-reduce of MT_STRAGGLER_FLAGS + 2n doubles (each rank fills its own two slots, the
 * others are 0, so the sums are the values exactly). */
void mt_straggler_boundary(mt_straggler *s, mt_comm *world, int64_t flags[MT_STRAGGLER_FLAGS], double step_ms, double wait_ms);
/* The {metrics} fields of the last step, starting with a comma ("" when
 * n == 1): "rank_step_ms":[...],"rank_wait_ms":[...] up to
 * MT_STRAGGLER_ARRAY_MAX ranks, else "rank_compute_ms_stats" and
 * "rank_wait_ms_stats" objects {min, median, max, max_rank}. */
const char *mt_straggler_metrics(mt_straggler *s);
/* Counts the last step (completed step `step`) into the streaks; returns 1
 * and the warning line in msg when one is due. */
int mt_straggler_check(mt_straggler *s, int64_t step, char *msg, size_t cap);

#endif
