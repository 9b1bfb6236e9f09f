/* Tensor data movement on the backend: copies and clears of device buffers,
 * transfers between host and device memory, and the fp32 <-> bf16/fp16
 * conversions (core/dtype's, which round to nearest even as the CPU always
 * has). On the CPU every buffer is host memory, so they are memcpy, memset
 * and the conversion loops the layers above called before. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <string.h>

void op_copy(mt_backend *be, float *dst, const float *src, size_t n) {
    MT_DISPATCH(be, copy, be, dst, src, n);
    if (n) memcpy(dst, src, n * sizeof(float));
}

void op_copy_bytes(mt_backend *be, void *dst, const void *src, size_t bytes) {
    MT_DISPATCH(be, copy_bytes, be, dst, src, bytes);
    if (bytes) memcpy(dst, src, bytes);
}

void op_copy_rows(mt_backend *be, void *dst, size_t dst_pitch, size_t dst_batch, const void *src, size_t src_pitch,
                  size_t src_batch, size_t width, int rows, int nb) {
    MT_DISPATCH(be, copy_rows, be, dst, dst_pitch, dst_batch, src, src_pitch, src_batch, width, rows, nb);
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < rows; i++)
            memcpy((char *)dst + (size_t)b * dst_batch + (size_t)i * dst_pitch,
                   (const char *)src + (size_t)b * src_batch + (size_t)i * src_pitch, width);
}

void op_zero_bytes(mt_backend *be, void *x, size_t bytes) {
    MT_DISPATCH(be, zero_bytes, be, x, bytes);
    if (bytes) memset(x, 0, bytes);
}

void op_copy_to_host(mt_backend *be, void *host, const void *src, size_t bytes) {
    MT_DISPATCH(be, copy_to_host, be, host, src, bytes);
    if (bytes) memcpy(host, src, bytes);
}

void op_copy_from_host(mt_backend *be, void *dst, const void *host, size_t bytes) {
    MT_DISPATCH(be, copy_from_host, be, dst, host, bytes);
    if (bytes) memcpy(dst, host, bytes);
}

void op_zero_cols(mt_backend *be, float *x, int N, size_t ld, int c0, int nc) {
    MT_DISPATCH(be, zero_cols, be, x, N, ld, c0, nc);
    if (nc <= 0) return;
    for (int i = 0; i < N; i++) memset(x + (size_t)i * ld + c0, 0, (size_t)nc * sizeof(float));
}

void op_to_16(mt_backend *be, mt_dtype dt, uint16_t *dst, const float *src, size_t n) {
    MT_DISPATCH(be, to_16, be, dt, dst, src, n);
    mt_convert_to_16(dt, dst, src, n);
}

void op_from_16(mt_backend *be, mt_dtype dt, float *dst, const uint16_t *src, size_t n) {
    MT_DISPATCH(be, from_16, be, dt, dst, src, n);
    mt_convert_from_16(dt, dst, src, n);
}
