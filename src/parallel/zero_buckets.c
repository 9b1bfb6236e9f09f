/* Stage 0's gradient buckets (DDP-style), as constant-size messages. With
 * bucket_bytes > 0 the gradients of all units live in one flat buffer in
 * unit order instead of one buffer per unit; the buffer is all-reduced in
 * place as messages of bucket_bytes each, taken from its end (the output
 * unit, then the last block, ... : backward order), the last message, at the
 * buffer's start, shorter. A message starts when the backward of the lowest
 * unit it overlaps ends on the last microbatch. The message size is the
 * same whatever the model (ZeRO-R's constant-size buffers): no staging copy
 * exists, and what the MPI library allocates per message does not grow with
 * the model. Only stage 0 under fp32: stages 1-3 reduce per unit (the unit
 * is the bucket) and mixed precision reduces each unit's fp32 buffer. */
#include "core/clock.h"
#include "parallel/zero_impl.h"
#include <stdlib.h>

/* Moves every unit's gradient into one flat buffer (unit order) and cuts it
 * into messages of bytes. */
void mt_zero_build_buckets(mt_zero *z, mt_model *m, size_t bytes) {
    int U = z->n_units;
    z->bk.unit_off = mt_xcalloc((size_t)U, sizeof(size_t), "bucket tables");
    for (int u = 0; u < U; u++) {
        z->bk.unit_off[u] = z->bk.gflat_len;
        z->bk.gflat_len += z->numel[u];
    }
    z->bk.gflat =
        mt_mem_alloc_at(z->mem, MT_PLACE_DEVICE, MT_MEM_GRADS, z->bk.gflat_len * sizeof(float), "gradients (bucketed)");
    for (int u = 0; u < U; u++) {
        mt_mem_free_at(z->mem, MT_PLACE_DEVICE, MT_MEM_GRADS, m->grads[u], z->numel[u] * sizeof(float));
        m->grads[u] = z->full_g[u] = z->bk.gflat + z->bk.unit_off[u];
    }
    z->bk.msg_floats = bytes / sizeof(float) ? bytes / sizeof(float) : 1;
    z->bk.n_buckets = (int)((z->bk.gflat_len + z->bk.msg_floats - 1) / z->bk.msg_floats);
    z->bk.req = mt_xcalloc((size_t)(z->bk.n_buckets ? z->bk.n_buckets : 1), sizeof(mt_comm_req), "bucket requests");
}

/* Message k: [lo, hi) of gflat, counted from its end. */
static size_t msg_hi(const mt_zero *z, int k) { return z->bk.gflat_len - (size_t)k * z->bk.msg_floats; }
static size_t msg_lo(const mt_zero *z, int k) {
    size_t hi = msg_hi(z, k);
    return hi > z->bk.msg_floats ? hi - z->bk.msg_floats : 0;
}

void mt_zero_start_bucket(mt_zero *z, int unit) {
    while (z->bk.next < z->bk.n_buckets && msg_lo(z, z->bk.next) >= z->bk.unit_off[unit]) {
        int k = z->bk.next++;
        size_t lo = msg_lo(z, k);
        mt_comm_iallreduce(z->dp, z->bk.gflat + lo, z->bk.gflat + lo, msg_hi(z, k) - lo, &z->bk.req[k]);
    }
}

void mt_zero_wait_buckets(mt_zero *z, int rewind) {
    if (!z->bk.gflat) return;
    double t0 = mt_clock_s();
    mt_comm_waitall(z->bk.req, z->bk.next);
    z->exposed_s += mt_clock_s() - t0;
    if (rewind) z->bk.next = 0;
}

void mt_zero_test_buckets(mt_zero *z) {
    for (int k = 0; k < z->bk.next; k++)
        if (z->bk.req[k].active) mt_comm_test(&z->bk.req[k]);
}

void mt_zero_free_buckets(mt_zero *z) {
    mt_mem_free_at(z->mem, MT_PLACE_DEVICE, MT_MEM_GRADS, z->bk.gflat, z->bk.gflat_len * sizeof(float));
    free(z->bk.unit_off);
    free(z->bk.req);
}
