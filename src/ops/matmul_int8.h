/* LLM.int8() (Dettmers et al. 2022), the forward of bitsandbytes'
 * Linear8bitLt with a threshold, on a weight stored as int8 codes per output
 * row (quant/int8.h: w[o, j] = (q[o, j] * SCB[o]) * (1/127)):
 *  - outlier columns: the input columns j with |x[i, j]| >= threshold in any
 *    row i;
 *  - the other columns in int8: per row i, a = max |x[i, j]| over the
 *    elements below the threshold, xq[i, j] = round-half-even(x[i, j] *
 *    (127 / a)) (0 in outlier columns; a row with a == 0 gives 0), then
 *    out[i, o] = (float)(sum_j xq[i, j] q[o, j]) (int32) * a * SCB[o] * (1/127^2);
 *  - the outlier columns in fp32: out += x[:, outliers] . w[:, outliers]^T with
 *    the weight columns dequantized.
 * A threshold above every activation gives the plain int8 x int8 product (no
 * column kept in fp32). tests/int8_outlier_ref.py re-implements it in PyTorch. */
#ifndef MT_OPS_MATMUL_INT8_H
#define MT_OPS_MATMUL_INT8_H
#include <stddef.h>
#include <stdint.h>
#include "ops/ops.h"

/* Bytes of the scratch op_int8_outlier_matmul needs for N rows of C inputs. */
size_t op_int8_outlier_scratch_bytes(mt_backend *be, int N, int C);
/* out[i * ldo + o] (o < R) = the decomposition above of x [N, C] against the
 * R x C codes wq with row absmaxes scb (assigned, no bias). scratch: 64-byte
 * aligned, op_int8_outlier_scratch_bytes(be, N, C). Returns the number of
 * outlier columns. */
int op_int8_outlier_matmul(mt_backend *be, float *out, int ldo, const float *x, int N, int C, const int8_t *wq,
                           const float *scb, int R, float threshold, void *scratch);

#endif
