/* Ring attention over a context-parallel group (issue 33): each of the N
 * ranks holds 2 of the 2N chunks of every sample's sequence, chunk r and
 * chunk 2N-1-r (causal load balancing: every rank then has the same share
 * of the causal triangle). Its local rows are [chunk r | chunk 2N-1-r] per
 * sample: qkv [B][2c][(NH + 2 NKV) HS], out [B][2c][NH HS], lse [B][NH][2c].
 *
 * Forward: the rank's K|V travels the ring (to rank+1, from rank-1) while
 * the rank's queries meet the K|V it holds (ops' block step, merged by the
 * log-sum-exp); after N steps every query has met every key. Backward: K|V
 * travels again with its dK|dV, each rank adding its queries' part; one
 * last shift brings each rank's dK|dV home. The next K|V's transfer is
 * started before the block compute and waited for after it (overlap); in
 * backward the dK|dV of the step's first K|V chunk leaves as soon as both
 * query chunks met it, while the second chunk is computed.
 *
 * N = 1 is one rank holding chunks 0 and 1: no message, the same blocks.
 * With a probe (mt_cp.probe, {profile}) each pass also measures how much of
 * its communication the block compute hid (mt_ring_probe below). */
#ifndef MT_MODELS_RING_ATTENTION_H
#define MT_MODELS_RING_ATTENTION_H
#include <stddef.h>
#include "comm/comm.h"
#include "core/error.h"
#include "core/profile.h"
#include "ops/ops.h"

/* How attention sees the whole sequence ({cp-mode}): ring (this file), or
 * all-to-all (DeepSpeed Ulysses: sequence-sharded to head-sharded and back). */
typedef enum { MT_CP_RING = 0, MT_CP_ALLTOALL } mt_cp_mode;
int mt_cp_mode_parse(const char *s, mt_cp_mode *out, mt_error *err);
const char *mt_cp_mode_name(mt_cp_mode m); /* "ring" | "alltoall" */

/* Measuring the ring ({profile}; the numbers: mt_prof_ring). Each pass
 * times every ring step's communication calls and its messages' time in
 * flight; after the pass, its results copied out, the same messages go round
 * again alone on `comm` (a barrier first, so a late peer is not counted as
 * communication), blocking, into buffers the pass no longer needs: the
 * fastest of MT_RING_PROBE_REPEATS such exchanges is the ring step's
 * communication time. Results stay bitwise the same; the probe's messages
 * are counted on its own group, not on the cp group. */
#define MT_RING_PROBE_REPEATS 3
typedef struct {
    mt_comm *comm;                /* a duplicate of the cp group, for the probe */
    mt_profile *prof;             /* where the numbers go (its current step) */
    double *wait_s, *in_flight_s; /* per ring step of one pass: the cp size entries each */
} mt_ring_probe;

typedef struct {
    mt_comm *comm; /* the cp group (NULL: one rank) */
    int size, rank;
    mt_cp_mode mode;
    mt_ring_probe *probe; /* NULL: the ring is not measured */
} mt_cp;

/* Context parallelism of a model: the cp size (1 without one), and the
 * global chunk (0 .. 2 size - 1) that local chunk a (0 or 1) of each
 * sample's 2 c local rows holds. */
static inline int mt_cp_size(const mt_cp *cp) { return cp && cp->comm ? cp->size : 1; }
static inline int mt_cp_chunk(const mt_cp *cp, int a) {
    int n = mt_cp_size(cp), r = n > 1 ? cp->rank : 0;
    return a == 0 ? r : 2 * n - 1 - r;
}

/* Every op runs on be. Floats of scratch for B samples of 2c local rows. */
size_t mt_ring_attention_scratch_floats(mt_backend *be, int B, int c, int NH, int NKV, int HS);
void mt_ring_attention_forward(mt_backend *be, const mt_cp *cp, float *out, float *lse, const float *qkv, int B, int c,
                               int NH, int NKV, int HS, const mt_attn_dropout *drop, float *scratch);
/* dqkv (the local rows' layout) is overwritten. */
void mt_ring_attention_backward(mt_backend *be, const mt_cp *cp, float *dqkv, const float *dout, const float *qkv, const float *out,
                                const float *lse, int B, int c, int NH, int NKV, int HS, const mt_attn_dropout *drop,
                                float *scratch);

#endif
