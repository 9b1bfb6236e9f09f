// A quantized base's row tiles on the device (cuda/kernels.h): NF4 (with or
// without double quantization) and bnb's int8 rows, dequantized into the
// fp32 or bf16 tile a GEMM reads. A thread per element, the CPU op's fp32
// products in its order (ops/quant_dequant.c; no fused multiply-add): bitwise.
#include "cuda/kernels.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"

#define NF4_BLOCK 64
#define NF4_NESTED_BLOCK 256
#define INT8_INV127 ((float)7.874015718698502e-3) // quant/int8.c's constant

__device__ static inline void put(int dt, void *out, size_t i, float v) {
    if (dt == 1) ((uint16_t *)out)[i] = mt_dev_fp32_to_bf16(v);
    else ((float *)out)[i] = v;
}

__global__ static void nf4_rows(mt_cuda_nf4 q, int64_t row0, size_t n, int64_t ld, int dt, void *out) {
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    int64_t r = (int64_t)(t / (size_t)q.cols), j = (int64_t)(t % (size_t)q.cols);
    int64_t e = (row0 + r) * q.cols + j, b = e / NF4_BLOCK;
    float am;
    if (q.absmax) am = q.absmax[b];
    else {
        float v = q.nested_map[q.absmax_code[b]] * q.nested_absmax[b / NF4_NESTED_BLOCK];
        am = v + q.offset;
    }
    int code = (q.packed[e / 2] >> (e % 2 ? 0 : 4)) & 0xF;
    put(dt, out, (size_t)(r * ld + j), q.code_map[code] * am);
}

__global__ static void int8_rows(const int8_t *codes, const float *scb, int64_t cols, int64_t row0, size_t n,
                                 int64_t ld, int dt, void *out) {
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    int64_t r = (int64_t)(t / (size_t)cols), j = (int64_t)(t % (size_t)cols);
    float s = scb[row0 + r];
    put(dt, out, (size_t)(r * ld + j), (float)codes[(row0 + r) * cols + j] * s * INT8_INV127);
}

extern "C" int mt_cuda_nf4_dequant_rows(const mt_cuda_ctx *c, const mt_cuda_nf4 *q, int64_t row0, int64_t nrows,
                                        int64_t ld, int dt, void *out) {
    size_t n = (size_t)nrows * (size_t)q->cols;
    if (n) MT_LAUNCH(nf4_rows, mt_blocks_for(n, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), *q, row0, n, ld, dt, out);
    return mt_launch_status();
}

extern "C" int mt_cuda_int8_dequant_rows(const mt_cuda_ctx *c, const int8_t *codes, const float *scb, int64_t cols,
                                         int64_t row0, int64_t nrows, int64_t ld, int dt, void *out) {
    size_t n = (size_t)nrows * (size_t)cols;
    if (n)
        MT_LAUNCH(int8_rows, mt_blocks_for(n, MT_EW_THREADS), MT_EW_THREADS, 0, mt_stream(c), codes, scb, cols, row0, n,
                  ld, dt, out);
    return mt_launch_status();
}
