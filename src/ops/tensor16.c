/* The 16-bit accumulations of mixed precision (core/dtype's loops behind
 * the backend): a 16-bit gradient accumulating fp32 microbatch gradients,
 * and an fp32 buffer adding a 16-bit one. */
#include "ops/kernel_table.h"
#include "ops/ops.h"

void op_accumulate_16(mt_backend *be, mt_dtype dt, uint16_t *acc, const float *x, size_t n) {
    MT_DISPATCH(be, accumulate_16, be, dt, acc, x, n);
    mt_accumulate_16(dt, acc, x, n);
}

void op_add_from_16(mt_backend *be, mt_dtype dt, float *dst, const uint16_t *src, size_t n) {
    MT_DISPATCH(be, add_from_16, be, dt, dst, src, n);
    mt_add_from_16(dt, dst, src, n);
}
