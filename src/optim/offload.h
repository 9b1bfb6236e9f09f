/* Disk offload of optimizer state (ZeRO-Infinity style).
 *
 * A rank's optimizer state (and, when the trainer wants, its fp32 master
 * weights) lives in one file in DIR instead of memory. The state is a list
 * of regions, one per unit: region r holds k_r fp32 streams of n_r elements
 * (the rank's owned range of the unit: m and v for AdamW, + master weights).
 * An update streams the regions through memory in chunks: a dedicated I/O
 * thread reads chunk c+1 (pread) and writes back chunk c-1 (pwrite) while
 * the caller's callback updates chunk c in place (double buffering: two
 * slots of k x chunk floats). Resident memory for the state is those two
 * slots, sized to the byte budget ({offload-buffer-mb}) and accounted under
 * MT_MEM_OPTIM. The I/O thread makes no MPI calls; the callback runs on the
 * calling thread.
 *
 * The file is created (name meshtrain-offload-r<rank>-<pid>.bin), sized with
 * posix_fallocate (a full disk is reported here, not mid-run) and unlinked
 * at once: it never shows in DIR, reads as zeros (fresh m, v), and its space
 * returns to the filesystem when the handle is closed or the process dies.
 * The kernel's page cache may hold the file's pages; they are reclaimable.
 *
 * Why a thread and not POSIX AIO: glibc implements aio_read/aio_write with
 * its own user-space threads, so a dedicated thread is the same mechanism
 * with a fixed FIFO order (the write of a slot always precedes the read that
 * refills it), one place for error reporting, and no signal setup.
 *
 * optim/opt_state.h drives it for every optimizer of the table (the
 * elementwise ones stream as below; the others page a unit's state
 * storage through stream 0 of a one-stream region). Used directly:
 *   init:  mt_offload_open(&o, dir, world_rank, buffer_mb << 20, &mem, err);
 *          per unit u, mt_offload_add_region(o, hi - lo, k, err) with [lo, hi)
 *          from mt_zero_owned (region ids are 0, 1, ... in call order;
 *          n = 0 is fine); mt_offload_start(o, err). Initial master weights:
 *          mt_offload_write(o, u, stream, 0, hi - lo, p, err).
 *   step:  mt_offload_stream_all(o, fn, ctx, err) with, for AdamW,
 *            fn(ctx, u, st, off, n): mt_zero_owned(z, m, u, &lo, &hi, &p, &g);
 *              mt_opt_update_range(&opt, &units[u], lo + off, lo + off + n,
 *                                  p + off, g + off, st, lr, t, coef);
 *          which is bitwise the in-memory update (the arithmetic is per
 *          element and weight decay follows the tensors of [lo+off, ...)).
 *          A failure (I/O error) is returned as -1 with the message; make it
 *          collective as the trainer does for other rank-local errors.
 *   checkpoint: mt_offload_read(o, u, s, 0, hi - lo, buf, err) into an
 *          S-float buffer (zero the tail) for mt_zero_get_full_state; load:
 *          mt_offload_write(o, u, s, 0, hi - lo, full + lo, err). Not while a
 *          stream runs (the calls are synchronous on the calling thread).
 *   end:   mt_offload_close(o) (joins the thread, frees, releases the file). */
#ifndef MT_OPTIM_OFFLOAD_H
#define MT_OPTIM_OFFLOAD_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "core/mem.h"

typedef struct mt_offload mt_offload;

/* Updates one chunk in place: state[s] points at elements [off, off + n) of
 * stream s of `region` (off counts from the region's start). */
typedef void (*mt_offload_chunk_fn)(void *ctx, int region, float *const *state, size_t off, size_t n);

/* buffer_bytes: the budget for the two resident slots. rank names the file.
 * mem may be NULL (no accounting). */
int mt_offload_open(mt_offload **out, const char *dir, int rank, size_t buffer_bytes, mt_mem *mem, mt_error *err);
/* Returns the new region's id (>= 0), or -1. k: 1..MT_OFFLOAD_MAX_STREAMS. */
#define MT_OFFLOAD_MAX_STREAMS 4
int mt_offload_add_region(mt_offload *o, size_t n, int k, mt_error *err);
/* Creates and sizes the file, allocates the slots, starts the I/O thread. */
int mt_offload_start(mt_offload *o, mt_error *err);

/* Streams elements [begin, end) of one region / every region in order. */
int mt_offload_stream(mt_offload *o, int region, size_t begin, size_t end, mt_offload_chunk_fn fn, void *ctx,
                      mt_error *err);
int mt_offload_stream_all(mt_offload *o, mt_offload_chunk_fn fn, void *ctx, mt_error *err);

/* Synchronous access to stream s of a region (init, checkpoints). */
int mt_offload_read(mt_offload *o, int region, int s, size_t begin, size_t end, float *dst, mt_error *err);
int mt_offload_write(mt_offload *o, int region, int s, size_t begin, size_t end, const float *src, mt_error *err);

void mt_offload_close(mt_offload *o);

typedef struct {
    size_t chunk_elems;     /* elements per chunk (per stream) */
    size_t resident_bytes;  /* the two slots */
    uint64_t file_bytes;
    uint64_t bytes_read, bytes_written, chunks;
    double io_s;            /* time the I/O thread spent in reads and writes */
    double wait_s;          /* time the caller waited for I/O (the exposed part) */
    double compute_s;       /* time in the callbacks */
    double stream_s;        /* wall time of the stream calls */
} mt_offload_stats;

void mt_offload_get_stats(mt_offload *o, mt_offload_stats *st);
void mt_offload_reset_stats(mt_offload *o);

/* Measurement aids: do each chunk's I/O on the calling thread, with no
 * overlap (the baseline for the hidden fraction); add a delay to every I/O
 * job (a slower disk, for overlap tests). */
void mt_offload_set_synchronous(mt_offload *o, int on);
void mt_offload_set_io_delay_us(mt_offload *o, unsigned us);

#endif
