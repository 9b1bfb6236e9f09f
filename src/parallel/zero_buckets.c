/* Stage 0's gradient buckets (DDP-style). With bucket_bytes > 0 the
 * gradients of all units live in one flat buffer in unit order instead of
 * one buffer per unit, and units consecutive in backward order (output, last
 * block, ..., input) are grouped until a bucket holds >= bucket_bytes; a
 * bucket is all-reduced by one collective, started when its last unit's
 * backward ends on the last microbatch. Fewer, larger messages, less overlap
 * with the backward. Only stage 0 under fp32: stages 1-3 reduce per unit (the
 * unit is the bucket) and mixed precision reduces each unit's fp32 buffer. */
#include "parallel/zero_impl.h"
#include <stdlib.h>

/* Stage 0 buckets: moves every unit's gradient into one flat buffer (unit
 * order) and groups units in backward order into buckets of >= bytes. */
void mt_zero_build_buckets(mt_zero *z, mt_model *m, size_t bytes) {
    int U = z->n_units;
    z->bk.bucket_lo = mt_xcalloc((size_t)U, sizeof(int), "bucket tables");
    z->bk.bucket_off = mt_xcalloc((size_t)U, sizeof(size_t), "bucket tables");
    z->bk.bucket_len = mt_xcalloc((size_t)U, sizeof(size_t), "bucket tables");
    size_t *off = mt_xcalloc((size_t)U, sizeof(size_t), "bucket tables");
    for (int u = 0; u < U; u++) {
        off[u] = z->bk.gflat_len;
        z->bk.gflat_len += z->numel[u];
    }
    z->bk.gflat =
        mt_mem_alloc_at(z->mem, MT_PLACE_DEVICE, MT_MEM_GRADS, z->bk.gflat_len * sizeof(float), "gradients (bucketed)");
    for (int u = 0; u < U; u++) {
        mt_mem_free_at(z->mem, MT_PLACE_DEVICE, MT_MEM_GRADS, m->grads[u], z->numel[u] * sizeof(float));
        m->grads[u] = z->full_g[u] = z->bk.gflat + off[u];
    }
    int hi = U - 1;
    size_t acc = 0;
    for (int u = U - 1; u >= 0; u--) {
        acc += z->numel[u] * sizeof(float);
        if (acc < bytes && u > 0) continue;
        for (int v = u; v <= hi; v++) z->bk.bucket_lo[v] = u;
        z->bk.bucket_off[u] = off[u];
        z->bk.bucket_len[u] = off[hi] + z->numel[hi] - off[u];
        z->bk.n_buckets++;
        hi = u - 1;
        acc = 0;
    }
    free(off);
}

void mt_zero_start_bucket(mt_zero *z, int unit) {
    if (z->bk.bucket_lo[unit] == unit) {
        float *b = z->bk.gflat + z->bk.bucket_off[unit];
        mt_comm_iallreduce(z->dp, b, b, z->bk.bucket_len[unit], &z->greq[unit]);
    }
}

void mt_zero_free_buckets(mt_zero *z) {
    mt_mem_free_at(z->mem, MT_PLACE_DEVICE, MT_MEM_GRADS, z->bk.gflat, z->bk.gflat_len * sizeof(float));
    free(z->bk.bucket_lo); free(z->bk.bucket_off); free(z->bk.bucket_len);
}
