/* Whole units for checkpoints, whatever the stage: the full parameters (or,
 * under mixed precision, the fp32 master) and optimizer state of a unit are
 * gathered from the shards of the shard group into one buffer of the unit's
 * numel elements, and a full buffer read from disk is cut back into this
 * rank's owned range (zeros past the unit's end, as at init). Collective
 * over the shard group where the stage shards; not for the hot path. dst
 * and src are host buffers (op_copy_to_host / op_copy_from_host); the 16-bit
 * parameters are rounded from src by op_to_16, which a device backend gets
 * from device memory, so it will stage src first (not done yet: only the CPU
 * backend exists). */
#include "parallel/zero_impl.h"
#include <string.h>

size_t mt_zero_max_padded(const mt_zero *z) {
    size_t mx = 0;
    for (int u = 0; u < z->n_units; u++) mx = unit_padded(z, u) > mx ? unit_padded(z, u) : mx;
    return mx;
}

int mt_zero_master_released(const mt_zero *z, int u) { return mixed(z) && z->numel[u] && !z->mp.master[u]; }

void mt_zero_get_full_params(mt_zero *z, mt_model *m, int u, float *dst, float *tmp) {
    if (mt_zero_master_released(z, u))
        mt_die("mt_zero_get_full_params: unit %d's fp32 master was released; gather the caller's copy with "
               "mt_zero_get_full_state", u);
    if (mixed(z)) { /* the fp32 master, sharded like optimizer state */
        mt_zero_get_full_state(z, u, z->mp.master[u], dst, tmp);
        return;
    }
    if (z->stage < 3) {
        op_copy_to_host(z->be, dst, z->full_p[z->first[u]], z->unumel[u] * sizeof(float));
        return;
    }
    for (int k = z->first[u]; k < z->first[u + 1]; k++) /* each part over its group, into its place */
        mt_comm_allgather(z->kcomm[k], z->pshard[k], tmp + z->off[k], z->S[k] * sizeof(float));
    op_copy_to_host(z->be, dst, tmp, z->unumel[u] * sizeof(float));
}

void mt_zero_set_full_params(mt_zero *z, mt_model *m, int u, const float *src) {
    if (mixed(z)) {
        if (z->mp.master[u]) mt_zero_set_full_state(z, u, z->mp.master[u], src);
        if (z->stage < 3) {
            op_to_16(z->be, z->mp.dt16, z->mp.p16[u], src, z->numel[u]);
        } else { /* the shard; zeros past the unit's end, as at init */
            size_t b, e;
            owned_range(z, u, &b, &e);
            op_zero_bytes(z->be, z->mp.p16[u], z->S[u] * sizeof(uint16_t));
            op_to_16(z->be, z->mp.dt16, z->mp.p16[u], src + b, e - b);
        }
        z->mp.punit0_version = 0;
        return;
    }
    if (z->stage < 3) {
        op_copy_from_host(z->be, z->full_p[z->first[u]], src, z->unumel[u] * sizeof(float));
        return;
    }
    for (int k = z->first[u]; k < z->first[u + 1]; k++) {
        size_t b, e;
        owned_range(z, k, &b, &e);
        op_zero_bytes(z->be, z->pshard[k], z->S[k] * sizeof(float));
        if (e > b) op_copy_from_host(z->be, z->pshard[k], src + b, (e - b) * sizeof(float));
    }
}

void mt_zero_get_full_state(mt_zero *z, int u, const float *state, float *dst, float *tmp) {
    if (z->stage == 0) {
        op_copy_to_host(z->be, dst, state, z->numel[u] * sizeof(float));
        return;
    }
    mt_comm_allgather(z->shard, state, tmp, z->S[u] * sizeof(float));
    op_copy_to_host(z->be, dst, tmp, z->numel[u] * sizeof(float));
}

void mt_zero_set_full_state(mt_zero *z, int u, float *state, const float *src) {
    if (z->stage == 0) {
        op_copy_from_host(z->be, state, src, z->numel[u] * sizeof(float));
        return;
    }
    size_t b, e;
    owned_range(z, u, &b, &e);
    op_zero_bytes(z->be, state, z->S[u] * sizeof(float));
    if (e > b) op_copy_from_host(z->be, state, src + b, (e - b) * sizeof(float));
}
