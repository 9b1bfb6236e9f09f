/* GPTQ on one layer (see gptq.h), in double. */
#include "quant/gptq.h"
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/dtype.h"
#include "core/mem.h"

int mt_gptq_opts_check(const mt_gptq_opts *o, int64_t cols, mt_error *err) {
    if (o->bits != 4 && o->bits != 8) return mt_errorf(err, "{bits} must be 4 or 8, got %d", o->bits);
    if (o->group_size < 1 || cols % o->group_size)
        return mt_errorf(err, "{group-size} %d does not divide the layer's %lld input columns: use a divisor of it "
                              "(e.g. 32, 64 or 128)",
                         o->group_size, (long long)cols);
    if (!(o->damp > 0.0 && o->damp < 1.0 && isfinite(o->damp)))
        return mt_errorf(err, "{damp} must be in (0, 1), got %g", o->damp);
    return 0;
}

void mt_gptq_hessian_add(double *H, const float *x, int64_t n, int64_t cols) {
    enum { ROWS = 64 };
    double *xd = mt_xmalloc((size_t)ROWS * (size_t)cols * sizeof(double), "GPTQ input rows");
    for (int64_t r0 = 0; r0 < n; r0 += ROWS) {
        int64_t nr = n - r0 < ROWS ? n - r0 : ROWS;
        for (int64_t i = 0; i < nr * cols; i++) xd[i] = (double)x[r0 * cols + i];
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, (blasint)cols, (blasint)nr, 1.0, xd, (blasint)cols, 1.0, H,
                    (blasint)cols);
    }
    free(xd);
    for (int64_t i = 0; i < cols; i++) /* dsyrk wrote the upper triangle */
        for (int64_t j = 0; j < i; j++) H[i * cols + j] = H[j * cols + i];
}

/* In place: the lower Cholesky factor of the symmetric positive definite
 * a [n, n] (upper triangle zeroed). -1 when a pivot is not positive. */
static int cholesky_lower(double *a, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        double s = a[j * n + j];
        for (int64_t k = 0; k < j; k++) s -= a[j * n + k] * a[j * n + k];
        if (!(s > 0.0)) return -1;
        double d = sqrt(s);
        a[j * n + j] = d;
#pragma omp parallel for schedule(static) if (n - j > 256)
        for (int64_t i = j + 1; i < n; i++) {
            double t = a[i * n + j];
            for (int64_t k = 0; k < j; k++) t -= a[i * n + k] * a[j * n + k];
            a[i * n + j] = t / d;
        }
    }
    for (int64_t i = 0; i < n; i++) memset(a + i * n + i + 1, 0, (size_t)(n - i - 1) * sizeof(double));
    return 0;
}

/* h [n, n] -> the upper Cholesky factor U of h^-1 (U^T U = h^-1), as the
 * reference's cholesky, cholesky_inverse, cholesky(upper=True). */
static int inverse_upper_factor(double *h, int64_t n) {
    if (cholesky_lower(h, n)) return -1;
    double *x = mt_xcalloc((size_t)(n * n), sizeof(double), "GPTQ inverse");
    for (int64_t i = 0; i < n; i++) x[i * n + i] = 1.0;
    /* X = L^-1, then h^-1 = X^T X */
    cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, (blasint)n, (blasint)n, 1.0, h,
                (blasint)n, x, (blasint)n);
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, (blasint)n, (blasint)n, 1.0, x, (blasint)n, 0.0, h, (blasint)n);
    free(x);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < i; j++) h[i * n + j] = h[j * n + i];
    if (cholesky_lower(h, n)) return -1;
    for (int64_t i = 0; i < n; i++) /* U = L^T */
        for (int64_t j = i + 1; j < n; j++) {
            h[i * n + j] = h[j * n + i];
            h[j * n + i] = 0.0;
        }
    return 0;
}

/* The reference Quantizer's grid of one row over x[0, n). */
static void find_params(const double *x, int64_t n, int maxq, int sym, double *scale, double *zero) {
    double lo = 0.0, hi = 0.0;
    for (int64_t i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    if (sym) {
        hi = fabs(lo) > hi ? fabs(lo) : hi;
        if (lo < 0.0) lo = -hi;
    }
    if (lo == 0.0 && hi == 0.0) lo = -1.0, hi = 1.0;
    *scale = (double)mt_fp16_to_fp32(mt_fp32_to_fp16((float)((hi - lo) / maxq)));
    *zero = sym ? (double)(maxq + 1) / 2 : nearbyint(-lo / *scale);
}

static int code_of(double w, double scale, double zero, int maxq) {
    double q = nearbyint(w / scale) + zero;
    return q < 0.0 ? 0 : q > maxq ? maxq : (int)q;
}

void mt_gptq_result_free(mt_gptq_result *r) {
    free(r->q);
    free(r->scales);
    free(r->zeros);
    free(r->g_idx);
    free(r->perm);
    memset(r, 0, sizeof *r);
}

/* Column indices by decreasing Hessian diagonal, ties in index order (a
 * stable descending sort, as tests/gptq_ref.py's). ctx: the H and its size. */
typedef struct {
    const double *h;
    int64_t n;
} diag_order;
static int by_diag_desc(const void *a, const void *b, void *ctx) {
    const diag_order *d = ctx;
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    double di = d->h[(int64_t)i * (d->n + 1)], dj = d->h[(int64_t)j * (d->n + 1)];
    return di > dj ? -1 : di < dj ? 1 : (i > j) - (i < j);
}

int mt_gptq_quantize(const mt_gptq_opts *o, const float *w, int64_t rows, int64_t cols, double *H, const char *what,
                     mt_gptq_result *r, mt_error *err) {
    memset(r, 0, sizeof *r);
    if (mt_gptq_opts_check(o, cols, err)) return -1;
    int maxq = (1 << o->bits) - 1, G = o->group_size;
    size_t n = (size_t)rows * (size_t)cols;
    r->rows = rows, r->cols = cols, r->bits = o->bits, r->group_size = G, r->n_groups = (int)(cols / G);
    r->q = mt_xmalloc(n, "GPTQ codes");
    r->scales = mt_xmalloc((size_t)r->n_groups * (size_t)rows * sizeof(float), "GPTQ scales");
    r->zeros = mt_xmalloc((size_t)r->n_groups * (size_t)rows * sizeof(int32_t), "GPTQ zeros");
    r->g_idx = mt_xmalloc((size_t)cols * sizeof(int32_t), "GPTQ g_idx");
    r->perm = mt_xmalloc((size_t)cols * sizeof(int32_t), "GPTQ order");
    double *W = mt_xmalloc(n * sizeof(double), "GPTQ weights");
    double *Hp = mt_xmalloc((size_t)cols * (size_t)cols * sizeof(double), "GPTQ Hessian");
    double *err1 = mt_xmalloc((size_t)rows * MT_GPTQ_BLOCK * sizeof(double), "GPTQ block errors");
    uint8_t *qp = mt_xmalloc(n, "GPTQ codes");
    unsigned char *dead = mt_xcalloc((size_t)cols, 1, "GPTQ dead inputs");
    int rc = 0;
    for (int64_t c = 0; c < cols; c++) {
        r->perm[c] = (int32_t)c;
        if (H[c * cols + c] == 0.0) H[c * cols + c] = 1.0, dead[c] = 1; /* an input always 0: its weights are 0 */
    }
    if (o->act_order) {
        diag_order d = {H, cols};
        qsort_r(r->perm, (size_t)cols, sizeof(int32_t), by_diag_desc, &d);
    }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < cols; c++) {
            int32_t pc = r->perm[c];
            W[i * cols + c] = dead[pc] ? 0.0 : (double)w[i * cols + pc];
        }
    for (int64_t a = 0; a < cols; a++)
        for (int64_t b = 0; b < cols; b++) Hp[a * cols + b] = H[(int64_t)r->perm[a] * cols + r->perm[b]];
    double mean = 0.0;
    for (int64_t c = 0; c < cols; c++) mean += Hp[c * cols + c];
    mean /= (double)cols;
    double damp = o->damp * mean;
    for (int64_t c = 0; c < cols; c++) Hp[c * cols + c] += damp;
    if (inverse_upper_factor(Hp, cols)) {
        rc = mt_errorf(err, "GPTQ: the Hessian of %s is not positive definite after damping by {damp} %g of its mean "
                            "diagonal: raise {damp} or give more calibration samples",
                       what, o->damp);
        goto out;
    }
    for (int64_t i1 = 0; i1 < cols && !rc; i1 += MT_GPTQ_BLOCK) {
        int64_t i2 = i1 + MT_GPTQ_BLOCK < cols ? i1 + MT_GPTQ_BLOCK : cols, B = i2 - i1;
        int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
        for (int64_t i = 0; i < rows; i++) {
            double w1[MT_GPTQ_BLOCK], scale = 0.0, zero = 0.0;
            const double *row = W + i * cols;
            memcpy(w1, row + i1, (size_t)B * sizeof(double));
            for (int64_t j = 0; j < B; j++) {
                int64_t c = i1 + j;
                if (c % G == 0) {
                    /* the grid from W as it stands before this block's updates, as the reference reads it */
                    find_params(row + c, G, maxq, o->sym, &scale, &zero);
                    if (!(scale > 0.0) || !isfinite(scale)) bad = 1;
                    r->scales[(size_t)(c / G) * (size_t)rows + (size_t)i] = (float)scale;
                    r->zeros[(size_t)(c / G) * (size_t)rows + (size_t)i] = (int32_t)zero;
                } else if (j == 0) { /* the block starts inside a group: that group's grid */
                    scale = r->scales[(size_t)(c / G) * (size_t)rows + (size_t)i];
                    zero = r->zeros[(size_t)(c / G) * (size_t)rows + (size_t)i];
                }
                double wv = w1[j];
                int q = code_of(wv, scale, zero, maxq);
                qp[i * cols + c] = (uint8_t)q;
                double d = Hp[c * cols + c], e = (wv - scale * ((double)q - zero)) / d;
                const double *hrow = Hp + c * cols + i1;
                for (int64_t k = j + 1; k < B; k++) w1[k] -= e * hrow[k];
                err1[i * MT_GPTQ_BLOCK + j] = e;
            }
        }
        if (bad) {
            rc = mt_errorf(err, "GPTQ: a scale of %s is not representable in fp16 (weights beyond +-%g or within "
                                "1e-7 of 0 over a whole group): check the checkpoint's weights",
                           what, 65504.0 * maxq / 2);
            break;
        }
        if (i2 < cols) /* W[:, i2:] -= Err @ Hinv[i1:i2, i2:] */
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)rows, (blasint)(cols - i2), (blasint)B,
                        -1.0, err1, MT_GPTQ_BLOCK, Hp + i1 * cols + i2, (blasint)cols, 1.0, W + i2, (blasint)cols);
    }
    if (!rc)
        for (int64_t c = 0; c < cols; c++) { /* back to the original column order */
            int64_t pc = r->perm[c];
            r->g_idx[pc] = (int32_t)(c / G);
            for (int64_t i = 0; i < rows; i++) r->q[i * cols + pc] = qp[i * cols + c];
        }
out:
    free(W);
    free(Hp);
    free(err1);
    free(qp);
    free(dead);
    if (rc) mt_gptq_result_free(r);
    return rc;
}

void mt_gptq_dequant(const mt_gptq_result *r, float *w) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < r->rows; i++)
        for (int64_t c = 0; c < r->cols; c++) {
            size_t g = (size_t)r->g_idx[c] * (size_t)r->rows + (size_t)i;
            w[i * r->cols + c] = r->scales[g] * (float)(r->q[i * r->cols + c] - r->zeros[g]);
        }
}

int mt_gptq_packable(int bits, int64_t rows, int64_t cols) {
    int pack = 32 / bits;
    return rows % pack == 0 && cols % pack == 0;
}

void mt_gptq_pack(const mt_gptq_result *r, int32_t *qweight, int32_t *qzeros, uint16_t *scales16) {
    int bits = r->bits, pack = 32 / bits;
    int64_t rows = r->rows, cols = r->cols;
    for (int64_t i = 0; i < cols / pack; i++)
        for (int64_t o = 0; o < rows; o++) {
            uint32_t v = 0;
            for (int j = 0; j < pack; j++) v |= (uint32_t)r->q[o * cols + i * pack + j] << (bits * j);
            qweight[i * rows + o] = (int32_t)v;
        }
    for (int64_t g = 0; g < r->n_groups; g++) {
        for (int64_t o = 0; o < rows / pack; o++) {
            uint32_t v = 0;
            for (int j = 0; j < pack; j++)
                v |= ((uint32_t)(r->zeros[g * rows + o * pack + j] - 1) & ((1u << bits) - 1)) << (bits * j);
            qzeros[g * (rows / pack) + o] = (int32_t)v;
        }
        for (int64_t o = 0; o < rows; o++) scales16[g * rows + o] = mt_fp32_to_fp16(r->scales[g * rows + o]);
    }
}

int mt_gptq_unpack_dequant(int bits, int64_t rows, int64_t cols, int64_t groups, const int32_t *qweight,
                           const int32_t *qzeros, const uint16_t *scales16, const int32_t *g_idx, float *w,
                           const char *what, mt_error *err) {
    int pack = 32 / bits;
    uint32_t mask = (1u << bits) - 1;
    for (int64_t c = 0; c < cols; c++)
        if (g_idx[c] < 0 || g_idx[c] >= groups)
            return mt_errorf(err, "%s: g_idx[%lld] = %d is outside [0, %lld)", what, (long long)c, g_idx[c],
                             (long long)groups);
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < rows; o++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t g = g_idx[c];
            uint32_t q = ((uint32_t)qweight[(c / pack) * rows + o] >> (bits * (c % pack))) & mask;
            uint32_t z = (((uint32_t)qzeros[g * (rows / pack) + o / pack] >> (bits * (o % pack))) & mask) + 1;
            w[o * cols + c] = mt_fp16_to_fp32(scales16[g * rows + o]) * (float)((int32_t)q - (int32_t)z);
        }
    return 0;
}
