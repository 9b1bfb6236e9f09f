/* Local implementation of comm.h: one process, no MPI (`make MPI=0`, built
 * with the plain C compiler and linked without libmpi; what the one-process
 * GPU build uses on a machine without Open MPI). The world and every group
 * split from it have size 1, so each operation is what mpi.c does on a group
 * of one -- a copy or nothing -- with the same counters (calls, payload,
 * zero bytes sent, wait time) and the same argument checks, so a one-process
 * run is bitwise the run of the MPI build. A launcher that started more than
 * one copy of this build is refused at mt_comm_process_init. */
#include "comm/comm.h"
#include "core/clock.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mt_comm {
    mt_comm_ctx *ctx;
    char name[MT_COMM_NAME_LEN];
    uint64_t entered; /* collectives started on this communicator */
    mt_comm_stats stats;
};

struct mt_comm_ctx {
    double timeout_s; /* kept for the interface; nothing here ever waits */
    double wait_s;    /* time inside waits and tests, every communicator */
    mt_comm *world;
    int ncomms;       /* live communicators, the world included */
    mt_comm_device dev; /* a device's hooks (mt_comm_set_device): copies of device buffers on its stream */
    int has_dev;
    mt_comm_stream *compute;
};

/* ------------------------------------------------------------------ errors */

__attribute__((format(printf, 2, 3))) static _Noreturn void usage_fail(const mt_comm *c, const char *fmt, ...) {
    char detail[384] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    fprintf(stderr, "meshtrain: rank 0: bad communication call on group '%s': %s; aborting\n", c ? c->name : "-",
            detail);
    mt_comm_process_abort(MT_COMM_EXIT_MPI);
}

/* ------------------------------------------------------------------ process */

/* The variables by which launchers tell a process how many they started:
 * Open MPI's mpirun, MPICH's (and Intel MPI's) hydra, Slurm's srun. */
static const char *const launcher_size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
static const char *const launcher_rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};

static long env_long(const char *name, long fallback) {
    const char *v = getenv(name);
    char *end = NULL;
    long x = v && *v ? strtol(v, &end, 10) : fallback;
    return v && *v && end && !*end ? x : fallback;
}

int mt_comm_process_init(int *argc, char ***argv, mt_error *err) {
    (void)argc, (void)argv;
    for (size_t i = 0; i < sizeof launcher_size_vars / sizeof *launcher_size_vars; i++) {
        long n = env_long(launcher_size_vars[i], 1);
        if (n > 1)
            return mt_errorf(err, "this meshtrain was built without MPI (make MPI=0) and runs one process, but a "
                                  "launcher started %ld (%s=%ld); use the MPI build (make) to run several processes",
                             n, launcher_size_vars[i], n);
    }
    return 0;
}

void mt_comm_process_finalize(void) {}

_Noreturn void mt_comm_process_abort(int code) {
    fflush(stdout);
    fflush(stderr);
    _Exit(code);
}

/* 0, except in a process refused by mt_comm_process_init: the rank its
 * launcher gave it, so that one of them (rank 0) says why. */
int mt_comm_process_rank(void) {
    for (size_t i = 0; i < sizeof launcher_rank_vars / sizeof *launcher_rank_vars; i++) {
        long r = env_long(launcher_rank_vars[i], 0);
        if (r > 0 && r <= 1L << 30) return (int)r;
    }
    return 0;
}
int mt_comm_process_size(void) { return 1; }
int mt_comm_process_all_failed(double wait_s) {
    (void)wait_s;
    return 1;
}
int mt_comm_process_launched(void) { return getenv("OMPI_COMM_WORLD_RANK") || getenv("PMI_RANK"); }

/* ------------------------------------------------------------------ context */

static mt_comm *make_comm(mt_comm_ctx *x, const char *name, mt_error *err) {
    mt_comm *c = calloc(1, sizeof *c);
    if (!c) {
        mt_errorf(err, "out of memory allocating communicator '%s'", name);
        return NULL;
    }
    c->ctx = x;
    snprintf(c->name, sizeof c->name, "%s", name);
    x->ncomms++;
    return c;
}

mt_comm_ctx *mt_comm_ctx_create(double timeout_s, mt_error *err) {
    mt_comm_ctx *x = calloc(1, sizeof *x);
    if (!x) {
        mt_errorf(err, "out of memory allocating the communication context");
        return NULL;
    }
    mt_comm_ctx_set_timeout(x, timeout_s);
    x->world = make_comm(x, "world", err);
    if (!x->world) {
        free(x);
        return NULL;
    }
    return x;
}

void mt_comm_ctx_free(mt_comm_ctx *x) {
    if (!x) return;
    if (x->ncomms > 1)
        fprintf(stderr, "meshtrain: rank 0: warning: %d communicators still alive when the "
                        "communication context was freed (free them first)\n",
                x->ncomms - 1);
    mt_comm_free(x->world);
    free(x);
}

int mt_comm_ctx_set_ranks_per_node(mt_comm_ctx *x, int ranks_per_node, mt_error *err) {
    (void)x;
    if (ranks_per_node < 1) return mt_errorf(err, "{ranks-per-node} must be >= 1, got %d", ranks_per_node);
    return 0;
}
int mt_comm_node_count(const mt_comm *c) {
    (void)c;
    return 1;
}
int mt_comm_node_of(const mt_comm *c, int r) {
    (void)c, (void)r;
    return 0;
}
void mt_comm_ctx_set_timeout(mt_comm_ctx *x, double t) {
    x->timeout_s = (t > 0 && isfinite(t)) ? t : MT_COMM_DEFAULT_TIMEOUT_S;
}
double mt_comm_ctx_timeout(const mt_comm_ctx *x) { return x->timeout_s; }
mt_comm *mt_comm_world(mt_comm_ctx *x) { return x->world; }
double mt_comm_wait_total_s(const mt_comm *c) { return c->ctx->wait_s; }

void mt_comm_host_name(char *buf, size_t n) {
    char name[256];
    if (gethostname(name, sizeof name) != 0) snprintf(name, sizeof name, "?");
    name[sizeof name - 1] = 0;
    snprintf(buf, n, "%s", name);
}

/* ------------------------------------------------------------------ communicators */

int mt_comm_split(mt_comm *parent, int color, int key, const char *name, mt_comm **out, mt_error *err) {
    (void)key;
    *out = NULL;
    mt_comm_barrier(parent); /* counted as mpi.c counts its timed barrier */
    if (color < 0) return 0;
    mt_comm *c = make_comm(parent->ctx, name, err);
    if (!c) return -1;
    *out = c;
    return 0;
}

void mt_comm_free(mt_comm *c) {
    if (!c) return;
    c->ctx->ncomms--;
    free(c);
}

int mt_comm_rank(const mt_comm *c) {
    (void)c;
    return 0;
}
int mt_comm_size(const mt_comm *c) {
    (void)c;
    return 1;
}
const char *mt_comm_name(const mt_comm *c) { return c->name; }
int mt_comm_world_rank_of(const mt_comm *c, int r) {
    (void)c;
    return r == 0 ? 0 : -1;
}
const mt_comm_stats *mt_comm_get_stats(const mt_comm *c) { return &c->stats; }
void mt_comm_reset_stats(mt_comm *c) { memset(&c->stats, 0, sizeof c->stats); }

/* ------------------------------------------------------------------ device buffers */

void mt_comm_set_device(mt_comm *c, const mt_comm_device *dev, mt_comm_stream *compute) {
    mt_comm_ctx *x = c->ctx;
    x->has_dev = dev != NULL;
    if (dev) x->dev = *dev;
    x->compute = dev ? compute : NULL;
}
/* One process: every group has size 1, so no NCCL communicator is ever made (copies only). */
int mt_comm_use_nccl(mt_comm *c, mt_error *err) {
    if (!mt_comm_nccl_hooks())
        return mt_errorf(err, "{comm} nccl: this meshtrain was built without NCCL: use build-gpu/meshtrain-mpi "
                              "(`make gpu-mpi`), or {comm} mpi");
    if (!c->ctx->has_dev) return mt_errorf(err, "{comm} nccl needs the device's streams ({device} cuda)");
    return 0;
}
int mt_comm_local_rank(const mt_comm *c) {
    (void)c;
    return 0;
}
int mt_comm_local_size(const mt_comm *c) {
    (void)c;
    return 1;
}

/* The stream an operation is ordered on: the one named, or the device's
 * compute stream for a device buffer, else none (the host). */
static mt_comm_stream *order_of(const mt_comm *c, mt_comm_stream *s, const void *a, const void *b, size_t bytes,
                                const char *what) {
    const mt_comm_ctx *x = c->ctx;
    if (s && !x->has_dev)
        usage_fail(c, "%s ordered on a device stream, but no device hooks are installed (mt_comm_set_device); "
                      "pass no stream (NULL) for host buffers", what);
    if (s || !x->has_dev || !bytes) return s;
    if ((a && x->dev.is_device(x->dev.ctx, a, bytes)) || (b && x->dev.is_device(x->dev.ctx, b, bytes)))
        return x->compute;
    return NULL;
}

/* ------------------------------------------------------------------ requests */

static void begin(mt_comm *c, mt_comm_req *r, int kind, int peer, size_t payload, mt_comm_stream *stream) {
    if (r->active)
        usage_fail(c, "%s started on a request that is still in flight (%s on '%s'); wait for it "
                      "first, and zero-initialise new requests",
                   mt_comm_kind_name(kind), mt_comm_kind_name(r->kind), r->comm ? r->comm->name : "?");
    memset(r->handle, 0, sizeof r->handle);
    r->stream = stream;
    r->comm = c;
    r->kind = kind;
    r->peer = peer;
    r->active = 1;
    r->bytes = payload;
    r->seq = (kind == MT_COMM_SEND || kind == MT_COMM_RECV) ? 0 : ++c->entered;
    mt_comm_counter *k = &c->stats.k[kind];
    k->calls++;
    k->payload_bytes += payload; /* bytes sent and crossing nodes: 0 on a group of one */
}

/* Every operation of a group of one is complete once started: a test or a
 * wait only finishes the bookkeeping, timed like mpi.c's. */
static void finish(mt_comm_req *r, double t0) {
    double dt = mt_clock_s() - t0;
    r->active = 0;
    r->comm->stats.k[r->kind].wait_s += dt;
    r->comm->ctx->wait_s += dt;
}

int mt_comm_test(mt_comm_req *r) {
    if (r->active) finish(r, mt_clock_s());
    return 1;
}

void mt_comm_wait(mt_comm_req *r) {
    if (r->active) finish(r, mt_clock_s());
}

/* ------------------------------------------------------------------ operations */

static void check_root(const mt_comm *c, int root, const char *what) {
    if (root != 0) usage_fail(c, "%s rank %d out of range [0, 1)", what, root);
}

static void check_tag(const mt_comm *c, int tag) {
    if (tag < 0 || tag > 32767)
        usage_fail(c, "message tag %d out of range [0, 32767] (the MPI-guaranteed range)", tag);
}

/* A group of one: a copy, on the device stream for device buffers. */
static void copy_on(const mt_comm *c, mt_comm_stream *s, const void *send, void *recv, size_t bytes) {
    if (send == recv || !bytes) return;
    if (s) c->ctx->dev.copy(c->ctx->dev.ctx, recv, send, bytes, s);
    else memmove(recv, send, bytes);
}
static void copy(const void *send, void *recv, size_t bytes) {
    if (send != recv && bytes) memmove(recv, send, bytes);
}
#define ORDER(what, snd, rcv, bytes) (s = order_of(c, s, (snd), (rcv), (bytes), (what)))

void mt_comm_iallreduce_on(mt_comm *c, const float *send, float *recv, size_t count, mt_comm_stream *s,
                           mt_comm_req *r) {
    ORDER("allreduce", send, recv, count * sizeof(float));
    begin(c, r, MT_COMM_ALLREDUCE, -1, count * sizeof(float), s);
    copy_on(c, s, send, recv, count * sizeof(float));
}
void mt_comm_ireduce_scatter_on(mt_comm *c, const float *send, float *recv, size_t count, mt_comm_stream *s,
                                mt_comm_req *r) {
    ORDER("reduce_scatter", send, recv, count * sizeof(float));
    begin(c, r, MT_COMM_REDUCE_SCATTER, -1, count * sizeof(float), s);
    copy_on(c, s, send, recv, count * sizeof(float));
}
void mt_comm_iallreduce_bf16_on(mt_comm *c, const mt_bf16 *send, mt_bf16 *recv, size_t count, mt_comm_stream *s,
                                mt_comm_req *r) {
    ORDER("allreduce", send, recv, count * sizeof(mt_bf16));
    begin(c, r, MT_COMM_ALLREDUCE, -1, count * sizeof(mt_bf16), s);
    copy_on(c, s, send, recv, count * sizeof(mt_bf16));
}
void mt_comm_ireduce_scatter_bf16_on(mt_comm *c, const mt_bf16 *send, mt_bf16 *recv, size_t count,
                                     mt_comm_stream *s, mt_comm_req *r) {
    ORDER("reduce_scatter", send, recv, count * sizeof(mt_bf16));
    begin(c, r, MT_COMM_REDUCE_SCATTER, -1, count * sizeof(mt_bf16), s);
    copy_on(c, s, send, recv, count * sizeof(mt_bf16));
}
void mt_comm_iallgather_on(mt_comm *c, const void *send, void *recv, size_t bytes, mt_comm_stream *s,
                           mt_comm_req *r) {
    ORDER("allgather", send, recv, bytes);
    begin(c, r, MT_COMM_ALLGATHER, -1, bytes, s);
    copy_on(c, s, send, recv, bytes);
}
void mt_comm_ibroadcast_on(mt_comm *c, void *buf, size_t bytes, int root, mt_comm_stream *s, mt_comm_req *r) {
    (void)buf;
    check_root(c, root, "broadcast root");
    ORDER("broadcast", buf, NULL, bytes);
    begin(c, r, MT_COMM_BROADCAST, -1, bytes, s);
}
/* A message to itself would need a matching queue that no caller uses (a
 * pipeline of one stage sends nothing): refused like a bad peer. */
void mt_comm_isend_on(mt_comm *c, const void *buf, size_t bytes, int peer, int tag, mt_comm_stream *s,
                      mt_comm_req *r) {
    (void)buf, (void)bytes, (void)s, (void)r;
    check_root(c, peer, "send destination");
    check_tag(c, tag);
    usage_fail(c, "send of %zu bytes to itself (tag %d): the one-process build has no messages to self", bytes, tag);
}
void mt_comm_irecv_on(mt_comm *c, void *buf, size_t bytes, int peer, int tag, mt_comm_stream *s, mt_comm_req *r) {
    (void)buf, (void)bytes, (void)s, (void)r;
    check_root(c, peer, "recv source");
    check_tag(c, tag);
    usage_fail(c, "recv of %zu bytes from itself (tag %d): the one-process build has no messages to self", bytes,
               tag);
}

void mt_comm_alltoall(mt_comm *c, const void *send, void *recv, size_t bytes) {
    mt_comm_req r = {0};
    begin(c, &r, MT_COMM_ALLTOALL, -1, bytes, NULL);
    if (bytes) memmove(recv, send, bytes);
    mt_comm_wait(&r);
}

void mt_comm_alltoallv(mt_comm *c, const void *send, const size_t *send_bytes, const size_t *send_displs, void *recv,
                       const size_t *recv_bytes, const size_t *recv_displs) {
    if (send_bytes[0] != recv_bytes[0])
        usage_fail(c, "alltoallv sends %zu bytes to this rank itself but expects %zu; the counts disagree",
                   send_bytes[0], recv_bytes[0]);
    mt_comm_req r = {0};
    begin(c, &r, MT_COMM_ALLTOALLV, -1, send_bytes[0], NULL);
    if (send_bytes[0]) memmove((char *)recv + recv_displs[0], (const char *)send + send_displs[0], send_bytes[0]);
    mt_comm_wait(&r);
}

void mt_comm_barrier(mt_comm *c) {
    mt_comm_req r = {0};
    begin(c, &r, MT_COMM_BARRIER, -1, 0, NULL);
    mt_comm_wait(&r);
}

void mt_comm_allreduce_ctl(mt_comm *c, const void *send, void *recv, size_t count, mt_comm_dtype dt,
                           mt_comm_op op) {
    size_t es;
    switch (dt) {
    case MT_COMM_F64: es = 8; break;
    case MT_COMM_I32: es = 4; break;
    case MT_COMM_I64: es = 8; break;
    default: usage_fail(c, "allreduce_ctl: unknown dtype %d", (int)dt);
    }
    if (op != MT_COMM_SUM && op != MT_COMM_MAX && op != MT_COMM_MIN)
        usage_fail(c, "allreduce_ctl: unknown op %d", (int)op);
    mt_comm_req r = {0};
    begin(c, &r, MT_COMM_ALLREDUCE_CTL, -1, count * es, NULL);
    copy(send, recv, count * es);
    mt_comm_wait(&r);
}
