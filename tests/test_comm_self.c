/* comm.h on a one-process world, as both backends give it: the MPI build
 * run without mpirun (an MPI singleton) and the build without MPI
 * (`make MPI=0`, src/comm/local.c). Checks:
 *   - every collective of a group of one is the identity copy (in place and
 *     not), the host and `_on(..., NULL)` forms alike, blocking and not;
 *   - the counters: calls and payload as comm.h documents them, zero bytes
 *     sent, a split counted as one barrier on the parent;
 *   - a non-NULL stream (the device hook, comm.h "Streams") is refused with
 *     one line naming it, in a child process (the refusal ends the job). */
#include <sys/wait.h>
#include "comm/comm.h"
#include "testlib.h"

static void check_identity(mt_comm *c) {
    enum { N = 37 };
    float a[N], b[N], ref[N];
    mt_bf16 h[N], hb[N];
    for (int i = 0; i < N; i++) ref[i] = a[i] = 0.25f * (float)i - 3.0f, h[i] = (mt_bf16)(0x3f80 + i);
    mt_comm_allreduce(c, a, b, N);
    CHECK(!memcmp(b, ref, sizeof b), "allreduce copy");
    mt_comm_allreduce(c, a, a, N);
    CHECK(!memcmp(a, ref, sizeof a), "allreduce in place");
    memset(b, 0, sizeof b);
    mt_comm_reduce_scatter(c, a, b, N);
    CHECK(!memcmp(b, ref, sizeof b), "reduce_scatter copy");
    memset(b, 0, sizeof b);
    mt_comm_allgather(c, a, b, sizeof a);
    CHECK(!memcmp(b, ref, sizeof b), "allgather copy");
    memset(b, 0, sizeof b);
    mt_comm_alltoall(c, a, b, sizeof a);
    CHECK(!memcmp(b, ref, sizeof b), "alltoall copy");
    memset(b, 0, sizeof b);
    size_t ab = sizeof a - sizeof a[0], ad = sizeof a[0]; /* all but the first float, into place 1 */
    mt_comm_alltoallv(c, a, &ab, &ad, b, &ab, &ad);
    CHECK(b[0] == 0.0f && !memcmp(b + 1, ref + 1, ab), "alltoallv copy");
    mt_comm_broadcast(c, a, sizeof a, 0);
    CHECK(!memcmp(a, ref, sizeof a), "broadcast leaves the root's buffer");
    mt_comm_req q[4] = {{0}};
    memset(b, 0, sizeof b);
    mt_comm_iallreduce_on(c, a, b, N, NULL, &q[0]);
    mt_comm_iallreduce_bf16_on(c, h, hb, N, NULL, &q[1]);
    CHECK(q[0].active && q[1].active, "started requests are active");
    mt_comm_waitall(q, 2);
    CHECK(!q[0].active && !q[1].active, "waited requests are inactive");
    CHECK(!memcmp(b, ref, sizeof b) && !memcmp(hb, h, sizeof hb), "iallreduce_on / bf16 copies");
    memset(hb, 0, sizeof hb);
    mt_comm_ireduce_scatter_bf16(c, h, hb, N, &q[2]);
    while (!mt_comm_test(&q[2])) {
    }
    CHECK(!memcmp(hb, h, sizeof hb), "ireduce_scatter_bf16 copy");
    CHECK(mt_comm_test(&q[3]), "an inactive request tests complete");
    int64_t v[2] = {5, -7}, w[2] = {0, 0};
    mt_comm_allreduce_ctl(c, v, w, 2, MT_COMM_I64, MT_COMM_MAX);
    CHECK(w[0] == 5 && w[1] == -7, "allreduce_ctl copy");
}

/* calls and payload per kind after check_identity on a fresh group */
static void check_counters(const mt_comm *c) {
    const mt_comm_stats *s = mt_comm_get_stats(c);
    const uint64_t B = 37 * sizeof(float), H = 37 * sizeof(mt_bf16);
    struct { mt_comm_kind k; uint64_t calls, payload; } want[] = {
        {MT_COMM_ALLREDUCE, 4, 3 * B + H}, {MT_COMM_ALLREDUCE_CTL, 1, 16}, {MT_COMM_REDUCE_SCATTER, 2, B + H},
        {MT_COMM_ALLGATHER, 1, B},         {MT_COMM_BROADCAST, 1, B},      {MT_COMM_ALLTOALL, 1, B}, {MT_COMM_ALLTOALLV, 1, B - 4},
        {MT_COMM_BARRIER, 0, 0},           {MT_COMM_SEND, 0, 0},           {MT_COMM_RECV, 0, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const mt_comm_counter *k = &s->k[want[i].k];
        CHECK(k->calls == want[i].calls && k->payload_bytes == want[i].payload,
              "%s: calls %llu payload %llu, want %llu %llu", mt_comm_kind_name(want[i].k),
              (unsigned long long)k->calls, (unsigned long long)k->payload_bytes,
              (unsigned long long)want[i].calls, (unsigned long long)want[i].payload);
        CHECK(k->bytes_sent == 0 && k->bytes_inter == 0, "%s sends nothing on a group of one",
              mt_comm_kind_name(want[i].k));
    }
}

/* The child starts an all-reduce on a stream; it must end with
 * MT_COMM_EXIT_MPI and one line on stderr naming the stream. */
static void check_stream_refused(const char *dir) {
    char errpath[512];
    snprintf(errpath, sizeof errpath, "%s/err", dir);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(errpath, "w", stderr)) _exit(90);
        int argc = 1;
        char *args[] = {"test_comm_self", NULL}, **argv = args;
        mt_error err = {{0}};
        if (mt_comm_process_init(&argc, &argv, &err)) _exit(91);
        mt_comm_ctx *ctx = mt_comm_ctx_create(10, &err);
        if (!ctx) _exit(92);
        float x = 1;
        mt_comm_req r = {0};
        mt_comm_iallreduce_on(mt_comm_world(ctx), &x, &x, 1, (mt_comm_stream *)&x, &r);
        _exit(93); /* not reached: the stream is refused */
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "fork/wait");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == MT_COMM_EXIT_MPI, "stream refusal: exit status %d, want %d",
          WIFEXITED(st) ? WEXITSTATUS(st) : -1, MT_COMM_EXIT_MPI);
    size_t n = 0;
    char *text = slurp(errpath, &n);
    CHECK(text && strstr(text, "bad communication call on group 'world': allreduce ordered on a device stream"),
          "stream refusal message: %s", text ? text : "(none)");
    free(text);
}

int main(int argc, char **argv) {
    char dir[] = "/tmp/test_comm_self.XXXXXX";
    tl_mkdtemp(dir);
    check_stream_refused(dir); /* before this process starts MPI: a fork after it is not safe */
    mt_error err = {{0}};
    CHECK(mt_comm_process_init(&argc, &argv, &err) == 0, "process init: %s", err.msg);
    CHECK(mt_comm_process_size() == 1 && mt_comm_process_rank() == 0, "a one-process world");
    mt_comm_ctx *ctx = mt_comm_ctx_create(10, &err);
    CHECK(ctx != NULL, "context: %s", err.msg);
    if (ctx) {
        mt_comm *w = mt_comm_world(ctx);
        CHECK(mt_comm_size(w) == 1 && mt_comm_rank(w) == 0 && mt_comm_world_rank_of(w, 0) == 0, "world of one");
        mt_comm *g = NULL, *none = NULL;
        CHECK(mt_comm_split(w, 0, 0, "group", &g, &err) == 0 && g, "split: %s", err.msg);
        CHECK(mt_comm_split(w, -1, 0, "none", &none, &err) == 0 && !none, "color < 0: no group");
        CHECK(mt_comm_get_stats(w)->k[MT_COMM_BARRIER].calls == 2, "each split is one barrier on the parent");
        if (g) {
            CHECK(!strcmp(mt_comm_name(g), "group") && mt_comm_size(g) == 1, "split group");
            check_identity(g);
            check_counters(g);
            CHECK(mt_comm_wait_total_s(g) >= 0, "wait total");
            mt_comm_reset_stats(g);
            CHECK(mt_comm_get_stats(g)->k[MT_COMM_ALLREDUCE].calls == 0, "reset");
            mt_comm_free(g);
        }
        mt_comm_ctx_free(ctx);
    }
    mt_comm_process_finalize();
    rm_tree(dir);
    TEST_MAIN_END("test_comm_self");
}
