/* NCCL beside MPI (comm/device.h, mt_comm_nccl): compiled and linked only
 * into `make gpu-mpi` (build-gpu/meshtrain-mpi), against the NCCL of
 * /usr/local/cuda; comm/mpi.c makes a communicator per group of more than
 * one rank when {comm} nccl asked for it, bootstrapped over MPI (rank 0's
 * unique id broadcast on the group). Every operation is enqueued on the
 * stream it is given; comm/mpi.c orders that stream after the compute
 * stream and the compute stream after it, with events, and polls the events
 * under its deadlines (a stalled peer leaves the NCCL kernel spinning; the
 * deadline's diagnosis over MPI names it and the job is aborted).
 * Not yet run: written and compiled on a machine without a GPU. */
#include "comm/device.h"
#include <cuda_runtime.h>
#include <nccl.h>
#include <string.h>

_Static_assert(NCCL_UNIQUE_ID_BYTES == sizeof(ncclUniqueId), "ncclUniqueId is not NCCL_UNIQUE_ID_BYTES bytes");

static const char *err(ncclResult_t r) { return r == ncclSuccess ? NULL : ncclGetErrorString(r); }
static ncclDataType_t sum_type(int bf16) { return bf16 ? ncclBfloat16 : ncclFloat32; }

static const char *get_id(void *id) {
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r == ncclSuccess) memcpy(id, &u, sizeof u);
    return err(r);
}

static const char *create(void **comm, const void *id, int nranks, int rank) {
    ncclUniqueId u;
    ncclComm_t c = NULL;
    memcpy(&u, id, sizeof u);
    ncclResult_t r = ncclCommInitRank(&c, nranks, u, rank);
    *comm = r == ncclSuccess ? (void *)c : NULL;
    return err(r);
}

/* after an error the communicator may hold kernels that never end: abort it rather than destroy */
static void destroy(void *comm) {
    ncclResult_t async = ncclSuccess;
    if (!comm) return;
    if (ncclCommGetAsyncError((ncclComm_t)comm, &async) != ncclSuccess || async != ncclSuccess)
        ncclCommAbort((ncclComm_t)comm);
    else
        ncclCommDestroy((ncclComm_t)comm);
}

static const char *allreduce(void *comm, const void *send, void *recv, size_t count, int bf16, mt_comm_stream *s) {
    return err(ncclAllReduce(send, recv, count, sum_type(bf16), ncclSum, (ncclComm_t)comm, (cudaStream_t)s));
}

static const char *reduce_scatter(void *comm, const void *send, void *recv, size_t count, int bf16,
                                  mt_comm_stream *s) {
    return err(ncclReduceScatter(send, recv, count, sum_type(bf16), ncclSum, (ncclComm_t)comm, (cudaStream_t)s));
}

static const char *allgather(void *comm, const void *send, void *recv, size_t bytes, mt_comm_stream *s) {
    return err(ncclAllGather(send, recv, bytes, ncclUint8, (ncclComm_t)comm, (cudaStream_t)s));
}

static const char *broadcast(void *comm, void *buf, size_t bytes, int root, mt_comm_stream *s) {
    return err(ncclBroadcast(buf, buf, bytes, ncclUint8, root, (ncclComm_t)comm, (cudaStream_t)s));
}

static const char *send(void *comm, const void *buf, size_t bytes, int peer, mt_comm_stream *s) {
    return err(ncclSend(buf, bytes, ncclUint8, peer, (ncclComm_t)comm, (cudaStream_t)s));
}

static const char *recv(void *comm, void *buf, size_t bytes, int peer, mt_comm_stream *s) {
    return err(ncclRecv(buf, bytes, ncclUint8, peer, (ncclComm_t)comm, (cudaStream_t)s));
}

static const char *async_error(void *comm) {
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError((ncclComm_t)comm, &async);
    return r != ncclSuccess ? err(r) : err(async);
}

static const mt_comm_nccl hooks = {NCCL_UNIQUE_ID_BYTES, get_id,    create,    destroy, allreduce,  reduce_scatter,
                                   allgather,            broadcast, send,      recv,    async_error};

const mt_comm_nccl *mt_comm_nccl_hooks(void) { return &hooks; }
