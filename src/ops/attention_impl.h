/* The two implementations behind op_attention_forward/backward and their
 * grouped-query forms (ops.h), exposed so tests can hold them against each
 * other:
 * - flash: AVX-512 kernels with an online softmax (attention_flash.c), for
 *   head sizes 16, 32, 48, 64; the default there.
 * - blas: query blocks of 64 rows through sgemm (attention.c); any shape.
 * Both take the arguments of op_attention_forward_gqa/backward_gqa (NKV ==
 * NH: the multi-head layout) and a scratch of at least their own
 * *_scratch_floats.
 */
#ifndef MT_OPS_ATTENTION_IMPL_H
#define MT_OPS_ATTENTION_IMPL_H
#include "ops/attention_gqa.h"
#include "ops/ops.h"

int op_attention_flash_supported(mt_backend *be, int T, int HS);
size_t op_attention_flash_scratch_floats(mt_backend *be, int B, int T, int NH, int NKV, int HS);
void op_attention_flash_forward(mt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                                int HS, const mt_attn_dropout *drop, float *scratch);
void op_attention_flash_backward(mt_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                                 const float *lse, int B, int T, int NH, int NKV, int HS, const mt_attn_dropout *drop,
                                 float *scratch);

size_t op_attention_blas_scratch_floats(mt_backend *be, int B, int T, int NH, int NKV, int HS);
void op_attention_blas_forward(mt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                               int HS, const mt_attn_dropout *drop, float *scratch);
void op_attention_blas_backward(mt_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                                const float *lse, int B, int T, int NH, int NKV, int HS, const mt_attn_dropout *drop,
                                float *scratch);

#endif
