#include "optim/opt_state.h"
#include "ops/ops.h"
#include <stdlib.h>
#include <string.h>

int mt_opt_states_init(mt_opt_states *o, const mt_opt_config *c, const mt_unit_layout *units, int n_units,
                       const size_t *begin, const size_t *end, const size_t *len, const mt_opt_offload_cfg *off,
                       mt_mem *mem, mt_error *err) {
    memset(o, 0, sizeof *o);
    o->entry = mt_optimizer_get(c->h.kind);
    o->cfg = *c;
    o->n_units = n_units;
    o->units = units;
    o->master = -1;
    o->mem = mem;
    size_t n = (size_t)(n_units > 0 ? n_units : 1);
    o->begin = mt_xcalloc(n, sizeof *o->begin, "optimizer ranges");
    o->end = mt_xcalloc(n, sizeof *o->end, "optimizer ranges");
    o->len = mt_xcalloc(n, sizeof *o->len, "optimizer ranges");
    o->state = mt_xcalloc(n, sizeof *o->state, "optimizer state table");
    for (int u = 0; u < n_units; u++) {
        o->begin[u] = begin[u];
        o->end[u] = end[u] > begin[u] ? end[u] : begin[u];
        o->len[u] = len[u];
    }
    if (!off || !off->dir) {
        for (int u = 0; u < n_units; u++)
            if (o->len[u]) o->state[u] = o->entry->init(c, &units[u], o->begin[u], o->end[u], o->len[u], mem);
        return 0;
    }
    if (mt_offload_open(&o->offload, off->dir, off->rank, off->buffer_bytes, mem, err)) return -1;
    if (!o->entry->elementwise) { /* paged: one stream per unit holding the state's storage */
        o->paged = 1;
        o->words = mt_xcalloc(n, sizeof *o->words, "optimizer storage sizes");
        size_t mx = 0;
        for (int u = 0; u < n_units; u++) {
            if (!o->len[u]) continue;
            o->state[u] = o->entry->init_detached(c, &units[u], o->begin[u], o->end[u], mem);
            o->words[u] = (o->entry->storage_bytes(o->state[u]) + sizeof(float) - 1) / sizeof(float);
            mx = o->words[u] > mx ? o->words[u] : mx;
        }
        o->resident_bytes = (mx ? mx : 1) * sizeof(float);
        o->resident = mt_mem_alloc_at(mem, MT_PLACE_PINNED, MT_MEM_OPTIM, o->resident_bytes, "paged optimizer state");
        for (int u = 0; u < n_units; u++)
            if (mt_offload_add_region(o->offload, o->words[u], 1, err) < 0) return -1;
        return mt_offload_start(o->offload, err);
    }
    /* one region per unit (ids = unit indices; the file reads as zeros: fresh state) */
    int k = o->entry->n_streams + (off->with_master ? 1 : 0);
    if (off->with_master) o->master = o->entry->n_streams;
    for (int u = 0; u < n_units; u++)
        if (mt_offload_add_region(o->offload, o->len[u] ? o->end[u] - o->begin[u] : 0, k, err) < 0) return -1;
    return mt_offload_start(o->offload, err);
}

void mt_opt_states_free(mt_opt_states *o) {
    if (o->offload) mt_offload_close(o->offload);
    for (int u = 0; o->state && u < o->n_units; u++)
        if (o->state[u]) o->entry->free(o->state[u], o->mem);
    mt_mem_free_at(o->mem, MT_PLACE_PINNED, MT_MEM_OPTIM, o->resident, o->resident_bytes);
    free(o->words);
    free(o->state);
    free(o->begin);
    free(o->end);
    free(o->len);
    memset(o, 0, sizeof *o);
}

int mt_opt_states_count(const mt_opt_states *o) { return o->entry->n_streams; }
const char *mt_opt_states_name(const mt_opt_states *o, int k) { return o->entry->streams[k].name; }
int mt_opt_states_has_master(const mt_opt_states *o) { return o->master >= 0; }

typedef struct {
    mt_opt_states *o;
    mt_opt_target_fn target;
    void *ctx;
    float lr, grad_scale;
    int64_t t;
} stream_step;

/* One streamed chunk of unit u: the entry's update of those elements, with
 * the master from the file where the caller no longer holds it. */
static void step_chunk(void *ctx, int u, float *const *st, size_t off, size_t n) {
    stream_step *a = ctx;
    mt_opt_states *o = a->o;
    mt_opt_target tg;
    a->target(a->ctx, u, &tg);
    float *p = tg.p ? tg.p + off : st[o->master];
    o->entry->step_streams(&o->cfg, &o->units[u], o->begin[u], off, n, &tg, p, st, a->lr, a->t, a->grad_scale);
}

/* Paged: unit u's state storage from the file into the resident buffer. */
static int page_in(mt_opt_states *o, int u, mt_error *err) {
    if (mt_offload_read(o->offload, u, 0, 0, o->words[u], o->resident, err)) return -1;
    o->entry->attach(o->state[u], o->resident);
    return 0;
}
static int page_out(mt_opt_states *o, int u, mt_error *err) {
    return mt_offload_write(o->offload, u, 0, 0, o->words[u], o->resident, err);
}

int mt_opt_states_step(mt_opt_states *o, mt_opt_target_fn target, void *ctx, float lr, int64_t t, float grad_scale,
                       mt_error *err) {
    if (o->offload && !o->paged) {
        stream_step a = {o, target, ctx, lr, grad_scale, t};
        return mt_offload_stream_all(o->offload, step_chunk, &a, err);
    }
    for (int u = 0; u < o->n_units; u++) {
        if (!o->state[u]) continue; /* not held here (another pipeline stage's unit) */
        mt_opt_target tg;
        target(ctx, u, &tg);
        if (o->paged && page_in(o, u, err)) return -1;
        o->entry->step(o->state[u], &o->cfg, &o->units[u], &tg, lr, t, grad_scale);
        if (o->paged && page_out(o, u, err)) return -1;
    }
    return 0;
}

/* The offload stream of index k (k = MT_OPT_STREAM_MASTER: the master). */
static int file_stream(const mt_opt_states *o, int k) { return k == MT_OPT_STREAM_MASTER ? o->master : k; }

static int check_master(const mt_opt_states *o, int u, int k, mt_error *err) {
    if (k == MT_OPT_STREAM_MASTER && o->master < 0)
        return mt_errorf(err, "unit %d: the fp32 master is not a stream of the optimizer state (it is offloaded "
                              "only under mixed precision with disk offload)", u);
    return 0;
}

static int on_device(const mt_opt_states *o) { return o->be && o->be->kind != MT_DEVICE_CPU; }

const float *mt_opt_states_get(mt_opt_states *o, int u, int k, float *buf, mt_error *err) {
    if (!o->offload && k != MT_OPT_STREAM_MASTER) {
        float *fp32 = o->entry->fp32_stream(o->state[u], k);
        if (fp32 && on_device(o)) { /* device memory: a host copy in buf */
            op_copy_to_host(o->be, buf, fp32, o->len[u] * sizeof(float));
            return buf;
        }
        if (fp32) return fp32;
    }
    if (check_master(o, u, k, err)) return NULL;
    if (on_device(o) && !o->offload) {
        mt_errorf(err, "unit %d: optimizer state stream %d is not fp32 on the device: it has no host copy yet", u, k);
        return NULL;
    }
    memset(buf, 0, o->len[u] * sizeof(float));
    size_t n = o->end[u] - o->begin[u];
    if (o->offload && !o->paged) return mt_offload_read(o->offload, u, file_stream(o, k), 0, n, buf, err) ? NULL : buf;
    if (o->paged && page_in(o, u, err)) return NULL;
    o->entry->get_stream(o->state[u], &o->units[u], k, buf);
    return buf;
}

int mt_opt_states_set(mt_opt_states *o, int u, int k, const float *full, mt_error *err) {
    if (check_master(o, u, k, err)) return -1;
    if (on_device(o) && !o->offload) { /* the owned part of the full stream copied in, the padding zeroed */
        float *fp32 = o->entry->fp32_stream(o->state[u], k);
        if (!fp32)
            return mt_errorf(err, "unit %d: optimizer state stream %d is not fp32 on the device: it cannot be set "
                                  "from the host yet", u, k);
        size_t n = o->end[u] - o->begin[u];
        op_copy_from_host(o->be, fp32, full + o->begin[u], n * sizeof(float));
        if (o->len[u] > n) op_zero_bytes(o->be, fp32 + n, (o->len[u] - n) * sizeof(float));
        return 0;
    }
    if (o->offload && !o->paged)
        return mt_offload_write(o->offload, u, file_stream(o, k), 0, o->end[u] - o->begin[u], full + o->begin[u], err);
    if (o->paged && page_in(o, u, err)) return -1;
    o->entry->set_stream(o->state[u], &o->units[u], k, full);
    return o->paged ? page_out(o, u, err) : 0;
}

int mt_opt_states_put_master(mt_opt_states *o, int u, const float *src, mt_error *err) {
    if (check_master(o, u, MT_OPT_STREAM_MASTER, err)) return -1;
    return mt_offload_write(o->offload, u, o->master, 0, o->end[u] - o->begin[u], src, err);
}
