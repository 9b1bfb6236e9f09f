/* Test helpers shared by the optimizer tests: a unit builder for hand-made
 * layouts (no tp, no padding) and the unit they step. */
#ifndef MT_TESTLIB_UNIT_H
#define MT_TESTLIB_UNIT_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nn/unit.h"
#include "testlib.h"

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

/* The optimizer tests' unit (1157 elements): matrices whose rows are not a
 * multiple of any block or shard size, vectors, a [1, n] matrix (unfactored)
 * and a tiny matrix. */
static inline void add_test_tensors(mt_unit_layout *u) {
    add_tensor(u, "w1", 2, 37, 23, 1);
    add_tensor(u, "b1", 1, 37, 1, 0);
    add_tensor(u, "w2", 2, 5, 41, 1);
    add_tensor(u, "g", 1, 41, 1, 0);
    add_tensor(u, "row", 2, 1, 17, 1);
    add_tensor(u, "w3", 2, 2, 3, 1);
}
#endif
