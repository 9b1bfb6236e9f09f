#include "optim/offload.h"
#include "core/clock.h"
#include "core/fileio.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* Stream s of a region starts at base + s * stride bytes (page-aligned). */
typedef struct {
    size_t n;
    int k;
    uint64_t base, stride;
} state_region;

enum { JOB_READ = 0, JOB_WRITE = 1 };
typedef struct {
    int kind, slot, region;
    size_t off, n;
} io_job;

/* At most two jobs (write back, refill) per slot are ever queued. */
#define QUEUE_CAP 8
#define FILE_ALIGN 4096u

struct mt_offload {
    char *dir, *path;
    int fd;
    size_t budget;
    mt_mem *mem;
    state_region *regions;
    int n_regions, cap_regions, kmax;
    int started;
    size_t chunk;       /* elements per stream in a slot */
    size_t slot_bytes;
    float *slot[2];
    uint64_t file_bytes;
    int synchronous;
    unsigned delay_us;
    /* shared with the I/O thread under mu */
    pthread_t thread;
    int thread_running;
    pthread_mutex_t mu;
    pthread_cond_t job_cv, done_cv;
    io_job queue[QUEUE_CAP];
    int q_head, q_len;
    int pending[2]; /* jobs queued or running per slot */
    int quit;
    int io_failed;
    mt_error io_err;
    mt_offload_stats st;
};


int mt_offload_open(mt_offload **out, const char *dir, int rank, size_t buffer_bytes, mt_mem *mem, mt_error *err) {
    *out = NULL;
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return mt_errorf(err, "offload directory %s: %s (create it, or give another {offload-optimizer} disk:DIR)", dir,
                         strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return mt_errorf(err, "offload directory %s is not a directory (give a directory to {offload-optimizer} disk:DIR)",
                         dir);
    mt_offload *o = mt_xcalloc(1, sizeof *o, "offload handle");
    size_t plen = strlen(dir) + 64;
    o->dir = mt_xmalloc(strlen(dir) + 1, "offload directory name");
    strcpy(o->dir, dir);
    o->path = mt_xmalloc(plen, "offload file name");
    snprintf(o->path, plen, "%s/meshtrain-offload-r%d-%ld.bin", dir, rank, (long)getpid());
    o->budget = buffer_bytes;
    o->mem = mem;
    o->fd = open(o->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (o->fd < 0) {
        int e = errno;
        mt_errorf(err, "cannot create the offload file %s: %s (the directory must be writable; give another "
                       "{offload-optimizer} disk:DIR)", o->path, strerror(e));
        free(o->dir);
        free(o->path);
        free(o);
        return -1;
    }
    /* Unlinked at once: no stale files after a crash; space returns at close. */
    if (unlink(o->path) != 0) {
        int e = errno;
        close(o->fd);
        mt_errorf(err, "cannot unlink the offload file %s after creating it: %s", o->path, strerror(e));
        free(o->dir);
        free(o->path);
        free(o);
        return -1;
    }
    if (pthread_mutex_init(&o->mu, NULL) || pthread_cond_init(&o->job_cv, NULL) || pthread_cond_init(&o->done_cv, NULL))
        mt_die("cannot initialise the offload I/O thread's mutex / condition variables");
    *out = o;
    return 0;
}

int mt_offload_add_region(mt_offload *o, size_t n, int k, mt_error *err) {
    if (o->started) return mt_errorf(err, "offload: regions must be added before mt_offload_start");
    if (k < 1 || k > MT_OFFLOAD_MAX_STREAMS)
        return mt_errorf(err, "offload: a region has 1 to %d state streams, not %d", MT_OFFLOAD_MAX_STREAMS, k);
    if (o->n_regions == o->cap_regions) {
        int cap = o->cap_regions ? 2 * o->cap_regions : 16;
        state_region *r = realloc(o->regions, (size_t)cap * sizeof *r);
        if (!r) mt_die("out of memory growing the offload region table to %d entries", cap);
        o->regions = r;
        o->cap_regions = cap;
    }
    o->regions[o->n_regions] = (state_region){n, k, 0, 0};
    if (k > o->kmax) o->kmax = k;
    return o->n_regions++;
}

static int size_file(mt_offload *o, mt_error *err) {
    if (o->file_bytes == 0) return 0;
    int rc = posix_fallocate(o->fd, 0, (off_t)o->file_bytes);
    if (rc == 0) return 0;
    if (rc == ENOSPC) {
        struct statvfs vs;
        unsigned long long avail = statvfs(o->dir, &vs) == 0 ? (unsigned long long)vs.f_bavail * vs.f_frsize : 0;
        return mt_errorf(err, "not enough space in %s for the optimizer offload file: need %" PRIu64
                              " bytes, %llu available (free space or give another {offload-optimizer} disk:DIR)",
                         o->dir, o->file_bytes, avail);
    }
    return mt_errorf(err, "cannot size the optimizer offload file in %s to %" PRIu64 " bytes: %s", o->dir,
                     o->file_bytes, strerror(rc));
}

static int do_job(mt_offload *o, const io_job *j, mt_error *err) {
    if (o->delay_us) {
        struct timespec ts = {(time_t)(o->delay_us / 1000000u), (long)(o->delay_us % 1000000u) * 1000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
    }
    const state_region *r = &o->regions[j->region];
    for (int s = 0; s < r->k; s++) {
        float *buf = o->slot[j->slot] + (size_t)s * o->chunk;
        uint64_t off = r->base + (uint64_t)s * r->stride + (uint64_t)j->off * sizeof(float);
        size_t bytes = j->n * sizeof(float);
        int rc = j->kind == JOB_READ ? mt_pread_all(o->fd, buf, bytes, off, o->path, err)
                                     : mt_pwrite_all(o->fd, buf, bytes, off, o->path, err);
        if (rc) return rc;
    }
    return 0;
}

/* Called with mu held, after a job ran for dt seconds. */
static void account_job(mt_offload *o, const io_job *j, double dt, int rc, const mt_error *e) {
    uint64_t bytes = (uint64_t)j->n * sizeof(float) * (uint64_t)o->regions[j->region].k;
    o->st.io_s += dt;
    if (j->kind == JOB_READ) o->st.bytes_read += bytes;
    else o->st.bytes_written += bytes;
    if (rc && !o->io_failed) {
        o->io_failed = 1;
        o->io_err = *e;
    }
}

static void *io_main(void *arg) {
    mt_offload *o = arg;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (o->q_len == 0 && !o->quit) pthread_cond_wait(&o->job_cv, &o->mu);
        if (o->q_len == 0) break; /* quit with nothing left */
        io_job j = o->queue[o->q_head];
        o->q_head = (o->q_head + 1) % QUEUE_CAP;
        o->q_len--;
        pthread_mutex_unlock(&o->mu);
        mt_error e;
        double t0 = mt_clock_s();
        int rc = do_job(o, &j, &e);
        double dt = mt_clock_s() - t0;
        pthread_mutex_lock(&o->mu);
        account_job(o, &j, dt, rc, &e);
        o->pending[j.slot]--;
        pthread_cond_broadcast(&o->done_cv);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

int mt_offload_start(mt_offload *o, mt_error *err) {
    if (o->started) return mt_errorf(err, "offload: mt_offload_start called twice");
    size_t max_n = 0;
    uint64_t pos = 0;
    for (int i = 0; i < o->n_regions; i++) {
        state_region *r = &o->regions[i];
        r->stride = ((uint64_t)r->n * sizeof(float) + FILE_ALIGN - 1) / FILE_ALIGN * FILE_ALIGN;
        r->base = pos;
        pos += r->stride * (uint64_t)r->k;
        if (r->n > max_n) max_n = r->n;
    }
    o->file_bytes = pos;
    int kmax = o->kmax ? o->kmax : 1;
    size_t per_elem = 2 * (size_t)kmax * sizeof(float); /* two slots, kmax streams */
    size_t chunk = o->budget / per_elem;
    if (chunk == 0)
        return mt_errorf(err, "offload buffer of %zu bytes is too small: two slots of %d state streams need at least "
                              "%zu bytes (raise {offload-buffer-mb})", o->budget, kmax, per_elem);
    if (chunk >= 16) chunk &= ~(size_t)15; /* whole 64-byte lines */
    if (chunk > max_n) chunk = max_n;
    o->chunk = chunk;
    if (size_file(o, err)) return -1;
    o->slot_bytes = (size_t)kmax * chunk * sizeof(float);
    for (int s = 0; s < 2; s++)
        o->slot[s] = mt_mem_alloc_at(o->mem, MT_PLACE_PINNED, MT_MEM_OPTIM, o->slot_bytes, "optimizer offload buffer");
    int rc = pthread_create(&o->thread, NULL, io_main, o);
    if (rc) return mt_errorf(err, "cannot start the optimizer offload I/O thread: %s", strerror(rc));
    o->thread_running = 1;
    o->started = 1;
    o->st.chunk_elems = chunk;
    o->st.resident_bytes = 2 * o->slot_bytes;
    o->st.file_bytes = o->file_bytes;
    return 0;
}

static void post(mt_offload *o, int kind, int slot, int region, size_t off, size_t n) {
    io_job j = {kind, slot, region, off, n};
    if (o->synchronous) {
        mt_error e;
        double t0 = mt_clock_s();
        int rc = do_job(o, &j, &e);
        double dt = mt_clock_s() - t0;
        pthread_mutex_lock(&o->mu);
        account_job(o, &j, dt, rc, &e);
        o->st.wait_s += dt; /* all of it exposed */
        pthread_mutex_unlock(&o->mu);
        return;
    }
    pthread_mutex_lock(&o->mu);
    o->queue[(o->q_head + o->q_len) % QUEUE_CAP] = j;
    o->q_len++;
    o->pending[slot]++;
    pthread_cond_signal(&o->job_cv);
    pthread_mutex_unlock(&o->mu);
}

static void wait_slot(mt_offload *o, int slot) {
    double t0 = mt_clock_s();
    pthread_mutex_lock(&o->mu);
    while (o->pending[slot] > 0) pthread_cond_wait(&o->done_cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
    o->st.wait_s += mt_clock_s() - t0;
}

/* The chunks of [pos, end) of regions r .. r_end-1 (end: the first region's
 * end when single, else each region's n). Chunks never cross regions. */
typedef struct {
    int r, r_end, single;
    size_t pos, end;
} chunk_iter;

typedef struct {
    int region;
    size_t off, n;
} chunk;

static int next_chunk(const mt_offload *o, chunk_iter *it, chunk *c) {
    while (it->r < it->r_end) {
        size_t lim = it->single ? it->end : o->regions[it->r].n;
        if (it->pos < lim) {
            c->region = it->r;
            c->off = it->pos;
            c->n = lim - it->pos < o->chunk ? lim - it->pos : o->chunk;
            it->pos += c->n;
            return 1;
        }
        it->r++;
        it->pos = 0;
    }
    return 0;
}

static int run_stream(mt_offload *o, chunk_iter it, mt_offload_chunk_fn fn, void *ctx, mt_error *err) {
    if (!o->started) return mt_errorf(err, "offload: mt_offload_start must run before streaming");
    if (o->io_failed) return mt_errorf(err, "%s (an earlier offload I/O error)", o->io_err.msg);
    double t0 = mt_clock_s();
    chunk c[2];
    int valid[2] = {0, 0};
    for (int s = 0; s < 2; s++)
        if ((valid[s] = next_chunk(o, &it, &c[s]))) post(o, JOB_READ, s, c[s].region, c[s].off, c[s].n);
    for (int cur = 0; valid[cur]; cur ^= 1) {
        wait_slot(o, cur);
        if (o->io_failed) break;
        float *ptr[MT_OFFLOAD_MAX_STREAMS];
        for (int s = 0; s < o->regions[c[cur].region].k; s++) ptr[s] = o->slot[cur] + (size_t)s * o->chunk;
        double tc = mt_clock_s();
        fn(ctx, c[cur].region, ptr, c[cur].off, c[cur].n);
        o->st.compute_s += mt_clock_s() - tc;
        o->st.chunks++;
        /* FIFO: the write-back of this slot runs before the read refilling it */
        post(o, JOB_WRITE, cur, c[cur].region, c[cur].off, c[cur].n);
        if ((valid[cur] = next_chunk(o, &it, &c[cur]))) post(o, JOB_READ, cur, c[cur].region, c[cur].off, c[cur].n);
    }
    wait_slot(o, 0);
    wait_slot(o, 1);
    o->st.stream_s += mt_clock_s() - t0;
    if (o->io_failed) return mt_errorf(err, "optimizer offload I/O failed: %s", o->io_err.msg);
    return 0;
}

static int check_range(const mt_offload *o, int region, size_t begin, size_t end, mt_error *err) {
    if (region < 0 || region >= o->n_regions)
        return mt_errorf(err, "offload: region %d does not exist (%d regions)", region, o->n_regions);
    if (begin > end || end > o->regions[region].n)
        return mt_errorf(err, "offload: range [%zu, %zu) is outside region %d of %zu elements", begin, end, region,
                         o->regions[region].n);
    return 0;
}

int mt_offload_stream(mt_offload *o, int region, size_t begin, size_t end, mt_offload_chunk_fn fn, void *ctx,
                      mt_error *err) {
    if (check_range(o, region, begin, end, err)) return -1;
    return run_stream(o, (chunk_iter){region, region + 1, 1, begin, end}, fn, ctx, err);
}

int mt_offload_stream_all(mt_offload *o, mt_offload_chunk_fn fn, void *ctx, mt_error *err) {
    return run_stream(o, (chunk_iter){0, o->n_regions, 0, 0, 0}, fn, ctx, err);
}

static int direct_io(mt_offload *o, int write, int region, int s, size_t begin, size_t end, float *buf,
                     mt_error *err) {
    if (!o->started) return mt_errorf(err, "offload: mt_offload_start must run before reading or writing state");
    if (check_range(o, region, begin, end, err)) return -1;
    const state_region *r = &o->regions[region];
    if (s < 0 || s >= r->k) return mt_errorf(err, "offload: region %d has %d streams, not stream %d", region, r->k, s);
    uint64_t off = r->base + (uint64_t)s * r->stride + (uint64_t)begin * sizeof(float);
    size_t bytes = (end - begin) * sizeof(float);
    return write ? mt_pwrite_all(o->fd, buf, bytes, off, o->path, err) : mt_pread_all(o->fd, buf, bytes, off, o->path, err);
}

int mt_offload_read(mt_offload *o, int region, int s, size_t begin, size_t end, float *dst, mt_error *err) {
    return direct_io(o, 0, region, s, begin, end, dst, err);
}

int mt_offload_write(mt_offload *o, int region, int s, size_t begin, size_t end, const float *src, mt_error *err) {
    return direct_io(o, 1, region, s, begin, end, (float *)src, err);
}

void mt_offload_close(mt_offload *o) {
    if (!o) return;
    if (o->thread_running) {
        pthread_mutex_lock(&o->mu);
        o->quit = 1;
        pthread_cond_signal(&o->job_cv);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->thread, NULL);
    }
    pthread_cond_destroy(&o->job_cv);
    pthread_cond_destroy(&o->done_cv);
    pthread_mutex_destroy(&o->mu);
    for (int s = 0; s < 2; s++) mt_mem_free_at(o->mem, MT_PLACE_PINNED, MT_MEM_OPTIM, o->slot[s], o->slot_bytes);
    close(o->fd);
    free(o->regions);
    free(o->dir);
    free(o->path);
    free(o);
}

void mt_offload_get_stats(mt_offload *o, mt_offload_stats *st) {
    pthread_mutex_lock(&o->mu);
    *st = o->st;
    pthread_mutex_unlock(&o->mu);
}

void mt_offload_reset_stats(mt_offload *o) {
    pthread_mutex_lock(&o->mu);
    mt_offload_stats keep = {.chunk_elems = o->st.chunk_elems, .resident_bytes = o->st.resident_bytes,
                             .file_bytes = o->st.file_bytes};
    o->st = keep;
    pthread_mutex_unlock(&o->mu);
}

void mt_offload_set_synchronous(mt_offload *o, int on) { o->synchronous = on; }
void mt_offload_set_io_delay_us(mt_offload *o, unsigned us) { o->delay_us = us; }
