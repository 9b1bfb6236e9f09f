/* Pipeline schedule generators (gpipe, 1f1b, interleaved) and the checker
 * that simulates them; the rules are in pipeline_schedule.h. */
#include "parallel/pipeline_schedule.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[MT_PP_NKIND] = {"gpipe", "1f1b", "interleaved"};
static const char *const op_names[MT_PP_NOPS] = {"FORWARD",  "BACKWARD",  "SEND_ACT",
                                                 "RECV_ACT", "SEND_GRAD", "RECV_GRAD"};

const char *mt_pp_kind_name(mt_pp_kind k) {
    return (unsigned)k < MT_PP_NKIND ? kind_names[k] : "?";
}

int mt_pp_kind_parse(const char *name, mt_pp_kind *out, mt_error *err) {
    for (int k = 0; k < MT_PP_NKIND; k++)
        if (name && !strcmp(name, kind_names[k])) {
            *out = (mt_pp_kind)k;
            return 0;
        }
    return mt_errorf(err, "unknown pipeline schedule '%s' (choose gpipe, 1f1b or interleaved)",
                     name ? name : "(null)");
}

const char *mt_pp_op_name(mt_pp_op op) {
    return (unsigned)op < MT_PP_NOPS ? op_names[op] : "?";
}

/* ---- generator ---- */

int mt_pp_warmup_forwards(const mt_pp_schedule *s, int rank) {
    int p = s->stages, m = s->microbatches, v = s->chunks;
    if (p == 1 && v == 1) return 0; /* F0 B0 F1 B1 ... for every kind */
    if (s->kind == MT_PP_GPIPE) return m;
    if (s->kind == MT_PP_1F1B || v == 1) return p - rank - 1 < m ? p - rank - 1 : m;
    int64_t w = 2 * (int64_t)(p - rank - 1) + (int64_t)(v - 1) * p;
    return w < (int64_t)m * v ? (int)w : m * v;
}

double mt_pp_bubble_closed_form(const mt_pp_schedule *s) {
    double p = s->stages, vm = (double)s->chunks * s->microbatches;
    return (p - 1) / (vm + p - 1);
}

/* The k-th chunk-forward of a rank, in groups of p microbatches per chunk
 * (for v = 1 simply microbatch k). Backward k is the same microbatch with
 * the chunks reversed. */
static void forward_index(const mt_pp_schedule *s, int k, int *mb, int *chunk) {
    int p = s->stages, pv = p * s->chunks;
    *chunk = (k % pv) / p;
    *mb = (k / pv) * p + k % p;
}

static int msg_tag(const mt_pp_schedule *s, int mb, int boundary, int dir) {
    int S = s->stages * s->chunks;
    return 2 * (mb * (S - 1) + boundary) + dir;
}

static mt_pp_action action(mt_pp_op op, int mb, int chunk, int peer, int tag) {
    mt_pp_action a = {op, mb, chunk, peer, tag};
    return a;
}

/* Writes rank r's actions into out (if non-NULL); returns their number. */
static int emit_rank(const mt_pp_schedule *s, int r, mt_pp_action *out) {
    int p = s->stages, v = s->chunks, S = p * v, N = s->microbatches * v;
    int W = mt_pp_warmup_forwards(s, r), next = (r + 1) % p, prev = (r + p - 1) % p, n = 0;
    for (int i = 0; i < 2 * N; i++) {
        int is_bwd, k;
        if (i < W) is_bwd = 0, k = i;
        else if (i < W + 2 * (N - W)) is_bwd = (i - W) & 1, k = is_bwd ? (i - W) / 2 : W + (i - W) / 2;
        else is_bwd = 1, k = N - W + (i - W - 2 * (N - W));
        int mb, c;
        forward_index(s, k, &mb, &c);
        if (is_bwd) c = v - 1 - c;
        int st = c * p + r;
        /* Rule 1: receive right before the compute, send right after. */
        if (!is_bwd) {
            if (p > 1 && st > 0) {
                if (out) out[n] = action(MT_PP_RECV_ACT, mb, c, prev, msg_tag(s, mb, st - 1, 0));
                n++;
            }
            if (out) out[n] = action(MT_PP_FORWARD, mb, c, -1, -1);
            n++;
            if (p > 1 && st < S - 1) {
                if (out) out[n] = action(MT_PP_SEND_ACT, mb, c, next, msg_tag(s, mb, st, 0));
                n++;
            }
        } else {
            if (p > 1 && st < S - 1) {
                if (out) out[n] = action(MT_PP_RECV_GRAD, mb, c, next, msg_tag(s, mb, st, 1));
                n++;
            }
            if (out) out[n] = action(MT_PP_BACKWARD, mb, c, -1, -1);
            n++;
            if (p > 1 && st > 0) {
                if (out) out[n] = action(MT_PP_SEND_GRAD, mb, c, prev, msg_tag(s, mb, st - 1, 1));
                n++;
            }
        }
    }
    return n;
}

int mt_pp_schedule_build(mt_pp_kind kind, int stages, int microbatches, int chunks,
                         mt_pp_schedule *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    if ((unsigned)kind >= MT_PP_NKIND) return mt_errorf(err, "unknown pipeline schedule kind %d", (int)kind);
    if (stages < 1 || stages > MT_PP_MAX_STAGES)
        return mt_errorf(err, "pipeline stages must be in 1..%d, got %d", MT_PP_MAX_STAGES, stages);
    if (microbatches < 1 || microbatches > MT_PP_MAX_MICROBATCHES)
        return mt_errorf(err, "microbatches must be in 1..%d, got %d", MT_PP_MAX_MICROBATCHES,
                         microbatches);
    if (chunks < 1 || chunks > MT_PP_MAX_CHUNKS)
        return mt_errorf(err, "model chunks per rank must be in 1..%d, got %d", MT_PP_MAX_CHUNKS, chunks);
    if (kind != MT_PP_INTERLEAVED && chunks != 1)
        return mt_errorf(err,
                         "%d model chunks per rank need the interleaved schedule; %s uses 1 "
                         "(drop {pp-chunks} or use {pp-schedule} interleaved)",
                         chunks, kind_names[kind]);
    if (kind == MT_PP_INTERLEAVED && microbatches % stages) {
        int lo = microbatches / stages * stages, hi = lo + stages;
        if (lo) return mt_errorf(err,
                                 "the interleaved schedule needs the microbatches (%d) to be a multiple of "
                                 "the pipeline stages (%d): use %d or %d",
                                 microbatches, stages, lo, hi);
        return mt_errorf(err,
                         "the interleaved schedule needs the microbatches (%d) to be a multiple of "
                         "the pipeline stages (%d): use %d",
                         microbatches, stages, hi);
    }
    /* Keeps every tag and action count inside an int with a wide margin. */
    int64_t work = (int64_t)stages * chunks * microbatches;
    if (work > (1 << 22))
        return mt_errorf(err, "stages x chunks x microbatches = %lld exceeds %d; use fewer microbatches",
                         (long long)work, 1 << 22);
    int64_t tags = stages > 1 ? 2 * (int64_t)microbatches * (stages * chunks - 1) : 0;
    if (tags > MT_PP_MAX_TAG + 1)
        return mt_errorf(err,
                         "%d microbatches over %d virtual stages need %lld message tags, more than the %d MPI "
                         "guarantees: use at most %lld microbatches",
                         microbatches, stages * chunks, (long long)tags, MT_PP_MAX_TAG + 1,
                         (long long)((MT_PP_MAX_TAG + 1) / (2 * (stages * chunks - 1))));
    out->kind = kind;
    out->stages = stages;
    out->microbatches = microbatches;
    out->chunks = chunks;
    out->max_tag = stages > 1 ? msg_tag(out, microbatches - 1, stages * chunks - 2, 1) : -1;
    out->count = mt_xmalloc((size_t)stages * sizeof *out->count, "pipeline schedule action counts");
    out->actions = mt_xmalloc((size_t)stages * sizeof *out->actions, "pipeline schedule rank lists");
    size_t total = 0;
    for (int r = 0; r < stages; r++) total += (size_t)(out->count[r] = emit_rank(out, r, NULL));
    mt_pp_action *all = mt_xmalloc(total * sizeof *all, "pipeline schedule actions");
    for (int r = 0; r < stages; r++) {
        out->actions[r] = all;
        emit_rank(out, r, all);
        all += out->count[r];
    }
    return 0;
}

void mt_pp_schedule_free(mt_pp_schedule *s) {
    if (!s) return;
    if (s->actions) free(s->actions[0]);
    free(s->actions);
    free(s->count);
    memset(s, 0, sizeof *s);
}

int mt_pp_action_format(const mt_pp_schedule *s, const mt_pp_action *a, char *buf, size_t cap) {
    char sub[16] = "";
    if (s->chunks > 1) snprintf(sub, sizeof sub, ".%d", a->chunk);
    switch (a->op) {
    case MT_PP_FORWARD: return snprintf(buf, cap, "F%d%s", a->microbatch, sub);
    case MT_PP_BACKWARD: return snprintf(buf, cap, "B%d%s", a->microbatch, sub);
    case MT_PP_SEND_ACT: return snprintf(buf, cap, "sendA%d%s>%d", a->microbatch, sub, a->peer);
    case MT_PP_RECV_ACT: return snprintf(buf, cap, "recvA%d%s<%d", a->microbatch, sub, a->peer);
    case MT_PP_SEND_GRAD: return snprintf(buf, cap, "sendG%d%s>%d", a->microbatch, sub, a->peer);
    case MT_PP_RECV_GRAD: return snprintf(buf, cap, "recvG%d%s<%d", a->microbatch, sub, a->peer);
    default: return snprintf(buf, cap, "?op%d", (int)a->op);
    }
}

void mt_pp_schedule_print_rank(const mt_pp_schedule *s, int rank, FILE *f) {
    fprintf(f, "rank %d (%d actions):", rank, s->count[rank]);
    char buf[64];
    for (int i = 0; i < s->count[rank]; i++) {
        mt_pp_action_format(s, &s->actions[rank][i], buf, sizeof buf);
        fprintf(f, " %s", buf);
    }
    fputc('\n', f);
}

/* ---- checker ---- */

enum { MSG_NONE = 0, MSG_POSTED, MSG_RECEIVED };

typedef struct {
    const mt_pp_schedule *s;
    double fwd, bwd, latency;
    int S, ntags;
    int *pc;              /* next action per rank */
    double *clock;        /* per rank */
    int *inflight;        /* per rank */
    unsigned char *fdone, *bdone, *have_act, *have_grad; /* [mb * S + stage] */
    unsigned char *msg_state;                            /* [tag] */
    double *msg_time;                                    /* [tag] arrival time */
    int *msg_src, *msg_action;                           /* [tag] sender and its action index */
} sim_state;

/* Describes action i of rank r into buf for messages. */
static const char *describe(const sim_state *st, int r, int i, char *buf, size_t cap) {
    const mt_pp_action *a = &st->s->actions[r][i];
    char f[48];
    mt_pp_action_format(st->s, a, f, sizeof f);
    snprintf(buf, cap, "rank %d action %d (%s %s, mb %d, chunk %d)", r, i, mt_pp_op_name(a->op), f,
             a->microbatch, a->chunk);
    return buf;
}

/* Expected peer and tag of a message action, or -1 with err if the message
 * cannot exist (edge of the pipeline, or p = 1 where neighbours are local). */
static int message_route(const sim_state *st, int r, int i, int *peer, int *tag, mt_error *err) {
    const mt_pp_schedule *s = st->s;
    const mt_pp_action *a = &s->actions[r][i];
    int p = s->stages, stage = a->chunk * p + r;
    int forward_dir = a->op == MT_PP_SEND_ACT || a->op == MT_PP_RECV_GRAD; /* towards stage+1 */
    int boundary = forward_dir ? stage : stage - 1;
    char d[160];
    if (p == 1)
        return mt_errorf(err, "%s: with one pipeline stage every neighbour is local; no message is needed",
                         describe(st, r, i, d, sizeof d));
    if (boundary < 0 || boundary > st->S - 2)
        return mt_errorf(err, "%s: virtual stage %d is the %s stage, there is no %s neighbour to message",
                         describe(st, r, i, d, sizeof d), stage, forward_dir ? "last" : "first",
                         forward_dir ? "next" : "previous");
    *peer = forward_dir ? (r + 1) % p : (r + p - 1) % p;
    *tag = msg_tag(s, a->microbatch, boundary, a->op == MT_PP_SEND_GRAD || a->op == MT_PP_RECV_GRAD);
    if (a->peer != *peer)
        return mt_errorf(err, "%s names peer %d, but the neighbouring virtual stage lives on rank %d",
                         describe(st, r, i, d, sizeof d), a->peer, *peer);
    if (a->tag != *tag)
        return mt_errorf(err, "%s has tag %d, expected %d", describe(st, r, i, d, sizeof d), a->tag, *tag);
    return 0;
}

/* Runs action pc[r] of rank r. Returns 1 if executed, 0 if blocked in a
 * RECV whose message has not been sent, -1 on a violation (err). */
static int step_rank(sim_state *st, mt_pp_sim *out, int r, mt_error *err) {
    const mt_pp_schedule *s = st->s;
    int i = st->pc[r], p = s->stages, v = s->chunks;
    const mt_pp_action *a = &s->actions[r][i];
    char d[160];
    if ((unsigned)a->op >= MT_PP_NOPS)
        return mt_errorf(err, "rank %d action %d: unknown op %d", r, i, (int)a->op);
    if (a->microbatch < 0 || a->microbatch >= s->microbatches || a->chunk < 0 || a->chunk >= v)
        return mt_errorf(err, "%s: microbatch must be in 0..%d and chunk in 0..%d",
                         describe(st, r, i, d, sizeof d), s->microbatches - 1, v - 1);
    int stage = a->chunk * p + r, at = a->microbatch * st->S + stage;
    int peer = -1, tag = -1;
    if (a->op != MT_PP_FORWARD && a->op != MT_PP_BACKWARD && message_route(st, r, i, &peer, &tag, err))
        return -1;
    double t0 = st->clock[r];
    switch (a->op) {
    case MT_PP_FORWARD:
        if (st->fdone[at])
            return mt_errorf(err, "%s: forward of microbatch %d on virtual stage %d runs a second time",
                             describe(st, r, i, d, sizeof d), a->microbatch, stage);
        if (stage > 0 && p == 1 && !st->fdone[at - 1])
            return mt_errorf(err, "%s: its input is the output of the local forward of chunk %d, which has not run",
                             describe(st, r, i, d, sizeof d), a->chunk - 1);
        if (stage > 0 && p > 1 && !st->have_act[at])
            return mt_errorf(err, "%s runs before its input activation was received (no RECV_ACT before it)",
                             describe(st, r, i, d, sizeof d));
        st->fdone[at] = 1;
        st->clock[r] += st->fwd / v;
        out->busy[r] += st->fwd / v;
        if (++st->inflight[r] > out->peak_inflight[r]) out->peak_inflight[r] = st->inflight[r];
        break;
    case MT_PP_BACKWARD:
        if (!st->fdone[at])
            return mt_errorf(err, "%s runs before the forward of microbatch %d on virtual stage %d",
                             describe(st, r, i, d, sizeof d), a->microbatch, stage);
        if (st->bdone[at])
            return mt_errorf(err, "%s: backward of microbatch %d on virtual stage %d runs a second time",
                             describe(st, r, i, d, sizeof d), a->microbatch, stage);
        if (stage < st->S - 1 && p == 1 && !st->bdone[at + 1])
            return mt_errorf(err, "%s: its gradient comes from the local backward of chunk %d, which has not run",
                             describe(st, r, i, d, sizeof d), a->chunk + 1);
        if (stage < st->S - 1 && p > 1 && !st->have_grad[at])
            return mt_errorf(err, "%s runs before its output gradient was received (no RECV_GRAD before it)",
                             describe(st, r, i, d, sizeof d));
        st->bdone[at] = 1;
        st->clock[r] += st->bwd / v;
        out->busy[r] += st->bwd / v;
        st->inflight[r]--;
        break;
    case MT_PP_SEND_ACT:
    case MT_PP_SEND_GRAD: {
        int is_act = a->op == MT_PP_SEND_ACT;
        if (!(is_act ? st->fdone[at] : st->bdone[at]))
            return mt_errorf(err, "%s sends data of the %s of microbatch %d on virtual stage %d, which has not run yet",
                             describe(st, r, i, d, sizeof d), is_act ? "forward" : "backward", a->microbatch,
                             stage);
        if (st->msg_state[tag] != MSG_NONE)
            return mt_errorf(err, "%s: this message (tag %d) was already sent", describe(st, r, i, d, sizeof d),
                             tag);
        st->msg_state[tag] = MSG_POSTED;
        st->msg_time[tag] = t0 + st->latency;
        st->msg_src[tag] = r;
        st->msg_action[tag] = i;
        break;
    }
    case MT_PP_RECV_ACT:
    case MT_PP_RECV_GRAD:
        if (st->msg_state[tag] == MSG_NONE) return 0; /* blocked */
        if (st->msg_state[tag] == MSG_RECEIVED)
            return mt_errorf(err, "%s: this message (tag %d) was already received", describe(st, r, i, d, sizeof d),
                             tag);
        st->msg_state[tag] = MSG_RECEIVED;
        if (a->op == MT_PP_RECV_ACT) st->have_act[at] = 1;
        else st->have_grad[at] = 1;
        if (st->msg_time[tag] > st->clock[r]) st->clock[r] = st->msg_time[tag];
        break;
    default:
        break;
    }
    out->start[r][i] = t0;
    out->end[r][i] = st->clock[r];
    st->pc[r]++;
    return 1;
}

/* Explains a deadlock: what each waiting rank waits for, and whether its
 * peer would ever send it. */
static int report_deadlock(sim_state *st, mt_error *err) {
    const mt_pp_schedule *s = st->s;
    char msg[MT_ERROR_LEN];
    size_t len = (size_t)snprintf(msg, sizeof msg, "deadlock: no rank can proceed;");
    int listed = 0;
    for (int r = 0; r < s->stages && len < sizeof msg; r++) {
        int i = st->pc[r];
        if (i >= s->count[r]) continue;
        if (listed == 4) {
            len += (size_t)snprintf(msg + len, sizeof msg - len, " ...");
            break;
        }
        const mt_pp_action *a = &s->actions[r][i];
        int peer = a->peer, when = -1;
        for (int j = st->pc[peer]; j < s->count[peer]; j++) {
            const mt_pp_action *b = &s->actions[peer][j];
            if ((b->op == MT_PP_SEND_ACT || b->op == MT_PP_SEND_GRAD) && b->tag == a->tag) {
                when = j;
                break;
            }
        }
        char f[48];
        mt_pp_action_format(s, a, f, sizeof f);
        if (when >= 0)
            len += (size_t)snprintf(msg + len, sizeof msg - len,
                                    " rank %d waits at action %d in %s %s (tag %d); rank %d sends it at its action %d "
                                    "but waits at %d;",
                                    r, i, mt_pp_op_name(a->op), f, a->tag, peer, when, st->pc[peer]);
        else
            len += (size_t)snprintf(msg + len, sizeof msg - len,
                                    " rank %d waits at action %d in %s %s (tag %d), which rank %d never sends;", r, i,
                                    mt_pp_op_name(a->op), f, a->tag, peer);
        listed++;
    }
    if (len < sizeof msg && msg[len - 1] == ';') msg[len - 1] = '\0';
    return mt_errorf(err, "%s", msg);
}

/* After every rank finished: every message received, every forward and
 * backward executed. */
static int check_complete(sim_state *st, mt_error *err) {
    const mt_pp_schedule *s = st->s;
    char d[160];
    for (int t = 0; t < st->ntags; t++)
        if (st->msg_state[t] == MSG_POSTED)
            return mt_errorf(err, "%s: its message (tag %d) is never received by rank %d",
                             describe(st, st->msg_src[t], st->msg_action[t], d, sizeof d), t,
                             s->actions[st->msg_src[t]][st->msg_action[t]].peer);
    for (int mb = 0; mb < s->microbatches; mb++)
        for (int stage = 0; stage < st->S; stage++) {
            int at = mb * st->S + stage, r = stage % s->stages, c = stage / s->stages;
            if (!st->fdone[at] || !st->bdone[at])
                return mt_errorf(err, "the %s of microbatch %d on virtual stage %d (rank %d, chunk %d) never runs",
                                 st->fdone[at] ? "backward" : "forward", mb, stage, r, c);
        }
    return 0;
}

int mt_pp_check(const mt_pp_schedule *s, double fwd_cost, double bwd_cost, double latency,
                mt_pp_sim *out, mt_error *err) {
    int p = s->stages;
    memset(out, 0, sizeof *out);
    out->stages = p;
    out->busy = mt_xcalloc((size_t)p, sizeof *out->busy, "pipeline simulation busy times");
    out->idle = mt_xcalloc((size_t)p, sizeof *out->idle, "pipeline simulation idle times");
    out->peak_inflight = mt_xcalloc((size_t)p, sizeof *out->peak_inflight, "pipeline simulation peaks");
    out->start = mt_xmalloc((size_t)p * sizeof *out->start, "pipeline simulation start times");
    out->end = mt_xmalloc((size_t)p * sizeof *out->end, "pipeline simulation end times");
    size_t total = 0;
    for (int r = 0; r < p; r++) total += (size_t)s->count[r];
    double *times = mt_xmalloc(2 * total * sizeof *times + 1, "pipeline simulation action times");
    for (size_t k = 0; k < 2 * total; k++) times[k] = -1;
    for (int r = 0; r < p; r++) {
        out->start[r] = times;
        out->end[r] = times + s->count[r];
        times += 2 * (size_t)s->count[r];
    }
    if (!(fwd_cost > 0) || !(bwd_cost > 0) || !(latency >= 0))
        return mt_errorf(err, "costs must be positive and the latency >= 0 (got forward %g, backward %g, latency %g)",
                         fwd_cost, bwd_cost, latency);

    sim_state st = {.s = s, .fwd = fwd_cost, .bwd = bwd_cost, .latency = latency};
    st.S = p * s->chunks;
    st.ntags = s->max_tag + 1;
    size_t cells = (size_t)s->microbatches * (size_t)st.S, ntags = (size_t)st.ntags;
    st.pc = mt_xcalloc((size_t)p, sizeof *st.pc, "pipeline simulation program counters");
    st.clock = mt_xcalloc((size_t)p, sizeof *st.clock, "pipeline simulation clocks");
    st.inflight = mt_xcalloc((size_t)p, sizeof *st.inflight, "pipeline simulation in-flight counts");
    unsigned char *flags = mt_xcalloc(4 * cells + ntags, 1, "pipeline simulation flags");
    st.fdone = flags;
    st.bdone = flags + cells;
    st.have_act = flags + 2 * cells;
    st.have_grad = flags + 3 * cells;
    st.msg_state = flags + 4 * cells;
    st.msg_time = mt_xcalloc(ntags, sizeof *st.msg_time, "pipeline simulation message times");
    st.msg_src = mt_xcalloc(ntags, sizeof *st.msg_src, "pipeline simulation message senders");
    st.msg_action = mt_xcalloc(ntags, sizeof *st.msg_action, "pipeline simulation message actions");

    int rc = 0;
    for (;;) {
        int progress = 0, left = 0;
        for (int r = 0; r < p && !rc; r++) {
            while (st.pc[r] < s->count[r]) {
                int k = step_rank(&st, out, r, err);
                if (k < 0) rc = -1;
                if (k <= 0) break;
                progress = 1;
            }
            if (st.pc[r] < s->count[r]) left = 1;
        }
        if (rc || !left) break;
        if (!progress) {
            rc = report_deadlock(&st, err);
            break;
        }
    }
    if (!rc) rc = check_complete(&st, err);
    for (int r = 0; r < p; r++)
        if (st.clock[r] > out->makespan) out->makespan = st.clock[r];
    double sum = 0;
    for (int r = 0; r < p; r++) {
        out->idle[r] = out->makespan - out->busy[r];
        if (out->makespan > 0) sum += out->idle[r] / out->makespan;
    }
    out->bubble = sum / p;
    free(st.pc);
    free(st.clock);
    free(st.inflight);
    free(flags);
    free(st.msg_time);
    free(st.msg_src);
    free(st.msg_action);
    return rc;
}

void mt_pp_sim_free(mt_pp_sim *sim) {
    if (!sim) return;
    if (sim->start) free(sim->start[0]);
    free(sim->start);
    free(sim->end);
    free(sim->busy);
    free(sim->idle);
    free(sim->peak_inflight);
    memset(sim, 0, sizeof *sim);
}
