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
} mt_comm_device;

#endif
