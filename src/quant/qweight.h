/* A frozen weight matrix stored quantized ({quantize-base}): NF4 (blocks of
 * 64, optional double quantization) or int8 per output row, with the
 * dequantization of row tiles the GEMMs use (models/unit_ops.c): no full
 * dequantized copy of a matrix exists while training. Or the codes of a
 * GPTQ directory as it holds them (mt_gptqw, {quantize-base} gptq): those
 * are read, not made here, and their row tiles are dequantized by an op
 * (ops.h: op_gptq_dequant_rows). */
#ifndef MT_QUANT_QWEIGHT_H
#define MT_QUANT_QWEIGHT_H
#include "quant/int8.h"
#include "quant/nf4.h"

typedef enum { MT_QUANT_NONE = 0, MT_QUANT_NF4 = 1, MT_QUANT_INT8 = 2, MT_QUANT_GPTQ = 3 } mt_quant_kind;

/* A GPTQ layer in the Hugging Face layout (quant/gptq.h), [rows = out, cols = in]. */
typedef struct mt_gptqw {
    int64_t rows, cols, groups;
    int bits;          /* 4 or 8 */
    int32_t *qweight;  /* [cols / pack, rows] */
    int32_t *qzeros;   /* [groups, rows / pack], zero points minus one */
    uint16_t *scales;  /* [groups, rows] fp16 */
    int32_t *g_idx;    /* [cols], each in [0, groups) */
} mt_gptqw;

typedef struct mt_qweight {
    mt_quant_kind kind;
    mt_nf4 nf4;
    mt_int8w i8;
    mt_gptqw gptq;
    /* A device backend's copy (models/model.c uploads NF4 and int8 codes and frees the host
     * arrays, keeping the sizes): one device buffer `dev` of dev_bytes, and the same structs with
     * their pointers into it (maps included). NULL on the CPU. */
    void *dev;
    size_t dev_bytes;
    mt_nf4 nf4_dev;
    mt_int8w i8_dev;
} mt_qweight;

int mt_quant_kind_parse(const char *s, mt_quant_kind *out, mt_error *err);
const char *mt_quant_kind_name(mt_quant_kind k);
/* Quantizes the rows x cols matrix w (refuses inf/NaN naming the element).
 * GPTQ codes are not made from fp32 here (refused): see mt_qweight_set_gptq. */
int mt_qweight_init(mt_qweight *q, mt_quant_kind kind, int double_quant, const float *w, int64_t rows, int64_t cols,
                    mt_error *err);
/* Takes the GPTQ layer g (its arrays now belong to q; g is cleared). */
void mt_qweight_set_gptq(mt_qweight *q, mt_gptqw *g);
void mt_gptqw_free(mt_gptqw *g);
/* The packed bytes of a GPTQ layer: qweight rows * cols * bits / 8, qzeros groups * rows *
 * bits / 8, scales 2 * groups * rows, g_idx 4 * cols. */
size_t mt_gptqw_bytes(int64_t rows, int64_t cols, int64_t groups, int bits);
void mt_qweight_free(mt_qweight *q);
size_t mt_qweight_bytes(const mt_qweight *q);
/* Rows [row0, row0 + nrows) dequantized to fp32, row stride ld (>= cols);
 * NF4 and int8 (a GPTQ weight's rows: op_gptq_dequant_rows). */
void mt_qweight_rows(const mt_qweight *q, int64_t row0, int64_t nrows, int64_t ld, float *out);
/* The same rounded to bf16 (nearest even): the operand of a bf16 GEMM. */
void mt_qweight_rows_bf16(const mt_qweight *q, int64_t row0, int64_t nrows, int64_t ld, uint16_t *out);

#endif
