/* ZeRO++ quantized weight communication (qwZ; Wang et al. 2023, section
 * 3.1). ZeRO-3's parameter all-gathers move the whole model twice per
 * microbatch; qwZ sends each rank's shard as int8 with one fp32 scale per
 * block instead, and every rank dequantizes what arrives. A rank's record
 * is its shard's scales followed by its codes, so one all-gather of bytes
 * carries both. The shard is quantized the same way every time, so the
 * backward gather (without hpZ) sees exactly the forward's values. */
#include "parallel/zero_impl.h"
#include "parallel/zeropp_quant.h"
#include <stdlib.h>
#include <string.h>

/* Scales, then codes padded to 4 bytes: every record's scales stay aligned. */
size_t mt_zero_qwz_record_bytes(size_t S) { return mt_zpp_blocks(S, MT_ZPP_BLOCK) * sizeof(float) + (S + 3) / 4 * 4; }

int mt_zero_enable_qwz(mt_zero *z, mt_error *err) {
    if (z->split) /* the trainer keeps {ep}'s old scheme for ZeRO++ (its parts are per whole unit) */
        return mt_errorf(err, "{zeropp-qwz} with {ep}: the dense parameters are sharded over every dp rank "
                              "here, which ZeRO++ does not support");
    if (z->stage != 3)
        return mt_errorf(err, "{zeropp-qwz} needs {zero} 3 (it quantizes the parameter all-gathers), got {zero} %d",
                         z->stage);
    size_t smax = 1;
    for (int u = 0; u < z->n_units; u++) smax = z->S[u] > smax ? z->S[u] : smax;
    z->qrec_max = mt_zero_qwz_record_bytes(smax);
    for (int k = 0; k < 2; k++) {
        z->qsend[k] = mt_mem_alloc_at(z->mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->qrec_max, "qwZ send record");
        z->qrecv[k] =
            mt_mem_alloc_at(z->mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->qrec_max * (size_t)z->n, "qwZ receive records");
    }
    z->qtmp = mt_mem_alloc_at(z->mem, MT_PLACE_DEVICE, MT_MEM_COMM, smax * sizeof(float), "qwZ shard in fp32");
    z->qwz = 1;
    return 0;
}

void mt_zero_qwz_start_gather(mt_zero *z, int u, int slot, mt_comm_req *req) {
    size_t S = z->S[u], nb = mt_zpp_blocks(S, MT_ZPP_BLOCK), R = mt_zero_qwz_record_bytes(S);
    const float *x = z->pshard[u];
    if (mixed(z)) {
        op_from_16(z->be, z->mp.dt16, z->qtmp, z->mp.p16[u], S);
        x = z->qtmp;
    }
    uint8_t *rec = z->qsend[slot];
    op_block_quantize(z->be, x, S, MT_ZPP_BLOCK, 8, rec + nb * sizeof(float), (float *)(void *)rec);
    mt_comm_iallgather(z->shard, rec, z->qrecv[slot], R, req);
}

void mt_zero_qwz_finish_gather(mt_zero *z, int u, int slot, void *pool) {
    size_t S = z->S[u], nb = mt_zpp_blocks(S, MT_ZPP_BLOCK), R = mt_zero_qwz_record_bytes(S);
    for (int k = 0; k < z->n; k++) {
        const uint8_t *rec = z->qrecv[slot] + (size_t)k * R;
        const float *scales = (const float *)(const void *)rec;
        if (mixed(z)) {
            op_block_dequantize(z->be, rec + nb * sizeof(float), scales, S, MT_ZPP_BLOCK, 8, z->qtmp);
            op_to_16(z->be, z->mp.dt16, (uint16_t *)pool + (size_t)k * S, z->qtmp, S);
        } else {
            op_block_dequantize(z->be, rec + nb * sizeof(float), scales, S, MT_ZPP_BLOCK, 8,
                                (float *)pool + (size_t)k * S);
        }
    }
}

void mt_zero_qwz_free(mt_zero *z) {
    if (!z->qwz) return;
    size_t smax = 1;
    for (int u = 0; u < z->n_units; u++) smax = z->S[u] > smax ? z->S[u] : smax;
    for (int k = 0; k < 2; k++) {
        mt_mem_free_at(z->mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->qsend[k], z->qrec_max);
        mt_mem_free_at(z->mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->qrecv[k], z->qrec_max * (size_t)z->n);
    }
    mt_mem_free_at(z->mem, MT_PLACE_DEVICE, MT_MEM_COMM, z->qtmp, smax * sizeof(float));
    z->qwz = 0;
}
