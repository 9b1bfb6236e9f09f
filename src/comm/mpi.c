/* MPI implementation of comm.h. See the header for the contract; the notes
 * here are about how it is done.
 *
 * Every operation is started non-blocking and completed by wait_req(), a
 * polling loop with a deadline. Status queries from ranks that timed out
 * arrive on ctx->diag (a private duplicate of MPI_COMM_WORLD, so they never
 * match user messages) through one pre-posted MPI_Irecv(ANY_SOURCE); every
 * poll iteration tests it and answers from a small pool of reply buffers. */
#include "comm/comm.h"
#include "core/checksum.h"
#include <mpi.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum { TAG_QUERY = 101, TAG_REPLY = 102 };
#define NREPLY 16
#ifndef SPINS_BEFORE_YIELD
#define SPINS_BEFORE_YIELD 64
#endif
/* More ranks on a node than its CPUs: a waiting rank sleeps this long
 * between polls instead of yielding. A yielding rank stays runnable and the
 * scheduler still gives it its share of the core -- taken from the rank it
 * waits for (a pipeline on 2 cores with 4 ranks ran 50 or 72 ms a step by
 * where the scheduler put them; sleeping, 52 ms every run). With a core per
 * rank spinning is faster (sleeps cost tp's many small collectives ~25%). */
#define OVERSUBSCRIBED_SLEEP_NS 30000L
/* A wait whose ranks all answer goes on for at most this many timeouts. */
#define MT_COMM_SLOW_TIMEOUTS 10

typedef struct {
    int64_t qid;
    int64_t comm_id;
} query_msg;

typedef struct {
    int64_t qid;
    int64_t comm_id;
    int64_t entered;     /* collectives entered on comm_id; -1: not a member */
    int64_t cur_kind;    /* what the replier waits in now; -1: nothing */
    int64_t cur_seq;
    int64_t cur_peer;    /* group rank of the peer for send/recv */
    char cur_name[MT_COMM_NAME_LEN];
} reply_msg;

struct mt_comm {
    mt_comm_ctx *ctx;
    MPI_Comm comm;
    int rank, size;
    int64_t id; /* agreed by all members at creation; -1 while agreeing */
    char name[MT_COMM_NAME_LEN];
    int *world_ranks;
    int *a2a;         /* [4 size] an all-to-all-v's counts and displacements as MPI's ints */
    uint64_t entered; /* collectives started on this communicator */
    mt_comm_stats stats;
    void *nccl;                  /* its NCCL communicator ({comm} nccl, groups of more than one rank) */
    mt_comm_stream *nccl_stream; /* the stream its NCCL operations run on */
};

#define HOST_LEN 48

struct mt_comm_ctx {
    MPI_Comm diag;
    MPI_Group world_group;
    int world_rank, world_size;
    int *node_of;      /* [world_size] node of each world rank (the world rank of its first rank) */
    char (*host_of)[HOST_LEN]; /* [world_size] each world rank's host (MPI_Get_processor_name, truncated) */
    double timeout_s;
    int slow_warned;   /* said once that a slow operation is waited on */
    int64_t next_id;
    mt_comm *world;
    mt_comm **comms;
    int ncomms, capcomms;
    MPI_Request q_req;
    query_msg q_in;
    MPI_Request rep_req[NREPLY];
    reply_msg rep_out[NREPLY];
    int64_t next_qid;
    /* the operation this rank is waiting in (for replies) */
    const mt_comm *cur_comm;
    int cur_kind;
    uint64_t cur_seq;
    int cur_peer;
    MPI_Op bf16_sum; /* the sum of two bf16 vectors (gradients reduced in bf16) */
    int oversubscribed; /* more ranks share this node's memory than it has online CPUs */
    double wait_s;      /* time inside waits and tests, every communicator (mt_comm_wait_total_s) */
    int local_rank, local_size; /* among the ranks of this node (shared memory, or the ranks-per-node override) */
    /* staged operations on device buffers (comm.h, "Streams and device buffers") */
    mt_comm_device dev;
    int has_dev;
    mt_comm_stream *compute; /* the stream an operation on a device buffer is ordered on by default */
    void *ev_start;          /* recorded on the ordering stream at a start; the communication stream waits for it */
    struct stage_slot **slots;
    int nslots, capslots;
    /* Staged operations post their MPI call once their copy in completed, in the order they started
       (MPI needs a group's collectives in the same order on every rank, and a send's messages in order):
       a queue, advanced by every start, test and wait, whichever request they are for -- a rank waiting
       for a receive still posts the send its peer waits for. */
    struct stage_slot *pending_head, *pending_tail;
    const mt_comm_nccl *nccl; /* {comm} nccl: the hooks (comm/nccl.c) */
};

/* ------------------------------------------------------------------ errors */

static int my_world_rank(const mt_comm *c) {
    if (c && c->ctx) return c->ctx->world_rank;
    int r = -1;
    if (MPI_Comm_rank(MPI_COMM_WORLD, &r) != MPI_SUCCESS) r = -1;
    return r;
}

static _Noreturn void abort_job(int code) {
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    _Exit(code); /* MPI_Abort should not return */
}

__attribute__((format(printf, 4, 5))) static _Noreturn void mpi_fail(const mt_comm *c, int rc,
                                                                     const char *fn,
                                                                     const char *fmt, ...) {
    char es[MPI_MAX_ERROR_STRING + 1] = "unknown error";
    int len = 0;
    if (MPI_Error_string(rc, es, &len) != MPI_SUCCESS) snprintf(es, sizeof es, "error code %d", rc);
    char detail[256] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    fprintf(stderr,
            "meshtrain: rank %d: %s failed on group '%s' (size %d, %s): %s; aborting the job "
            "(check the other ranks' messages and the MPI installation)\n",
            my_world_rank(c), fn, c ? c->name : "-", c ? c->size : 0, detail, es);
    abort_job(MT_COMM_EXIT_MPI);
}

__attribute__((format(printf, 2, 3))) static _Noreturn void usage_fail(const mt_comm *c,
                                                                       const char *fmt, ...) {
    char detail[384] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    fprintf(stderr, "meshtrain: rank %d: bad communication call on group '%s': %s; aborting\n",
            my_world_rank(c), c ? c->name : "-", detail);
    abort_job(MT_COMM_EXIT_MPI);
}

#define CK(c, fn, call, ...)                                         \
    do {                                                             \
        int rc_ = (call);                                            \
        if (rc_ != MPI_SUCCESS) mpi_fail((c), rc_, fn, __VA_ARGS__); \
    } while (0)

static int to_int(const mt_comm *c, size_t n, const char *what) {
    if (n > (size_t)INT_MAX)
        usage_fail(c, "%s = %zu exceeds the MPI limit of %d elements; split the buffer", what, n,
                   INT_MAX);
    return (int)n;
}

/* ------------------------------------------------------------------ process */

int mt_comm_process_init(int *argc, char ***argv, mt_error *err) {
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return mt_errorf(err, "MPI_Init failed; is the MPI installation working?");
    return 0;
}

void mt_comm_process_finalize(void) {
    if (MPI_Finalize() != MPI_SUCCESS)
        fprintf(stderr, "meshtrain: rank %d: warning: MPI_Finalize failed\n", my_world_rank(NULL));
}

_Noreturn void mt_comm_process_abort(int code) { abort_job(code); }

int mt_comm_process_rank(void) {
    int inited = 0, r = 0;
    if (MPI_Initialized(&inited) != MPI_SUCCESS || !inited || MPI_Comm_rank(MPI_COMM_WORLD, &r) != MPI_SUCCESS)
        return 0;
    return r;
}

int mt_comm_process_size(void) {
    int inited = 0, n = 1;
    if (MPI_Initialized(&inited) != MPI_SUCCESS || !inited || MPI_Comm_size(MPI_COMM_WORLD, &n) != MPI_SUCCESS)
        return 1;
    return n;
}

int mt_comm_process_all_failed(double wait_s) {
    if (mt_comm_process_size() == 1) return 1;
    int mine = 1, all = 0, done = 0;
    MPI_Request req;
    if (MPI_Iallreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req) != MPI_SUCCESS) return 0;
    double t0 = MPI_Wtime();
    while (!done && MPI_Wtime() - t0 < wait_s) {
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
        if (!done) {
            struct timespec pause = {0, 1000000};
            nanosleep(&pause, NULL);
        }
    }
    return done && all == 1;
}

/* mpirun (Open MPI), mpiexec (MPICH hydra); a singleton sets neither */
int mt_comm_process_launched(void) { return getenv("OMPI_COMM_WORLD_RANK") || getenv("PMI_RANK"); }

/* ------------------------------------------------------------------ counters */

const mt_comm_stats *mt_comm_get_stats(const mt_comm *c) { return &c->stats; }
void mt_comm_reset_stats(mt_comm *c) { memset(&c->stats, 0, sizeof c->stats); }
int mt_comm_rank(const mt_comm *c) { return c->rank; }
int mt_comm_size(const mt_comm *c) { return c->size; }
const char *mt_comm_name(const mt_comm *c) { return c->name; }
int mt_comm_world_rank_of(const mt_comm *c, int r) {
    return (r >= 0 && r < c->size) ? c->world_ranks[r] : -1;
}

/* ------------------------------------------------------------------ context */

static void register_comm(mt_comm_ctx *x, mt_comm *c) {
    if (x->ncomms == x->capcomms) {
        int cap = x->capcomms ? 2 * x->capcomms : 16;
        mt_comm **p = realloc(x->comms, (size_t)cap * sizeof *p);
        if (!p) usage_fail(c, "out of memory growing the communicator list to %d entries", cap);
        x->comms = p;
        x->capcomms = cap;
    }
    x->comms[x->ncomms++] = c;
}

static void unregister_comm(mt_comm_ctx *x, mt_comm *c) {
    for (int i = 0; i < x->ncomms; i++)
        if (x->comms[i] == c) {
            x->ncomms--;
            x->comms[i] = x->comms[x->ncomms];
            return;
        }
}

/* Wraps an MPI communicator (takes ownership). */
static mt_comm *make_comm(mt_comm_ctx *x, MPI_Comm mc, const char *name, int64_t id,
                          mt_error *err) {
    mt_comm *c = calloc(1, sizeof *c);
    if (!c) {
        mt_errorf(err, "out of memory allocating communicator '%s'", name);
        return NULL;
    }
    c->ctx = x;
    c->comm = mc;
    c->id = id;
    snprintf(c->name, sizeof c->name, "%s", name);
    CK(c, "MPI_Comm_set_errhandler", MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN), "new group");
    CK(c, "MPI_Comm_rank", MPI_Comm_rank(mc, &c->rank), "new group");
    CK(c, "MPI_Comm_size", MPI_Comm_size(mc, &c->size), "new group");
    c->world_ranks = malloc((size_t)c->size * sizeof(int));
    c->a2a = malloc(4 * (size_t)c->size * sizeof(int));
    int *idx = malloc((size_t)c->size * sizeof(int));
    if (!c->world_ranks || !idx || !c->a2a) {
        mt_errorf(err, "out of memory allocating the rank table of communicator '%s' (%d ranks)",
                  name, c->size);
        free(idx);
        free(c->a2a);
        free(c->world_ranks);
        free(c);
        return NULL;
    }
    for (int i = 0; i < c->size; i++) idx[i] = i;
    MPI_Group g;
    CK(c, "MPI_Comm_group", MPI_Comm_group(mc, &g), "new group");
    CK(c, "MPI_Group_translate_ranks",
       MPI_Group_translate_ranks(g, c->size, idx, x->world_group, c->world_ranks), "new group");
    CK(c, "MPI_Group_free", MPI_Group_free(&g), "new group");
    free(idx);
    register_comm(x, c);
    return c;
}

/* MPI has no bf16 type: a bf16 sum is a user operation on 16-bit words,
 * each pairwise addition done in fp32 and rounded back (what a bf16
 * all-reduce on a GPU does). Chunks keep the fp32 buffers on the stack. */
static void bf16_sum_fn(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    enum { CH = 1024 };
    const mt_bf16 *a = in;
    mt_bf16 *b = inout;
    float fa[CH];
    for (int i = 0; i < *len; i += CH) {
        size_t k = (size_t)(*len - i < CH ? *len - i : CH);
        mt_convert_bf16_to_fp32(fa, a + i, k);
        mt_accumulate_16(MT_BF16, b + i, fa, k);
    }
}

mt_comm_ctx *mt_comm_ctx_create(double timeout_s, mt_error *err) {
    int inited = 0;
    if (MPI_Initialized(&inited) != MPI_SUCCESS || !inited) {
        mt_errorf(err, "mt_comm_ctx_create: MPI is not initialised; call MPI_Init first");
        return NULL;
    }
    mt_comm_ctx *x = calloc(1, sizeof *x);
    if (!x) {
        mt_errorf(err, "out of memory allocating the communication context");
        return NULL;
    }
    mt_comm_ctx_set_timeout(x, timeout_s);
    x->q_req = MPI_REQUEST_NULL;
    for (int i = 0; i < NREPLY; i++) x->rep_req[i] = MPI_REQUEST_NULL;
    x->cur_kind = -1;
    CK(NULL, "MPI_Comm_rank", MPI_Comm_rank(MPI_COMM_WORLD, &x->world_rank), "MPI_COMM_WORLD");
    CK(NULL, "MPI_Comm_size", MPI_Comm_size(MPI_COMM_WORLD, &x->world_size), "MPI_COMM_WORLD");
    CK(NULL, "MPI_Comm_group", MPI_Comm_group(MPI_COMM_WORLD, &x->world_group), "MPI_COMM_WORLD");
    CK(NULL, "MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &x->diag), "diagnosis channel");
    CK(NULL, "MPI_Comm_set_errhandler", MPI_Comm_set_errhandler(x->diag, MPI_ERRORS_RETURN),
       "diagnosis channel");
    MPI_Comm w;
    CK(NULL, "MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &w), "world group");
    x->world = make_comm(x, w, "world", 0, err);
    if (!x->world) {
        MPI_Comm_free(&w);
        MPI_Comm_free(&x->diag);
        free(x);
        return NULL;
    }
    x->next_id = 1;
    /* Nodes: the ranks that share memory (MPI-3), each named by the world
     * rank of its first member. */
    x->node_of = malloc((size_t)x->world_size * sizeof(int));
    if (!x->node_of) usage_fail(x->world, "out of memory allocating the node table (%d ranks)", x->world_size);
    MPI_Comm shm;
    CK(x->world, "MPI_Comm_split_type",
       MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, x->world_rank, MPI_INFO_NULL, &shm), "node group");
    int first = x->world_rank, local = 1;
    CK(x->world, "MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, shm), "node group");
    CK(x->world, "MPI_Comm_size", MPI_Comm_size(shm, &local), "node group");
    CK(x->world, "MPI_Comm_rank", MPI_Comm_rank(shm, &x->local_rank), "node group");
    x->local_size = local;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    x->oversubscribed = cpus > 0 && local > cpus;
    CK(x->world, "MPI_Comm_free", MPI_Comm_free(&shm), "node group");
    CK(x->world, "MPI_Allgather", MPI_Allgather(&first, 1, MPI_INT, x->node_of, 1, MPI_INT, w), "node table");
    /* Hosts, by name: a timeout names the host of each rank that did not arrive. */
    x->host_of = calloc((size_t)x->world_size, HOST_LEN);
    if (!x->host_of) usage_fail(x->world, "out of memory allocating the host table (%d ranks)", x->world_size);
    char host[HOST_LEN];
    mt_comm_host_name(host, sizeof host);
    CK(x->world, "MPI_Allgather", MPI_Allgather(host, HOST_LEN, MPI_CHAR, x->host_of, HOST_LEN, MPI_CHAR, w),
       "host table");
    CK(x->world, "MPI_Op_create", MPI_Op_create(bf16_sum_fn, 1, &x->bf16_sum), "bf16 sum");
    CK(x->world, "MPI_Irecv", MPI_Irecv(&x->q_in, (int)sizeof x->q_in, MPI_BYTE, MPI_ANY_SOURCE,
                                        TAG_QUERY, x->diag, &x->q_req),
       "status-query receive");
    return x;
}

int mt_comm_ctx_set_ranks_per_node(mt_comm_ctx *x, int ranks_per_node, mt_error *err) {
    if (ranks_per_node < 1)
        return mt_errorf(err, "{ranks-per-node} must be >= 1, got %d", ranks_per_node);
    for (int r = 0; r < x->world_size; r++) x->node_of[r] = r / ranks_per_node * ranks_per_node;
    x->local_rank = x->world_rank % ranks_per_node;
    x->local_size = ranks_per_node;
    return 0;
}

int mt_comm_local_rank(const mt_comm *c) { return c->ctx->local_rank; }
int mt_comm_local_size(const mt_comm *c) { return c->ctx->local_size; }

int mt_comm_node_of(const mt_comm *c, int r) { return c->ctx->node_of[c->world_ranks[r]]; }

int mt_comm_node_count(const mt_comm *c) {
    int n = 0;
    for (int i = 0; i < c->size; i++) {
        int seen = 0, me = c->ctx->node_of[c->world_ranks[i]];
        for (int j = 0; j < i && !seen; j++) seen = c->ctx->node_of[c->world_ranks[j]] == me;
        n += !seen;
    }
    return n;
}

void mt_comm_ctx_set_timeout(mt_comm_ctx *x, double t) {
    x->timeout_s = (t > 0 && isfinite(t)) ? t : MT_COMM_DEFAULT_TIMEOUT_S;
}
double mt_comm_ctx_timeout(const mt_comm_ctx *x) { return x->timeout_s; }
mt_comm *mt_comm_world(mt_comm_ctx *x) { return x->world; }
double mt_comm_wait_total_s(const mt_comm *c) { return c->ctx->wait_s; }

void mt_comm_host_name(char *buf, size_t n) {
    char name[MPI_MAX_PROCESSOR_NAME + 1];
    int len = 0;
    if (MPI_Get_processor_name(name, &len) != MPI_SUCCESS || len < 0) len = 0;
    name[len < MPI_MAX_PROCESSOR_NAME ? len : MPI_MAX_PROCESSOR_NAME] = 0;
    snprintf(buf, n, "%s", len ? name : "?");
}

void mt_comm_ctx_free(mt_comm_ctx *x) {
    if (!x) return;
    if (x->ncomms > 1)
        fprintf(stderr, "meshtrain: rank %d: warning: %d communicators still alive when the "
                        "communication context was freed (free them first)\n",
                x->world_rank, x->ncomms - 1);
    if (x->q_req != MPI_REQUEST_NULL) {
        CK(x->world, "MPI_Cancel", MPI_Cancel(&x->q_req), "status-query receive");
        CK(x->world, "MPI_Wait", MPI_Wait(&x->q_req, MPI_STATUS_IGNORE), "status-query receive");
    }
    for (int i = 0; i < NREPLY; i++)
        if (x->rep_req[i] != MPI_REQUEST_NULL)
            CK(x->world, "MPI_Wait", MPI_Wait(&x->rep_req[i], MPI_STATUS_IGNORE), "status reply");
    if (x->has_dev) mt_comm_set_device(x->world, NULL, NULL);
    CK(x->world, "MPI_Op_free", MPI_Op_free(&x->bf16_sum), "bf16 sum");
    mt_comm_free(x->world);
    x->world = NULL;
    CK(NULL, "MPI_Comm_free", MPI_Comm_free(&x->diag), "diagnosis channel");
    CK(NULL, "MPI_Group_free", MPI_Group_free(&x->world_group), "world group");
    free(x->comms);
    free(x->node_of);
    free(x->host_of);
    free(x);
}

/* ------------------------------------------------------------------ queries */

static mt_comm *find_comm(mt_comm_ctx *x, int64_t id) {
    for (int i = 0; i < x->ncomms; i++)
        if (x->comms[i]->id == id) return x->comms[i];
    return NULL;
}

/* Answers one query from world rank src. */
static void answer(mt_comm_ctx *x, int src) {
    int slot = -1;
    for (int i = 0; i < NREPLY && slot < 0; i++) {
        int done = 1;
        if (x->rep_req[i] != MPI_REQUEST_NULL &&
            MPI_Test(&x->rep_req[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            done = 0;
        if (done) slot = i;
    }
    if (slot < 0) return; /* all reply buffers in flight: the asker sees "no response" */
    reply_msg *m = &x->rep_out[slot];
    memset(m, 0, sizeof *m);
    m->qid = x->q_in.qid;
    m->comm_id = x->q_in.comm_id;
    const mt_comm *c = find_comm(x, x->q_in.comm_id);
    m->entered = c ? (int64_t)c->entered : -1;
    m->cur_kind = x->cur_comm ? x->cur_kind : -1;
    m->cur_seq = (int64_t)x->cur_seq;
    m->cur_peer = x->cur_peer;
    if (x->cur_comm) snprintf(m->cur_name, sizeof m->cur_name, "%s", x->cur_comm->name);
    /* Errors here only lose a diagnosis; they must not abort a healthy rank. */
    if (MPI_Isend(m, (int)sizeof *m, MPI_BYTE, src, TAG_REPLY, x->diag, &x->rep_req[slot]) !=
        MPI_SUCCESS)
        x->rep_req[slot] = MPI_REQUEST_NULL;
}

/* Answers every pending query; cheap (one MPI_Test) when there is none. */
static void service(mt_comm_ctx *x) {
    while (x->q_req != MPI_REQUEST_NULL) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Test(&x->q_req, &flag, &st) != MPI_SUCCESS || !flag) return;
        answer(x, st.MPI_SOURCE);
        CK(x->world, "MPI_Irecv",
           MPI_Irecv(&x->q_in, (int)sizeof x->q_in, MPI_BYTE, MPI_ANY_SOURCE, TAG_QUERY, x->diag,
                     &x->q_req),
           "status-query receive");
    }
}

typedef struct {
    char *buf;
    size_t cap, len;
} linebuf;

__attribute__((format(printf, 2, 3))) static void lb_add(linebuf *b, const char *fmt, ...) {
    if (b->len + 1 >= b->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n > 0) b->len = (b->len + (size_t)n < b->cap) ? b->len + (size_t)n : b->cap - 1;
}

static void describe_op(linebuf *b, const mt_comm_req *r) {
    const mt_comm *c = r->comm;
    if (r->kind == MT_COMM_SEND || r->kind == MT_COMM_RECV)
        lb_add(b, "%s %s rank %d (world rank %d) on group '%s' (size %d, %zu bytes)",
               mt_comm_kind_name(r->kind), r->kind == MT_COMM_SEND ? "to" : "from", r->peer,
               c->world_ranks[r->peer], c->name, c->size, r->bytes);
    else
        lb_add(b, "%s #%llu on group '%s' (size %d, %zu bytes)", mt_comm_kind_name(r->kind),
               (unsigned long long)r->seq, c->name, c->size, r->bytes);
}

/* What the group's ranks said when a wait passed its deadline: the text
 * naming each rank that did not arrive, and whether every rank answered
 * (alive, reachable over the network) and had entered the operation (then
 * it is in flight: a slow link or a large transfer, not a dead peer). */
typedef struct {
    int all_answered, all_arrived;
    int mismatch; /* a rank waits in another collective under this one's number: no wait helps */
    uint64_t signature; /* the answers' states: a change between two diagnoses is progress */
    char text[2048];
} diagnosis;

/* The status queries of one wait, one per peer at a time. A query and its
 * answer travel behind the operation's own bytes; over a slow link the answer
 * can take longer than a diagnosis waits, so a query stays posted across the
 * wait's later deadlines and its late answer still counts: a peer is silent
 * only when nothing of it arrived since the last deadline. */
typedef struct {
    int n;
    int64_t first_qid;      /* the wait's first query: a reply to an older one is discarded */
    reply_msg *rep;         /* [n] the latest answer of each peer */
    query_msg *q;           /* [n] the query in flight to each peer (its send buffer) */
    MPI_Request *rq, *sq;   /* [n] its answer's receive and its send */
    int *state;             /* [n] 0 never asked, 1 asked (in flight), 2 answered this round */
} queries;

static int queries_open(queries *qs, int n) {
    memset(qs, 0, sizeof *qs);
    qs->n = n;
    qs->rep = calloc((size_t)n, sizeof *qs->rep);
    qs->q = calloc((size_t)n, sizeof *qs->q);
    qs->rq = malloc((size_t)n * sizeof *qs->rq);
    qs->sq = malloc((size_t)n * sizeof *qs->sq);
    qs->state = calloc((size_t)n, sizeof *qs->state);
    if (!qs->rep || !qs->q || !qs->rq || !qs->sq || !qs->state) return 0;
    for (int t = 0; t < n; t++) qs->rq[t] = qs->sq[t] = MPI_REQUEST_NULL;
    return 1;
}

/* After the wait: a receive still posted is cancelled (its late answer, if it
 * comes, is discarded by the next wait's first_qid), the sends complete (the
 * peers are alive: the operation finished), and the buffers go. */
static void queries_close(queries *qs) {
    if (qs->rep && qs->q && qs->rq && qs->sq && qs->state)
        for (int t = 0; t < qs->n; t++) {
            if (qs->rq[t] != MPI_REQUEST_NULL) {
                MPI_Cancel(&qs->rq[t]);
                MPI_Wait(&qs->rq[t], MPI_STATUS_IGNORE);
            }
            if (qs->sq[t] != MPI_REQUEST_NULL) MPI_Wait(&qs->sq[t], MPI_STATUS_IGNORE);
        }
    free(qs->rep);
    free(qs->q);
    free(qs->rq);
    free(qs->sq);
    free(qs->state);
    memset(qs, 0, sizeof *qs);
}

static void diagnose(mt_comm_req *r, double waited, queries *qs, diagnosis *d) {
    mt_comm *c = r->comm;
    mt_comm_ctx *x = c->ctx;
    int n = c->size, p2p = (r->kind == MT_COMM_SEND || r->kind == MT_COMM_RECV);
    int *state = qs->state; /* NULL: out of memory for the queries */
    const reply_msg *rep = qs->rep;
    if (state) {
        if (!qs->first_qid) qs->first_qid = ((int64_t)x->world_rank << 32) | (x->next_qid + 1);
        for (int t = 0; t < n; t++) {
            if (t == c->rank || (p2p && t != r->peer)) continue;
            if (state[t] == 1) continue; /* the last query is still in flight: its answer counts when it comes */
            int w = c->world_ranks[t];
            if (qs->sq[t] != MPI_REQUEST_NULL) MPI_Wait(&qs->sq[t], MPI_STATUS_IGNORE); /* answered: delivered */
            qs->q[t] = (query_msg){((int64_t)x->world_rank << 32) | ++x->next_qid, c->id};
            if (MPI_Irecv(&qs->rep[t], (int)sizeof qs->rep[t], MPI_BYTE, w, TAG_REPLY, x->diag, &qs->rq[t]) !=
                    MPI_SUCCESS ||
                MPI_Isend(&qs->q[t], (int)sizeof qs->q[t], MPI_BYTE, w, TAG_QUERY, x->diag, &qs->sq[t]) !=
                    MPI_SUCCESS) {
                state[t] = 0;
                continue;
            }
            state[t] = 1;
        }
        /* at least 1 s: a peer inside a large transfer answers between MPI_Test calls, each of which
           may move (and reduce) a large block */
        double end = MPI_Wtime() + fmin(2.0, fmax(1.0, 0.1 * x->timeout_s));
        for (;;) {
            int pending = 0;
            for (int t = 0; t < n; t++) {
                if (state[t] != 1) continue;
                int f = 0;
                if (MPI_Test(&qs->rq[t], &f, MPI_STATUS_IGNORE) != MPI_SUCCESS || !f) {
                    pending++;
                } else if (qs->rep[t].qid >= qs->first_qid) {
                    state[t] = 2;
                } else { /* an answer to an earlier wait's query: not this one's, listen again */
                    if (MPI_Irecv(&qs->rep[t], (int)sizeof qs->rep[t], MPI_BYTE, c->world_ranks[t], TAG_REPLY,
                                  x->diag, &qs->rq[t]) != MPI_SUCCESS)
                        state[t] = 0;
                    else
                        pending++;
                }
            }
            service(x);
            if (!pending || MPI_Wtime() > end) break;
            sched_yield();
        }
    }
    linebuf b = {d->text, sizeof d->text, 0};
    d->text[0] = 0;
    d->all_answered = state != NULL;
    d->all_arrived = state != NULL;
    d->mismatch = 0;
    mt_checksum answers;
    mt_checksum_init(&answers);
    lb_add(&b, "meshtrain: rank %d: timeout: ", x->world_rank);
    describe_op(&b, r);
    lb_add(&b, " waited %.1f s (timeout %g s); did not arrive:", waited, x->timeout_s);
    int nmiss = 0;
    for (int t = 0; t < n; t++) {
        if (t == c->rank || (p2p && t != r->peer)) continue;
        if (!state) break;
        int st = state[t];
        if (st == 2) {
            const reply_msg *a = &qs->rep[t];
            const int64_t v[5] = {t, a->entered, a->cur_kind, a->cur_seq, a->cur_peer};
            mt_checksum_update(&answers, v, sizeof v);
        } else {
            d->all_answered = 0;
        }
        /* a collective's peer has arrived when it entered it (or went beyond); a send's or a receive's
           when it waits in the matching receive or send with this rank on this group */
        /* a rank waiting in another kind of collective under this one's number on this group made a
           different call: the calls do not match, which no wait resolves */
        int mismatched = st == 2 && !p2p && rep[t].cur_kind >= 0 && rep[t].cur_kind != r->kind &&
                         rep[t].cur_kind != MT_COMM_SEND && rep[t].cur_kind != MT_COMM_RECV &&
                         rep[t].cur_seq == (int64_t)r->seq && !strcmp(rep[t].cur_name, c->name);
        int arrived = st == 2 && !mismatched &&
                      (p2p ? rep[t].cur_kind == (r->kind == MT_COMM_SEND ? MT_COMM_RECV : MT_COMM_SEND) &&
                                 rep[t].cur_peer == c->rank && !strcmp(rep[t].cur_name, c->name)
                           : rep[t].entered >= (int64_t)r->seq);
        if (mismatched) d->mismatch = 1;
        if (arrived) continue;
        d->all_arrived = 0;
        if (nmiss++ >= 16) continue;
        lb_add(&b, "%s %d (world rank %d on host %s: ", nmiss > 1 ? ";" : "", t, c->world_ranks[t],
               x->host_of[c->world_ranks[t]]);
        if (st != 2) {
            lb_add(&b, "no response -- stopped, dead, unreachable or busy outside communication)");
            continue;
        }
        if (!p2p) lb_add(&b, "entered %lld collectives here, ", (long long)rep[t].entered);
        if (rep[t].cur_kind >= 0 && rep[t].cur_kind < MT_COMM_NKIND) {
            lb_add(&b, "waiting in %s", mt_comm_kind_name(rep[t].cur_kind));
            if (rep[t].cur_kind == MT_COMM_SEND || rep[t].cur_kind == MT_COMM_RECV)
                lb_add(&b, " with rank %lld", (long long)rep[t].cur_peer);
            else
                lb_add(&b, " #%lld", (long long)rep[t].cur_seq);
            lb_add(&b, " on group '%s'%s)", rep[t].cur_name,
                   mismatched ? " -- a different collective under the same number: the ranks' calls do not match" : "");
        } else {
            lb_add(&b, "alive, not waiting)");
        }
    }
    d->signature = mt_checksum_final(&answers);
    if (!state) lb_add(&b, " (unknown: out of memory for the diagnosis)");
    else if (nmiss == 0)
        lb_add(&b, " none: every rank is inside it and answering, yet it did not complete in %d timeouts -- a link "
                   "too slow for this timeout, or the MPI library is stuck", MT_COMM_SLOW_TIMEOUTS);
    else if (nmiss > 16) lb_add(&b, "; and %d more", nmiss - 16);
    if (!p2p && state) {
        lb_add(&b, "; arrived:");
        for (int t = 0; t < n; t++)
            if (t == c->rank || (state[t] == 2 && rep[t].entered >= (int64_t)r->seq))
                lb_add(&b, " %d", t);
    }
    if (state) /* the next deadline asks those that answered again */
        for (int t = 0; t < n; t++)
            if (state[t] == 2) state[t] = 0;
}

static _Noreturn void on_timeout(const mt_comm_req *r, diagnosis *d) {
    mt_comm_ctx *x = r->comm->ctx;
    linebuf b = {d->text, sizeof d->text, strlen(d->text)};
    lb_add(&b, "; aborting");
    fprintf(stderr, "%s\n", d->text);
    fflush(stderr);
    /* Linger for one grace period, still answering queries: the other
     * survivors reach their deadlines at about the same time, and the first
     * MPI_Abort kills them -- this lets each print its own line first. */
    double end = MPI_Wtime() + fmin(2.0, fmax(0.2, 0.1 * x->timeout_s));
    while (MPI_Wtime() < end) {
        service(x);
        sched_yield();
    }
    abort_job(MT_COMM_EXIT_TIMEOUT);
}

/* ------------------------------------------------------------------ requests */

static double now(void) { return MPI_Wtime(); }

/* The MPI_Request of an operation lives in the request's opaque handle
 * (comm.h names no MPI type), and after it the staging slot of an operation
 * on device buffers (NULL: a host operation); copied in and out, never aliased. */
#define SLOT_OFFSET 8
_Static_assert(sizeof(MPI_Request) <= SLOT_OFFSET, "an MPI_Request wider than 8 bytes: move the slot pointer");
_Static_assert(SLOT_OFFSET + sizeof(void *) <= sizeof(((mt_comm_req *)0)->handle),
               "mt_comm_req.handle too small for an MPI_Request and a slot pointer");
static MPI_Request req_of(const mt_comm_req *r) {
    MPI_Request q;
    memcpy(&q, r->handle, sizeof q);
    return q;
}
static void set_req(mt_comm_req *r, MPI_Request q) { memcpy(r->handle, &q, sizeof q); }
static int test_req(mt_comm_req *r, int *flag, MPI_Status *st) {
    MPI_Request q = req_of(r);
    int rc = MPI_Test(&q, flag, st);
    set_req(r, q);
    return rc;
}
/* Starts an MPI operation whose call writes its request to q, into r; after
 * the group's staged operations still queued (advance_staged, below). */
#define START(c, r, fn, call, ...)            \
    do {                                      \
        MPI_Request q = MPI_REQUEST_NULL;     \
        if ((c)->ctx->pending_head) advance_staged((c)->ctx, (c)); \
        CK((c), fn, call, __VA_ARGS__);       \
        set_req((r), q);                      \
    } while (0)

/* ------------------------------------------------------------------ staging (device buffers) */

/* One staged operation: what it copies in, what MPI does on the pinned
 * slot, what it copies back. */
typedef struct {
    size_t esize;
    MPI_Datatype type;
    MPI_Op op;
    const char *what;
} sum_kind;

typedef struct {
    const void *in;   /* device -> slot + in_off before MPI; NULL: nothing (a receive, a broadcast's non-root) */
    size_t in_bytes, in_off;
    void *out;        /* slot + out_off -> device after MPI; NULL: nothing (a send) */
    size_t out_bytes, out_off;
    size_t slot_bytes;
    size_t count;     /* reductions: elements (reduce-scatter: per block); allgather: block bytes */
    sum_kind k;
    int root, peer, tag;
} stage_op;

enum { ST_COPY_IN = 1, ST_MPI, ST_NCCL };

typedef struct stage_slot {
    unsigned char *buf;
    size_t cap;
    void *ev_in, *ev_out;
    int busy;        /* held by an operation in flight */
    int out_pending; /* its copy back is queued: reusable once ev_out completed */
    int state;
    stage_op op;
    mt_comm *comm;   /* the operation's group and kind */
    int kind;
    MPI_Request q;   /* its MPI request once posted */
    struct stage_slot *next; /* the queue of slots whose copy in is pending, in start order */
} stage_slot;

static stage_slot *slot_of(const mt_comm_req *r) {
    stage_slot *s;
    memcpy(&s, r->handle + SLOT_OFFSET, sizeof s);
    return s;
}
static void set_slot(mt_comm_req *r, stage_slot *s) { memcpy(r->handle + SLOT_OFFSET, &s, sizeof s); }

static int slot_free(mt_comm_ctx *x, stage_slot *s) {
    if (s->busy) return 0;
    if (s->out_pending && !x->dev.event_done(x->dev.ctx, s->ev_out)) return 0;
    s->out_pending = 0;
    return 1;
}

/* A free slot of at least `bytes`: the smallest that fits, else the largest
 * free one grown, else a new one. Slots are kept, so once a step's pattern
 * of operations has run, later steps allocate nothing. */
static stage_slot *acquire_slot(mt_comm *c, size_t bytes) {
    mt_comm_ctx *x = c->ctx;
    stage_slot *best = NULL, *largest = NULL;
    for (int i = 0; i < x->nslots; i++) {
        stage_slot *s = x->slots[i];
        if (!slot_free(x, s)) continue;
        if (s->cap >= bytes && (!best || s->cap < best->cap)) best = s;
        if (!largest || s->cap > largest->cap) largest = s;
    }
    if (!best && largest) {
        x->dev.pinned_free(x->dev.ctx, largest->buf);
        largest->cap = 0;
        largest->buf = x->dev.pinned_alloc(x->dev.ctx, bytes ? bytes : 1);
        if (!largest->buf)
            usage_fail(c, "out of pinned host memory for a %zu-byte staging buffer of a device collective", bytes);
        largest->cap = bytes;
        best = largest;
    }
    if (!best) {
        if (x->nslots == x->capslots) {
            int cap = x->capslots ? 2 * x->capslots : 8;
            stage_slot **p = realloc(x->slots, (size_t)cap * sizeof *p);
            if (!p) usage_fail(c, "out of memory growing the staging slots to %d", cap);
            x->slots = p;
            x->capslots = cap;
        }
        best = calloc(1, sizeof *best);
        if (!best) usage_fail(c, "out of memory for a staging slot");
        best->buf = x->dev.pinned_alloc(x->dev.ctx, bytes ? bytes : 1);
        if (!best->buf)
            usage_fail(c, "out of pinned host memory for a %zu-byte staging buffer of a device collective", bytes);
        best->cap = bytes;
        best->ev_in = x->dev.event_create(x->dev.ctx);
        best->ev_out = x->dev.event_create(x->dev.ctx);
        x->slots[x->nslots++] = best;
    }
    best->busy = 1;
    return best;
}

void mt_comm_set_device(mt_comm *c, const mt_comm_device *dev, mt_comm_stream *compute) {
    mt_comm_ctx *x = c->ctx;
    if (x->has_dev) { /* uninstall: the copies back complete, then the slots go */
        for (int i = 0; i < x->nslots; i++) {
            stage_slot *s = x->slots[i];
            if (s->busy)
                usage_fail(c, "the device hooks were removed while a staged operation is in flight; wait for it first");
            while (!slot_free(x, s)) sched_yield();
            x->dev.pinned_free(x->dev.ctx, s->buf);
            x->dev.event_destroy(x->dev.ctx, s->ev_in);
            x->dev.event_destroy(x->dev.ctx, s->ev_out);
            free(s);
        }
        free(x->slots);
        x->slots = NULL;
        x->nslots = x->capslots = 0;
        x->dev.event_destroy(x->dev.ctx, x->ev_start);
        x->has_dev = 0;
        x->compute = NULL;
    }
    if (!dev) return;
    x->dev = *dev;
    x->has_dev = 1;
    x->compute = compute;
    x->ev_start = x->dev.event_create(x->dev.ctx);
}

/* The stream an operation on buf is ordered on: the one named, or the
 * compute stream when buf is device memory, else none (the host). */
static mt_comm_stream *order_of(const mt_comm *c, mt_comm_stream *s, const void *a, size_t abytes, const void *b,
                                size_t bbytes, const char *what) {
    const mt_comm_ctx *x = c->ctx;
    if (s) {
        if (!x->has_dev)
            usage_fail(c, "%s ordered on a device stream, but no device hooks are installed (mt_comm_set_device); "
                          "pass no stream (NULL) for host buffers", what);
        return s;
    }
    if (!x->has_dev) return NULL;
    if ((a && abytes && x->dev.is_device(x->dev.ctx, a, abytes)) ||
        (b && bbytes && x->dev.is_device(x->dev.ctx, b, bbytes)))
        return x->compute;
    return NULL;
}

static void post_staged(stage_slot *sl);

/* Posts the queued operations whose copy in completed, oldest first; with
 * `until` (a group), blocks until no queued operation of that group is left
 * (a host collective on it is about to be posted and must come after them:
 * their copies wait only for this rank's own device work, never for a peer). */
static void advance_staged(mt_comm_ctx *x, const mt_comm *until) {
    for (;;) {
        stage_slot *h = x->pending_head;
        if (!h) return;
        if (!x->dev.event_done(x->dev.ctx, h->ev_in)) {
            int blocked = 0;
            for (stage_slot *p = h; p && until && !blocked; p = p->next) blocked = p->comm == until;
            if (!blocked) return;
            sched_yield();
            continue;
        }
        x->pending_head = h->next;
        if (!x->pending_head) x->pending_tail = NULL;
        h->next = NULL;
        post_staged(h);
    }
}

/* Starts a staged operation (the request was begun on stream r->stream). */
static void stage_start(mt_comm *c, mt_comm_req *r, const stage_op *op) {
    mt_comm_ctx *x = c->ctx;
    const mt_comm_device *d = &x->dev;
    stage_slot *sl = acquire_slot(c, op->slot_bytes);
    sl->op = *op;
    sl->comm = c;
    sl->kind = r->kind;
    sl->q = MPI_REQUEST_NULL;
    set_slot(r, sl);
    /* the communication stream runs after the work queued on the ordering stream so far: the data is
       ready to read, and the buffer is no longer read by that work when the copy back overwrites it */
    d->event_record(d->ctx, x->ev_start, r->stream);
    d->stream_wait(d->ctx, d->comm_stream, x->ev_start);
    if (op->in) {
        d->copy(d->ctx, sl->buf + op->in_off, op->in, op->in_bytes, d->comm_stream);
        d->event_record(d->ctx, sl->ev_in, d->comm_stream);
        sl->state = ST_COPY_IN;
        if (x->pending_tail) x->pending_tail->next = sl;
        else x->pending_head = sl;
        x->pending_tail = sl;
        advance_staged(x, NULL);
    } else {
        /* a receive (or a broadcast's non-root) posts at once; a collective still after the group's queued ones */
        if (r->kind != MT_COMM_RECV) advance_staged(x, c);
        post_staged(sl);
    }
}

static void post_staged(stage_slot *sl) {
    mt_comm *c = sl->comm;
    const stage_op *op = &sl->op;
    void *b = sl->buf;
    MPI_Request q = MPI_REQUEST_NULL;
    switch (sl->kind) {
    case MT_COMM_ALLREDUCE:
        CK(c, "MPI_Iallreduce",
           MPI_Iallreduce(MPI_IN_PLACE, b, to_int(c, op->count, "count"), op->k.type, op->k.op, c->comm, &q),
           "%zu %s (staged from the device)", op->count, op->k.what);
        break;
    case MT_COMM_REDUCE_SCATTER:
        CK(c, "MPI_Ireduce_scatter_block",
           MPI_Ireduce_scatter_block(MPI_IN_PLACE, b, to_int(c, op->count, "block count"), op->k.type, op->k.op,
                                     c->comm, &q),
           "%zu %s per block (staged from the device)", op->count, op->k.what);
        break;
    case MT_COMM_ALLGATHER:
        CK(c, "MPI_Iallgather",
           MPI_Iallgather(MPI_IN_PLACE, 0, MPI_BYTE, b, to_int(c, op->count, "block bytes"), MPI_BYTE, c->comm, &q),
           "%zu bytes per block (staged from the device)", op->count);
        break;
    case MT_COMM_BROADCAST:
        CK(c, "MPI_Ibcast", MPI_Ibcast(b, to_int(c, op->count, "bytes"), MPI_BYTE, op->root, c->comm, &q),
           "%zu bytes from root %d (staged from the device)", op->count, op->root);
        break;
    case MT_COMM_SEND:
        CK(c, "MPI_Isend", MPI_Isend(b, to_int(c, op->count, "bytes"), MPI_BYTE, op->peer, op->tag, c->comm, &q),
           "%zu bytes to rank %d, tag %d (staged from the device)", op->count, op->peer, op->tag);
        break;
    case MT_COMM_RECV:
        CK(c, "MPI_Irecv", MPI_Irecv(b, to_int(c, op->count, "bytes"), MPI_BYTE, op->peer, op->tag, c->comm, &q),
           "%zu bytes from rank %d, tag %d (staged to the device)", op->count, op->peer, op->tag);
        break;
    default: usage_fail(c, "%s has no staged form", mt_comm_kind_name(sl->kind));
    }
    sl->q = q;
    sl->state = ST_MPI;
}

__attribute__((format(printf, 3, 4))) static _Noreturn void nccl_fail(const mt_comm *c, const char *e, const char *fmt,
                                                                       ...);

/* Advances an operation: a host one is its MPI_Test; a staged one is
 * complete once its MPI call (posted by advance_staged after the copy in)
 * completed: then the copy back is queued and the ordering stream waits for
 * it. Every call also posts the queued operations that are ready. *flag:
 * complete. */
static int progress(mt_comm_req *r, int *flag, MPI_Status *st) {
    mt_comm_ctx *x = r->comm->ctx;
    if (x->pending_head) advance_staged(x, NULL);
    stage_slot *sl = slot_of(r);
    if (!sl) return test_req(r, flag, st);
    const mt_comm_device *d = &x->dev;
    *flag = 0;
    if (sl->state == ST_COPY_IN) return MPI_SUCCESS;
    if (sl->state == ST_NCCL) {
        const char *e = x->nccl->async_error(sl->comm->nccl);
        if (e) nccl_fail(sl->comm, e, "%s (asynchronous)", mt_comm_kind_name(sl->kind));
        if (!d->event_done(d->ctx, sl->ev_out)) return MPI_SUCCESS;
        d->stream_wait(d->ctx, r->stream, sl->ev_out);
        sl->busy = 0;
        sl->out_pending = 1;
        set_slot(r, NULL);
        *flag = 1;
        st->MPI_SOURCE = -1; /* no MPI status: finish() checks a receive's size only after MPI */
        return MPI_SUCCESS;
    }
    int rc = MPI_Test(&sl->q, flag, st);
    if (rc != MPI_SUCCESS || !*flag) return rc;
    if (sl->op.out) d->copy(d->ctx, sl->op.out, sl->buf + sl->op.out_off, sl->op.out_bytes, d->comm_stream);
    d->event_record(d->ctx, sl->ev_out, d->comm_stream);
    d->stream_wait(d->ctx, r->stream, sl->ev_out);
    sl->busy = 0;
    sl->out_pending = 1;
    set_slot(r, NULL);
    return rc;
}

/* A group of one on device buffers: a device copy ordered on the stream. */
static void local_copy(const mt_comm *c, mt_comm_stream *s, void *dst, const void *src, size_t bytes) {
    if (dst == src || !bytes) return;
    if (s) c->ctx->dev.copy(c->ctx->dev.ctx, dst, src, bytes, s);
    else memmove(dst, src, bytes);
}

static void begin(mt_comm *c, mt_comm_req *r, int kind, int peer, size_t payload, uint64_t sent,
                  mt_comm_stream *stream) {
    if (r->active)
        usage_fail(c, "%s started on a request that is still in flight (%s on '%s'); wait for it "
                      "first, and zero-initialise new requests",
                   mt_comm_kind_name(kind), mt_comm_kind_name(r->kind), r->comm ? r->comm->name : "?");
    set_req(r, MPI_REQUEST_NULL);
    set_slot(r, NULL);
    r->stream = stream;
    r->comm = c;
    r->kind = kind;
    r->peer = peer;
    r->active = 1;
    r->bytes = payload;
    r->seq = (kind == MT_COMM_SEND || kind == MT_COMM_RECV) ? 0 : ++c->entered;
    mt_comm_counter *k = &c->stats.k[kind];
    k->calls++;
    k->payload_bytes += payload;
    k->bytes_sent += sent;
    /* The ring convention: a collective's bytes go to the next rank of the
     * group, a send's to its peer; they cross nodes when that rank is on
     * another node. */
    const int *node = c->ctx->node_of;
    int mine = node[c->world_ranks[c->rank]];
    if (sent && kind == MT_COMM_ALLTOALL) {
        for (int i = 0; i < c->size; i++)
            if (node[c->world_ranks[i]] != mine) k->bytes_inter += sent / (uint64_t)(c->size - 1);
    } else if (sent && c->size > 1) {
        int to = kind == MT_COMM_SEND ? peer : (c->rank + 1) % c->size;
        if (node[c->world_ranks[to]] != mine) k->bytes_inter += sent;
    }
}

static void finish(mt_comm_req *r, const MPI_Status *st) {
    mt_comm *c = r->comm;
    r->active = 0;
    if (r->kind == MT_COMM_RECV && st && st->MPI_SOURCE != -1) {
        int got = 0;
        CK(c, "MPI_Get_count", MPI_Get_count(st, MPI_BYTE, &got), "recv from rank %d", r->peer);
        if ((size_t)got != r->bytes)
            usage_fail(c, "recv from rank %d expected %zu bytes but the message had %d; the "
                          "sender and receiver disagree on the message size",
                       r->peer, r->bytes, got);
    }
}

int mt_comm_test(mt_comm_req *r) {
    if (!r->active) return 1;
    mt_comm *c = r->comm;
    double t0 = now();
    int flag = 0;
    MPI_Status st;
    CK(c, "MPI_Test", progress(r, &flag, &st), "%s", mt_comm_kind_name(r->kind));
    service(c->ctx);
    if (flag) finish(r, &st);
    double dt = now() - t0;
    c->stats.k[r->kind].wait_s += dt;
    c->ctx->wait_s += dt;
    return flag;
}

void mt_comm_wait(mt_comm_req *r) {
    if (!r->active) return;
    mt_comm *c = r->comm;
    mt_comm_ctx *x = c->ctx;
    double t0 = now(), deadline = t0 + x->timeout_s;
    uint64_t last_signature = 0;
    int extended = 0, silent = 0;
    queries qs = {0}; /* opened at the first deadline: the hot path allocates nothing */
    x->cur_comm = c;
    x->cur_kind = r->kind;
    x->cur_seq = r->seq;
    x->cur_peer = r->peer;
    MPI_Status st;
    for (long spins = 0;; spins++) {
        int flag = 0;
        CK(c, "MPI_Test", progress(r, &flag, &st), "waiting for %s", mt_comm_kind_name(r->kind));
        if (flag) break;
        service(x);
        double t = now();
        if (t > deadline) {
            /* The deadline counts time without a sign of progress: every
             * rank inside the operation and answering is a transfer in
             * flight (a slow link), and answers that changed since the last
             * deadline are ranks moving on; both wait another timeout, up to
             * MT_COMM_SLOW_TIMEOUTS of them. Silence, or the same answers
             * twice, is a stalled or dead peer. */
            diagnosis d;
            if (!qs.n && !queries_open(&qs, c->size)) queries_close(&qs);
            diagnose(r, t - t0, &qs, &d);
            int moving = !d.mismatch && (d.all_arrived || (d.all_answered && (!extended || d.signature != last_signature)));
            /* Silence once is not yet a dead peer: over a slow link the query and its answer queue
               behind the operation's own bytes, for longer than the diagnosis waits. A peer silent
               at two deadlines in a row is stalled, dead or unreachable. */
            if (!moving && !d.mismatch && !d.all_answered && !silent++) {
                deadline = now() + x->timeout_s;
                continue;
            }
            if (moving) silent = 0;
            if (!moving || ++extended >= MT_COMM_SLOW_TIMEOUTS) {
                /* the operation may have completed while the diagnosis waited for answers (over a slow
                   link a query queues behind the operation's own bytes): that is progress, not a timeout */
                CK(c, "MPI_Test", progress(r, &flag, &st), "waiting for %s", mt_comm_kind_name(r->kind));
                if (flag) break;
                on_timeout(r, &d);
            }
            if (d.all_arrived && !x->slow_warned) {
                x->slow_warned = 1;
                linebuf b = {d.text, sizeof d.text, 0};
                lb_add(&b, "meshtrain: rank %d: warning: ", x->world_rank);
                describe_op(&b, r);
                lb_add(&b, " has taken %.1f s (timeout %g s), but every rank of the group is inside it and "
                           "answering: a slow link, not a dead peer; waiting on", now() - t0, x->timeout_s);
                fprintf(stderr, "%s\n", d.text);
                fflush(stderr);
            }
            last_signature = d.signature;
            deadline = now() + x->timeout_s;
        }
        if (spins >= SPINS_BEFORE_YIELD) {
            if (x->oversubscribed) {
                struct timespec ts = {0, OVERSUBSCRIBED_SLEEP_NS};
                nanosleep(&ts, NULL);
            } else {
                sched_yield();
            }
        }
    }
    x->cur_comm = NULL;
    x->cur_kind = -1;
    queries_close(&qs);
    finish(r, &st);
    double dt = now() - t0;
    c->stats.k[r->kind].wait_s += dt;
    x->wait_s += dt;
}


/* ------------------------------------------------------------------ NCCL ({comm} nccl) */

/* The group's NCCL communicator: rank 0's unique id broadcast over MPI, then
 * ncclCommInitRank on every member (collective over the group). */
static int make_nccl(mt_comm *c, mt_error *err) {
    mt_comm_ctx *x = c->ctx;
    unsigned char id[512];
    const char *e = NULL;
    if (x->nccl->id_bytes > sizeof id) return mt_errorf(err, "{comm} nccl: a unique id of %zu bytes", x->nccl->id_bytes);
    int bad = 0;
    if (c->rank == 0 && (e = x->nccl->get_id(id)) != NULL) bad = 1;
    /* a failed id on rank 0 must not leave the others waiting in ncclCommInitRank */
    CK(c, "MPI_Bcast", MPI_Bcast(&bad, 1, MPI_INT, 0, c->comm), "the NCCL id's status");
    if (bad)
        return mt_errorf(err, "{comm} nccl: ncclGetUniqueId failed on rank 0 of group '%s'%s%s", c->name, e ? ": " : "",
                         e ? e : "");
    CK(c, "MPI_Bcast", MPI_Bcast(id, (int)x->nccl->id_bytes, MPI_BYTE, 0, c->comm), "the NCCL unique id");
    c->nccl_stream = x->dev.stream_create(x->dev.ctx);
    if ((e = x->nccl->create(&c->nccl, id, c->size, c->rank)) != NULL) {
        x->dev.stream_destroy(x->dev.ctx, c->nccl_stream);
        c->nccl_stream = NULL;
        return mt_errorf(err, "{comm} nccl: ncclCommInitRank failed on group '%s' (rank %d of %d): %s", c->name, c->rank,
                         c->size, e);
    }
    return 0;
}

static int by_id(const void *a, const void *b) {
    int64_t x = (*(mt_comm *const *)a)->id, y = (*(mt_comm *const *)b)->id;
    return (x > y) - (x < y);
}

int mt_comm_use_nccl(mt_comm *c, mt_error *err) {
    mt_comm_ctx *x = c->ctx;
    const mt_comm_nccl *h = mt_comm_nccl_hooks();
    if (!h)
        return mt_errorf(err, "{comm} nccl: this meshtrain was built without NCCL: use build-gpu/meshtrain-mpi "
                              "(`make gpu-mpi`), or {comm} mpi");
    if (!x->has_dev || !x->dev.stream_create)
        return mt_errorf(err, "{comm} nccl needs the device's streams ({device} cuda)");
    x->nccl = h;
    /* in creation order (ids grow with it on every member), so that each group's members meet in the same order */
    mt_comm **all = malloc((size_t)x->ncomms * sizeof *all);
    if (!all) return mt_errorf(err, "out of memory listing %d communicators", x->ncomms);
    memcpy(all, x->comms, (size_t)x->ncomms * sizeof *all);
    qsort(all, (size_t)x->ncomms, sizeof *all, by_id);
    int rc = 0;
    for (int i = 0; i < x->ncomms && !rc; i++)
        if (all[i]->size > 1 && !all[i]->nccl) rc = make_nccl(all[i], err);
    free(all);
    return rc;
}

__attribute__((format(printf, 3, 4))) static _Noreturn void nccl_fail(const mt_comm *c, const char *e, const char *fmt,
                                                                       ...) {
    char detail[256] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    fprintf(stderr, "meshtrain: rank %d: NCCL %s failed on group '%s' (size %d): %s; aborting the job\n",
            my_world_rank(c), detail, c->name, c->size, e);
    abort_job(MT_COMM_EXIT_MPI);
}

/* An operation on device buffers through the group's NCCL communicator: on its stream, after the work
   queued on the ordering stream; complete (progress) once its event completed. */
static void nccl_start(mt_comm *c, mt_comm_req *r, const void *send, void *recv, size_t count, int bf16, int root,
                       int peer) {
    mt_comm_ctx *x = c->ctx;
    const mt_comm_device *d = &x->dev;
    const mt_comm_nccl *h = x->nccl;
    stage_slot *sl = acquire_slot(c, 0);
    memset(&sl->op, 0, sizeof sl->op);
    sl->comm = c;
    sl->kind = r->kind;
    sl->q = MPI_REQUEST_NULL;
    set_slot(r, sl);
    d->event_record(d->ctx, x->ev_start, r->stream);
    d->stream_wait(d->ctx, c->nccl_stream, x->ev_start);
    const char *e = NULL;
    size_t esize = bf16 ? 2 : 4;
    switch (r->kind) {
    case MT_COMM_ALLREDUCE: e = h->allreduce(c->nccl, send, recv, count, bf16, c->nccl_stream); break;
    case MT_COMM_REDUCE_SCATTER:
        if (send == recv && c->rank) { /* ours lands at the start; NCCL's in place at block `rank` */
            char *mine = (char *)recv + (size_t)c->rank * count * esize;
            e = h->reduce_scatter(c->nccl, send, mine, count, bf16, c->nccl_stream);
            if (!e) d->copy(d->ctx, recv, mine, count * esize, c->nccl_stream);
        } else {
            e = h->reduce_scatter(c->nccl, send, recv, count, bf16, c->nccl_stream);
        }
        break;
    case MT_COMM_ALLGATHER: e = h->allgather(c->nccl, send, recv, count, c->nccl_stream); break;
    case MT_COMM_BROADCAST: e = h->broadcast(c->nccl, recv, count, root, c->nccl_stream); break;
    case MT_COMM_SEND: e = h->send(c->nccl, send, count, peer, c->nccl_stream); break;
    case MT_COMM_RECV: e = h->recv(c->nccl, recv, count, peer, c->nccl_stream); break;
    default: usage_fail(c, "%s has no NCCL form", mt_comm_kind_name(r->kind));
    }
    if (e) nccl_fail(c, e, "%s of %zu elements", mt_comm_kind_name(r->kind), count);
    d->event_record(d->ctx, sl->ev_out, c->nccl_stream);
    sl->state = ST_NCCL;
}

/* ------------------------------------------------------------------ operations */

static void check_root(const mt_comm *c, int root, const char *what) {
    if (root < 0 || root >= c->size)
        usage_fail(c, "%s rank %d out of range [0, %d)", what, root, c->size);
}

static void check_tag(const mt_comm *c, int tag) {
    if (tag < 0 || tag > 32767)
        usage_fail(c, "message tag %d out of range [0, 32767] (the MPI-guaranteed range)", tag);
}

/* A summing reduction (sum_kind, above) of `count` elements of esize bytes (type/op: MPI's
 * element type and sum; what: how to name the elements in an error). */

static sum_kind fp32_sum(void) { return (sum_kind){sizeof(float), MPI_FLOAT, MPI_SUM, "floats"}; }
static sum_kind bf16_sum(const mt_comm *c) { return (sum_kind){sizeof(mt_bf16), MPI_UINT16_T, c->ctx->bf16_sum, "bf16 values"}; }

static void start_allreduce(mt_comm *c, const void *send, void *recv, size_t count, sum_kind k, mt_comm_stream *s,
                            mt_comm_req *r) {
    size_t B = count * k.esize;
    s = order_of(c, s, send, B, recv, B, "allreduce");
    begin(c, r, MT_COMM_ALLREDUCE, -1, B, mt_comm_bytes_sent(MT_COMM_ALLREDUCE, B, c->size, 0), s);
    if (c->size == 1) {
        local_copy(c, s, recv, send, B);
        return;
    }
    if (s && c->nccl) {
        nccl_start(c, r, send, recv, count, k.esize == 2, 0, 0);
        return;
    }
    if (s) {
        stage_op op = {.in = send, .in_bytes = B, .out = recv, .out_bytes = B, .slot_bytes = B, .count = count, .k = k};
        stage_start(c, r, &op);
        return;
    }
    START(c, r, "MPI_Iallreduce",
       MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, to_int(c, count, "count"), k.type, k.op, c->comm,
                      &q),
       "%zu %s", count, k.what);
}

static void start_reduce_scatter(mt_comm *c, const void *send, void *recv, size_t count, sum_kind k,
                                 mt_comm_stream *s, mt_comm_req *r) {
    size_t B = count * k.esize * (size_t)c->size;
    s = order_of(c, s, send, B, recv, count * k.esize, "reduce_scatter");
    begin(c, r, MT_COMM_REDUCE_SCATTER, -1, B, mt_comm_bytes_sent(MT_COMM_REDUCE_SCATTER, B, c->size, 0), s);
    if (c->size == 1) {
        local_copy(c, s, recv, send, count * k.esize);
        return;
    }
    if (s && c->nccl) {
        nccl_start(c, r, send, recv, count, k.esize == 2, 0, 0);
        return;
    }
    if (s) {
        stage_op op = {.in = send, .in_bytes = B, .out = recv, .out_bytes = count * k.esize, .slot_bytes = B,
                       .count = count, .k = k};
        stage_start(c, r, &op);
        return;
    }
    START(c, r, "MPI_Ireduce_scatter_block",
       MPI_Ireduce_scatter_block(send == recv ? MPI_IN_PLACE : send, recv, to_int(c, count, "block count"), k.type,
                                 k.op, c->comm, &q),
       "%zu %s per block", count, k.what);
}

void mt_comm_iallreduce_on(mt_comm *c, const float *send, float *recv, size_t count, mt_comm_stream *s,
                           mt_comm_req *r) {
    start_allreduce(c, send, recv, count, fp32_sum(), s, r);
}

void mt_comm_ireduce_scatter_on(mt_comm *c, const float *send, float *recv, size_t count, mt_comm_stream *s,
                                mt_comm_req *r) {
    start_reduce_scatter(c, send, recv, count, fp32_sum(), s, r);
}

void mt_comm_iallreduce_bf16_on(mt_comm *c, const mt_bf16 *send, mt_bf16 *recv, size_t count, mt_comm_stream *s,
                                mt_comm_req *r) {
    start_allreduce(c, send, recv, count, bf16_sum(c), s, r);
}

void mt_comm_ireduce_scatter_bf16_on(mt_comm *c, const mt_bf16 *send, mt_bf16 *recv, size_t count,
                                     mt_comm_stream *s, mt_comm_req *r) {
    start_reduce_scatter(c, send, recv, count, bf16_sum(c), s, r);
}

void mt_comm_iallgather_on(mt_comm *c, const void *send, void *recv, size_t bytes, mt_comm_stream *s,
                           mt_comm_req *r) {
    size_t B = bytes * (size_t)c->size;
    s = order_of(c, s, send, bytes, recv, B, "allgather");
    begin(c, r, MT_COMM_ALLGATHER, -1, B, mt_comm_bytes_sent(MT_COMM_ALLGATHER, B, c->size, 0), s);
    char *mine = (char *)recv + (size_t)c->rank * bytes;
    if (c->size == 1) {
        local_copy(c, s, recv, send, bytes);
        return;
    }
    if (s && c->nccl) {
        nccl_start(c, r, send, recv, bytes, 0, 0, 0);
        return;
    }
    if (s) {
        stage_op op = {.in = send, .in_bytes = bytes, .in_off = (size_t)c->rank * bytes, .out = recv, .out_bytes = B,
                       .slot_bytes = B, .count = bytes};
        stage_start(c, r, &op);
        return;
    }
    START(c, r, "MPI_Iallgather",
       MPI_Iallgather(send == mine ? MPI_IN_PLACE : send, to_int(c, bytes, "block bytes"),
                      MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->comm, &q),
       "%zu bytes per block", bytes);
}

static void ialltoall(mt_comm *c, const void *send, void *recv, size_t bytes, mt_comm_req *r) {
    size_t B = bytes * (size_t)c->size;
    begin(c, r, MT_COMM_ALLTOALL, -1, B, mt_comm_bytes_sent(MT_COMM_ALLTOALL, B, c->size, 0), NULL);
    if (c->size == 1) {
        if (bytes) memmove(recv, send, bytes);
        return;
    }
    START(c, r, "MPI_Ialltoall",
       MPI_Ialltoall(send, to_int(c, bytes, "block bytes"), MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->comm, &q),
       "%zu bytes per block", bytes);
}

void mt_comm_ibroadcast_on(mt_comm *c, void *buf, size_t bytes, int root, mt_comm_stream *s, mt_comm_req *r) {
    check_root(c, root, "broadcast root");
    s = order_of(c, s, buf, bytes, NULL, 0, "broadcast");
    begin(c, r, MT_COMM_BROADCAST, -1, bytes,
          mt_comm_bytes_sent(MT_COMM_BROADCAST, bytes, c->size, c->rank == root), s);
    if (c->size == 1) return;
    if (s && c->nccl) {
        nccl_start(c, r, buf, buf, bytes, 0, root, 0);
        return;
    }
    if (s) {
        int me = c->rank == root;
        stage_op op = {.in = me ? buf : NULL, .in_bytes = bytes, .out = me ? NULL : buf, .out_bytes = bytes,
                       .slot_bytes = bytes, .count = bytes, .root = root};
        stage_start(c, r, &op);
        return;
    }
    START(c, r, "MPI_Ibcast",
       MPI_Ibcast(buf, to_int(c, bytes, "bytes"), MPI_BYTE, root, c->comm, &q),
       "%zu bytes from root %d", bytes, root);
}

void mt_comm_isend_on(mt_comm *c, const void *buf, size_t bytes, int peer, int tag, mt_comm_stream *s,
                      mt_comm_req *r) {
    check_root(c, peer, "send destination");
    check_tag(c, tag);
    s = order_of(c, s, buf, bytes, NULL, 0, "send");
    begin(c, r, MT_COMM_SEND, peer, bytes, mt_comm_bytes_sent(MT_COMM_SEND, bytes, c->size, 0), s);
    if (s && c->nccl) { /* NCCL has no tags: a group's messages to a peer match in order */
        nccl_start(c, r, buf, NULL, bytes, 0, 0, peer);
        return;
    }
    if (s) {
        stage_op op = {.in = buf, .in_bytes = bytes, .slot_bytes = bytes, .count = bytes, .peer = peer, .tag = tag};
        stage_start(c, r, &op);
        return;
    }
    START(c, r, "MPI_Isend",
       MPI_Isend(buf, to_int(c, bytes, "bytes"), MPI_BYTE, peer, tag, c->comm, &q),
       "%zu bytes to rank %d, tag %d", bytes, peer, tag);
}

void mt_comm_irecv_on(mt_comm *c, void *buf, size_t bytes, int peer, int tag, mt_comm_stream *s, mt_comm_req *r) {
    check_root(c, peer, "recv source");
    check_tag(c, tag);
    s = order_of(c, s, buf, bytes, NULL, 0, "recv");
    begin(c, r, MT_COMM_RECV, peer, bytes, 0, s);
    if (s && c->nccl) {
        nccl_start(c, r, NULL, buf, bytes, 0, 0, peer);
        return;
    }
    if (s) {
        stage_op op = {.out = buf, .out_bytes = bytes, .slot_bytes = bytes, .count = bytes, .peer = peer, .tag = tag};
        stage_start(c, r, &op);
        return;
    }
    START(c, r, "MPI_Irecv",
       MPI_Irecv(buf, to_int(c, bytes, "bytes"), MPI_BYTE, peer, tag, c->comm, &q),
       "%zu bytes from rank %d, tag %d", bytes, peer, tag);
}

/* The blocking forms of the operations with a non-blocking one are in common.c. */
void mt_comm_alltoall(mt_comm *c, const void *send, void *recv, size_t bytes) {
    mt_comm_req r = {0};
    ialltoall(c, send, recv, bytes, &r);
    mt_comm_wait(&r);
}
void mt_comm_alltoallv(mt_comm *c, const void *send, const size_t *send_bytes, const size_t *send_displs, void *recv,
                       const size_t *recv_bytes, const size_t *recv_displs) {
    uint64_t payload = 0, sent = 0, inter = 0;
    const int *node = c->ctx->node_of;
    int mine = node[c->world_ranks[c->rank]];
    for (int i = 0; i < c->size; i++) {
        payload += send_bytes[i];
        if (i == c->rank) continue;
        sent += send_bytes[i];
        if (node[c->world_ranks[i]] != mine) inter += send_bytes[i];
    }
    if (send_bytes[c->rank] != recv_bytes[c->rank])
        usage_fail(c, "alltoallv sends %zu bytes to this rank itself but expects %zu; the counts disagree",
                   send_bytes[c->rank], recv_bytes[c->rank]);
    mt_comm_req r = {0};
    begin(c, &r, MT_COMM_ALLTOALLV, -1, payload, sent, NULL);
    c->stats.k[MT_COMM_ALLTOALLV].bytes_inter += inter;
    if (c->size == 1) {
        if (send_bytes[0]) memmove((char *)recv + recv_displs[0], (const char *)send + send_displs[0], send_bytes[0]);
    } else {
        int *sc = c->a2a, *sd = sc + c->size, *rc = sd + c->size, *rd = rc + c->size;
        for (int i = 0; i < c->size; i++) {
            sc[i] = to_int(c, send_bytes[i], "bytes to one rank");
            sd[i] = to_int(c, send_displs[i], "send displacement");
            rc[i] = to_int(c, recv_bytes[i], "bytes from one rank");
            rd[i] = to_int(c, recv_displs[i], "receive displacement");
        }
        START(c, &r, "MPI_Ialltoallv", MPI_Ialltoallv(send, sc, sd, MPI_BYTE, recv, rc, rd, MPI_BYTE, c->comm, &q),
              "%llu bytes to the other ranks", (unsigned long long)sent);
    }
    mt_comm_wait(&r);
}
void mt_comm_barrier(mt_comm *c) {
    mt_comm_req r = {0};
    begin(c, &r, MT_COMM_BARRIER, -1, 0, 0, NULL);
    if (c->size > 1) START(c, &r, "MPI_Ibarrier", MPI_Ibarrier(c->comm, &q), "barrier");
    mt_comm_wait(&r);
}

void mt_comm_allreduce_ctl(mt_comm *c, const void *send, void *recv, size_t count,
                           mt_comm_dtype dt, mt_comm_op op) {
    MPI_Datatype mdt;
    size_t es;
    switch (dt) {
    case MT_COMM_F64: mdt = MPI_DOUBLE; es = 8; break;
    case MT_COMM_I32: mdt = MPI_INT; es = 4; break;
    case MT_COMM_I64: mdt = MPI_INT64_T; es = 8; break;
    default: usage_fail(c, "allreduce_ctl: unknown dtype %d", (int)dt);
    }
    MPI_Op mop;
    switch (op) {
    case MT_COMM_SUM: mop = MPI_SUM; break;
    case MT_COMM_MAX: mop = MPI_MAX; break;
    case MT_COMM_MIN: mop = MPI_MIN; break;
    default: usage_fail(c, "allreduce_ctl: unknown op %d", (int)op);
    }
    size_t B = count * es;
    mt_comm_req r = {0};
    begin(c, &r, MT_COMM_ALLREDUCE_CTL, -1, B,
          mt_comm_bytes_sent(MT_COMM_ALLREDUCE_CTL, B, c->size, 0), NULL);
    if (c->size == 1) {
        if (send != recv && count) memmove(recv, send, B);
    } else {
        START(c, &r, "MPI_Iallreduce",
           MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, to_int(c, count, "count"), mdt,
                          mop, c->comm, &q),
           "%zu control values", count);
    }
    mt_comm_wait(&r);
}

/* ------------------------------------------------------------------ split/free */

int mt_comm_split(mt_comm *parent, int color, int key, const char *name, mt_comm **out,
                  mt_error *err) {
    *out = NULL;
    mt_comm_ctx *x = parent->ctx;
    /* MPI_Comm_split blocks inside MPI; a timed barrier first turns a missing
     * rank into a timeout message instead of a hang. */
    mt_comm_barrier(parent);
    MPI_Comm mc = MPI_COMM_NULL;
    CK(parent, "MPI_Comm_split",
       MPI_Comm_split(parent->comm, color < 0 ? MPI_UNDEFINED : color, key, &mc),
       "color %d key %d for group '%s'", color, key, name);
    if (mc == MPI_COMM_NULL) return 0;
    mt_comm *c = make_comm(x, mc, name, -1, err);
    if (!c) {
        MPI_Comm_free(&mc);
        return -1;
    }
    /* Agree on an id that is unused in every member's context, so status
     * queries can name this group. */
    int64_t id = x->next_id;
    mt_comm_allreduce_ctl(c, &id, &id, 1, MT_COMM_I64, MT_COMM_MAX);
    c->id = id;
    x->next_id = id + 1;
    c->entered = 0;
    if (x->nccl && c->size > 1 && make_nccl(c, err)) return -1;
    mt_comm_reset_stats(c);
    *out = c;
    return 0;
}

void mt_comm_free(mt_comm *c) {
    if (!c) return;
    if (c->nccl) {
        c->ctx->nccl->destroy(c->nccl);
        c->ctx->dev.stream_destroy(c->ctx->dev.ctx, c->nccl_stream);
    }
    unregister_comm(c->ctx, c);
    CK(c, "MPI_Comm_free", MPI_Comm_free(&c->comm), "group '%s'", c->name);
    free(c->a2a);
    free(c->world_ranks);
    free(c);
}
