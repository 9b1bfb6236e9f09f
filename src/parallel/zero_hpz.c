/* ZeRO++ hierarchical partitioning (hpZ; Wang et al. 2023, section 3.2).
 *
 * ZeRO-3 all-gathers a unit's parameters from every rank of the shard group
 * twice per microbatch: before its forward and again before its backward.
 * Across nodes the second gather costs as much as the first. hpZ keeps, from
 * the forward gather, a secondary copy of the unit split over the ranks of
 * one node (G consecutive ranks of the shard group): rank j of the node
 * keeps part j of the padded unit. The backward gather then collects those
 * G parts inside the node. The bytes gathered are the very same parameter
 * values, so the model computes bitwise what plain ZeRO-3 does. Unit 0 is
 * gathered once per microbatch and held until its backward (zero.c), so it
 * needs no secondary copy. */
#include "parallel/zero_impl.h"
#include <stdlib.h>
#include <string.h>

static size_t elt(const mt_zero *z) { return z->mp.dt16 != MT_FP32 ? sizeof(uint16_t) : sizeof(float); }

int mt_zero_enable_hpz(mt_zero *z, const mt_model *m, int group, mt_error *err) {
    (void)m;
    if (z->split) /* the trainer keeps {ep}'s old scheme for ZeRO++ (its parts are per whole unit) */
        return mt_errorf(err, "{zeropp-hpz} with {ep}: the dense parameters are sharded over every dp rank "
                              "here, which ZeRO++ does not support");
    if (z->stage != 3)
        return mt_errorf(err, "{zeropp-hpz} needs {zero} 3 (it keeps a node's copy of the sharded parameters), got "
                              "{zero} %d", z->stage);
    if (group < 2 || z->n % group)
        return mt_errorf(err, "{zeropp-hpz} %d must be >= 2 and divide the ZeRO shard group of %d ranks", group, z->n);
    if (mt_comm_split(z->shard, z->r / group, z->r, "hpz", &z->hpz, err)) return -1;
    z->hpz_j = mt_comm_rank(z->hpz);
    z->hpz_len = mt_xcalloc((size_t)z->n_units, sizeof(size_t), "hpz tables");
    z->hpz_part = mt_xcalloc((size_t)z->n_units, sizeof(void *), "hpz tables");
    for (int u = 1; u < z->n_units; u++) {
        if (!z->numel[u]) continue;
        z->hpz_len[u] = (size_t)z->n * z->S[u] / (size_t)group;
        z->hpz_part[u] = mt_mem_alloc_at(z->mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, z->hpz_len[u] * elt(z),
                                         "hpZ secondary parameter part");
    }
    return 0;
}

void mt_zero_hpz_keep(mt_zero *z, int u, const void *pool) {
    size_t n = z->hpz_len[u] * elt(z);
    op_copy_bytes(z->be, z->hpz_part[u], (const char *)pool + (size_t)z->hpz_j * n, n);
}

void mt_zero_hpz_start_gather(mt_zero *z, int u, void *pool, mt_comm_req *req) {
    mt_comm_iallgather(z->hpz, z->hpz_part[u], pool, z->hpz_len[u] * elt(z), req);
}

void mt_zero_hpz_free(mt_zero *z) {
    if (!z->hpz) return;
    for (int u = 1; u < z->n_units; u++)
        mt_mem_free_at(z->mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, z->hpz_part[u], z->hpz_len[u] * elt(z));
    free(z->hpz_part);
    free(z->hpz_len);
    z->hpz_part = NULL;
    z->hpz_len = NULL;
    mt_comm_free(z->hpz);
    z->hpz = NULL;
}
