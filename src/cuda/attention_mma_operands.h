/* The register-form attention kernels' operands, prepared once per call (attention_mma_operands.cu):
 * q, k, v and dout of each (sample, head) as bf16 (round to nearest even), [B][heads][Tp][HS] (Tp: T
 * rounded up to 64, rows past T zero). A kernel's 64-row tile is then one contiguous block that it
 * copies to shared memory with cp.async while it works on the previous tile, without converting or
 * re-reading fp32 for every block that needs it (transposed operands come from the same tiles through
 * ldmatrix .trans, cuda/tensor_core.h).
 * The bits are those the kernels staged before (attention_tc_tiles.h's staging, the same roundings).
 * The backward also gets D_i = dout_i.out_i and lse_i per (sample, head), [B][NH][Tp] fp32, 0 past T.
 * All in the caller's workspace (mt_cuda_attention_mma_workspace_bytes): no allocation. */
#ifndef MT_CUDA_ATTENTION_MMA_OPERANDS_H
#define MT_CUDA_ATTENTION_MMA_OPERANDS_H
#include "cuda/compat.h"
#include "cuda/context.h"
#include <stddef.h>
#include <stdint.h>

struct mma_operands {
    int B, T, Tp, NH, NKV, HS;
    uint16_t *q, *k, *v; // NH, NKV and NKV heads
    uint16_t *out_grad;  // dout, NH heads (backward)
    float *D, *L;        // dout.out and lse (backward)
};

/* the layout in a workspace (NULL: only the size, in *bytes) */
mma_operands mma_operands_layout(void *ws, int B, int T, int NH, int NKV, int HS, bool backward, size_t *bytes);
/* fill the forward's (q, k, v) or the backward's operands from qkv [B, T, (NH + 2 NKV) HS] (fp32),
 * dout and out [B, T, NH HS], lse [B, NH, T] */
int mma_operands_prepare(const mt_cuda_ctx *c, const mma_operands &op, const float *qkv, const float *dout,
                         const float *out, const float *lse);

/* the element offset of (sample b, head h)'s row r0 in a buffer of `heads` heads */
MT_HD static inline size_t mma_rows_at(int b, int h, int heads, int Tp, int HS, int r0) {
    return ((size_t)(b * heads + h) * Tp + r0) * HS;
}
#endif
