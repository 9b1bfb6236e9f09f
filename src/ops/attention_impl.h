/* The two implementations behind op_attention_forward/backward (ops.h),
 * exposed so tests can hold them against each other:
 * - flash: AVX-512 kernels with an online softmax (attention_flash.c), for
 *   head sizes that are a multiple of 16 up to 128; the default there.
 * - blas: query blocks of 64 rows through sgemm (attention.c); any shape.
 * Both take the same arguments as the public calls and a scratch of at
 * least their own *_scratch_floats. */
#ifndef MT_OPS_ATTENTION_IMPL_H
#define MT_OPS_ATTENTION_IMPL_H
#include "ops/ops.h"

int op_attention_flash_supported(int T, int HS);
size_t op_attention_flash_scratch_floats(int T, int HS, int nthreads);
void op_attention_flash_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int HS,
                                const mt_attn_dropout *drop, float *scratch);
void op_attention_flash_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                 const float *lse, int B, int T, int NH, int HS, const mt_attn_dropout *drop,
                                 float *scratch);

size_t op_attention_blas_scratch_floats(int T, int HS, int nthreads);
void op_attention_blas_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int HS,
                               const mt_attn_dropout *drop, float *scratch);
void op_attention_blas_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                                const float *lse, int B, int T, int NH, int HS, const mt_attn_dropout *drop,
                                float *scratch);

#endif
