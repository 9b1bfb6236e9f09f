/* The parts of comm.h every backend shares (mpi.c, local.c): names, the byte
 * convention, the stats print, the host forms of the non-blocking operations
 * (no stream) and the blocking forms (start + wait, so they time out like
 * everything else). Written against comm.h alone. */
#include "comm/comm.h"

static const char *const kind_names[MT_COMM_NKIND] = {
    "allreduce", "allreduce_ctl", "reduce_scatter", "allgather",
    "broadcast", "send",          "recv",           "barrier", "alltoall",
    "alltoallv"};

const char *mt_comm_kind_name(mt_comm_kind k) {
    return (unsigned)k < MT_COMM_NKIND ? kind_names[k] : "?";
}

uint64_t mt_comm_bytes_sent(mt_comm_kind k, uint64_t payload, int n, int is_root) {
    if (n <= 1) return 0;
    uint64_t un = (uint64_t)n;
    switch (k) {
    case MT_COMM_ALLREDUCE:
    case MT_COMM_ALLREDUCE_CTL: return 2 * (un - 1) * payload / un;
    case MT_COMM_REDUCE_SCATTER:
    case MT_COMM_ALLGATHER:
    case MT_COMM_ALLTOALL: return (un - 1) * (payload / un);
    case MT_COMM_BROADCAST: return is_root ? payload : 0;
    case MT_COMM_SEND: return payload;
    default: return 0;
    }
}

void mt_comm_print_stats(const mt_comm *c, FILE *f) {
    const mt_comm_stats *s = mt_comm_get_stats(c);
    for (int k = 0; k < MT_COMM_NKIND; k++) {
        const mt_comm_counter *q = &s->k[k];
        if (!q->calls) continue;
        fprintf(f, "  %-8s %-15s calls %8llu  payload %14llu B  sent %14llu B  wait %9.3f s\n",
                mt_comm_name(c), kind_names[k], (unsigned long long)q->calls,
                (unsigned long long)q->payload_bytes, (unsigned long long)q->bytes_sent,
                q->wait_s);
    }
}

/* ---- host forms: the stream forms with no stream ---- */
void mt_comm_iallreduce(mt_comm *c, const float *send, float *recv, size_t count, mt_comm_req *r) {
    mt_comm_iallreduce_on(c, send, recv, count, NULL, r);
}
void mt_comm_ireduce_scatter(mt_comm *c, const float *send, float *recv, size_t count, mt_comm_req *r) {
    mt_comm_ireduce_scatter_on(c, send, recv, count, NULL, r);
}
void mt_comm_iallreduce_bf16(mt_comm *c, const mt_bf16 *send, mt_bf16 *recv, size_t count, mt_comm_req *r) {
    mt_comm_iallreduce_bf16_on(c, send, recv, count, NULL, r);
}
void mt_comm_ireduce_scatter_bf16(mt_comm *c, const mt_bf16 *send, mt_bf16 *recv, size_t count, mt_comm_req *r) {
    mt_comm_ireduce_scatter_bf16_on(c, send, recv, count, NULL, r);
}
void mt_comm_iallgather(mt_comm *c, const void *send, void *recv, size_t bytes, mt_comm_req *r) {
    mt_comm_iallgather_on(c, send, recv, bytes, NULL, r);
}
void mt_comm_ibroadcast(mt_comm *c, void *buf, size_t bytes, int root, mt_comm_req *r) {
    mt_comm_ibroadcast_on(c, buf, bytes, root, NULL, r);
}
void mt_comm_isend(mt_comm *c, const void *buf, size_t bytes, int peer, int tag, mt_comm_req *r) {
    mt_comm_isend_on(c, buf, bytes, peer, tag, NULL, r);
}
void mt_comm_irecv(mt_comm *c, void *buf, size_t bytes, int peer, int tag, mt_comm_req *r) {
    mt_comm_irecv_on(c, buf, bytes, peer, tag, NULL, r);
}

/* ---- blocking forms ---- */
void mt_comm_allreduce(mt_comm *c, const float *send, float *recv, size_t count) {
    mt_comm_req r = {0};
    mt_comm_iallreduce(c, send, recv, count, &r);
    mt_comm_wait(&r);
}
void mt_comm_reduce_scatter(mt_comm *c, const float *send, float *recv, size_t count) {
    mt_comm_req r = {0};
    mt_comm_ireduce_scatter(c, send, recv, count, &r);
    mt_comm_wait(&r);
}
void mt_comm_allgather(mt_comm *c, const void *send, void *recv, size_t bytes) {
    mt_comm_req r = {0};
    mt_comm_iallgather(c, send, recv, bytes, &r);
    mt_comm_wait(&r);
}
void mt_comm_broadcast(mt_comm *c, void *buf, size_t bytes, int root) {
    mt_comm_req r = {0};
    mt_comm_ibroadcast(c, buf, bytes, root, &r);
    mt_comm_wait(&r);
}
void mt_comm_send(mt_comm *c, const void *buf, size_t bytes, int peer, int tag) {
    mt_comm_req r = {0};
    mt_comm_isend(c, buf, bytes, peer, tag, &r);
    mt_comm_wait(&r);
}
void mt_comm_recv(mt_comm *c, void *buf, size_t bytes, int peer, int tag) {
    mt_comm_req r = {0};
    mt_comm_irecv(c, buf, bytes, peer, tag, &r);
    mt_comm_wait(&r);
}
void mt_comm_waitall(mt_comm_req *r, int n) {
    for (int i = 0; i < n; i++) mt_comm_wait(&r[i]);
}

/* The NCCL hooks: none here; comm/nccl.c's strong definition replaces this in `make gpu-mpi`. */
__attribute__((weak)) const mt_comm_nccl *mt_comm_nccl_hooks(void) { return NULL; }
