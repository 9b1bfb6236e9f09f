/* Test helpers shared by the optimizer tests: a seeded splitmix64 stream
 * and a unit builder for hand-made layouts (no tp, no padding). */
#ifndef MT_TESTLIB_UNIT_H
#define MT_TESTLIB_UNIT_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nn/unit.h"

static inline uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* Uniform in [-1, 1). */
static inline float rng_sym(uint64_t *s) { return (float)((double)(rng_next(s) >> 11) / 4503599627370496.0 - 1.0); }

/* Appends a tensor of r x c (ndim 2) or r (ndim 1) elements to u, growing
 * u->t when it is full (a fixed array with room to spare is never grown;
 * the tests' units live to the end of the test). */
static inline void add_tensor(mt_unit_layout *u, const char *name, int ndim, int64_t r, int64_t c, int decay) {
    if (u->n_tensors == u->cap) {
        u->cap = u->cap ? 2 * u->cap : 8;
        u->t = realloc(u->t, (size_t)u->cap * sizeof *u->t);
        if (!u->t) abort();
    }
    mt_tensor *t = &u->t[u->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = r;
    t->shape[1] = ndim == 2 ? c : 1;
    t->offset = u->numel;
    t->numel = (size_t)(r * t->shape[1]);
    t->weight_decay = decay;
    u->numel += t->numel;
}
#endif
