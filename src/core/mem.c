#include "core/mem.h"
#include "core/error.h"
#include <stdlib.h>
#include <string.h>

static const char *const cat_names[MT_MEM_NCAT] = {"params", "grads", "optimizer", "activations",
                                                  "comm", "scratch", "frozen"};

const char *mt_mem_cat_name(mt_mem_cat c) { return (unsigned)c < MT_MEM_NCAT ? cat_names[c] : "?"; }

size_t mt_mem_total(const mt_mem *m) {
    size_t t = 0;
    for (int i = 0; i < MT_MEM_NCAT; i++) t += m->cur[i];
    return t;
}

_Static_assert(MT_MEM_PLACE_SLOTS == MT_PLACE_N, "mt_mem.placed has a row per placement");

static const char *const place_names[MT_PLACE_N] = {"host", "pinned", "device"};

const char *mt_mem_place_name(mt_mem_place pl) { return (unsigned)pl < MT_PLACE_N ? place_names[pl] : "?"; }

size_t mt_mem_placed_total(const mt_mem *m, mt_mem_place pl) {
    size_t t = 0;
    for (int i = 0; i < MT_MEM_NCAT; i++) t += m->placed[pl][i];
    return t;
}

static void held(mt_mem *m, mt_mem_place pl, mt_mem_cat cat, size_t bytes) {
    m->cur[cat] += bytes;
    if (m->cur[cat] > m->peak[cat]) m->peak[cat] = m->cur[cat];
    size_t t = mt_mem_total(m);
    if (t > m->peak_total) m->peak_total = t;
    m->placed[pl][cat] += bytes;
    size_t tp = mt_mem_placed_total(m, pl);
    if (tp > m->placed_peak[pl]) m->placed_peak[pl] = tp;
}

static void released(mt_mem *m, mt_mem_place pl, mt_mem_cat cat, size_t bytes) {
    if (m->placed[pl][cat] < bytes || m->cur[cat] < bytes)
        mt_die("memory accounting: freeing %zu bytes of %s memory in category %s, which holds %zu: a buffer freed "
               "with another placement or category than it was allocated with",
               bytes, mt_mem_place_name(pl), mt_mem_cat_name(cat), m->placed[pl][cat]);
    m->cur[cat] -= bytes;
    m->placed[pl][cat] -= bytes;
}

static void *raw_alloc(mt_mem *m, mt_mem_place pl, mt_mem_cat cat, size_t bytes, const char *what) {
    void *p;
    if (m && m->allocator && pl != MT_PLACE_HOST) {
        p = m->allocator->alloc(m->allocator->ctx, pl, bytes ? bytes : 1);
        if (!p)
            mt_die("out of %s memory allocating %zu bytes for %s (category %s): shrink the model, batch or "
                   "micro-batch, or shard it (zero, tp, pp; meshtrain plan)",
                   mt_mem_place_name(pl), bytes, what, mt_mem_cat_name(cat));
    } else {
        size_t rounded = (bytes + 63) & ~(size_t)63;
        if (rounded == 0) rounded = 64;
        p = aligned_alloc(64, rounded);
        if (!p) mt_die("out of memory allocating %zu bytes for %s (category %s)", bytes, what, mt_mem_cat_name(cat));
        memset(p, 0, rounded); /* zero and pre-touch every page */
    }
    return p;
}

void *mt_mem_alloc_at(mt_mem *m, mt_mem_place pl, mt_mem_cat cat, size_t bytes, const char *what) {
    void *p = raw_alloc(m, pl, cat, bytes, what);
    if (m) held(m, pl, cat, bytes);
    return p;
}

void mt_mem_free_at(mt_mem *m, mt_mem_place pl, mt_mem_cat cat, void *p, size_t bytes) {
    if (!p) return;
    if (m) released(m, pl, cat, bytes);
    if (m && m->allocator && pl != MT_PLACE_HOST) m->allocator->free(m->allocator->ctx, pl, p);
    else free(p);
}

void mt_mem_drop_at(mt_mem *m, mt_mem_place pl, void *p) {
    if (!p) return;
    if (m && m->allocator && pl != MT_PLACE_HOST) m->allocator->free(m->allocator->ctx, pl, p);
    else free(p);
}

static size_t aligned64(size_t n) { return (n + 63) & ~(size_t)63; }

void *mt_mem_arena_take(mt_mem_arena *a, size_t bytes, const char *what) {
    size_t step = aligned64(bytes);
    if (!a->base) { /* measuring */
        a->cap += step;
        a->taken += bytes;
        a->buffers++;
        return NULL;
    }
    if (a->used + step > a->cap)
        mt_die("activation arena: %s (%zu bytes) does not fit: %zu of %zu bytes carved (the carving pass differs "
               "from the measuring pass)", what, bytes, a->used, a->cap);
    void *p = a->base + a->used;
    a->used += step;
    if (a->mem) held(a->mem, a->pl, a->cat, bytes);
    return p;
}

void mt_mem_arena_open(mt_mem *m, mt_mem_arena *a, mt_mem_place pl, mt_mem_cat cat, const char *what) {
    a->base = raw_alloc(m, pl, cat, a->cap, what);
    a->used = 0;
    a->pl = pl;
    a->cat = cat;
    a->mem = m;
    if (!m) return;
    held(m, pl, MT_MEM_SCRATCH, a->cap - a->taken); /* the alignment gaps */
    m->arena[cat].count++;
    m->arena[cat].bytes += a->cap;
    m->arena[cat].buffers += a->buffers;
}

void mt_mem_arena_drop(mt_mem_arena *a) {
    if (!a->base) return;
    mt_mem *m = a->mem;
    if (m) {
        m->arena[a->cat].count--;
        m->arena[a->cat].bytes -= a->cap;
        m->arena[a->cat].buffers -= a->buffers;
    }
    mt_mem_drop_at(m, a->pl, a->base);
    memset(a, 0, sizeof *a);
}

void *mt_mem_alloc(mt_mem *m, mt_mem_cat cat, size_t bytes, const char *what) {
    return mt_mem_alloc_at(m, MT_PLACE_HOST, cat, bytes, what);
}

void mt_mem_free(mt_mem *m, mt_mem_cat cat, void *p, size_t bytes) { mt_mem_free_at(m, MT_PLACE_HOST, cat, p, bytes); }

void mt_mem_note(mt_mem *m, mt_mem_cat cat, size_t bytes, int is_held) {
    if (!m) return;
    if (is_held) held(m, MT_PLACE_HOST, cat, bytes);
    else released(m, MT_PLACE_HOST, cat, bytes);
}
