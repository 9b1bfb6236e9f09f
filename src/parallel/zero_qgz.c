/* ZeRO++ quantized gradient communication (qgZ; Wang et al. 2023, section
 * 3.3). A ring reduce-scatter of quantized gradients would quantize and
 * dequantize at every one of its n-1 steps; qgZ instead exchanges int4
 * blocks in two all-to-alls, one inside the node and one across nodes,
 * reducing in fp32 after each, so a gradient is quantized twice in all and
 * the inter-node hop carries a node's already-summed gradient (1/G of the
 * volume a flat reduce-scatter sends across).
 *
 * Ranks: the shard group of n = A * G ranks, node-major, rank a*G + j owns
 * shard a*G + j (S elements of the padded unit). Hop 1 (intra, G ranks):
 * rank j' receives column j' -- shards a*G + j' for every node a -- from
 * each node peer. Hop 2 (inter, A ranks of local index j): the node sum of
 * shard a*G + j goes to node a. Sums run in rank order, so every run is
 * deterministic. */
#include "parallel/zero_impl.h"
#include "parallel/zeropp_quant.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* int4 needs finer scales than qwZ's int8: blocks of 64 (the scales add 1/16 byte per element). */
#define QGZ_BLOCK 64

/* One shard's record: scales, then int4 codes padded to 4 bytes. */
size_t mt_zero_qgz_record_bytes(size_t S) {
    return mt_zpp_blocks(S, QGZ_BLOCK) * sizeof(float) + (mt_zpp_code_bytes(S, 4) + 3) / 4 * 4;
}

static void put(mt_zero *z, const float *x, size_t S, uint8_t *rec) {
    size_t nb = mt_zpp_blocks(S, QGZ_BLOCK);
    op_block_quantize(z->be, x, S, QGZ_BLOCK, 4, rec + nb * sizeof(float), (float *)(void *)rec);
}

static void get(mt_zero *z, const uint8_t *rec, size_t S, float *x) {
    size_t nb = mt_zpp_blocks(S, QGZ_BLOCK);
    op_block_dequantize(z->be, rec + nb * sizeof(float), (const float *)(const void *)rec, S, QGZ_BLOCK, 4, x);
}

int mt_zero_enable_qgz(mt_zero *z, mt_error *err) {
    if (z->split) /* the trainer keeps {ep}'s old scheme for ZeRO++ (its parts are per whole unit) */
        return mt_errorf(err, "{zeropp-qgz} with {ep}: the dense parameters are sharded over every dp rank "
                              "here, which ZeRO++ does not support");
    if (z->stage < 2)
        return mt_errorf(err, "{zeropp-qgz} needs {zero} 2 or 3 (it quantizes the gradient reduce-scatter), got "
                              "{zero} %d", z->stage);
    /* node-major with G ranks on every node: rank r is on the node of rank r - r % G */
    int n = z->n, G = 0;
    while (G < n && mt_comm_node_of(z->shard, G) == mt_comm_node_of(z->shard, 0)) G++;
    int uniform = n % G == 0;
    for (int r = 0; r < n && uniform; r++) {
        int first = r - r % G;
        uniform = mt_comm_node_of(z->shard, r) == mt_comm_node_of(z->shard, first) &&
                  (r % G || r == 0 || mt_comm_node_of(z->shard, r) != mt_comm_node_of(z->shard, r - 1));
    }
    if (!uniform) return 1; /* the caller says so */
    if (mt_comm_split(z->shard, z->r / G, z->r, "qgz-intra", &z->qgz_intra, err)) return -1;
    if (mt_comm_split(z->shard, z->r % G, z->r, "qgz-inter", &z->qgz_inter, err)) return -1;
    size_t smax = 1;
    for (int u = 0; u < z->n_units; u++) smax = z->S[u] > smax ? z->S[u] : smax;
    z->qg_smax = smax;
    z->qg_send = mt_mem_alloc_at(z->mem, MT_PLACE_DEVICE, MT_MEM_COMM, (size_t)n * mt_zero_qgz_record_bytes(smax),
                                 "qgZ send records");
    z->qg_recv = mt_mem_alloc_at(z->mem, MT_PLACE_DEVICE, MT_MEM_COMM, (size_t)n * mt_zero_qgz_record_bytes(smax),
                                 "qgZ receive records");
    z->qg_partial =
        mt_mem_alloc_at(z->mem, MT_PLACE_DEVICE, MT_MEM_COMM, (size_t)(n / G) * smax * sizeof(float), "qgZ node sums");
    z->qg_tmp = mt_mem_alloc_at(z->mem, MT_PLACE_DEVICE, MT_MEM_COMM, smax * sizeof(float), "qgZ dequantized shard");
    return 0;
}

void mt_zero_qgz_reduce_scatter(mt_zero *z, int u, float *slot) {
    size_t S = z->S[u], R = mt_zero_qgz_record_bytes(S);
    int G = mt_comm_size(z->qgz_intra), A = mt_comm_size(z->qgz_inter);
    /* hop 1: to node peer j', its column (shards a*G + j'), a record per shard */
    for (int jp = 0; jp < G; jp++)
        for (int a = 0; a < A; a++) put(z, slot + (size_t)(a * G + jp) * S, S, z->qg_send + ((size_t)jp * A + a) * R);
    mt_comm_alltoall(z->qgz_intra, z->qg_send, z->qg_recv, (size_t)A * R);
    op_zero_bytes(z->be, z->qg_partial, (size_t)A * S * sizeof(float));
    for (int jp = 0; jp < G; jp++)
        for (int a = 0; a < A; a++) {
            get(z, z->qg_recv + ((size_t)jp * A + a) * R, S, z->qg_tmp);
            op_add(z->be, z->qg_partial + (size_t)a * S, z->qg_partial + (size_t)a * S, z->qg_tmp, S);
        }
    /* hop 2: the node sum of shard a*G + j to node a */
    for (int a = 0; a < A; a++) put(z, z->qg_partial + (size_t)a * S, S, z->qg_send + (size_t)a * R);
    mt_comm_alltoall(z->qgz_inter, z->qg_send, z->qg_recv, R);
    op_zero_bytes(z->be, slot, S * sizeof(float));
    for (int a = 0; a < A; a++) {
        get(z, z->qg_recv + (size_t)a * R, S, z->qg_tmp);
        op_add(z->be, slot, slot, z->qg_tmp, S);
    }
}

void mt_zero_qgz_free(mt_zero *z) {
    if (!z->qgz_intra) return;
    int n = z->n, G = mt_comm_size(z->qgz_intra);
    mt_mem_free_at(z->mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->qg_send, (size_t)n * mt_zero_qgz_record_bytes(z->qg_smax));
    mt_mem_free_at(z->mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->qg_recv, (size_t)n * mt_zero_qgz_record_bytes(z->qg_smax));
    mt_mem_free_at(z->mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->qg_partial, (size_t)(n / G) * z->qg_smax * sizeof(float));
    mt_mem_free_at(z->mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->qg_tmp, z->qg_smax * sizeof(float));
    mt_comm_free(z->qgz_intra);
    mt_comm_free(z->qgz_inter);
    z->qgz_intra = z->qgz_inter = NULL;
}
