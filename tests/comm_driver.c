/* MPI driver for tests/check_comm.sh (not a test_* binary: it needs mpirun).
 *
 *   comm_driver collectives              every operation vs expected values,
 *                                        odd sizes, in place, non-blocking,
 *                                        counters vs the documented formulas
 *   comm_driver mesh DP PP TP [G]        mesh groups vs the coordinate math
 *   comm_driver stall stop|kill RANK TIMEOUT [OP]   (OP mismatch: RANK
 *                                        broadcasts where the others all-reduce)
 *                                        RANK stops/kills itself before
 *                                        collective #3 (OP: allreduce,
 *                                        reduce_scatter, allgather, broadcast,
 *                                        barrier; or recv: rank+1 receives
 *                                        from it); the others must time out
 *   comm_driver slow TIMEOUT MB          an all-reduce of MB megabytes that takes
 *                                        longer than TIMEOUT: every rank is inside
 *                                        it and answering, so it must complete
 *   comm_driver overhead                 per-call cost vs plain MPI
 *   comm_driver bench [flags]            meshtrain bench-comm
 * Prints "comm_driver <mode>: rank R: N checks, M failed"; exit 1 on failure. */
#include <mpi.h> /* the raw MPI the overhead mode compares with, and the launcher setup */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/args.h"
#include "cli/cli.h"
#include "comm/comm.h"
#include "parallel/mesh.h"
#include "testlib.h"

static int g_rank;

typedef struct {
    uint64_t calls[MT_COMM_NKIND], sent[MT_COMM_NKIND], payload[MT_COMM_NKIND];
} expect_t;

static void expect(expect_t *e, mt_comm_kind k, uint64_t payload, uint64_t sent) {
    e->calls[k]++;
    e->payload[k] += payload;
    e->sent[k] += sent;
}

static void check_counters(const mt_comm *c, const expect_t *e) {
    const mt_comm_stats *s = mt_comm_get_stats(c);
    for (int k = 0; k < MT_COMM_NKIND; k++) {
        CHECK(s->k[k].calls == e->calls[k], "rank %d %s calls %llu vs %llu", g_rank,
              mt_comm_kind_name((mt_comm_kind)k), (unsigned long long)s->k[k].calls,
              (unsigned long long)e->calls[k]);
        CHECK(s->k[k].bytes_sent == e->sent[k], "rank %d %s bytes_sent %llu vs %llu", g_rank,
              mt_comm_kind_name((mt_comm_kind)k), (unsigned long long)s->k[k].bytes_sent,
              (unsigned long long)e->sent[k]);
        CHECK(s->k[k].payload_bytes == e->payload[k], "rank %d %s payload %llu vs %llu", g_rank,
              mt_comm_kind_name((mt_comm_kind)k), (unsigned long long)s->k[k].payload_bytes,
              (unsigned long long)e->payload[k]);
        CHECK(s->k[k].wait_s >= 0 && (s->k[k].calls || s->k[k].wait_s == 0), "wait_s");
    }
}

static int mode_collectives(mt_comm_ctx *ctx) {
    mt_comm *w = mt_comm_world(ctx);
    int n = mt_comm_size(w), r = mt_comm_rank(w);
    uint64_t un = (uint64_t)n;
    expect_t e;
    memset(&e, 0, sizeof e);
    mt_comm_reset_stats(w);
    size_t maxc = 100003 * (size_t)n + 16;
    float *a = malloc(maxc * sizeof(float)), *b = malloc(maxc * sizeof(float));
    size_t maxb = (size_t)1 << 21; /* >= every byte size used below */
    unsigned char *ba = malloc(maxb), *bb = malloc(maxb * (size_t)n);
    if (!a || !b || !ba || !bb) {
        fprintf(stderr, "comm_driver: out of memory\n");
        return 1;
    }

    /* all-reduce: out of place, in place; exact sums of small integers */
    size_t counts[] = {0, 1, 3, 7, 1000, 4097, 100003};
    for (int ci = 0; ci < 7; ci++) {
        size_t cnt = counts[ci];
        for (int inplace = 0; inplace < 2; inplace++) {
            for (size_t i = 0; i < cnt; i++) a[i] = (float)((r + 1) * (int)(i % 13 + 1));
            float *out = inplace ? a : b;
            mt_comm_allreduce(w, a, out, cnt);
            expect(&e, MT_COMM_ALLREDUCE, cnt * 4, 2 * (un - 1) * cnt * 4 / un);
            long bad = 0;
            for (size_t i = 0; i < cnt; i++)
                bad += out[i] != (float)(n * (n + 1) / 2 * (int)(i % 13 + 1));
            CHECK(bad == 0, "allreduce count %zu inplace %d: %ld wrong", cnt, inplace, bad);
        }
    }
    /* non-blocking all-reduces in flight together, completed by test/wait */
    {
        mt_comm_req q[3] = {{0}};
        size_t c3[3] = {5, 1001, 33333};
        float *bufs[3] = {a, a + 5, a + 1006};
        for (int j = 0; j < 3; j++) {
            for (size_t i = 0; i < c3[j]; i++) bufs[j][i] = (float)(r * (j + 1));
            mt_comm_iallreduce(w, bufs[j], bufs[j], c3[j], &q[j]);
            expect(&e, MT_COMM_ALLREDUCE, c3[j] * 4, 2 * (un - 1) * c3[j] * 4 / un);
        }
        while (!mt_comm_test(&q[0])) {
        }
        CHECK(mt_comm_test(&q[0]) == 1, "test after completion");
        mt_comm_waitall(q, 3);
        for (int j = 0; j < 3; j++) {
            long bad = 0;
            for (size_t i = 0; i < c3[j]; i++) bad += bufs[j][i] != (float)((j + 1) * n * (n - 1) / 2);
            CHECK(bad == 0, "iallreduce %d: %ld wrong", j, bad);
        }
    }

    /* reduce-scatter: equal blocks of cnt floats */
    size_t rs_counts[] = {1, 5, 1001, 100003};
    for (int ci = 0; ci < 4; ci++) {
        size_t cnt = rs_counts[ci];
        for (int mode = 0; mode < 3; mode++) { /* 0 out of place, 1 in place, 2 non-blocking */
            for (size_t j = 0; j < cnt * (size_t)n; j++) a[j] = (float)((r + 1) + (int)(j % 7));
            float *out = mode == 1 ? a : b;
            if (mode == 2) {
                mt_comm_req q = {0};
                mt_comm_ireduce_scatter(w, a, out, cnt, &q);
                mt_comm_wait(&q);
            } else {
                mt_comm_reduce_scatter(w, a, out, cnt);
            }
            expect(&e, MT_COMM_REDUCE_SCATTER, un * cnt * 4, (un - 1) * cnt * 4);
            long bad = 0;
            for (size_t i = 0; i < cnt; i++) {
                size_t g = (size_t)r * cnt + i;
                bad += out[i] != (float)(n * (n + 1) / 2 + n * (int)(g % 7));
            }
            CHECK(bad == 0, "reduce_scatter %zu mode %d: %ld wrong", cnt, mode, bad);
        }
    }

    /* all-gather: byte blocks of odd sizes */
    size_t ag_bytes[] = {1, 3, 4001, 65537};
    for (int ci = 0; ci < 4; ci++) {
        size_t nb = ag_bytes[ci];
        for (int mode = 0; mode < 3; mode++) {
            memset(bb, 0xEE, nb * (size_t)n);
            unsigned char *src = mode == 1 ? bb + (size_t)r * nb : ba;
            for (size_t i = 0; i < nb; i++) src[i] = (unsigned char)(r * 31 + (int)i);
            if (mode == 2) {
                mt_comm_req q = {0};
                mt_comm_iallgather(w, src, bb, nb, &q);
                mt_comm_wait(&q);
            } else {
                mt_comm_allgather(w, src, bb, nb);
            }
            expect(&e, MT_COMM_ALLGATHER, un * nb, (un - 1) * nb);
            long bad = 0;
            for (size_t j = 0; j < nb * (size_t)n; j++)
                bad += bb[j] != (unsigned char)((int)(j / nb) * 31 + (int)(j % nb));
            CHECK(bad == 0, "allgather %zu mode %d: %ld wrong", nb, mode, bad);
        }
    }

    /* broadcast from every root, blocking and non-blocking */
    size_t bc_bytes[] = {1, 5, 70001};
    for (int root = 0; root < n; root++)
        for (int ci = 0; ci < 3; ci++)
            for (int nbk = 0; nbk < 2; nbk++) {
                size_t nb = bc_bytes[ci];
                for (size_t i = 0; i < nb; i++)
                    ba[i] = (unsigned char)(r == root ? root * 7 + (int)i : 0xAB);
                if (nbk) {
                    mt_comm_req q = {0};
                    mt_comm_ibroadcast(w, ba, nb, root, &q);
                    mt_comm_wait(&q);
                } else {
                    mt_comm_broadcast(w, ba, nb, root);
                }
                expect(&e, MT_COMM_BROADCAST, nb, (r == root && n > 1) ? nb : 0);
                long bad = 0;
                for (size_t i = 0; i < nb; i++) bad += ba[i] != (unsigned char)(root * 7 + (int)i);
                CHECK(bad == 0, "broadcast root %d %zu bytes: %ld wrong", root, nb, bad);
            }

    /* point-to-point: a ring (non-blocking) with a small and a large message,
     * then blocking pairwise exchanges */
    size_t p2p[] = {0, 17, 1 << 20};
    for (int ci = 0; ci < 3; ci++) {
        size_t nb = p2p[ci];
        int to = (r + 1) % n, from = (r + n - 1) % n;
        for (size_t i = 0; i < nb; i++) ba[i] = (unsigned char)(r + (int)i);
        memset(bb, 0, nb);
        mt_comm_req q[2] = {{0}};
        mt_comm_irecv(w, bb, nb, from, 7, &q[0]);
        mt_comm_isend(w, ba, nb, to, 7, &q[1]);
        mt_comm_waitall(q, 2);
        expect(&e, MT_COMM_RECV, nb, 0);
        expect(&e, MT_COMM_SEND, nb, n > 1 ? nb : 0); /* n = 1: all counts 0 */
        long bad = 0;
        for (size_t i = 0; i < nb; i++) bad += bb[i] != (unsigned char)(from + (int)i);
        CHECK(bad == 0, "ring %zu bytes: %ld wrong", nb, bad);
    }
    if ((r ^ 1) < n) {
        int peer = r ^ 1;
        int mine[3] = {r, r * r, -r}, theirs[3] = {0};
        if (r % 2 == 0) {
            mt_comm_send(w, mine, sizeof mine, peer, 3);
            mt_comm_recv(w, theirs, sizeof theirs, peer, 3);
        } else {
            mt_comm_recv(w, theirs, sizeof theirs, peer, 3);
            mt_comm_send(w, mine, sizeof mine, peer, 3);
        }
        expect(&e, MT_COMM_SEND, sizeof mine, sizeof mine);
        expect(&e, MT_COMM_RECV, sizeof theirs, 0);
        CHECK(theirs[0] == peer && theirs[1] == peer * peer && theirs[2] == -peer, "pair");
    }

    /* all-to-all-v: rank r sends a2a(r, j) bytes to rank j (sizes differ per pair, some 0), packed in rank
     * order; the counters: payload what r sends, bytes_sent what goes to the other ranks */
    {
        size_t sb[8], sd[8], rb[8], rd[8], at = 0, rt = 0;
        uint64_t pay = 0, sent = 0;
#define A2A(i, j) ((size_t)(((i) * 3 + (j) * 5 + 1) % 7) * 1001)
        for (int j = 0; j < n && j < 8; j++) {
            sb[j] = A2A(r, j), sd[j] = at, at += sb[j];
            rb[j] = A2A(j, r), rd[j] = rt, rt += rb[j];
            for (size_t i = 0; i < sb[j]; i++) ba[sd[j] + i] = (unsigned char)(r * 31 + j * 7 + (int)i);
            pay += sb[j];
            sent += j == r ? 0 : sb[j];
        }
        if (n <= 8) {
            memset(bb, 0, rt);
            mt_comm_alltoallv(w, ba, sb, sd, bb, rb, rd);
            expect(&e, MT_COMM_ALLTOALLV, pay, sent);
            long bad = 0;
            for (int j = 0; j < n; j++)
                for (size_t i = 0; i < rb[j]; i++) bad += bb[rd[j] + i] != (unsigned char)(j * 31 + r * 7 + (int)i);
            CHECK(bad == 0, "alltoallv: %ld bytes wrong", bad);
        }
#undef A2A
    }

    mt_comm_barrier(w);
    expect(&e, MT_COMM_BARRIER, 0, 0);

    /* control values */
    double d = r + 0.5;
    mt_comm_allreduce_ctl(w, &d, &d, 1, MT_COMM_F64, MT_COMM_SUM);
    expect(&e, MT_COMM_ALLREDUCE_CTL, 8, 2 * (un - 1) * 8 / un);
    CHECK(d == n * (n - 1) / 2.0 + 0.5 * n, "f64 sum %g", d);
    int iv[2] = {r, -r}, io[2];
    mt_comm_allreduce_ctl(w, iv, io, 2, MT_COMM_I32, MT_COMM_MAX);
    expect(&e, MT_COMM_ALLREDUCE_CTL, 8, 2 * (un - 1) * 8 / un);
    CHECK(io[0] == n - 1 && io[1] == 0, "i32 max %d %d", io[0], io[1]);
    int64_t lv[3] = {r - 100, (int64_t)r << 40, 5};
    mt_comm_allreduce_ctl(w, lv, lv, 3, MT_COMM_I64, MT_COMM_MIN);
    expect(&e, MT_COMM_ALLREDUCE_CTL, 24, 2 * (un - 1) * 24 / un);
    CHECK(lv[0] == -100 && lv[1] == 0 && lv[2] == 5, "i64 min");

    check_counters(w, &e);
    CHECK(mt_comm_bytes_sent(MT_COMM_ALLREDUCE, 1000, 1, 0) == 0, "n=1");
    CHECK(mt_comm_bytes_sent(MT_COMM_ALLREDUCE, 1000, 4, 0) == 1500, "ring allreduce");
    CHECK(mt_comm_bytes_sent(MT_COMM_REDUCE_SCATTER, 1000, 4, 0) == 750, "ring rs");
    CHECK(mt_comm_bytes_sent(MT_COMM_BROADCAST, 1000, 4, 1) == 1000, "bcast root");

    /* split: odd/even groups, reversed order; sum of world ranks */
    mt_comm *half = NULL;
    mt_error err = {{0}};
    CHECK(mt_comm_split(w, r % 2, -r, "half", &half, &err) == 0, "%s", err.msg);
    if (half) {
        int hs = mt_comm_size(half), hr = mt_comm_rank(half);
        CHECK(hs == (n + 1 - r % 2) / 2, "half size %d", hs);
        CHECK(mt_comm_world_rank_of(half, hr) == r, "own world rank");
        CHECK(hr == 0 || mt_comm_world_rank_of(half, hr - 1) > r, "reversed key order");
        float s = (float)r;
        mt_comm_allreduce(half, &s, &s, 1);
        float want = 0;
        for (int q = r % 2; q < n; q += 2) want += (float)q;
        CHECK(s == want, "half sum %g vs %g", s, want);
        const mt_comm_stats *hsx = mt_comm_get_stats(half);
        CHECK(hsx->k[MT_COMM_ALLREDUCE].calls == 1, "split stats reset");
        CHECK(!strcmp(mt_comm_name(half), "half"), "name");
    }
    mt_comm *none = (mt_comm *)1;
    CHECK(mt_comm_split(w, r == 0 ? 0 : -1, 0, "only0", &none, &err) == 0, "%s", err.msg);
    CHECK(r == 0 ? (none && mt_comm_size(none) == 1) : none == NULL, "undefined color");
    if (none) { /* size-1 group: copies only, zero bytes */
        float x[3] = {1, 2, 3}, y[3] = {0};
        mt_comm_allreduce(none, x, y, 3);
        mt_comm_reduce_scatter(none, x, y, 3);
        mt_comm_allgather(none, x, y, sizeof x);
        mt_comm_broadcast(none, x, sizeof x, 0);
        mt_comm_barrier(none);
        CHECK(y[0] == 1 && y[2] == 3, "size-1 copy");
        const mt_comm_stats *s1 = mt_comm_get_stats(none);
        CHECK(s1->k[MT_COMM_ALLREDUCE].bytes_sent == 0 && s1->k[MT_COMM_BROADCAST].bytes_sent == 0,
              "size-1 bytes");
    }
    mt_comm_free(none);
    mt_comm_free(half);
    if (r == 0) mt_comm_print_stats(w, stdout);
    free(a);
    free(b);
    free(ba);
    free(bb);
    printf("comm_driver collectives: rank %d: %d checks, %d failed\n", r, tl_checks, tl_failed);
    return tl_failed ? 1 : 0;
}

static int mode_mesh(mt_comm_ctx *ctx, int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: comm_driver mesh DP PP TP [G]\n");
        return 2;
    }
    mt_mesh_shape s = {atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argc > 5 ? atoi(argv[5]) : 0, 0, 0};
    mt_mesh m;
    mt_error err = {{0}};
    mt_comm *w = mt_comm_world(ctx);
    if (mt_mesh_init(&m, w, &s, &err)) {
        char shown[MT_ERROR_LEN]; /* as the CLI says it: {option} names as --option */
        mt_cli_render(err.msg, shown, sizeof shown);
        if (mt_comm_rank(w) == 0) fprintf(stderr, "meshtrain: error: %s\n", shown);
        return 2; /* every rank returns: clean exit */
    }
    int r = m.rank, W = m.world_size;
    if (r == 0) mt_mesh_print_layout(&m.shape, W, stdout);
    int *want = malloc((size_t)W * sizeof(int)), *got = malloc((size_t)W * sizeof(int));
    if (!want || !got) {
        fprintf(stderr, "comm_driver: out of memory for %d ranks\n", W);
        return 1;
    }
    for (int a = 0; a < MT_AXIS_N; a++) {
        mt_comm *c = mt_mesh_comm(&m, (mt_mesh_axis)a);
        int n = mt_mesh_group_ranks(&m.shape, (mt_mesh_axis)a, r, want);
        CHECK(mt_comm_size(c) == n, "axis %s size %d vs %d", mt_mesh_axis_name(a), mt_comm_size(c), n);
        CHECK(mt_comm_rank(c) == mt_mesh_group_index(&m.shape, (mt_mesh_axis)a, r), "index");
        /* membership by communication: gather world ranks over the group */
        mt_comm_allgather(c, &r, got, sizeof(int));
        for (int i = 0; i < n; i++) {
            CHECK(got[i] == want[i], "rank %d axis %s member %d: %d vs %d", r,
                  mt_mesh_axis_name(a), i, got[i], want[i]);
            CHECK(mt_comm_world_rank_of(c, i) == want[i], "world_rank_of");
        }
    }
    CHECK(m.coord.tp == r % s.tp && m.coord.pp == (r / s.tp) % s.pp && m.coord.dp == r / (s.tp * s.pp),
          "coords");
    free(want);
    free(got);
    mt_mesh_free(&m);
    printf("comm_driver mesh: rank %d: %d checks, %d failed\n", r, tl_checks, tl_failed);
    return tl_failed ? 1 : 0;
}

static int mode_stall(mt_comm_ctx *ctx, int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: comm_driver stall stop|kill RANK TIMEOUT [OP]\n");
        return 2;
    }
    int sig = !strcmp(argv[2], "kill") ? SIGKILL : SIGSTOP, victim = atoi(argv[3]);
    mt_comm_ctx_set_timeout(ctx, atof(argv[4]));
    const char *op = argc > 5 ? argv[5] : "allreduce";
    mt_comm *w = mt_comm_world(ctx);
    int r = mt_comm_rank(w), n = mt_comm_size(w);
    float buf[1024 * 8] = {0};
    mt_comm_allreduce(w, buf, buf, 1024); /* #1 */
    mt_comm_allreduce(w, buf, buf, 1024); /* #2 */
    fflush(stdout);
    if (!strcmp(op, "mismatch")) { /* no signal: the victim calls a broadcast where the others all-reduce */
        if (r == victim) mt_comm_broadcast(w, buf, 4096, 0);
        else mt_comm_allreduce(w, buf, buf, 1024);
    } else if (r == victim) raise(sig);
    if (!strcmp(op, "mismatch")) ;
    else if (!strcmp(op, "reduce_scatter")) mt_comm_reduce_scatter(w, buf, buf, 1024 / (size_t)n);
    else if (!strcmp(op, "allgather")) mt_comm_allgather(w, buf + r * 256, buf, 1024);
    else if (!strcmp(op, "broadcast")) mt_comm_broadcast(w, buf, 4096, 0);
    else if (!strcmp(op, "barrier")) mt_comm_barrier(w);
    else if (!strcmp(op, "recv")) {
        if (r == (victim + 1) % n) mt_comm_recv(w, buf, 16, victim, 5);
    }
    else mt_comm_allreduce(w, buf, buf, 1024);
    mt_comm_barrier(w); /* a broadcast may complete without the victim */
    printf("comm_driver stall: rank %d: UNEXPECTED: collective completed\n", r);
    return 1;
}

static int mode_slow(mt_comm_ctx *ctx, int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: comm_driver slow TIMEOUT MB\n");
        return 2;
    }
    double timeout = atof(argv[2]), mb = atof(argv[3]);
    mt_comm *w = mt_comm_world(ctx);
    int r = mt_comm_rank(w), n = mt_comm_size(w);
    size_t count = (size_t)(mb * 1048576.0 / sizeof(float));
    float *buf = malloc(count * sizeof(float));
    if (!buf) {
        fprintf(stderr, "comm_driver slow: out of memory for %.0f MB\n", mb);
        return 2;
    }
    for (size_t i = 0; i < count; i++) buf[i] = (float)(r + 1) + (float)(i % 7); /* pre-touched */
    mt_comm_barrier(w); /* under the default timeout: the ranks enter the all-reduce together */
    double saved = mt_comm_ctx_timeout(ctx);
    mt_comm_ctx_set_timeout(ctx, timeout);
    double t0 = MPI_Wtime();
    mt_comm_allreduce(w, buf, buf, count);
    double dt = MPI_Wtime() - t0;
    mt_comm_ctx_set_timeout(ctx, saved);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++)
        if (buf[i] != (float)(n * (n + 1) / 2) + (float)n * (float)(i % 7)) bad++;
    free(buf);
    printf("comm_driver slow: rank %d: all-reduce of %.0f MB took %.2f s under a %.2f s timeout, %zu wrong values\n", r,
           mb, dt, timeout, bad);
    return bad ? 1 : 0;
}

static double time_loop(int which, MPI_Comm raw, mt_comm *c, float *buf, int cnt, int iters) {
    MPI_Barrier(raw);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (which == 0) {
            MPI_Allreduce(MPI_IN_PLACE, buf, cnt, MPI_FLOAT, MPI_SUM, raw);
        } else if (which == 1) {
            MPI_Request q;
            MPI_Iallreduce(MPI_IN_PLACE, buf, cnt, MPI_FLOAT, MPI_SUM, raw, &q);
            MPI_Wait(&q, MPI_STATUS_IGNORE);
        } else {
            mt_comm_allreduce(c, buf, buf, (size_t)cnt);
        }
    }
    double t = (MPI_Wtime() - t0) / iters;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, raw);
    return t;
}

static int mode_overhead(mt_comm_ctx *ctx) {
    mt_comm *w = mt_comm_world(ctx);
    MPI_Comm raw; /* keeps MPI_ERRORS_ARE_FATAL: any failure aborts with MPI's message */
    if (MPI_Comm_dup(MPI_COMM_WORLD, &raw) != MPI_SUCCESS) return 1;
    static float buf[65536];
    int sizes[] = {2, 1024, 65536};
    if (mt_comm_rank(w) == 0)
        printf("overhead: %d ranks, us per all-reduce (best of 5 rounds): MPI_Allreduce | "
               "MPI_Iallreduce+MPI_Wait | mt_comm_allreduce\n",
               mt_comm_size(w));
    for (int si = 0; si < 3; si++) {
        int iters = si == 2 ? 100 : 1000;
        double best[3] = {1e9, 1e9, 1e9};
        for (int round = 0; round < 5; round++)
            for (int k = 0; k < 3; k++) {
                double t = time_loop(k, raw, w, buf, sizes[si], iters);
                if (t < best[k]) best[k] = t;
            }
        if (mt_comm_rank(w) == 0)
            printf("overhead: %7d bytes: %8.2f | %8.2f | %8.2f  (mt vs MPI_Allreduce %+.2f us)\n",
                   sizes[si] * 4, best[0] * 1e6, best[1] * 1e6, best[2] * 1e6,
                   (best[2] - best[0]) * 1e6);
    }
    /* bookkeeping alone: a size-1 group never touches MPI */
    mt_comm *self = NULL;
    mt_error err = {{0}};
    if (mt_comm_split(w, mt_comm_rank(w), 0, "self", &self, &err) == 0 && self) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < 100000; i++) mt_comm_allreduce(self, buf, buf, 2);
        double t = (MPI_Wtime() - t0) / 100000;
        if (mt_comm_rank(w) == 0) printf("overhead: size-1 group call: %.3f us\n", t * 1e6);
        mt_comm_free(self);
    }
    MPI_Comm_free(&raw);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
        fprintf(stderr, "comm_driver: MPI_Init failed\n");
        return 1;
    }
    /* Lets check_comm.sh kill exactly its own leftover processes. */
    const char *piddir = getenv("COMM_DRIVER_PIDDIR");
    if (piddir) {
        int wr = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &wr);
        char path[512];
        snprintf(path, sizeof path, "%s/pid.%d", piddir, wr);
        FILE *f = fopen(path, "w");
        if (!f) {
            fprintf(stderr, "comm_driver: cannot write %s\n", path);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        fprintf(f, "%ld\n", (long)getpid());
        fclose(f);
    }
    const char *mode = argc > 1 ? argv[1] : "collectives";
    int rc;
    if (!strcmp(mode, "bench")) {
        rc = mt_cli_bench_comm(argc - 1, argv + 1);
    } else {
        mt_error err = {{0}};
        mt_comm_ctx *ctx = mt_comm_ctx_create(30, &err);
        if (!ctx) {
            fprintf(stderr, "comm_driver: %s\n", err.msg);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        g_rank = mt_comm_rank(mt_comm_world(ctx));
        if (!strcmp(mode, "collectives")) rc = mode_collectives(ctx);
        else if (!strcmp(mode, "mesh")) rc = mode_mesh(ctx, argc, argv);
        else if (!strcmp(mode, "stall")) rc = mode_stall(ctx, argc, argv);
        else if (!strcmp(mode, "slow")) rc = mode_slow(ctx, argc, argv);
        else if (!strcmp(mode, "overhead")) rc = mode_overhead(ctx);
        else {
            fprintf(stderr, "comm_driver: unknown mode '%s'\n", mode);
            rc = 2;
        }
        mt_comm_ctx_free(ctx);
    }
    MPI_Finalize();
    return rc;
}
