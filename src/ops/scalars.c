/* Reductions whose result the host reads: a loss sum, and the non-finite
 * flag accumulated into a backend scalar (mt_backend.scalars, read at the
 * step's sync point with mt_backend_read_scalars). */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "core/nonfinite.h"

double op_sum(mt_backend *be, const float *x, size_t n) {
    MT_DISPATCH_RET(be, sum, be, x, n);
    double s = 0.0; /* in order, in double: the loss sum of a microbatch */
    for (size_t i = 0; i < n; i++) s += x[i];
    return s;
}

void op_nonfinite_flag(mt_backend *be, mt_scalar slot, const float *x, size_t n) {
    MT_DISPATCH(be, nonfinite_flag, be, slot, x, n);
    if (mt_found_nonfinite(x, n)) be->scalars[slot] = 1.0;
}
