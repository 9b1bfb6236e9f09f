/* Private to src/ops: the threading of a linear layer's GEMMs, shared by the
 * fp32 (matmul.c) and bf16 (matmul_lowp.c) forms.
 *
 * Each OpenMP thread computes one slab of every output -- a range of rows,
 * or of columns when the rows are too few for every thread to get a
 * GEMM-sized slab -- with a serial GEMM, so the partition is fixed for a
 * thread count, no output element is summed across threads, and results
 * are deterministic. The bias sum is parallel over column ranges (each
 * thread walks all rows, in order, for its columns). One parallel region
 * per call. */
#ifndef MT_OPS_LINEAR_SLABS_H
#define MT_OPS_LINEAR_SLABS_H
#include <stddef.h>

/* One row-major GEMM on the calling thread: C[M,N] = op(A) . op(B) + beta C,
 * op = transpose where trans is 'T'; A and B hold elements of the
 * operand type (fp32 or bf16). */
typedef void (*mt_slab_gemm)(char transa, char transb, int M, int N, int K, const void *A, int lda, const void *B,
                             int ldb, float beta, float *C, int ldc);

typedef struct {
    mt_slab_gemm gemm;
    size_t esize; /* bytes per operand element: 4 (fp32) or 2 (bf16) */
} mt_slab_kind;

/* C[M,N] = beta C: a GEMM with no products (K == 0), which the libraries
 * refuse (their leading dimensions must be >= 1). */
void mt_gemm_scale_only(int M, int N, float beta, float *C, int ldc);

/* out[N,OC] = inp[N,C] . w[OC,C]^T + bias (bias fp32, may be NULL). */
void mt_slabs_forward(const mt_slab_kind *k, float *out, const void *inp, const void *w, const float *bias, int N,
                      int C, int OC);
/* dinp (+)= dout . w ; dw (+)= dout^T . inp ; dbias += column sums of dout
 * (NULL outputs are skipped), with the semantics and flags of
 * op_matmul_backward. */
void mt_slabs_backward(const mt_slab_kind *k, float *dinp, float *dw, float *dbias, const void *dout, const void *inp,
                       const void *w, int N, int C, int OC, int flags);

#endif
