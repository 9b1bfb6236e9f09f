/* Grouped-query attention backward, shared by the BLAS and flash kernels: every (sample, query head) task
 * writes disjoint outputs. The first query head of a group (h % g == 0,
 * g = NH/NKV) writes its dK, dV straight into dqkv; head j > 0 of the group
 * writes them into partial slot j-1 of its (sample, kv head) at the start
 * of the scratch; afterwards op_attention_gqa_reduce adds slots 1..g-1 to
 * dqkv in that order, so dK = ((dK_0 + dK_1) + dK_2) + ... whatever the
 * thread count. With g == 1 there are no slots and nothing to reduce. */
#ifndef MT_OPS_ATTENTION_GQA_H
#define MT_OPS_ATTENTION_GQA_H
#include <stddef.h>
#include "device/backend.h"

/* Floats of the partial dK/dV slots at the start of the scratch (0 when
 * NKV == NH), a multiple of 16 so the per-thread areas after them stay
 * 64-byte aligned relative to the scratch. */
size_t op_attention_gqa_partial_floats(int B, int T, int NH, int NKV, int HS);
/* Where query head h of sample b puts its dK (kind 0) or dV (kind 1): a
 * pointer and its row stride in floats; dqkv itself for the group's first
 * head, else its slot in part (rows HS apart). */
float *op_attention_gqa_dkv_dst(float *dqkv, float *part, int b, int h, int kind, int B, int T, int NH, int NKV,
                                int HS, size_t *ld);
/* dqkv's K and V blocks += the slots, rows in parallel, slots in order. */
void op_attention_gqa_reduce(mt_backend *be, float *dqkv, const float *part, int B, int T, int NH, int NKV, int HS);

#endif
