/* A rank's optimizer state: one table entry (optim/optimizer.h) and, per
 * unit, the state of the rank's range [begin, end) of it -- in memory (the
 * entry's own encoding), or, with disk offload, as the entry's fp32 streams
 * in one file (optim/offload.h) streamed through the update a chunk at a
 * time. The caller (the trainer) sees streams by index and name and fp32
 * views of them; it never names a particular optimizer or storage.
 *
 * Offload wraps every entry. The elementwise ones (AdamW, Adam, SGD) are
 * streamed a chunk at a time by the I/O thread (their update of a chunk
 * equals the same elements of the whole-range update); with
 * `offload_master` the fp32 master weights are one more stream of the file
 * (mixed precision: ZeRO-Infinity keeps them with the moments):
 * mt_opt_states_put_master writes them once, a step's target then has p ==
 * NULL and the update uses the streamed master. The entries with their own
 * encoding (Adafactor's whole-tensor statistics, 8-bit AdamW's blocks) are
 * paged a unit at a time: the unit's state storage is read into one
 * resident buffer (the largest unit's), stepped, and written back,
 * synchronously; their master stays in memory.
 * master. */
#ifndef MT_OPTIM_OPT_STATE_H
#define MT_OPTIM_OPT_STATE_H
#include <stddef.h>
#include "core/error.h"
#include "core/mem.h"
#include "nn/unit.h"
#include "optim/offload.h"
#include "optim/optimizer.h"

/* Stream index of the offloaded fp32 master (mt_opt_states_get / _set). */
#define MT_OPT_STREAM_MASTER (-1)

typedef struct {
    const char *dir;       /* NULL: state in memory */
    int rank;              /* names the file */
    size_t buffer_bytes;   /* resident budget of the streamed state */
    int with_master;       /* the fp32 master is a stream of the file */
} mt_opt_offload_cfg;

typedef struct {
    const mt_optimizer *entry;
    mt_opt_config cfg;
    int n_units;
    const mt_unit_layout *units;  /* borrowed, [n_units] */
    size_t *begin, *end, *len;    /* [n_units]: the rank's range and stream length (0: unit not held) */
    mt_opt_state **state;         /* [n_units]: in memory (NULL: not held, or offloaded) */
    mt_offload *offload;          /* NULL: in memory */
    int master;                   /* offload stream of the fp32 master, or -1 */
    int paged;                    /* offloaded a unit at a time (an entry with its own encoding) */
    size_t *words;                /* paged: floats of each unit's storage in the file */
    void *resident;               /* paged: the buffer the unit in use is attached to */
    size_t resident_bytes;
    mt_mem *mem;
    /* the device the in-memory state lives on (set by the owner after init; NULL or the CPU's: host
     * memory): on a device, mt_opt_states_get/set copy the fp32 streams through the host */
    mt_backend *be;
} mt_opt_states;

/* Per unit u: [begin[u], end[u]) and its stream length len[u] (>= the
 * range; 0 for a unit this rank does not hold). Rank-local; on failure
 * (offload file, an entry that cannot be offloaded) returns -1 with the
 * message and leaves nothing to free but mt_opt_states_free. */
int mt_opt_states_init(mt_opt_states *o, const mt_opt_config *c, const mt_unit_layout *units, int n_units,
                       const size_t *begin, const size_t *end, const size_t *len, const mt_opt_offload_cfg *off,
                       mt_mem *mem, mt_error *err);
void mt_opt_states_free(mt_opt_states *o);

int mt_opt_states_count(const mt_opt_states *o);
const char *mt_opt_states_name(const mt_opt_states *o, int k);

/* The target of unit u for this step (the caller's parameter and gradient views). */
typedef void (*mt_opt_target_fn)(void *ctx, int u, mt_opt_target *tg);

/* One step of every held unit, in unit order; t is 1-based. An offload I/O
 * failure returns -1 with the message (make it collective). */
int mt_opt_states_step(mt_opt_states *o, mt_opt_target_fn target, void *ctx, float lr, int64_t t, float grad_scale,
                       mt_error *err);

/* Stream k (or MT_OPT_STREAM_MASTER) of unit u as fp32: len[u] floats,
 * zero past the range. Returns the in-memory stream itself when it is
 * fp32, else fills and returns buf (len[u] floats). */
const float *mt_opt_states_get(mt_opt_states *o, int u, int k, float *buf, mt_error *err);
/* Sets stream k (or MT_OPT_STREAM_MASTER) of unit u from the unit's full
 * fp32 stream (numel floats, indexed by unit element). */
int mt_opt_states_set(mt_opt_states *o, int u, int k, const float *full, mt_error *err);
/* Offload with master: writes unit u's master (range floats at src) into the file. */
int mt_opt_states_put_master(mt_opt_states *o, int u, const float *src, mt_error *err);
/* 1 when the fp32 master is a stream of the offload file. */
int mt_opt_states_has_master(const mt_opt_states *o);

#endif
