/* int8 weight-only storage as bitsandbytes' int8_vectorwise_quant (LLM.int8()
 * without outliers, threshold 0) stores a Linear8bitLt weight:
 *   SCB[r] = max |w[r, :]| (fp32, one per output row);
 *   q = round-half-even(w * s) with s = (1 / SCB[r]) * 127 in fp32 (bnb's
 *   `127.0 / row_stats` is PyTorch's reciprocal-then-multiply), clamped to
 *   [-127, 127]; an all-zero row (and any zero weight) gives 0, where bnb
 *   would convert 0 * inf = NaN.
 *   Dequantized: w = (q * SCB[r]) * fp32(7.874015718698502e-3) (1/127), in
 *   that order, as bnb's int8_vectorwise_dequant.
 * Files: `weight` int8 [rows, cols], `SCB` fp32 [rows]. tests/quant_ref.py
 * re-implements it in PyTorch and check_quant_bnb compares byte for byte. */
#ifndef MT_QUANT_INT8_H
#define MT_QUANT_INT8_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

typedef struct {
    int64_t rows, cols;
    int8_t *q;  /* rows * cols codes, row-major */
    float *scb; /* rows absmaxes */
} mt_int8w;

/* Rejects inf or NaN (the message names the element): -1, q empty. */
int mt_int8w_init(mt_int8w *q, const float *w, int64_t rows, int64_t cols, mt_error *err);
void mt_int8w_free(mt_int8w *q);
/* rows * cols + 4 * rows */
size_t mt_int8w_bytes(const mt_int8w *q);
/* Rows [row0, row0 + nrows) into out with row stride cols >= q->cols. */
void mt_int8w_dequant_rows(const mt_int8w *q, int64_t row0, int64_t nrows, int64_t cols, float *out);
/* The same values rounded to bf16 (nearest even). */
void mt_int8w_dequant_rows_bf16(const mt_int8w *q, int64_t row0, int64_t nrows, int64_t cols, uint16_t *out);
void mt_int8w_dequant(const mt_int8w *q, float *out);

#endif
