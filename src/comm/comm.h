/* Communication layer: one communicator per process group.
 *
 * An mt_comm wraps one MPI communicator (the world, or a group the mesh split
 * off it) and offers the collectives the trainer needs -- all-reduce,
 * reduce-scatter, all-gather, broadcast, barrier, point-to-point send/recv --
 * in blocking and non-blocking forms, with per-communicator counters.
 *
 * Process context. All communicators of a process belong to one
 * mt_comm_ctx (created once after mt_comm_process_init, owned by the caller,
 * freed before mt_comm_process_finalize). It holds the timeout, a private
 * duplicate of MPI_COMM_WORLD used only for failure diagnosis, and the list
 * of live communicators.
 *
 * Errors. MPI errors never reach the caller: every communicator has
 * MPI_ERRORS_RETURN and every MPI call is checked; a failure prints one line
 * "meshtrain: rank R: MPI_<call> failed on group '<name>' ...: <MPI error
 * string>" and aborts the job (MPI_Abort, exit status MT_COMM_EXIT_MPI). Bad
 * arguments (count too large for an MPI int, root out of range) abort the same
 * way: they are programming errors, and on one rank only they would otherwise
 * hang the others.
 *
 * Timeouts and who did not arrive. No call ever blocks inside MPI: blocking
 * collectives are the non-blocking ones followed by mt_comm_wait, and every
 * wait polls MPI_Test until a deadline (ctx timeout, default 60 s, counted
 * from the start of the wait). While polling, a rank also answers "status
 * queries" (below). When the deadline passes the rank
 *   1. sends a status query (16 bytes, on the private world duplicate) to
 *      every other member of the group (for send/recv: to the peer);
 *   2. for a grace period of clamp(0.1*timeout, 0.2 s, 2 s) keeps answering
 *      queries of others and collects replies. A reply carries the peer's
 *      count of collectives entered on that group and what it is waiting in
 *      right now (group, collective, sequence number);
 *   2a. waits on (a new deadline, up to MT_COMM_SLOW_TIMEOUTS in all) when
 *      the diagnosis shows progress: every rank inside the operation (a slow
 *      link), answers changed since the last deadline, or the operation
 *      completed meanwhile; and once when some peer did not answer (over a
 *      slow link the query queues behind the operation's own bytes) -- a
 *      peer silent at two deadlines in a row is stalled or dead;
 *   3. prints ONE line to stderr naming the collective, its sequence number,
 *      the group (name and size), the bytes, the time waited, and the ranks
 *      that did not arrive -- peers that did not answer (stopped, dead, or
 *      computing outside any communication call) and peers that answered but
 *      had entered fewer collectives on this group (with what they are
 *      waiting in instead, which points at the root cause when a stall
 *      cascades across groups);
 *   4. lingers one more grace period, still answering queries (the other
 *      survivors reach their deadlines at about the same time and the first
 *      MPI_Abort kills them: this lets each print its line), then calls
 *      MPI_Abort (exit MT_COMM_EXIT_TIMEOUT).
 * So a stalled job ends about 2 timeouts + 3 grace periods after the stall
 * (about 12 s for a 5 s timeout). Collectives on a group are entered in the same
 * order on every member (MPI requires it), so "entered >= my sequence
 * number" is exactly "arrived". Example (one line):
 *   meshtrain: rank 1: timeout: allreduce #3 on group 'world' (size 4,
 *   4096 bytes) waited 11.0 s (timeout 5 s); did not arrive: 2 (world rank 2
 *   on host node7: no response -- stopped, dead or busy outside communication); arrived:
 *   0 1 3; aborting
 *
 * Normal-path cost: zero extra messages. Each poll iteration adds one
 * MPI_Test on the pre-posted query receive and one clock read; after 64
 * unsuccessful polls the loop calls sched_yield() so oversubscribed ranks
 * leave the core to the peers they wait for. Measured (tests/comm_driver
 * overhead; OpenMPI 4.1, shared memory, a shared 2-core VM, so noisy): on 2
 * ranks an 8-byte all-reduce costs ~0.6-1.1 us through mt_comm_allreduce vs
 * ~0.5-1.0 us for MPI_Iallreduce+MPI_Wait, i.e. the loop adds ~0.1-0.2 us;
 * a call on a size-1 group (no MPI) costs ~0.1-0.3 us. The larger gap is
 * OpenMPI's non-blocking algorithms vs its tuned blocking ones (8 B: ~0.3 us
 * blocking; 4 KB: ~1-12 us vs ~7-36 us) -- the price of never blocking
 * inside MPI; at 256 KB they differ by up to ~2x either way between runs
 * (bench-comm shows the bandwidth the trainer actually gets). Group creation
 * (MPI_Comm_split, MPI_Comm_dup in mt_comm_ctx_create) blocks inside MPI;
 * mt_comm_split is preceded by a timed barrier so a missing rank is still
 * named.
 * A rank killed outright (SIGKILL) is normally noticed by the launcher,
 * which tears the job down itself; under `mpirun {enable-recovery}` (OpenMPI)
 * or `mpiexec -disable-auto-cleanup` (MPICH) the survivors keep running and
 * this timeout path names the dead rank.
 *
 * Counters (per communicator, per kind of operation). `calls` counts
 * operations started; `payload_bytes` the size of the user buffer involved
 * (B below); `bytes_sent` the bytes this rank sends under the ring-algorithm
 * convention used by the ZeRO paper and nccl-tests, with n the group size:
 *   allreduce, allreduce_ctl: floor(2(n-1)*B / n)  (B = bytes of the vector)
 *   reduce_scatter:           (n-1)*b   (b = bytes of one block; B = n*b input)
 *   allgather:                (n-1)*b   (b = bytes of one block; B = n*b output)
 *   broadcast:                B on the root, 0 elsewhere (0 when n = 1)
 *   alltoall:                 (n-1)*b   (b = bytes to each rank; B = n*b)
 *   alltoallv:                the bytes to the other ranks (B = all the bytes this rank sends, its own
 *                             block included)
 *   send: B;  recv: 0;  barrier: 0
 * so with n = 1 every count is 0.
 *
 * Nodes. The ranks that share memory (MPI_COMM_TYPE_SHARED) form a node;
 * mt_comm_ctx_set_ranks_per_node overrides that with consecutive world
 * ranks (to test two-level paths on one machine). `bytes_inter` counts the
 * bytes a rank sends to another node under the same ring convention: a
 * collective's go to the next rank of the group, a send's to its peer, an
 * all-to-all's block to each rank on another node. With
 * the group's ranks in node order, a ring over k nodes crosses k links,
 * which is what a hierarchical NCCL ring does too. `wait_s` is the time spent inside the call
 * (blocking forms) or inside mt_comm_wait/mt_comm_test (non-blocking forms).
 * Groups of size 1 never touch MPI (copies only).
 *
 * Backends. comm.h names no MPI type: a build links one implementation.
 * mpi.c (`make`, compiled with mpicc) runs any number of processes over MPI;
 * local.c (`make MPI=0`, the plain C compiler, no libmpi) runs exactly one
 * process, whose every group has size 1 (copies only, as above), and refuses
 * a launcher that started more. Nothing outside src/comm/ includes <mpi.h>
 * or names an MPI symbol (tests/check_comm_seam.sh): the CLI starts and ends
 * the process through mt_comm_process_*.
 *
 * Streams and device buffers (issue 29). Every non-blocking operation has a
 * form ending in `_on` that also takes an mt_comm_stream (NULL: the host,
 * which is what the forms without `_on` pass). A device backend installs
 * its copy and event hooks (mt_comm_device, below) and its compute stream
 * with mt_comm_set_device; from then on an operation whose buffer is device
 * memory (the hooks' is_device) is ordered on that stream even when it came
 * through a host form, and an `_on` form orders on the stream it names. Such
 * an operation is host-staged (MPI sees only host memory, and NCCL cannot
 * serve ranks that share a GPU), as a state machine that test and wait
 * advance, so it overlaps the compute queued after it:
 *   start:  an event on the compute stream; the communication stream waits
 *           for it and copies the device buffer to a pinned host slot
 *           (device -> host), then records `in`;
 *   test/wait: once `in` completed, the MPI operation starts on the slot;
 *           once MPI completed, the slot is copied back (host -> device) on
 *           the communication stream, which records `out`, and the compute
 *           stream waits for `out`: the operation is complete for every
 *           kernel queued after the test or wait that saw it complete (the
 *           host reads the result only after a device sync, as any device
 *           memory). A slot is reused once its `out` completed; slots are
 *           kept, so a steady step allocates nothing.
 * The waits poll the events under the same deadlines and diagnosis as
 * above: a rank whose copy is still queued is inside the operation, a
 * stalled peer is named as on the host. Groups of size 1 copy device to
 * device on the compute stream. Byte counters are the host path's. Without
 * installed hooks a non-NULL stream is refused with one line (a programming
 * error, like a bad root). Send/recv of device buffers, broadcast and every
 * reduction are staged; all-to-all and the control all-reduce take host
 * buffers only.
 *
 * Threads: all calls of one context must come from one thread. */
#ifndef MT_COMM_COMM_H
#define MT_COMM_COMM_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "core/dtype.h"
#include "core/error.h"
#include "comm/device.h"

#define MT_COMM_EXIT_TIMEOUT 3 /* exit status of the job after a timeout */
#define MT_COMM_EXIT_MPI 4     /* exit status after a failed MPI call or a bad communication call */
#define MT_COMM_DEFAULT_TIMEOUT_S 60.0
#define MT_COMM_NAME_LEN 48

typedef enum {
    MT_COMM_ALLREDUCE = 0, /* fp32 sum */
    MT_COMM_ALLREDUCE_CTL, /* small control values: f64/i32/i64, sum/max/min */
    MT_COMM_REDUCE_SCATTER,
    MT_COMM_ALLGATHER,
    MT_COMM_BROADCAST,
    MT_COMM_SEND,
    MT_COMM_RECV,
    MT_COMM_BARRIER,
    MT_COMM_ALLTOALL,
    MT_COMM_ALLTOALLV, /* a size per pair (expert parallelism's token exchange) */
    MT_COMM_NKIND
} mt_comm_kind;

typedef enum { MT_COMM_F64 = 0, MT_COMM_I32, MT_COMM_I64 } mt_comm_dtype;
typedef enum { MT_COMM_SUM = 0, MT_COMM_MAX, MT_COMM_MIN } mt_comm_op;

typedef struct {
    uint64_t calls;
    uint64_t payload_bytes;
    uint64_t bytes_sent;
    uint64_t bytes_inter; /* the part of bytes_sent that crosses nodes (see "Nodes" above) */
    double wait_s;
} mt_comm_counter;

typedef struct {
    mt_comm_counter k[MT_COMM_NKIND];
} mt_comm_stats;

typedef struct mt_comm_ctx mt_comm_ctx;
typedef struct mt_comm mt_comm;

/* A non-blocking operation in flight. Owned by the caller (e.g. one per
 * gradient bucket); zero-initialise or leave it from a previous wait. The
 * buffers of the operation must stay untouched until it completes. Callers
 * read `active` at most; the rest is the backend's (`handle` holds its
 * request, e.g. an MPI_Request, as opaque bytes). */
typedef struct {
    mt_comm_stream *stream; /* what the operation is ordered on; NULL: the host */
    mt_comm *comm;
    int kind;          /* mt_comm_kind */
    int peer;          /* send/recv: group rank of the peer; else -1 */
    int active;        /* 1 between start and completion */
    uint64_t seq;      /* collective sequence number on comm (1-based) */
    size_t bytes;      /* payload bytes (for messages) */
    _Alignas(8) unsigned char handle[16];
} mt_comm_req;

/* ---- process ---- */
/* Starts this process's communication (MPI_Init_thread with funneled
 * threads; the local backend checks that no launcher started more than one
 * process). Call once, before anything else here; argc/argv as main's.
 * Returns 0, or -1 with err filled (nothing to finalize then). */
int mt_comm_process_init(int *argc, char ***argv, mt_error *err);
/* Ends it (MPI_Finalize): after every context is freed. */
void mt_comm_process_finalize(void);
/* Ends every process of the job with exit status `code` (MPI_Abort). */
_Noreturn void mt_comm_process_abort(int code);
/* This process's rank and the number of processes in the job (the world);
 * 0 and 1 before mt_comm_process_init, and in the local backend (whose
 * process refused by mt_comm_process_init answers the rank its launcher gave
 * it, so that one process says why). */
int mt_comm_process_rank(void);
int mt_comm_process_size(void);
/* After a failure on this rank: did every rank of the job fail? The ranks
 * that failed meet in one all-reduce; a rank that did not fail never joins
 * (nor one still waiting in a collective for a peer), so after wait_s
 * seconds the answer is no. 1 in a one-process job. */
int mt_comm_process_all_failed(double wait_s);
/* Whether a launcher (mpirun, mpiexec) started this process (one of one,
 * for the local backend); a singleton: 0. */
int mt_comm_process_launched(void);

/* ---- context ---- */
/* Requires mt_comm_process_init. timeout_s <= 0 selects the default (60 s).
 * Collective over the world. Returns NULL with err filled on failure. */
mt_comm_ctx *mt_comm_ctx_create(double timeout_s, mt_error *err);
/* Frees the context and its world communicator; every other communicator
 * must have been freed. Call before mt_comm_process_finalize. */
void mt_comm_ctx_free(mt_comm_ctx *ctx);
/* Installs a device's staging hooks and its compute stream on c's context
 * (every communicator of it; see "Streams and device buffers"); dev NULL
 * uninstalls them, after every staged operation completed (the slots are
 * freed then). */
void mt_comm_set_device(mt_comm *c, const mt_comm_device *dev, mt_comm_stream *compute);
/* {comm} nccl (comm/device.h, mt_comm_nccl): from now on every group of
 * more than one rank, the existing ones (in creation order, which every
 * member shares) and those split later, gets an NCCL communicator, and
 * the operations on device buffers ordered on a stream go through it
 * instead of host staging. Needs the device hooks (mt_comm_set_device) and
 * a build with NCCL (`make gpu-mpi`); collective over the world. 0, or -1
 * with err set. Not yet run on a GPU. */
int mt_comm_use_nccl(mt_comm *c, mt_error *err);

/* This rank's index among the ranks of its node (ranks sharing memory, or
 * the ranks-per-node override) and their number: the local GPU it drives. */
int mt_comm_local_rank(const mt_comm *c);
int mt_comm_local_size(const mt_comm *c);

/* Nodes of ranks_per_node consecutive world ranks instead of the shared-
 * memory groups; call before creating the groups whose traffic it should
 * classify (it changes only the accounting, and the node groups asked for
 * later). */
int mt_comm_ctx_set_ranks_per_node(mt_comm_ctx *x, int ranks_per_node, mt_error *err);
/* Distinct nodes among the group's ranks. */
int mt_comm_node_count(const mt_comm *c);
/* The node of member r (the world rank of the node's first rank). */
int mt_comm_node_of(const mt_comm *c, int r);
void mt_comm_ctx_set_timeout(mt_comm_ctx *ctx, double timeout_s);
double mt_comm_ctx_timeout(const mt_comm_ctx *ctx);
/* The world communicator (name "world"), owned by the context. */
mt_comm *mt_comm_world(mt_comm_ctx *ctx);
/* Seconds this process has spent inside waits and tests on every
 * communicator of c's context (the sum of all wait_s counters, kept as one
 * running total; never reset): the difference over a step is the step's
 * time waiting in communication. */
double mt_comm_wait_total_s(const mt_comm *c);
/* This process's host (MPI_Get_processor_name), truncated to n - 1 bytes. */
void mt_comm_host_name(char *buf, size_t n);

/* ---- communicators ---- */
/* Collective over parent: like MPI_Comm_split. Members with the same color
 * form a new group ordered by key; color < 0 means "no group" (*out = NULL).
 * name (<= 47 chars) names the group in messages. */
int mt_comm_split(mt_comm *parent, int color, int key, const char *name, mt_comm **out,
                  mt_error *err);
void mt_comm_free(mt_comm *c); /* NULL is a no-op */
int mt_comm_rank(const mt_comm *c);
int mt_comm_size(const mt_comm *c);
const char *mt_comm_name(const mt_comm *c);
int mt_comm_world_rank_of(const mt_comm *c, int group_rank); /* world rank of a member */
const mt_comm_stats *mt_comm_get_stats(const mt_comm *c);
void mt_comm_reset_stats(mt_comm *c);
const char *mt_comm_kind_name(mt_comm_kind k); /* "allreduce", "reduce_scatter", ... */
/* The bytes_sent convention above, for one operation of `payload` bytes
 * (reduce_scatter/allgather: payload = n * block bytes) on n ranks. */
uint64_t mt_comm_bytes_sent(mt_comm_kind k, uint64_t payload, int n, int is_root);
/* Prints one line per kind with calls, payload and sent bytes, wait time. */
void mt_comm_print_stats(const mt_comm *c, FILE *f);

/* ---- blocking operations ---- (send == recv means in place) */
/* recv[i] = sum over ranks of send[i], i < count. */
void mt_comm_allreduce(mt_comm *c, const float *send, float *recv, size_t count);
/* Small control values (loss sums, norms, flags): dtype/op as named. */
void mt_comm_allreduce_ctl(mt_comm *c, const void *send, void *recv, size_t count,
                           mt_comm_dtype dt, mt_comm_op op);
/* send holds n blocks of `count` floats; recv (count floats) gets block
 * `rank` summed over ranks. In place (send == recv): recv holds the n blocks
 * and the result lands in its first `count` elements. */
void mt_comm_reduce_scatter(mt_comm *c, const float *send, float *recv, size_t count);
/* recv (n * bytes) gets every rank's `bytes`-sized block in rank order. In
 * place: send == (char *)recv + rank * bytes. */
void mt_comm_allgather(mt_comm *c, const void *send, void *recv, size_t bytes);
/* Block i of send (bytes each) goes to rank i; recv gets rank i's block
 * for this rank at block i. Not in place. */
void mt_comm_alltoall(mt_comm *c, const void *send, void *recv, size_t bytes);
/* The same with a size per pair (MPI_Alltoallv): send_bytes[i] bytes at
 * send + send_displs[i] go to rank i, and recv_bytes[i] bytes from rank i
 * land at recv + recv_displs[i] (all arrays of the group's size, displacements
 * in bytes). The sizes must agree pairwise -- exchange them first (e.g. with
 * mt_comm_alltoall); a rank that expects another size from a peer is a
 * programming error. Not in place. Times out and names the missing ranks
 * like every collective. */
void mt_comm_alltoallv(mt_comm *c, const void *send, const size_t *send_bytes, const size_t *send_displs, void *recv,
                       const size_t *recv_bytes, const size_t *recv_displs);
void mt_comm_broadcast(mt_comm *c, void *buf, size_t bytes, int root);
void mt_comm_send(mt_comm *c, const void *buf, size_t bytes, int peer, int tag);
void mt_comm_recv(mt_comm *c, void *buf, size_t bytes, int peer, int tag);
void mt_comm_barrier(mt_comm *c);

/* ---- non-blocking forms: start, then mt_comm_test / mt_comm_wait ---- */
void mt_comm_iallreduce(mt_comm *c, const float *send, float *recv, size_t count,
                        mt_comm_req *r);
void mt_comm_ireduce_scatter(mt_comm *c, const float *send, float *recv, size_t count,
                             mt_comm_req *r);
/* The same two reductions on bf16 vectors (gradients held in bf16): every
 * pairwise sum is done in fp32 and rounded to bf16 (round to nearest even);
 * the order of the additions is the MPI library's. Counted as
 * allreduce / reduce_scatter with 2-byte elements. */
void mt_comm_iallreduce_bf16(mt_comm *c, const mt_bf16 *send, mt_bf16 *recv, size_t count, mt_comm_req *r);
void mt_comm_ireduce_scatter_bf16(mt_comm *c, const mt_bf16 *send, mt_bf16 *recv, size_t count, mt_comm_req *r);
void mt_comm_iallgather(mt_comm *c, const void *send, void *recv, size_t bytes,
                        mt_comm_req *r);
void mt_comm_ibroadcast(mt_comm *c, void *buf, size_t bytes, int root, mt_comm_req *r);
void mt_comm_isend(mt_comm *c, const void *buf, size_t bytes, int peer, int tag,
                   mt_comm_req *r);
void mt_comm_irecv(mt_comm *c, void *buf, size_t bytes, int peer, int tag, mt_comm_req *r);
/* The same, ordered on a stream (see "Streams" above; NULL: the host, as the
 * forms without `_on`). */
void mt_comm_iallreduce_on(mt_comm *c, const float *send, float *recv, size_t count, mt_comm_stream *s,
                           mt_comm_req *r);
void mt_comm_ireduce_scatter_on(mt_comm *c, const float *send, float *recv, size_t count, mt_comm_stream *s,
                                mt_comm_req *r);
void mt_comm_iallreduce_bf16_on(mt_comm *c, const mt_bf16 *send, mt_bf16 *recv, size_t count, mt_comm_stream *s,
                                mt_comm_req *r);
void mt_comm_ireduce_scatter_bf16_on(mt_comm *c, const mt_bf16 *send, mt_bf16 *recv, size_t count,
                                     mt_comm_stream *s, mt_comm_req *r);
void mt_comm_iallgather_on(mt_comm *c, const void *send, void *recv, size_t bytes, mt_comm_stream *s,
                           mt_comm_req *r);
void mt_comm_ibroadcast_on(mt_comm *c, void *buf, size_t bytes, int root, mt_comm_stream *s, mt_comm_req *r);
void mt_comm_isend_on(mt_comm *c, const void *buf, size_t bytes, int peer, int tag, mt_comm_stream *s,
                      mt_comm_req *r);
void mt_comm_irecv_on(mt_comm *c, void *buf, size_t bytes, int peer, int tag, mt_comm_stream *s, mt_comm_req *r);
/* Progresses the operation (and the MPI library); returns 1 once complete
 * (also for an inactive request), 0 otherwise. Never blocks. */
int mt_comm_test(mt_comm_req *r);
/* Completes the operation, or times out as described above. */
void mt_comm_wait(mt_comm_req *r);
void mt_comm_waitall(mt_comm_req *r, int n);

#endif
