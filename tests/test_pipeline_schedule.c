/* Pipeline schedules: every generated schedule passes the checker for
 * p = 1..8, m = 1..32, v = 1, 2, 4; bubble fractions, makespans and activation
 * peaks equal their closed forms; hand-broken schedules are caught with a
 * message that says what is wrong. */
#include <stdlib.h>
#include <string.h>
#include "parallel/pipeline_schedule.h"
#include "testlib.h"

static int min_i(int a, int b) { return a < b ? a : b; }

/* Rule 1 of the header, checked on the data: each RECV is followed by the
 * compute that consumes it, each SEND preceded by the compute that made it. */
static int comm_next_to_compute(const mt_pp_schedule *s, int r) {
    const mt_pp_action *a = s->actions[r];
    for (int i = 0; i < s->count[r]; i++) {
        mt_pp_op want;
        int j;
        switch (a[i].op) {
        case MT_PP_RECV_ACT: want = MT_PP_FORWARD, j = i + 1; break;
        case MT_PP_RECV_GRAD: want = MT_PP_BACKWARD, j = i + 1; break;
        case MT_PP_SEND_ACT: want = MT_PP_FORWARD, j = i - 1; break;
        case MT_PP_SEND_GRAD: want = MT_PP_BACKWARD, j = i - 1; break;
        default: continue;
        }
        if (j < 0 || j >= s->count[r] || a[j].op != want || a[j].microbatch != a[i].microbatch ||
            a[j].chunk != a[i].chunk)
            return 0;
    }
    return 1;
}

/* One (kind, p, m, v) case under costs f, b: checker passes, closed forms hold. */
static void check_case(mt_pp_kind kind, int p, int m, int v, double f, double b) {
    mt_pp_schedule s;
    mt_error err = {{0}};
    if (mt_pp_schedule_build(kind, p, m, v, &s, &err)) {
        CHECK(0, "build %s p=%d m=%d v=%d: %s", mt_pp_kind_name(kind), p, m, v, err.msg);
        return;
    }
    mt_pp_sim sim;
    int rc = mt_pp_check(&s, f, b, 0, &sim, &err);
    CHECK(rc == 0, "%s p=%d m=%d v=%d f=%g b=%g: %s", mt_pp_kind_name(kind), p, m, v, f, b, err.msg);
    double closed = (double)(p - 1) / ((double)v * m + p - 1);
    CHECK(fabs(sim.bubble - closed) <= 1e-12, "%s p=%d m=%d v=%d f=%g b=%g: bubble %.17g vs %.17g",
          mt_pp_kind_name(kind), p, m, v, f, b, sim.bubble, closed);
    CHECK(fabs(mt_pp_bubble_closed_form(&s) - closed) <= 1e-15, "closed form helper");
    double T = ((double)v * m + p - 1) * (f + b) / v;
    CHECK(fabs(sim.makespan - T) <= 1e-9 * T, "%s p=%d m=%d v=%d: makespan %.17g vs %.17g", mt_pp_kind_name(kind),
          p, m, v, sim.makespan, T);
    int msgs = 0;
    for (int r = 0; r < p; r++) {
        int W = mt_pp_warmup_forwards(&s, r);
        CHECK(fabs(sim.busy[r] - m * (f + b)) <= 1e-9 * m * (f + b), "busy %g", sim.busy[r]);
        CHECK(sim.peak_inflight[r] == min_i(W + 1, m * v), "%s p=%d m=%d v=%d rank %d: peak %d, W=%d",
              mt_pp_kind_name(kind), p, m, v, r, sim.peak_inflight[r], W);
        if (kind == MT_PP_1F1B || (kind == MT_PP_INTERLEAVED && v == 1)) {
            CHECK(sim.peak_inflight[r] == min_i(p - r, m) && sim.peak_inflight[r] <= p,
                  "1f1b p=%d m=%d rank %d: peak %d", p, m, r, sim.peak_inflight[r]);
        }
        if (kind == MT_PP_GPIPE)
            CHECK(sim.peak_inflight[r] == (p > 1 ? m : 1), "gpipe p=%d m=%d rank %d: peak %d", p, m, r,
                  sim.peak_inflight[r]);
        CHECK(comm_next_to_compute(&s, r), "%s p=%d m=%d v=%d rank %d: a message is not next to its compute",
              mt_pp_kind_name(kind), p, m, v, r);
        for (int i = 0; i < s.count[r]; i++) {
            mt_pp_op op = s.actions[r][i].op;
            if (op == MT_PP_SEND_ACT || op == MT_PP_SEND_GRAD) msgs++;
        }
    }
    /* Every boundary crossed twice per microbatch; tags are exactly 0..max_tag. */
    int expect = p > 1 ? 2 * m * (p * v - 1) : 0;
    CHECK(msgs == expect && s.max_tag == expect - 1, "messages %d (expected %d), max_tag %d", msgs, expect,
          s.max_tag);
    mt_pp_sim_free(&sim);
    mt_pp_schedule_free(&s);
}

static void test_sweep(void) {
    static const double costs[2][2] = {{1, 1}, {1, 2}};
    for (int c = 0; c < 2; c++)
        for (int p = 1; p <= 8; p++)
            for (int m = 1; m <= 32; m++) {
                check_case(MT_PP_GPIPE, p, m, 1, costs[c][0], costs[c][1]);
                check_case(MT_PP_1F1B, p, m, 1, costs[c][0], costs[c][1]);
                if (m % p) continue;
                for (int v = 1; v <= 4; v *= 2) check_case(MT_PP_INTERLEAVED, p, m, v, costs[c][0], costs[c][1]);
            }
}

static int same_actions(const mt_pp_schedule *a, const mt_pp_schedule *b) {
    if (a->stages != b->stages) return 0;
    for (int r = 0; r < a->stages; r++)
        if (a->count[r] != b->count[r] || memcmp(a->actions[r], b->actions[r], a->count[r] * sizeof(mt_pp_action)))
            return 0;
    return 1;
}

static void test_degenerate_forms(void) {
    mt_error err;
    /* Interleaved with one chunk is 1f1b, action for action. */
    for (int p = 1; p <= 8; p++)
        for (int m = p; m <= 32; m += p) {
            mt_pp_schedule a, b;
            CHECK(mt_pp_schedule_build(MT_PP_INTERLEAVED, p, m, 1, &a, &err) == 0, "%s", err.msg);
            CHECK(mt_pp_schedule_build(MT_PP_1F1B, p, m, 1, &b, &err) == 0, "%s", err.msg);
            CHECK(same_actions(&a, &b), "interleaved v=1 differs from 1f1b at p=%d m=%d", p, m);
            mt_pp_schedule_free(&a);
            mt_pp_schedule_free(&b);
        }
    /* One stage: F0 B0 F1 B1 ... without messages, for every kind. */
    for (int k = 0; k < MT_PP_NKIND; k++) {
        mt_pp_schedule s;
        CHECK(mt_pp_schedule_build((mt_pp_kind)k, 1, 5, 1, &s, &err) == 0, "%s", err.msg);
        CHECK(s.count[0] == 10 && s.max_tag == -1, "%s p=1: %d actions", mt_pp_kind_name((mt_pp_kind)k), s.count[0]);
        for (int i = 0; i < s.count[0]; i++)
            CHECK(s.actions[0][i].op == (i % 2 ? MT_PP_BACKWARD : MT_PP_FORWARD) && s.actions[0][i].microbatch == i / 2,
                  "%s p=1 action %d", mt_pp_kind_name((mt_pp_kind)k), i);
        mt_pp_schedule_free(&s);
    }
}

static char *rank_text(const mt_pp_schedule *s, int r, char *buf, size_t cap) {
    FILE *f = fmemopen(buf, cap, "w");
    CHECK(f != NULL, "fmemopen");
    if (!f) return buf;
    mt_pp_schedule_print_rank(s, r, f);
    fclose(f);
    return buf;
}

static void test_print(void) {
    mt_pp_schedule s;
    mt_error err;
    char buf[512];
    CHECK(mt_pp_schedule_build(MT_PP_1F1B, 2, 3, 1, &s, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(rank_text(&s, 0, buf, sizeof buf),
                  "rank 0 (12 actions): F0 sendA0>1 F1 sendA1>1 recvG0<1 B0 F2 sendA2>1 recvG1<1 B1 recvG2<1 B2\n"),
          "%s", buf);
    CHECK(!strcmp(rank_text(&s, 1, buf, sizeof buf),
                  "rank 1 (12 actions): recvA0<0 F0 B0 sendG0>0 recvA1<0 F1 B1 sendG1>0 recvA2<0 F2 B2 sendG2>0\n"),
          "%s", buf);
    mt_pp_schedule_free(&s);
    /* Interleaved p=2, v=2, m=2: rank 1's chunk 1 is the last virtual stage. */
    CHECK(mt_pp_schedule_build(MT_PP_INTERLEAVED, 2, 2, 2, &s, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(rank_text(&s, 1, buf, sizeof buf),
                  "rank 1 (20 actions): recvA0.0<0 F0.0 sendA0.0>0 recvA1.0<0 F1.0 sendA1.0>0 recvA0.1<0 F0.1 B0.1 "
                  "sendG0.1>0 recvA1.1<0 F1.1 B1.1 sendG1.1>0 recvG0.0<0 B0.0 sendG0.0>0 recvG1.0<0 B1.0 "
                  "sendG1.0>0\n"),
          "%s", buf);
    CHECK(mt_pp_warmup_forwards(&s, 0) == 4 && mt_pp_warmup_forwards(&s, 1) == 2, "interleaved warm-up");
    mt_pp_schedule_free(&s);
}

static void test_bad_arguments(void) {
    mt_pp_schedule s;
    mt_error err = {{0}};
    mt_pp_kind k;
    CHECK(mt_pp_kind_parse("1f1b", &k, &err) == 0 && k == MT_PP_1F1B, "parse 1f1b");
    CHECK(mt_pp_kind_parse("zb", &k, &err) == -1 && strstr(err.msg, "unknown pipeline schedule 'zb'"), "%s", err.msg);
    CHECK(mt_pp_schedule_build(MT_PP_INTERLEAVED, 4, 6, 2, &s, &err) == -1 &&
              strstr(err.msg, "multiple of the pipeline stages (4): use 4 or 8"),
          "%s", err.msg);
    CHECK(mt_pp_schedule_build(MT_PP_INTERLEAVED, 4, 3, 2, &s, &err) == -1 && strstr(err.msg, ": use 4"), "%s",
          err.msg);
    CHECK(mt_pp_schedule_build(MT_PP_1F1B, 4, 8, 2, &s, &err) == -1 && strstr(err.msg, "need the interleaved"),
          "%s", err.msg);
    CHECK(mt_pp_schedule_build(MT_PP_GPIPE, 0, 8, 1, &s, &err) == -1 && strstr(err.msg, "stages must be in 1.."),
          "%s", err.msg);
    CHECK(mt_pp_schedule_build(MT_PP_GPIPE, 2, 0, 1, &s, &err) == -1 && strstr(err.msg, "microbatches must be"),
          "%s", err.msg);
    CHECK(mt_pp_schedule_build(MT_PP_1F1B, 1, 1 << 20, 1, &s, &err) == 0, "%s", err.msg);
    mt_pp_schedule_free(&s);
    CHECK(mt_pp_schedule_build(MT_PP_INTERLEAVED, 1, 1 << 20, 8, &s, &err) == -1 && strstr(err.msg, "exceeds"),
          "%s", err.msg);
    /* Tags: 2*m*(S-1) <= 32768. p=8, v=4: S-1 = 31, so m <= 528. */
    CHECK(mt_pp_schedule_build(MT_PP_INTERLEAVED, 8, 528, 4, &s, &err) == 0 && s.max_tag <= 32767, "%s", err.msg);
    mt_pp_schedule_free(&s);
    CHECK(mt_pp_schedule_build(MT_PP_INTERLEAVED, 8, 536, 4, &s, &err) == -1 &&
              strstr(err.msg, "use at most 528 microbatches"),
          "%s", err.msg);
}

/* Index of the first action of rank r with this op and microbatch. */
static int find(const mt_pp_schedule *s, int r, mt_pp_op op, int mb) {
    for (int i = 0; i < s->count[r]; i++)
        if (s->actions[r][i].op == op && s->actions[r][i].microbatch == mb) return i;
    CHECK(0, "rank %d has no %s of microbatch %d", r, mt_pp_op_name(op), mb);
    return 0;
}

static void drop(mt_pp_schedule *s, int r, int i) {
    memmove(&s->actions[r][i], &s->actions[r][i + 1], (size_t)(s->count[r] - i - 1) * sizeof(mt_pp_action));
    s->count[r]--;
}

/* Builds 1f1b p=2 m=2, breaks it with `breaker`, expects `words` in the
 * checker's message. */
static void expect_broken(void (*breaker)(mt_pp_schedule *), const char *words, const char *what) {
    mt_pp_schedule s;
    mt_pp_sim sim;
    mt_error err = {{0}};
    CHECK(mt_pp_schedule_build(MT_PP_1F1B, 2, 2, 1, &s, &err) == 0, "%s", err.msg);
    breaker(&s);
    int rc = mt_pp_check(&s, 1, 2, 0, &sim, &err);
    CHECK(rc == -1 && strstr(err.msg, words), "%s: expected '%s', got rc %d: %s", what, words, rc, err.msg);
    printf("%s -> %s\n", what, err.msg);
    mt_pp_sim_free(&sim);
    mt_pp_schedule_free(&s);
}

static void drop_recv(mt_pp_schedule *s) { drop(s, 1, find(s, 1, MT_PP_RECV_ACT, 1)); }
static void drop_send(mt_pp_schedule *s) { drop(s, 0, find(s, 0, MT_PP_SEND_ACT, 1)); }
static void drop_last_backward(mt_pp_schedule *s) {
    /* Rank 0 never receives microbatch 1's gradient that rank 1 sends. */
    drop(s, 0, find(s, 0, MT_PP_BACKWARD, 1));
    drop(s, 0, find(s, 0, MT_PP_RECV_GRAD, 1));
}
static void swap_order(mt_pp_schedule *s) {
    /* Rank 0 waits for microbatch 0's gradient before sending its activation. */
    int i = find(s, 0, MT_PP_SEND_ACT, 0), j = find(s, 0, MT_PP_RECV_GRAD, 0);
    mt_pp_action t = s->actions[0][i];
    s->actions[0][i] = s->actions[0][j];
    s->actions[0][j] = t;
}
static void wrong_peer(mt_pp_schedule *s) { s->actions[1][find(s, 1, MT_PP_SEND_GRAD, 0)].peer = 1; }
static void wrong_tag(mt_pp_schedule *s) { s->actions[1][find(s, 1, MT_PP_RECV_ACT, 1)].tag = 0; }
static void twice(mt_pp_schedule *s) { s->actions[0][find(s, 0, MT_PP_FORWARD, 1)].microbatch = 0; }
static void backward_first(mt_pp_schedule *s) {
    int i = find(s, 1, MT_PP_FORWARD, 0), j = find(s, 1, MT_PP_BACKWARD, 0);
    mt_pp_action t = s->actions[1][i];
    s->actions[1][i] = s->actions[1][j];
    s->actions[1][j] = t;
}

static void test_broken(void) {
    expect_broken(drop_recv, "rank 1 action 4 (FORWARD F1, mb 1, chunk 0) runs before its input activation was received",
                  "dropped receive");
    expect_broken(drop_send, "rank 1 waits at action 4 in RECV_ACT recvA1<0 (tag 2), which rank 0 never sends",
                  "dropped send");
    expect_broken(drop_last_backward, "SEND_GRAD sendG1>0, mb 1, chunk 0): its message (tag 3) is never received by rank 0",
                  "send without receive");
    expect_broken(swap_order, "deadlock: no rank can proceed; rank 0 waits at action 1 in RECV_GRAD recvG0<1 (tag 1); "
                              "rank 1 sends it at its action 3 but waits at 0; rank 1 waits at action 0 in RECV_ACT",
                  "swapped order");
    expect_broken(wrong_peer, "names peer 1, but the neighbouring virtual stage lives on rank 0", "wrong peer");
    expect_broken(wrong_tag, "has tag 0, expected 2", "wrong tag");
    expect_broken(twice, "forward of microbatch 0 on virtual stage 0 runs a second time", "duplicate forward");
    expect_broken(backward_first, "runs before the forward of microbatch 0 on virtual stage 1", "backward first");
}

static void test_latency_and_costs(void) {
    mt_pp_schedule s;
    mt_pp_sim sim;
    mt_error err;
    /* p=2, m=1: F | msg | F B | msg | B  =  2(f+b) + 2 latency. */
    CHECK(mt_pp_schedule_build(MT_PP_1F1B, 2, 1, 1, &s, &err) == 0, "%s", err.msg);
    CHECK(mt_pp_check(&s, 1, 2, 0.5, &sim, &err) == 0, "%s", err.msg);
    CHECK_CLOSE(sim.makespan, 7.0, 1e-15);
    CHECK(sim.start[1][0] == 0.0 && sim.end[1][0] == 1.5, "recv reached at 0, waited until 1.5: [%g, %g]", sim.start[1][0], sim.end[1][0]);
    mt_pp_sim_free(&sim);
    CHECK(mt_pp_check(&s, 0, 2, 0, &sim, &err) == -1 && strstr(err.msg, "costs must be positive"), "%s", err.msg);
    mt_pp_sim_free(&sim);
    mt_pp_schedule_free(&s);
}

int main(void) {
    test_sweep();
    test_degenerate_forms();
    test_print();
    test_bad_arguments();
    test_broken();
    test_latency_and_costs();
    TEST_MAIN_END("test_pipeline_schedule");
}
