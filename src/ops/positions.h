/* Positions of packed samples: several documents share a window of T rows
 * and each one's positions restart at 0 (pos[n] = n's index in its window
 * minus its document's first index). The forms of RoPE and of GPT-2's
 * learned positions that read the position of every row from pos[]
 * instead of taking it as the row's index modulo T (rope.c, embed.c). */
#ifndef MT_OPS_POSITIONS_H
#define MT_OPS_POSITIONS_H
#include <stddef.h>
#include <stdint.h>
#include "device/backend.h"

/* op_rope_apply with row i at position pos[i] (i < N). */
void op_rope_apply_at(mt_backend *be, float *x, int N, int nh, int HS, size_t ld, const float *cos_t, const float *sin_t, int inverse,
                      const int32_t *pos);
/* out[i] += wpe[pos[i]] for i < n. */
void op_add_positions_at(mt_backend *be, float *out, const float *wpe, const int32_t *pos, int n, int C);
/* dwpe[pos[i]] += dout[i] for i < N, rows in order (threads split the
 * columns, so the sums do not depend on the thread count). */
void op_positions_backward_at(mt_backend *be, float *dwpe, const float *dout, const int32_t *pos, int N, int C);

#endif
