/* LoRA on one linear layer (models/lora.c): y += s * B A dropout(x),
 * s = alpha / r (or alpha / sqrt(r)), on the output columns [col0, col0 +
 * B's rows) of a linear whose output is N x OC (a fused q|k|v GEMM holds
 * several targets side by side). The adapter GEMMs run in fp32 whatever
 * {precision} says (they are rank r: a few percent of the base's FLOPs).
 *
 * Tensor parallelism, with the cuts nn/adapters.c gives:
 *   column-parallel target (B cut by rows, A whole): h = A x is the same on
 *     every rank; backward's dh = s dy B is a partial sum over ranks, which
 *     the input gradient keeps (the layer's own reduction sums it) and A's
 *     gradient needs whole (one all-reduce of N x r, or under sequence
 *     parallelism the unit's reduction of replicated gradients does it);
 *   row-parallel target (A cut by columns, B whole): h = sum over ranks of
 *     A_r x_r (one all-reduce of N x r, again in backward), and only tp rank
 *     0 adds s B h to its partial output, which the layer's reduction sums.
 * Dropout masks come from global coordinates (sample, position, layer,
 * target, input column), so every layout drops the same elements. */
#ifndef MT_MODELS_LORA_H
#define MT_MODELS_LORA_H
#include "models/model.h"

void mt_lora_forward(mt_model *m, int u, int k, const mt_fwd_ctx *fc, float *out, const float *inp, int N, int C, int OC,
                     int col0);
/* dinp += the adapter's input gradient; A's and B's gradients accumulate. */
void mt_lora_backward(mt_model *m, int u, int k, const mt_fwd_ctx *fc, float *dinp, const float *dout, const float *inp,
                      int N, int C, int OC, int col0);

#endif
