/* Quantized frozen weights (see quant/qweight.h). */
#include "quant/qweight.h"
#include <stdlib.h>
#include <string.h>

int mt_quant_kind_parse(const char *s, mt_quant_kind *out, mt_error *err) {
    if (!strcmp(s, "none")) *out = MT_QUANT_NONE;
    else if (!strcmp(s, "nf4")) *out = MT_QUANT_NF4;
    else if (!strcmp(s, "int8")) *out = MT_QUANT_INT8;
    else if (!strcmp(s, "gptq")) *out = MT_QUANT_GPTQ;
    else return mt_errorf(err, "{quantize-base} must be none, nf4, int8 or gptq, got '%s'", s);
    return 0;
}

const char *mt_quant_kind_name(mt_quant_kind k) {
    return k == MT_QUANT_NF4 ? "nf4" : k == MT_QUANT_INT8 ? "int8" : k == MT_QUANT_GPTQ ? "gptq" : "none";
}

int mt_qweight_init(mt_qweight *q, mt_quant_kind kind, int double_quant, const float *w, int64_t rows, int64_t cols,
                    mt_error *err) {
    memset(q, 0, sizeof *q);
    q->kind = kind;
    if (kind == MT_QUANT_NF4) return mt_nf4_init(&q->nf4, w, rows, cols, double_quant, err);
    if (kind == MT_QUANT_INT8) return mt_int8w_init(&q->i8, w, rows, cols, err);
    (void)w, (void)rows, (void)cols, (void)double_quant;
    if (kind == MT_QUANT_GPTQ)
        return mt_errorf(err, "a GPTQ base is the codes of a GPTQ directory, read as they are: it is not made from "
                              "fp32 weights here (meshtrain quantize --method gptq makes one)");
    return mt_errorf(err, "quantized weight: no quantization kind given");
}

void mt_qweight_set_gptq(mt_qweight *q, mt_gptqw *g) {
    memset(q, 0, sizeof *q);
    q->kind = MT_QUANT_GPTQ;
    q->gptq = *g;
    memset(g, 0, sizeof *g);
}

void mt_gptqw_free(mt_gptqw *g) {
    free(g->qweight);
    free(g->qzeros);
    free(g->scales);
    free(g->g_idx);
    memset(g, 0, sizeof *g);
}

size_t mt_gptqw_bytes(int64_t rows, int64_t cols, int64_t groups, int bits) {
    size_t r = (size_t)rows, c = (size_t)cols, g = (size_t)groups, b = (size_t)bits;
    return r * c * b / 8 + g * r * b / 8 + 2 * g * r + 4 * c;
}

void mt_qweight_free(mt_qweight *q) {
    if (q->kind == MT_QUANT_NF4) mt_nf4_free(&q->nf4);
    else if (q->kind == MT_QUANT_INT8) mt_int8w_free(&q->i8);
    else if (q->kind == MT_QUANT_GPTQ) mt_gptqw_free(&q->gptq);
    memset(q, 0, sizeof *q);
}

size_t mt_qweight_bytes(const mt_qweight *q) {
    if (q->kind == MT_QUANT_GPTQ) return mt_gptqw_bytes(q->gptq.rows, q->gptq.cols, q->gptq.groups, q->gptq.bits);
    return q->kind == MT_QUANT_NF4 ? mt_nf4_bytes(&q->nf4) : q->kind == MT_QUANT_INT8 ? mt_int8w_bytes(&q->i8) : 0;
}

void mt_qweight_rows(const mt_qweight *q, int64_t row0, int64_t nrows, int64_t ld, float *out) {
    if (q->kind == MT_QUANT_GPTQ) /* a caller's slip: its rows are an op's (op_gptq_dequant_rows) */
        mt_die("mt_qweight_rows: a GPTQ weight is dequantized by op_gptq_dequant_rows");
    if (q->kind == MT_QUANT_NF4) mt_nf4_dequant_rows(&q->nf4, row0, nrows, ld, out);
    else mt_int8w_dequant_rows(&q->i8, row0, nrows, ld, out);
}

void mt_qweight_rows_bf16(const mt_qweight *q, int64_t row0, int64_t nrows, int64_t ld, uint16_t *out) {
    if (q->kind == MT_QUANT_GPTQ) /* a caller's slip: its rows are an op's (op_gptq_dequant_rows) */
        mt_die("mt_qweight_rows: a GPTQ weight is dequantized by op_gptq_dequant_rows");
    if (q->kind == MT_QUANT_NF4) mt_nf4_dequant_rows_bf16(&q->nf4, row0, nrows, ld, out);
    else mt_int8w_dequant_rows_bf16(&q->i8, row0, nrows, ld, out);
}
