/* A GPTQ weight's rows dequantized for one GEMM tile (ops.h: op_gptq_dequant_rows), the CPU
 * backend's kernel. The codes stay packed in the Hugging Face layout they were read in; a row's
 * codes are one int32 column of qweight (stride rows), unpacked pack at a time. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "core/dtype.h"

void op_gptq_dequant_rows(mt_backend *be, const int32_t *qweight, const int32_t *qzeros, const uint16_t *scales,
                          const int32_t *g_idx, int bits, int64_t rows, int64_t cols, int64_t row0, int64_t nrows,
                          int64_t ld, float *out) {
    MT_DISPATCH(be, gptq_dequant_rows, be, qweight, qzeros, scales, g_idx, bits, rows, cols, row0, nrows, ld, out);
    const int pack = 32 / bits;
    const uint32_t mask = (1u << bits) - 1;
    const int64_t zrow = rows / pack;
#pragma omp parallel for schedule(static) if (nrows * cols > 65536)
    for (int64_t r = 0; r < nrows; r++) {
        const int64_t o = row0 + r;
        const int zshift = bits * (int)(o % pack);
        float *dst = out + r * ld;
        for (int64_t i = 0; i < cols / pack; i++) {
            uint32_t v = (uint32_t)qweight[i * rows + o];
            for (int j = 0; j < pack; j++) {
                int64_t c = i * pack + j, g = g_idx[c];
                uint32_t q = (v >> (bits * j)) & mask;
                uint32_t z = (((uint32_t)qzeros[g * zrow + o / pack] >> zshift) & mask) + 1;
                dst[c] = mt_fp16_to_fp32(scales[g * rows + o]) * (float)((int32_t)q - (int32_t)z);
            }
        }
    }
}
