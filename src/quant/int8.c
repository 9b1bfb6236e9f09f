/* Row-wise int8 weights, bit for bit bitsandbytes' int8_vectorwise_quant /
 * int8_vectorwise_dequant (see int8.h): one fp32 operation per step in
 * bnb's order. */
#include "quant/int8.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/dtype.h"

#define MT_INT8_INV127 ((float)7.874015718698502e-3) /* bnb's constant, a double rounded to fp32 */

void mt_int8w_free(mt_int8w *q) {
    free(q->q);
    free(q->scb);
    memset(q, 0, sizeof *q);
}

int mt_int8w_init(mt_int8w *q, const float *w, int64_t rows, int64_t cols, mt_error *err) {
    memset(q, 0, sizeof *q);
    if (rows < 1 || cols < 1) return mt_errorf(err, "int8: bad shape [%lld, %lld]", (long long)rows, (long long)cols);
    int64_t n = rows * cols;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(w[i]))
            return mt_errorf(err, "int8: element %lld (row %lld, column %lld) is %s; only finite weights can be quantized",
                             (long long)i, (long long)(i / cols), (long long)(i % cols),
                             isnan(w[i]) ? "nan" : w[i] > 0 ? "+inf" : "-inf");
    q->rows = rows;
    q->cols = cols;
    q->q = mt_xmalloc((size_t)n, "int8 weight");
    q->scb = mt_xmalloc((size_t)rows * sizeof *q->scb, "int8 SCB");
    for (int64_t r = 0; r < rows; r++) {
        const float *x = w + r * cols;
        float am = 0.0f;
        for (int64_t c = 0; c < cols; c++) am = fmaxf(am, fabsf(x[c]));
        q->scb[r] = am;
        float s = (1.0f / am) * 127.0f; /* inf for a zero (or < 2^-128) row: zeros stay 0 below */
        for (int64_t c = 0; c < cols; c++) {
            float v = x[c] == 0.0f ? 0.0f : fminf(fmaxf(rintf(x[c] * s), -127.0f), 127.0f);
            q->q[r * cols + c] = (int8_t)v;
        }
    }
    return 0;
}

size_t mt_int8w_bytes(const mt_int8w *q) { return (size_t)(q->rows * q->cols) + (size_t)q->rows * sizeof(float); }

static inline float dequant_one(int8_t c, float scb) { return (float)c * scb * MT_INT8_INV127; }

static void check_rows(const mt_int8w *q, int64_t row0, int64_t nrows, int64_t cols) {
    if (row0 < 0 || nrows < 0 || row0 + nrows > q->rows || cols < q->cols)
        mt_die("mt_int8w_dequant_rows: rows [%lld, +%lld) stride %lld of a [%lld, %lld] matrix", (long long)row0,
               (long long)nrows, (long long)cols, (long long)q->rows, (long long)q->cols);
}

void mt_int8w_dequant_rows(const mt_int8w *q, int64_t row0, int64_t nrows, int64_t cols, float *out) {
    check_rows(q, row0, nrows, cols);
    for (int64_t r = 0; r < nrows; r++) {
        const int8_t *c = q->q + (row0 + r) * q->cols;
        float scb = q->scb[row0 + r];
        for (int64_t j = 0; j < q->cols; j++) out[r * cols + j] = dequant_one(c[j], scb);
    }
}

void mt_int8w_dequant_rows_bf16(const mt_int8w *q, int64_t row0, int64_t nrows, int64_t cols, uint16_t *out) {
    check_rows(q, row0, nrows, cols);
    for (int64_t r = 0; r < nrows; r++) {
        const int8_t *c = q->q + (row0 + r) * q->cols;
        float scb = q->scb[row0 + r];
        for (int64_t j = 0; j < q->cols; j++) out[r * cols + j] = mt_fp32_to_bf16(dequant_one(c[j], scb));
    }
}

void mt_int8w_dequant(const mt_int8w *q, float *out) { mt_int8w_dequant_rows(q, 0, q->rows, q->cols, out); }
