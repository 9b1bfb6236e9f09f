/* Linear layer with bf16 inputs, fp32 accumulation and fp32 outputs: the
 * same semantics as op_matmul_forward / op_matmul_backward (ops.h) with
 * inp, w and dout in bf16.
 * forward:  out[N,OC] = inp[N,C] . w[OC,C]^T + bias   (bias fp32, may be NULL)
 * backward: dinp[N,C] (+)= dout . w ; dw[OC,C] (+)= dout^T . inp (flags
 *           MT_ACC_DINP and MT_SET_DW of ops.h as for op_matmul_backward);
 *           dbias[OC] += column sums of dout. NULL outputs are skipped.
 * Products of two bf16 values are exact in fp32, so the results differ from
 * an fp32 GEMM on the bf16-rounded inputs only by the order of the fp32
 * sums. Deterministic for a fixed thread count (no output element is summed
 * across threads). The GEMMs run on oneDNN's AVX512_BF16 kernels
 * (docs/precision.md has the measurements behind that choice). */
#ifndef MT_OPS_MATMUL_LOWP_H
#define MT_OPS_MATMUL_LOWP_H
#include "core/dtype.h"
#include "ops/ops.h" /* the backward flags */

void op_matmul_forward_bf16(mt_backend *be, float *out, const mt_bf16 *inp, const mt_bf16 *w, const float *bias, int N,
                            int C, int OC);
void op_matmul_backward_bf16(mt_backend *be, float *dinp, float *dw, float *dbias, const mt_bf16 *dout,
                             const mt_bf16 *inp, const mt_bf16 *w, int N, int C, int OC, int flags);

/* One row-major GEMM, C[M,N] = op(A) . op(B) + beta C with op = transpose
 * where trans is 'T', bf16 A and B, fp32 C: the call the two ops above make
 * on each thread's slab (exposed for bench/gemm_rate.c).
 * Runs on the calling thread inside a parallel region, threaded by the
 * library outside one. Handles empty shapes (K == 0 scales C by beta). */
void op_gemm_bf16(mt_backend *be, char transa, char transb, int M, int N, int K, const mt_bf16 *A, int lda,
                  const mt_bf16 *B, int ldb, float beta, float *C, int ldc);

#endif
