/* Pipeline schedules as data, and a checker that simulates them.
 *
 * A schedule says, for each of the p ranks of one pipeline group, the ordered
 * list of actions that rank runs in one optimizer step over m microbatches.
 * The executor (in the trainer) is a small interpreter: it runs the actions
 * strictly in order, SENDs non-blocking (isend; the request is completed
 * later, at the latest at the end of the step), RECVs blocking. Ranks here
 * are indices in the pipeline group (0..p-1), not world ranks.
 *
 * Model chunks and virtual stages. The model's layers are cut into S = p*v
 * consecutive virtual stages. Rank r holds v chunks; its local chunk c is
 * virtual stage s = c*p + r (v = 1 except for the interleaved schedule).
 * Virtual stage 0 reads the data loader's microbatch; stage S-1 computes the
 * loss. Activations flow from stage s to s+1 (rank r -> (r+1) % p),
 * gradients from s+1 back to s.
 *
 * Actions.
 *   FORWARD(mb, c)   run chunk c on microbatch mb. Input: the loader (s = 0),
 *                    else the tensor of the preceding RECV_ACT(mb, c) (with
 *                    p = 1 and v > 1: the output of the local FORWARD(mb, c-1)).
 *                    Keep what backward needs; at s = S-1 compute the loss.
 *   BACKWARD(mb, c)  backward of chunk c on mb (its FORWARD came earlier on this
 *                    rank). Incoming gradient: the loss (s = S-1), else the
 *                    tensor of the preceding RECV_GRAD(mb, c) (p = 1: the input
 *                    gradient of the local BACKWARD(mb, c+1)).
 *   SEND_ACT(mb, c)  isend the output of FORWARD(mb, c) to `peer` (holder of s+1).
 *   RECV_ACT(mb, c)  blocking receive of FORWARD(mb, c)'s input from `peer`.
 *   SEND_GRAD(mb, c) isend the input gradient of BACKWARD(mb, c) to `peer`
 *                    (holder of s-1).
 *   RECV_GRAD(mb, c) blocking receive of BACKWARD(mb, c)'s output gradient.
 * `chunk` is always the LOCAL chunk of the compute action the message belongs
 * to on THIS rank (the sender's producing chunk, the receiver's consuming
 * chunk), so it names the executor's buffer directly. `tag` is the MPI tag:
 * equal on both sides of a message and unique among the messages of a step
 * (tag = 2*(mb*(S-1) + e) + dir for the boundary between stages e and e+1,
 * dir 0 = activation, 1 = gradient; max_tag <= MT_PP_MAX_TAG = 32767, the
 * range MPI guarantees and mt_comm accepts).
 *
 * Ordering rules (what makes the interpreter deadlock-free and simple):
 *   1. Every RECV stands immediately before the compute action that consumes
 *      it, every SEND immediately after the compute action that produced it.
 *      So a rank blocks only when the data it needs next is really missing,
 *      and a message is posted as soon as its data exists.
 *   2. The compute order of rank r (F = forward, B = backward):
 *      gpipe       F0..F(m-1), then B0..B(m-1).
 *      1f1b        PipeDream-flush: W = min(p-r-1, m) warm-up forwards, then
 *                  m-W pairs (F(W+i), B(i)), then the W remaining backwards.
 *      interleaved (Megatron-LM's interleaved 1F1B, v > 1) the m*v
 *                  chunk-forwards in groups of p microbatches: chunk 0 of mbs
 *                  0..p-1, chunk 1 of the same mbs, ..., chunk v-1, then the
 *                  next p mbs; backwards in the same order with the chunks
 *                  reversed (v-1 first). Warm-up W = min(2(p-r-1) + (v-1)p,
 *                  m*v) forwards, then pairs (F(W+i), B(i)), then the rest.
 *                  With v = 1 it is exactly 1f1b (Megatron also uses its
 *                  non-interleaved schedule then).
 *      With p = 1 (and v = 1) every kind is F0 B0 F1 B1 ... with no messages:
 *      one stage has no pipeline to fill, and GPipe's forwards-first order
 *      would only hold m microbatches of activations instead of one.
 *   3. Backwards of each chunk run in ascending microbatch order in every
 *      schedule, so gradients accumulate in the single-process order.
 *   4. Buffers: the tensor of a SEND must stay untouched until its request
 *      completes; the activation memory a rank needs is peak_inflight
 *      chunk-microbatches (below). Large isends move only while the sender
 *      is inside MPI (rendezvous), so test outstanding sends between
 *      actions (mt_comm_test) or the receiver waits for the sender's next
 *      RECV; this delays, it never deadlocks.
 * mt_pp_check proves deadlock freedom and matching for a given (p, m, v) by
 * simulating exactly these semantics.
 *
 * Why interleaved needs m to be a multiple of p (checked, as in Megatron):
 * the forward of microbatch i on chunk c+1 of rank 0 needs the output of
 * chunk c on rank p-1, which the grouping delivers exactly p forwards later,
 * just in time. With a short last group the warm-up count no longer matches
 * that distance: in a prototype of this simulator, the naive generalisation
 * (a last group of m mod p) deadlocked in 103 of the 342 cases p = 2..8,
 * m = 1..32 not a multiple of p, v = 2, 4, and in every other case its
 * bubble exceeded (p-1)/(v*m+p-1). So the restriction is not needed for a
 * correct schedule in principle, but for this one and for its bubble.
 * Megatron's extra p-r-1 warm-up forwards (2(p-r-1) where a plain
 * 1F1B would use p-r-1) do not change the bubble when messages are free
 * (prototype: identical makespans on every case above), but they hide
 * message latency: with a latency of 0.2 per message (f = 1, b = 2),
 * p = 8, m = 32, v = 4 takes 113.65 instead of 149.65 time units, for
 * 7 more chunk-microbatches of activation memory on rank 0.
 *
 * Checker (mt_pp_check). Simulates every rank with a cost model: a forward of
 * one chunk of one microbatch costs fwd_cost/v, a backward bwd_cost/v, a
 * message arrives `latency` after its SEND (0 in the tests). All ranks start
 * at time 0; actions run in order; a RECV waits for its message. It reports
 * the first violation of: each action well formed (microbatch, chunk, peer
 * and tag consistent with the virtual stages); a compute runs only when its
 * input exists (received, local, or from the loader / loss); a SEND only after
 * the compute that produced its data; no message sent or received twice;
 * every message received (no SEND without its RECV); no deadlock (ranks left
 * that all wait in RECVs; the report names what each waits for and whether
 * the peer ever sends it); every (microbatch, virtual stage) forward and
 * backward executed exactly once, each backward after its forward.
 *
 * Bubble. makespan T = the time the last action of any rank ends.
 * busy_r = the total compute time of rank r; idle_r = T - busy_r (the fill
 * before its first input, waits in between, the drain at the end).
 * bubble fraction = (1/p) * sum_r idle_r / T. Every rank does m*(f+b) of work,
 * and with free messages T = (m+p-1)(f+b) for gpipe and 1f1b and
 * (v*m+p-1)(f+b)/v for interleaved, so the bubble is exactly (p-1)/(m+p-1)
 * resp. (p-1)/(v*m+p-1) for ANY per-stage costs f, b that are the same for
 * every stage and microbatch, with zero message latency (tested for f = b = 1
 * and f = 1, b = 2 on p = 1..8, m = 1..32, v = 1, 2, 4). Latency or unequal
 * stages make it larger. (Megatron's paper divides idle by the ideal time
 * m(f+b) instead of by T, giving (p-1)/m.)
 *
 * Peak in-flight (activation memory): the maximum over time of the number of
 * chunk-microbatches whose forward has run on the rank and whose backward has
 * not, in units of one chunk-microbatch's activations (1/v of a stage's). It
 * equals min(W_r + 1, m*v) for every kind: gpipe m, 1f1b min(p-r, m). */
#ifndef MT_PARALLEL_PIPELINE_SCHEDULE_H
#define MT_PARALLEL_PIPELINE_SCHEDULE_H
#include <stdio.h>
#include "core/error.h"

typedef enum { MT_PP_GPIPE = 0, MT_PP_1F1B, MT_PP_INTERLEAVED, MT_PP_NKIND } mt_pp_kind;

typedef enum {
    MT_PP_FORWARD = 0,
    MT_PP_BACKWARD,
    MT_PP_SEND_ACT,
    MT_PP_RECV_ACT,
    MT_PP_SEND_GRAD,
    MT_PP_RECV_GRAD,
    MT_PP_NOPS /* number of ops, not an op */
} mt_pp_op;

typedef struct {
    mt_pp_op op;
    int microbatch;
    int chunk; /* local chunk on this rank (virtual stage chunk*p + rank) */
    int peer;  /* messages: the other rank; compute: -1 */
    int tag;   /* messages: MPI tag (see above); compute: -1 */
} mt_pp_action;

/* Limits that keep every index and tag inside an int. */
#define MT_PP_MAX_STAGES 4096
#define MT_PP_MAX_CHUNKS 64
#define MT_PP_MAX_MICROBATCHES (1 << 20)
#define MT_PP_MAX_TAG 32767

typedef struct {
    mt_pp_kind kind;
    int stages;       /* p */
    int microbatches; /* m */
    int chunks;       /* v: model chunks per rank (1 unless interleaved) */
    int max_tag;      /* largest tag used (-1 without messages) */
    int *count;       /* count[r]: number of actions of rank r */
    mt_pp_action **actions; /* actions[r][0..count[r]) */
} mt_pp_schedule;

const char *mt_pp_kind_name(mt_pp_kind k); /* "gpipe", "1f1b", "interleaved" */
/* Parses a kind name; -1 with err listing the valid names otherwise. */
int mt_pp_kind_parse(const char *name, mt_pp_kind *out, mt_error *err);
const char *mt_pp_op_name(mt_pp_op op); /* "FORWARD", ..., "RECV_GRAD" */

/* Builds the schedule (allocated here, nothing later). chunks must be 1 for
 * gpipe and 1f1b; interleaved needs microbatches % stages == 0; the tags must
 * fit MT_PP_MAX_TAG (2*m*(p*v-1) <= 32768). Returns -1
 * with err on bad arguments (saying what to change). */
int mt_pp_schedule_build(mt_pp_kind kind, int stages, int microbatches, int chunks,
                         mt_pp_schedule *out, mt_error *err);
void mt_pp_schedule_free(mt_pp_schedule *s);

/* Virtual stage of a rank's local chunk, and its ends. */
static inline int mt_pp_virtual_stage(const mt_pp_schedule *s, int rank, int chunk) {
    return chunk * s->stages + rank;
}
static inline int mt_pp_is_first_stage(const mt_pp_schedule *s, int rank, int chunk) {
    return mt_pp_virtual_stage(s, rank, chunk) == 0;
}
static inline int mt_pp_is_last_stage(const mt_pp_schedule *s, int rank, int chunk) {
    return mt_pp_virtual_stage(s, rank, chunk) == s->stages * s->chunks - 1;
}
/* Number of warm-up forwards W of rank r (compute order rule 2 above). */
int mt_pp_warmup_forwards(const mt_pp_schedule *s, int rank);
/* Closed-form bubble fraction: (p-1)/(m+p-1), or (p-1)/(v*m+p-1) for
 * interleaved (the same with v = 1). */
double mt_pp_bubble_closed_form(const mt_pp_schedule *s);

/* "F3" / "B3" (with ".c" when v > 1), "sendA3>1", "recvA3<0", "sendG3>0",
 * "recvG3<2": like snprintf (returns the length it needed). */
int mt_pp_action_format(const mt_pp_schedule *s, const mt_pp_action *a, char *buf, size_t cap);
/* Prints "rank r (N actions): a0 a1 ..." on one line. */
void mt_pp_schedule_print_rank(const mt_pp_schedule *s, int rank, FILE *f);

/* Result of a simulation; free with mt_pp_sim_free. */
typedef struct {
    int stages;
    double makespan;    /* T */
    double bubble;      /* mean over ranks of idle/T (see above) */
    double *busy;       /* [p] compute time per rank */
    double *idle;       /* [p] T - busy */
    int *peak_inflight; /* [p] chunk-microbatches */
    /* Per action: when it started and ended (RECV: start = when reached,
     * end = when its message was there). -1 for actions never reached. */
    double **start, **end; /* [p][count[r]] */
} mt_pp_sim;

/* Simulates s (costs per stage-microbatch, see above; fwd_cost, bwd_cost > 0,
 * latency >= 0) and checks every rule above. Returns 0 if the schedule is
 * valid, -1 with err naming the first violation (rank, action index, what).
 * `out` is filled in both cases (as far as the simulation got) and must be
 * freed with mt_pp_sim_free. */
int mt_pp_check(const mt_pp_schedule *s, double fwd_cost, double bwd_cost, double latency,
                mt_pp_sim *out, mt_error *err);
void mt_pp_sim_free(mt_pp_sim *sim);

#endif
