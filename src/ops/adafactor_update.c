/* Adafactor's update (Shazeer & Stern 2018) on one tensor's owned elements,
 * in the three phases optim/adafactor.c runs around its two all-reduces:
 *   1. a factored matrix's row and column sums of g^2 + eps1 (double);
 *   2. the second moment updated (R and C from the summed sums, or V
 *      elementwise) and the sum of squares of the unclipped update U;
 *   3. the parameters: p = p * pdecay - lr * (U * clip, through momentum).
 * A factored [rows, cols] tensor's owned part is its elements [e0, e1) in
 * row-major order (a shard may start and end inside a row); g, p and m
 * point at element e0. Phases 2 and 3 form U with the same expressions, so
 * they see bitwise the same U. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <math.h>

/* 1/sqrt(C) for every column of a matrix, and the row factor sqrt(mean(R) / R[row]). */
static void column_factors(const float *C, size_t cols, float *cf) {
    for (size_t c = 0; c < cols; c++) cf[c] = (float)(1.0 / sqrt((double)C[c]));
}
static float row_factor(const float *R, double r_mean, size_t row) { return (float)sqrt(r_mean / (double)R[row]); }

/* The row segments of [e0, e1): the next row, its first column, the column
 * count and the segment's offset from e0. */
typedef struct {
    size_t e, last, cols, e0;
} row_segments;

static int next_segment(row_segments *it, size_t *row, size_t *c0, size_t *nc, size_t *off) {
    if (it->e >= it->last) return 0;
    *row = it->e / it->cols;
    *c0 = it->e % it->cols;
    *nc = it->cols - *c0 < it->last - it->e ? it->cols - *c0 : it->last - it->e;
    *off = it->e - it->e0;
    it->e += *nc;
    return 1;
}

void op_adafactor_row_col_sums(mt_backend *be, double *rs, double *cs, const float *g, size_t e0, size_t e1,
                               size_t rows, size_t cols, float grad_scale, float eps1) {
    MT_DISPATCH(be, adafactor_row_col_sums, be, rs, cs, g, e0, e1, rows, cols, grad_scale, eps1);
    for (size_t r = 0; r < rows; r++) rs[r] = 0.0;
    for (size_t c = 0; c < cols; c++) cs[c] = 0.0;
    double eps = eps1;
    row_segments it = {e0, e1, cols, e0};
    size_t row, c0, nc, off;
    while (next_segment(&it, &row, &c0, &nc, &off)) {
        const float *gr = g + off;
        double acc = 0.0;
        for (size_t c = 0; c < nc; c++) {
            float gi = gr[c] * grad_scale;
            double x = (double)gi * gi + eps;
            acc += x;
            cs[c0 + c] += x;
        }
        rs[row] += acc;
    }
}

double op_adafactor_factored_moment(mt_backend *be, float *R, float *C, double *r_mean, const double *rs,
                                    const double *cs, size_t rows, size_t cols, double beta2, const float *g,
                                    size_t e0, size_t e1, float grad_scale, float *col_factor) {
    MT_DISPATCH_RET(be, adafactor_factored_moment, be, R, C, r_mean, rs, cs, rows, cols, beta2, g, e0, e1, grad_scale,
                    col_factor);
    double omb2 = 1.0 - beta2, r_sum = 0.0, acc = 0.0;
    for (size_t r = 0; r < rows; r++) {
        R[r] = (float)(beta2 * R[r] + omb2 * (rs[r] / (double)cols));
        r_sum += R[r];
    }
    for (size_t c = 0; c < cols; c++) C[c] = (float)(beta2 * C[c] + omb2 * (cs[c] / (double)rows));
    *r_mean = r_sum / (double)rows;
    if (e0 >= e1) return 0.0;
    column_factors(C, cols, col_factor);
    row_segments it = {e0, e1, cols, e0};
    size_t row, c0, nc, off;
    while (next_segment(&it, &row, &c0, &nc, &off)) {
        float rf = row_factor(R, *r_mean, row);
        const float *gr = g + off, *cf = col_factor + c0;
        for (size_t c = 0; c < nc; c++) {
            float u = gr[c] * grad_scale * rf * cf[c];
            acc += (double)u * u;
        }
    }
    return acc;
}

double op_adafactor_moment(mt_backend *be, float *V, const float *g, size_t n, float grad_scale, double beta2,
                           float eps1) {
    MT_DISPATCH_RET(be, adafactor_moment, be, V, g, n, grad_scale, beta2, eps1);
    double omb2 = 1.0 - beta2, eps = eps1, acc = 0.0;
    for (size_t j = 0; j < n; j++) {
        float gi = g[j] * grad_scale;
        V[j] = (float)(beta2 * V[j] + omb2 * ((double)gi * gi + eps));
        float u = gi / sqrtf(V[j]);
        acc += (double)u * u;
    }
    return acc;
}

void op_adafactor_apply_factored(mt_backend *be, float *p, float *m, const float *g, const float *R, const float *C,
                                 double r_mean, size_t e0, size_t e1, size_t cols, float grad_scale, float clip,
                                 float beta1, float lr, float pdecay, float *col_factor) {
    MT_DISPATCH(be, adafactor_apply_factored, be, p, m, g, R, C, r_mean, e0, e1, cols, grad_scale, clip, beta1, lr,
                pdecay, col_factor);
    float omb1 = (float)(1.0 - (double)beta1);
    column_factors(C, cols, col_factor);
    row_segments it = {e0, e1, cols, e0};
    size_t row, c0, nc, off;
    while (next_segment(&it, &row, &c0, &nc, &off)) {
        float rf = row_factor(R, r_mean, row);
        const float *gr = g + off, *cf = col_factor + c0;
        float *pr = p + off, *mr = m ? m + off : NULL;
        for (size_t c = 0; c < nc; c++) {
            float upd = gr[c] * grad_scale * rf * cf[c] * clip;
            if (mr) upd = mr[c] = beta1 * mr[c] + omb1 * upd;
            pr[c] = pr[c] * pdecay - lr * upd;
        }
    }
}

void op_adafactor_apply(mt_backend *be, float *p, float *m, const float *g, const float *V, size_t n, float grad_scale,
                        float clip, float beta1, float lr, float pdecay) {
    MT_DISPATCH(be, adafactor_apply, be, p, m, g, V, n, grad_scale, clip, beta1, lr, pdecay);
    float omb1 = (float)(1.0 - (double)beta1);
    for (size_t j = 0; j < n; j++) {
        float gi = g[j] * grad_scale;
        float upd = gi / sqrtf(V[j]) * clip;
        if (m) upd = m[j] = beta1 * m[j] + omb1 * upd;
        p[j] = p[j] * pdecay - lr * upd;
    }
}
