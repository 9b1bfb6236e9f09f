/* A frozen weight matrix stored quantized ({quantize-base}): NF4 (blocks of
 * 64, optional double quantization) or int8 per output row, with the
 * dequantization of row tiles the GEMMs use (models/unit_ops.c): no full
 * dequantized copy of a matrix exists while training. */
#ifndef MT_QUANT_QWEIGHT_H
#define MT_QUANT_QWEIGHT_H
#include "quant/int8.h"
#include "quant/nf4.h"

typedef enum { MT_QUANT_NONE = 0, MT_QUANT_NF4 = 1, MT_QUANT_INT8 = 2 } mt_quant_kind;

typedef struct mt_qweight {
    mt_quant_kind kind;
    mt_nf4 nf4;
    mt_int8w i8;
} mt_qweight;

int mt_quant_kind_parse(const char *s, mt_quant_kind *out, mt_error *err);
const char *mt_quant_kind_name(mt_quant_kind k);
/* Quantizes the rows x cols matrix w (refuses inf/NaN naming the element). */
int mt_qweight_init(mt_qweight *q, mt_quant_kind kind, int double_quant, const float *w, int64_t rows, int64_t cols,
                    mt_error *err);
void mt_qweight_free(mt_qweight *q);
size_t mt_qweight_bytes(const mt_qweight *q);
/* Rows [row0, row0 + nrows) dequantized to fp32, row stride ld (>= cols). */
void mt_qweight_rows(const mt_qweight *q, int64_t row0, int64_t nrows, int64_t ld, float *out);
/* The same rounded to bf16 (nearest even): the operand of a bf16 GEMM. */
void mt_qweight_rows_bf16(const mt_qweight *q, int64_t row0, int64_t nrows, int64_t ld, uint16_t *out);

#endif
