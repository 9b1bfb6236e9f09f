/* IA3 (models/ia3.c): a learned vector l, initialised to ones, scaling a
 * target's output y = (W x + b) * l, or for a feedforward module (the MLP's
 * down projection) its input y = W (x * l) + b. Backward:
 *   output scaling: dL/dl = sum over rows of dy * (W x + b) (recomputed,
 *     one GEMM of the target's rows), and the base sees dy * l;
 *   input scaling:  the base's input gradient g = dy W gives dL/dl = sum
 *     over rows of g * x and dL/dx = g * l.
 * Under tensor parallelism l is cut with what it scales (output rows of a
 * column-parallel target, input columns of a row-parallel one), so every
 * rank's part of dL/dl is complete from its own rows. */
#ifndef MT_MODELS_IA3_H
#define MT_MODELS_IA3_H
#include "models/model.h"

/* xs = x * l (input-scaled target k of unit u; x is N x C). */
void mt_ia3_scale_input(mt_model *m, int u, int k, float *xs, const float *x, int N, int C);
/* out[:, col0 : col0 + rows] *= l (output-scaled target). */
void mt_ia3_scale_output(mt_model *m, int u, int k, float *out, int N, int OC, int col0);
/* dl += column sums of a[:, col0 + j] * b[j] rows: a is N x lda, b N x n (ldb n). */
void mt_ia3_grad(mt_model *m, int u, int k, const float *a, int lda, int col0, const float *b, int N, int n);

#endif
