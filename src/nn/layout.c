#include "nn/unit.h"
#include "core/error.h"
#include "core/philox.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mt_layout_init(mt_layout *l, int n_units, int tp, int tp_rank) {
    memset(l, 0, sizeof *l);
    l->tp = tp;
    l->tp_rank = tp_rank;
    l->ep = 1;
    l->n_units = n_units;
    l->units = mt_xcalloc((size_t)n_units, sizeof(mt_unit_layout), "model layout");
    for (int u = 0; u < n_units; u++) {
        l->units[u].layer = -1;
        l->units[u].shared_unit = -1;
    }
}

mt_tensor *mt_unit_add_tensor(mt_layout *l, int uidx, const char *name, int64_t rows, int64_t cols, int ndim, int decay,
                              float std, mt_tp_split split) {
    mt_unit_layout *u = &l->units[uidx];
    if (u->n_tensors == u->cap) {
        u->cap = u->cap ? 2 * u->cap : 16;
        u->t = realloc(u->t, (size_t)u->cap * sizeof(mt_tensor));
        if (!u->t) mt_die("out of memory growing the tensor list of unit %d", uidx);
    }
    int tp = l->tp;
    mt_tensor *t = &u->t[u->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->gshape[0] = rows;
    t->gshape[1] = ndim == 2 ? cols : 1;
    t->gnumel = (size_t)rows * (size_t)t->gshape[1];
    t->goffset = u->gnumel;
    u->gnumel += t->gnumel;
    t->split = tp > 1 ? split : MT_TP_REPLICATED;
    t->tp_replicas = t->split == MT_TP_REPLICATED ? tp : 1;
    t->split_parts = 1;
    t->part_rows[0] = rows;
    t->shape[0] = t->split == MT_TP_ROWS ? rows / tp : rows;
    t->shape[1] = t->split == MT_TP_COLS ? t->gshape[1] / tp : t->gshape[1];
    t->numel = (size_t)t->shape[0] * (size_t)t->shape[1];
    t->offset = u->numel;
    t->weight_decay = decay;
    t->trainable = 1;
    t->init_std = std;
    t->init_rows = rows;
    t->ckpt_rows = rows;
    u->numel += t->numel;
    return t;
}

void mt_tensor_set_parts(mt_tensor *t, int n, const int64_t *rows) {
    if (n < 1 || n > MT_TP_MAX_PARTS) mt_die("tensor %s: %d row blocks (1..%d supported)", t->name, n, MT_TP_MAX_PARTS);
    int64_t sum = 0;
    for (int i = 0; i < n; i++) sum += t->part_rows[i] = rows[i];
    if (sum != t->gshape[0]) mt_die("tensor %s: row blocks sum to %lld, not %lld", t->name, (long long)sum, (long long)t->gshape[0]);
    t->split_parts = n;
}

void mt_unit_set_tp_replicas(mt_layout *l, int uidx, int replicas) {
    mt_unit_layout *u = &l->units[uidx];
    mt_tensor *t = &u->t[u->n_tensors - 1];
    if (l->tp == 1 || replicas == 1) return;
    if (t->split != MT_TP_ROWS || replicas < 1 || l->tp % replicas || t->split_parts != 1)
        mt_die("tensor %s: %d replicas of a tp %d cut", t->name, replicas, l->tp);
    u->numel -= t->numel;
    t->tp_replicas = replicas;
    t->shape[0] = t->gshape[0] * replicas / l->tp;
    t->numel = (size_t)t->shape[0] * (size_t)t->shape[1];
    u->numel += t->numel;
}

void mt_unit_add_shared(mt_layout *l, int u, const char *name, const char *owner_name) {
    mt_unit_layout *ul = &l->units[u];
    int owner = -1;
    const mt_tensor *t = mt_layout_find_tensor(l, owner_name, &owner);
    if (!t || owner == u) mt_die("unit %d: shared tensor '%s' names no tensor of another unit", u, owner_name);
    if (ul->n_shared == MT_MAX_SHARED || (ul->shared_unit >= 0 && ul->shared_unit != owner))
        mt_die("unit %d: shares tensors with more than one unit, or more than %d", u, MT_MAX_SHARED);
    mt_shared_tensor *s = &ul->shared[ul->n_shared++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->unit = owner;
    s->tensor = (int)(t - l->units[owner].t); /* a declared index (mt_unit_tensor) */
    if (l->units[owner].ref) mt_die("unit %d: shared tensor '%s' declared after the frozen split", u, owner_name);
    ul->shared_unit = owner;
}

/* One store's tensors with the other ranks' experts emptied, offsets
 * renumbered, the first expert's offset rounded up to a multiple of align
 * (the trainable store under ZeRO's dp sharding of the dense part; 1: none);
 * its elements (a quantized frozen tensor has none here). */
static size_t shard_store(mt_tensor *t, int n, int per, int ep_rank, int frozen, size_t align) {
    size_t off = 0;
    int seen = 0;
    for (int i = 0; i < n; i++) {
        if (t[i].expert && !seen) off = (off + align - 1) / align * align;
        seen |= t[i].expert != 0;
        if (t[i].expert && (t[i].expert - 1) / per != ep_rank) {
            t[i].shape[0] = 0;
            t[i].numel = 0;
        }
        t[i].offset = off;
        if (!(frozen && t[i].quant)) off += t[i].numel;
    }
    return off;
}

void mt_layout_shard_experts(mt_layout *l, int n_experts, int ep, int ep_rank, int dense_align) {
    int per = n_experts / ep;
    size_t A = dense_align > 1 ? (size_t)dense_align : 1;
    l->ep = ep;
    l->ep_rank = ep_rank;
    l->dense_align = (int)A;
    for (int u = 0; u < l->n_units; u++) {
        mt_unit_layout *ul = &l->units[u];
        if (ul->ref) {
            /* Adapters (added after the base tensors) and trained base tensors: the trainable experts'
               go last, declared order kept within each kind, so that the dense part is one prefix */
            int n = ul->n_tensors, *to = mt_xcalloc((size_t)(n ? n : 1), sizeof(int), "tensor order");
            mt_tensor *t = mt_xcalloc((size_t)(n ? n : 1), sizeof(mt_tensor), "tensor list");
            int k = 0;
            for (int pass = 0; pass < 2; pass++)
                for (int i = 0; i < n; i++)
                    if ((ul->t[i].expert != 0) == pass) to[i] = k, t[k++] = ul->t[i];
            for (int d = 0; d < ul->n_decl; d++)
                if (ul->ref[d] >= 0) ul->ref[d] = to[ul->ref[d]];
            free(ul->t);
            free(to);
            ul->t = t;
            ul->frozen_numel = shard_store(ul->ft, ul->n_frozen, per, ep_rank, 1, 1);
        } else {
            int seen = 0;
            for (int i = 0; i < ul->n_tensors; i++) {
                if (!ul->t[i].expert && seen) mt_die("tensor %s: a dense tensor after the experts' in unit %d", ul->t[i].name, u);
                seen |= ul->t[i].expert != 0;
            }
        }
        ul->numel = shard_store(ul->t, ul->n_tensors, per, ep_rank, 0, A);
    }
    mt_layout_finish(l);
}

void mt_layout_finish(mt_layout *l) {
    l->total_params = l->gtotal_params = l->total_frozen = l->gtotal_frozen = 0;
    for (int i = 0; i < l->n_units; i++) {
        mt_unit_layout *ul = &l->units[i];
        ul->dense_numel = ul->numel;
        for (int k = 0; k < ul->n_tensors; k++)
            if (ul->t[k].expert) {
                ul->dense_numel = ul->t[k].offset;
                break;
            }
        l->total_params += l->units[i].numel;
        l->total_frozen += l->units[i].frozen_numel;
        l->gtotal_frozen += l->units[i].gfrozen_numel;
        l->gtotal_params += l->units[i].gnumel;
    }
}

double mt_layout_frozen_matrix_params(const mt_layout *l) {
    double n = 0;
    for (int u = 0; u < l->n_units; u++)
        if (l->units[u].role == MT_UNIT_BLOCK)
            for (int i = 0; i < l->units[u].n_frozen; i++)
                if (l->units[u].ft[i].ndim == 2) n += (double)l->units[u].ft[i].gnumel;
    return n;
}

size_t mt_tensor_row_origin(const mt_layout *l, const mt_tensor *t, int64_t r) {
    int64_t gcols = t->gshape[1];
    if (t->split == MT_TP_ROWS) { /* blocks of part_rows[p] rows, each cut into tp / tp_replicas pieces */
        int64_t first = 0, slot = l->tp_rank / t->tp_replicas;
        for (int p = 0; p < t->split_parts; p++) {
            int64_t piece = t->part_rows[p] * t->tp_replicas / l->tp;
            if (r < piece) return (size_t)((first + slot * piece + r) * gcols);
            r -= piece;
            first += t->part_rows[p];
        }
        mt_die("tensor %s: local row out of range", t->name);
    }
    if (t->split == MT_TP_COLS) return (size_t)(r * gcols + (int64_t)l->tp_rank * t->shape[1]);
    return (size_t)(r * gcols);
}

/* Copies every local row of unit u to (to_full) or from its run in the full unit. */
static void copy_unit(const mt_layout *l, int u, float *local, float *full, int to_full) {
    const mt_unit_layout *ul = &l->units[u];
    for (int i = 0; i < ul->n_tensors; i++) {
        const mt_tensor *t = &ul->t[i];
        size_t w = (size_t)t->shape[1];
        for (int64_t r = 0; r < t->shape[0]; r++) {
            float *lo = local + t->offset + (size_t)r * w, *fu = full + t->goffset + mt_tensor_row_origin(l, t, r);
            memcpy(to_full ? fu : lo, to_full ? lo : fu, w * sizeof(float));
        }
    }
}

void mt_unit_to_full(const mt_layout *l, int u, const float *local, float *full) {
    copy_unit(l, u, (float *)local, full, 1); /* only read */
}

void mt_unit_from_full(const mt_layout *l, int u, const float *full, float *local) {
    copy_unit(l, u, local, (float *)full, 0); /* only read */
}

void mt_layout_free(mt_layout *l) {
    for (int u = 0; u < l->n_units; u++) {
        free(l->units[u].t);
        free(l->units[u].ft);
        free(l->units[u].ref);
    }
    free(l->units);
    l->units = NULL;
    l->n_units = 0;
}

const mt_tensor *mt_layout_find_tensor(const mt_layout *l, const char *name, int *unit) {
    for (int u = 0; u < l->n_units; u++) {
        for (int i = 0; i < l->units[u].n_tensors; i++)
            if (strcmp(l->units[u].t[i].name, name) == 0) {
                if (unit) *unit = u;
                return &l->units[u].t[i];
            }
        for (int i = 0; i < l->units[u].n_frozen; i++)
            if (strcmp(l->units[u].ft[i].name, name) == 0) {
                if (unit) *unit = u;
                return &l->units[u].ft[i];
            }
    }
    return NULL;
}

/* One tensor's initial values (a function of seed, name and full-tensor
 * element index only). */
void mt_tensor_init_values(const mt_layout *l, const mt_tensor *t, float *dst, uint64_t seed) {
    if (t->init_std > 0 || t->init_bound > 0) {
        /* Row by row from the full tensor's element indices; rows at or
         * past init_rows (an embedding's vocabulary padding) stay zero. */
        size_t w = (size_t)t->shape[1], gw = (size_t)t->gshape[1];
        for (int64_t r = 0; r < t->shape[0];) {
            /* rows whose full-tensor runs follow each other go in one call */
            size_t origin = mt_tensor_row_origin(l, t, r);
            int drawn = (int64_t)(origin / gw) < t->init_rows;
            int64_t e = r + 1;
            while (e < t->shape[0] && mt_tensor_row_origin(l, t, e) == origin + (size_t)(e - r) * w &&
                   ((int64_t)((origin + (size_t)(e - r) * w) / gw) < t->init_rows) == drawn)
                e++;
            size_t n = (size_t)(e - r) * w;
            if (!drawn) memset(dst + (size_t)r * w, 0, n * sizeof(float));
            else if (t->init_bound > 0) mt_init_uniform(dst + (size_t)r * w, n, origin, seed, t->name, t->init_bound);
            else mt_init_normal(dst + (size_t)r * w, n, origin, seed, t->name, t->init_std);
            r = e;
        }
    } else {
        float v = t->init_std < 0 ? 1.0f : 0.0f;
        for (size_t j = 0; j < t->numel; j++) dst[j] = v;
    }
}

void mt_unit_init_params(const mt_layout *l, int unit, float *params, uint64_t seed) {
    const mt_unit_layout *u = &l->units[unit];
    for (int i = 0; i < u->n_tensors; i++) mt_tensor_init_values(l, &u->t[i], params + u->t[i].offset, seed);
}

void mt_unit_init_frozen(const mt_layout *l, int unit, float *frozen, uint64_t seed) {
    const mt_unit_layout *u = &l->units[unit];
    for (int i = 0; i < u->n_frozen; i++) /* quantized ones have no room here (mt_model's quantized store) */
        if (!u->ft[i].quant) mt_tensor_init_values(l, &u->ft[i], frozen + u->ft[i].offset, seed);
}

void mt_unit_split_frozen(mt_layout *l, int uidx) {
    mt_unit_layout *u = &l->units[uidx];
    if (u->ref) mt_die("unit %d: frozen tensors split twice", uidx);
    int n = u->n_tensors;
    u->n_decl = n;
    u->ref = mt_xcalloc((size_t)(n ? n : 1), sizeof(int), "tensor map");
    mt_tensor *all = u->t;
    u->t = mt_xcalloc((size_t)(n ? n : 1), sizeof(mt_tensor), "tensor list");
    u->ft = mt_xcalloc((size_t)(n ? n : 1), sizeof(mt_tensor), "frozen tensor list");
    u->n_tensors = u->n_frozen = 0;
    u->cap = u->fcap = n;
    u->numel = u->gnumel = u->frozen_numel = u->gfrozen_numel = 0;
    for (int k = 0; k < n; k++) {
        mt_tensor t = all[k];
        if (t.trainable) {
            t.offset = u->numel, t.goffset = u->gnumel;
            u->numel += t.numel, u->gnumel += t.gnumel;
            u->ref[k] = u->n_tensors;
            u->t[u->n_tensors++] = t;
        } else {
            t.offset = u->frozen_numel, t.goffset = u->gfrozen_numel;
            if (!t.quant) u->frozen_numel += t.numel; /* a quantized tensor lives in the model's quantized store */
            u->gfrozen_numel += t.gnumel;
            u->ref[k] = -u->n_frozen - 1;
            u->ft[u->n_frozen++] = t;
        }
    }
    free(all);
}
