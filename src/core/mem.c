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

void *mt_mem_alloc(mt_mem *m, mt_mem_cat cat, size_t bytes, const char *what) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded == 0) rounded = 64;
    void *p = aligned_alloc(64, rounded);
    if (!p) mt_die("out of memory allocating %zu bytes for %s (category %s)", bytes, what,
                   mt_mem_cat_name(cat));
    memset(p, 0, rounded); /* zero and pre-touch every page */
    if (m) {
        m->cur[cat] += bytes;
        if (m->cur[cat] > m->peak[cat]) m->peak[cat] = m->cur[cat];
        size_t t = mt_mem_total(m);
        if (t > m->peak_total) m->peak_total = t;
    }
    return p;
}

void mt_mem_free(mt_mem *m, mt_mem_cat cat, void *p, size_t bytes) {
    if (!p) return;
    free(p);
    if (m) m->cur[cat] -= bytes;
}

void mt_mem_note(mt_mem *m, mt_mem_cat cat, size_t bytes, int held) {
    if (!m) return;
    if (!held) {
        m->cur[cat] -= bytes;
        return;
    }
    m->cur[cat] += bytes;
    if (m->cur[cat] > m->peak[cat]) m->peak[cat] = m->cur[cat];
    size_t t = mt_mem_total(m);
    if (t > m->peak_total) m->peak_total = t;
}
