// The adapters' element-wise kernels (cuda/kernels.h): LoRA's input dropout
// and IA3's column scalings and gradient, one thread per element (per column
// for the gradient), the CPU ops' arithmetic in their order: bitwise.
#include "cuda/kernels.h"
#include "cuda/launch_util.h"
#include "cuda/philox_device.h"

#define AD_INDEX(i, n)                                          \
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; \
    if (i >= (n)) return
#define AD_LAUNCH(kernel, n, ...)                                                                                      \
    do {                                                                                                               \
        if ((n) > 0)                                                                                                   \
            MT_LAUNCH(kernel, mt_blocks_for((n), MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), __VA_ARGS__);       \
        return mt_launch_status();                                                                                     \
    } while (0)

__global__ static void dropout_feature_rows(float *dst, const float *src, mt_dev_dropout d, const uint64_t *sample_ids,
                                            size_t n, int T, int C, uint32_t site_layer, uint32_t col0) {
    AD_INDEX(e, n);
    size_t i = e / C;
    uint32_t j = (uint32_t)(e % C);
    dst[e] = src[e] * mt_dev_dropout_scale(&d, sample_ids[i / T], (uint32_t)(i % T), site_layer, col0 + j);
}

__global__ static void scale_cols(float *dst, const float *src, const float *l, size_t n, int C) {
    AD_INDEX(e, n);
    dst[e] = src[e] * l[e % C];
}

__global__ static void scale_cols_in_place(float *x, const float *l, size_t n, int ld, int col0, int R) {
    AD_INDEX(e, n);
    size_t i = e / R, j = e % R;
    x[i * ld + col0 + j] *= l[j];
}

__global__ static void scale_cols_into(float *dst, const float *src, const float *l, size_t n, int C, int accumulate) {
    AD_INDEX(e, n);
    float v = src[e] * l[e % C];
    dst[e] = accumulate ? dst[e] + v : v;
}

// a thread per column: its rows in order, in double (the CPU's order)
__global__ static void col_dot_acc(float *dl, const float *a, int lda, int col0, const float *b, int N, size_t n) {
    AD_INDEX(j, n);
    double s = 0;
    for (int i = 0; i < N; i++) s += (double)a[(size_t)i * lda + col0 + j] * (double)b[(size_t)i * n + j];
    dl[j] += (float)s;
}

extern "C" int mt_cuda_dropout_feature_rows(const mt_cuda_ctx *c, float *dst, const float *src, const mt_dropout *d,
                                            const uint64_t *sample_ids, int N, int T, int C, uint32_t site_layer,
                                            uint32_t col0) {
    // p == 0 draws scale 1 everywhere (the CPU op's result: a copy), so no branch is needed
    mt_dev_dropout dd = mt_dev_dropout_make(d->p, d->seed, d->step, d->layer, d->site);
    size_t n = (size_t)N * C;
    AD_LAUNCH(dropout_feature_rows, n, dst, src, dd, sample_ids, n, T, C, site_layer, col0);
}

extern "C" int mt_cuda_scale_cols(const mt_cuda_ctx *c, float *dst, const float *src, const float *l, int N, int C) {
    size_t n = (size_t)N * C;
    AD_LAUNCH(scale_cols, n, dst, src, l, n, C);
}

extern "C" int mt_cuda_scale_cols_in_place(const mt_cuda_ctx *c, float *x, const float *l, int N, int ld, int col0,
                                           int R) {
    size_t n = (size_t)N * R;
    AD_LAUNCH(scale_cols_in_place, n, x, l, n, ld, col0, R);
}

extern "C" int mt_cuda_scale_cols_into(const mt_cuda_ctx *c, float *dst, const float *src, const float *l, int N,
                                       int C, int accumulate) {
    size_t n = (size_t)N * C;
    AD_LAUNCH(scale_cols_into, n, dst, src, l, n, C, accumulate);
}

extern "C" int mt_cuda_col_dot_acc(const mt_cuda_ctx *c, float *dl, const float *a, int lda, int col0, const float *b,
                                   int N, int n) {
    size_t nc = (size_t)(n > 0 ? n : 0);
    AD_LAUNCH(col_dot_acc, nc, dl, a, lda, col0, b, N, nc);
}
