/* What comm/ needs of a device to stage collectives of its buffers
 * (comm.h, "Streams and device buffers"): a header of its own, plain C
 * that C++ reads too, so that the CUDA backend (src/cuda/backend.cu) fills
 * the hooks without compiling comm.h. */
#ifndef MT_COMM_DEVICE_H
#define MT_COMM_DEVICE_H
#include <stddef.h>

/* A device stream (a cudaStream_t under the CUDA backend); only ever
 * handled by pointer, NULL being the host. */
typedef struct mt_comm_stream mt_comm_stream;

/* A device's hooks for staged collectives (filled by the device backend,
 * src/cuda/backend.cu; `ctx` is its first argument). Device errors end the
 * process with one line inside the hooks, as every mid-step device error
 * does. Events are opaque (cudaEvent_t). */
typedef struct mt_comm_device {
    void *ctx;
    /* whether [p, p + bytes) is device memory the host must not touch directly */
    int (*is_device)(void *ctx, const void *p, size_t bytes);
    void *(*pinned_alloc)(void *ctx, size_t bytes); /* NULL when out of pinned memory */
    void (*pinned_free)(void *ctx, void *p);
    void *(*event_create)(void *ctx);
    void (*event_destroy)(void *ctx, void *event);
    void (*event_record)(void *ctx, void *event, mt_comm_stream *s);
    int (*event_done)(void *ctx, void *event); /* 1 once the work before the record completed */
    void (*stream_wait)(void *ctx, mt_comm_stream *s, void *event);
    /* an asynchronous copy on s, any direction (cudaMemcpyDefault) */
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes, mt_comm_stream *s);
    mt_comm_stream *comm_stream; /* where the staging copies run (overlapping the compute stream) */
    /* a stream of its own for each NCCL communicator (NULL where the device has no NCCL) */
    mt_comm_stream *(*stream_create)(void *ctx);
    void (*stream_destroy)(void *ctx, mt_comm_stream *s);
} mt_comm_device;

/* NCCL beside MPI (comm/nccl.c, linked only into `make gpu-mpi`; elsewhere
 * mt_comm_nccl_hooks() is NULL). A communicator per group of more than one
 * rank, made when the group is (bootstrapped by broadcasting rank 0's unique
 * id over the group's MPI communicator); every call enqueues on stream s and
 * returns NULL or NCCL's error string. */
typedef struct mt_comm_nccl {
    size_t id_bytes; /* NCCL_UNIQUE_ID_BYTES */
    const char *(*get_id)(void *id);
    const char *(*create)(void **comm, const void *id, int nranks, int rank);
    void (*destroy)(void *comm);
    /* bf16: 2-byte bf16 elements, else fp32; reduce-scatter writes block `rank` to recv (NCCL's in place
       is recv == send + rank * count) */
    const char *(*allreduce)(void *comm, const void *send, void *recv, size_t count, int bf16, mt_comm_stream *s);
    const char *(*reduce_scatter)(void *comm, const void *send, void *recv, size_t count, int bf16, mt_comm_stream *s);
    const char *(*allgather)(void *comm, const void *send, void *recv, size_t bytes, mt_comm_stream *s);
    const char *(*broadcast)(void *comm, void *buf, size_t bytes, int root, mt_comm_stream *s);
    const char *(*send)(void *comm, const void *buf, size_t bytes, int peer, mt_comm_stream *s);
    const char *(*recv)(void *comm, void *buf, size_t bytes, int peer, mt_comm_stream *s);
    const char *(*async_error)(void *comm); /* NULL while the communicator is healthy */
} mt_comm_nccl;

#ifdef __cplusplus
extern "C" {
#endif
/* The NCCL hooks of this build (comm/nccl.c), or NULL (weak, comm/common.c). */
const mt_comm_nccl *mt_comm_nccl_hooks(void);
#ifdef __cplusplus
}
#endif

#endif
