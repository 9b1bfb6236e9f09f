/* A GPTQ weight's rows dequantized for one GEMM tile (ops.h: op_gptq_dequant_rows), the CPU
 * backend's kernel. The codes stay packed in the Hugging Face layout they were read in; a row's
 * codes are one int32 column of qweight (stride rows), unpacked pack at a time. Per row, the
 * groups' scales (fp16 -> fp32) and zero points are unpacked once into a small table, so the
 * inner loop is a lookup by g_idx, a shift and a multiply. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "core/dtype.h"

enum { ROW_GROUPS = 512 }; /* groups tabled per row (more: looked up per element) */

void op_gptq_dequant_rows(mt_backend *be, const int32_t *qweight, const int32_t *qzeros, const uint16_t *scales,
                          const int32_t *g_idx, int bits, int64_t rows, int64_t cols, int64_t row0, int64_t nrows,
                          int64_t ld, float *out) {
    MT_DISPATCH(be, gptq_dequant_rows, be, qweight, qzeros, scales, g_idx, bits, rows, cols, row0, nrows, ld, out);
    const int pack = 32 / bits;
    const uint32_t mask = (1u << bits) - 1;
    const int64_t zrow = rows / pack, words = cols / pack;
    int64_t groups = 0;
    for (int64_t c = 0; c < cols; c++) groups = g_idx[c] + 1 > groups ? g_idx[c] + 1 : groups;
#pragma omp parallel for schedule(static) if (nrows * cols > 65536)
    for (int64_t r = 0; r < nrows; r++) {
        const int64_t o = row0 + r;
        const int zshift = bits * (int)(o % pack);
        float *dst = out + r * ld, scale[ROW_GROUPS];
        int32_t zero[ROW_GROUPS];
        /* a row reads one word of each qweight row (stride rows): a cache line serves 16 rows, and
         * the hardware prefetcher does not follow strides across pages, so the lines of the next 16
         * rows are fetched while these are unpacked (and the scales' lines, 32 rows each) */
        if (o % 16 == 0 && o + 16 < rows) {
            for (int64_t i = 0; i < words; i++) __builtin_prefetch(qweight + i * rows + o + 16);
            if (o % 32 == 0 && o + 32 < rows)
                for (int64_t g = 0; g < groups && g < ROW_GROUPS; g++) __builtin_prefetch(scales + g * rows + o + 32);
        }
        if (groups <= ROW_GROUPS) {
            for (int64_t g = 0; g < groups; g++) {
                scale[g] = mt_fp16_to_fp32(scales[g * rows + o]);
                zero[g] = (int32_t)((((uint32_t)qzeros[g * zrow + o / pack] >> zshift) & mask) + 1);
            }
            for (int64_t i = 0; i < words; i++) {
                uint32_t v = (uint32_t)qweight[i * rows + o];
                const int32_t *gi = g_idx + i * pack;
                float *d = dst + i * pack;
                for (int j = 0; j < pack; j++, v >>= bits)
                    d[j] = scale[gi[j]] * (float)((int32_t)(v & mask) - zero[gi[j]]);
            }
            continue;
        }
        for (int64_t i = 0; i < words; i++) {
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
