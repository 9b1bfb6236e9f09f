/* A quantized base's row tiles (ops.h: op_nf4_dequant_rows, op_int8_dequant_rows), the CPU
 * backend's kernels: the arithmetic of quant/nf4.c's and quant/int8.c's dequantization, which
 * stay there for the importers and exporters (ops/ cannot include quant/, the same level), so
 * that a device backend can take the GEMM tiles over (cuda/quant.cu). Same fp32 products in the
 * same order: the numbers are those of mt_nf4_dequant_rows and mt_int8w_dequant_rows, bit for bit. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "core/dtype.h"

#define NF4_BLOCK 64         /* quant/nf4.h's MT_NF4_BLOCK */
#define NF4_NESTED_BLOCK 256 /* and MT_NF4_NESTED_BLOCK */
#define INT8_INV127 ((float)7.874015718698502e-3) /* quant/int8.c's MT_INT8_INV127 */

static float nf4_block_absmax(const mt_nf4_codes *q, int64_t b) {
    if (q->absmax) return q->absmax[b];
    float v = q->nested_map[q->absmax_code[b]] * q->nested_absmax[b / NF4_NESTED_BLOCK];
    return v + q->offset;
}

static inline void put(mt_dtype dt, void *out, int64_t i, float v) {
    if (dt == MT_BF16) ((uint16_t *)out)[i] = mt_fp32_to_bf16(v);
    else ((float *)out)[i] = v;
}

void op_nf4_dequant_rows(mt_backend *be, const mt_nf4_codes *q, int64_t row0, int64_t nrows, int64_t ld, mt_dtype dt,
                         void *out) {
    MT_DISPATCH(be, nf4_dequant_rows, be, q, row0, nrows, ld, dt, out);
    if (row0 < 0 || nrows < 0 || row0 + nrows > q->rows || ld < q->cols || (dt != MT_FP32 && dt != MT_BF16))
        mt_die("op_nf4_dequant_rows: rows [%lld, +%lld) stride %lld (dtype %d) of a [%lld, %lld] matrix",
               (long long)row0, (long long)nrows, (long long)ld, (int)dt, (long long)q->rows, (long long)q->cols);
    for (int64_t r = 0; r < nrows; r++) {
        /* block by block: the 16 products code * absmax once per block, then a lookup per element */
        int64_t e = (row0 + r) * q->cols, end = e + q->cols, o = r * ld;
        while (e < end) {
            int64_t b = e / NF4_BLOCK, stop = (b + 1) * NF4_BLOCK < end ? (b + 1) * NF4_BLOCK : end;
            float am = nf4_block_absmax(q, b), v[16];
            for (int k = 0; k < 16; k++) v[k] = q->code_map[k] * am;
            const uint8_t *p = q->packed;
            if (dt == MT_BF16)
                for (uint16_t *ob = (uint16_t *)out; e < stop; e++)
                    ob[o++] = mt_fp32_to_bf16(v[(p[e / 2] >> (e % 2 ? 0 : 4)) & 0xF]);
            else
                for (float *of = (float *)out; e < stop; e++) of[o++] = v[(p[e / 2] >> (e % 2 ? 0 : 4)) & 0xF];
        }
    }
}

void op_int8_dequant_rows(mt_backend *be, const int8_t *codes, const float *scb, int64_t cols, int64_t row0,
                          int64_t nrows, int64_t ld, mt_dtype dt, void *out) {
    MT_DISPATCH(be, int8_dequant_rows, be, codes, scb, cols, row0, nrows, ld, dt, out);
    if (row0 < 0 || nrows < 0 || ld < cols || (dt != MT_FP32 && dt != MT_BF16))
        mt_die("op_int8_dequant_rows: rows [%lld, +%lld) stride %lld (dtype %d) of %lld columns", (long long)row0,
               (long long)nrows, (long long)ld, (int)dt, (long long)cols);
    for (int64_t r = 0; r < nrows; r++) {
        const int8_t *c = codes + (row0 + r) * cols;
        float s = scb[row0 + r];
        for (int64_t j = 0; j < cols; j++) put(dt, out, r * ld + j, (float)c[j] * s * INT8_INV127);
    }
}
