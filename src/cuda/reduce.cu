// Sums of squares (cuda/kernels.h) in two fixed-order stages, in double:
// block b sums the elements i = b*256 + t (+ k*256*blocks) by thread t,
// then mt_block_sum's tree; one block adds the partials in a tree. No
// atomics: the same double every run (it differs from the CPU's order).
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"

__global__ static void sumsq_partials(double *partials, const void *x, int dt, size_t n) {
    __shared__ double red[MT_ROW_THREADS];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double w = dt == 0 ? (double)((const float *)x)[i] : (double)mt_dev_widen16(dt, ((const uint16_t *)x)[i]);
        s += w * w;
    }
    s = mt_block_sum(s, red);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ static void sumsq_total(double *out, const double *partials, int np) {
    __shared__ double red[MT_ROW_THREADS];
    double s = 0.0;
    for (int i = threadIdx.x; i < np; i += blockDim.x) s += partials[i];
    s = mt_block_sum(s, red);
    if (threadIdx.x == 0) *out = s;
}

static int sumsq(const mt_cuda_ctx *c, double *out, const void *x, int dt, size_t n, double *partials) {
    MT_LAUNCH(sumsq_partials, MT_CUDA_SUMSQ_BLOCKS, MT_ROW_THREADS, 0, mt_stream(c), partials, x, dt, n);
    int e = mt_launch_status();
    if (e) return e;
    MT_LAUNCH(sumsq_total, 1, MT_ROW_THREADS, 0, mt_stream(c), out, (const double *)partials, MT_CUDA_SUMSQ_BLOCKS);
    return mt_launch_status();
}

extern "C" int mt_cuda_sumsq(const mt_cuda_ctx *c, double *out, const float *x, size_t n, double *partials) {
    return sumsq(c, out, x, 0, n, partials);
}

extern "C" int mt_cuda_sumsq_16(const mt_cuda_ctx *c, double *out, int dt, const uint16_t *x, size_t n,
                                double *partials) {
    if (dt != 1 && dt != 2) return (int)cudaErrorInvalidValue;
    return sumsq(c, out, x, dt, n, partials);
}

extern "C" int mt_cuda_round_to_16_sumsq(const mt_cuda_ctx *c, double *out, int dt, uint16_t *dst, const float *src,
                                         size_t n, double *partials) {
    int e = mt_cuda_convert_to_16(c, dt, dst, src, n);
    return e ? e : mt_cuda_sumsq_16(c, out, dt, dst, n, partials);
}
