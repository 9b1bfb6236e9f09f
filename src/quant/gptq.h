/* GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for
 * Generative Pre-trained Transformers"): one linear layer's weight W [rows =
 * outputs, cols = inputs] quantized column by column to `bits` with the
 * rounding error of each column spread over the columns not yet quantized,
 * weighted by the inverse Hessian of the layer's reconstruction error
 * H = 2 X X^T (X: calibration inputs of the layer; only its direction
 * matters, so H may be any positive multiple of X X^T).
 *
 * As the reference implementation (gptq.py's fasterquant) does it:
 *   dead inputs (H[i,i] == 0): H[i,i] = 1 and W[:, i] = 0;
 *   act order: columns in decreasing H[i,i] (W and H permuted);
 *   H += damp * mean(diag H) * I; Hinv = upper Cholesky factor of H^-1;
 *   blocks of 128 columns: per column i, the group's grid (when i starts a
 *   group: min/max per row over the group's columns of W as it stands
 *   before this block's updates), q = quantized w, err = (w - q) / Hinv[i,i],
 *   the block's later columns -= err * Hinv[i, i+1..]; after the block the
 *   columns past it -= Err @ Hinv[block, past].
 * The grid per row and group (the reference's Quantizer): xmin = min(x, 0),
 * xmax = max(x, 0) (sym: xmax = max(|xmin|, xmax), xmin = -xmax); both 0:
 * -1, +1; scale = (xmax - xmin) / maxq, maxq = 2^bits - 1; zero = round(-xmin
 * / scale) (sym: (maxq + 1) / 2); q = clamp(round(w / scale) + zero, 0,
 * maxq), dequantized scale * (q - zero); rounding half to even as torch.round.
 * One deliberate difference: the scale is rounded to fp16 (the form the
 * Hugging Face layout stores) before it is used, so the stored codes are
 * exactly the ones GPTQ chose (the reference rounds it only when packing and
 * re-derives the codes from the dequantized weights there).
 * Arithmetic is in double throughout (tests/gptq_ref.py re-implements it in
 * PyTorch float64). */
#ifndef MT_QUANT_GPTQ_H
#define MT_QUANT_GPTQ_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

typedef struct {
    int bits;       /* 4 or 8 */
    int group_size; /* input columns per group of scales; divides cols */
    int act_order;  /* columns in decreasing Hessian diagonal ("desc_act") */
    int sym;        /* symmetric grid (zero = 2^(bits-1)) */
    double damp;    /* fraction of the mean diagonal added to it (0.01) */
} mt_gptq_opts;

#define MT_GPTQ_BLOCK 128

typedef struct {
    int64_t rows, cols;
    int bits, group_size, n_groups;
    uint8_t *q;      /* [rows, cols] codes in [0, 2^bits), original column order */
    float *scales;   /* [n_groups, rows], each an fp16 value */
    int32_t *zeros;  /* [n_groups, rows] zero points (the code of 0.0) */
    int32_t *g_idx;  /* [cols] the group of each input column */
    int32_t *perm;   /* [cols] the quantization order (identity without act order) */
} mt_gptq_result;

/* Checks bits (4 or 8), the group size (> 0, dividing cols) and damp (> 0):
 * -1 with a message naming the options as {bits} etc. */
int mt_gptq_opts_check(const mt_gptq_opts *o, int64_t cols, mt_error *err);
/* H[cols, cols] += x^T x for x [n, cols] (row-major, fp32 rows). */
void mt_gptq_hessian_add(double *H, const float *x, int64_t n, int64_t cols);
/* Quantizes w [rows, cols] with H (overwritten: damped, permuted,
 * factored). -1 with err when H is not positive definite after damping
 * (`what` names the tensor) or a scale is not representable in fp16. */
int mt_gptq_quantize(const mt_gptq_opts *o, const float *w, int64_t rows, int64_t cols, double *H, const char *what,
                     mt_gptq_result *r, mt_error *err);
void mt_gptq_result_free(mt_gptq_result *r);
/* w [rows, cols] = scale[g_idx[c], r] * (q[r, c] - zero[g_idx[c], r]) in fp32. */
void mt_gptq_dequant(const mt_gptq_result *r, float *w);

/* ---- the Hugging Face GPTQ layout (AutoGPTQ's "gptq" checkpoint format)
 * of a layer with in = cols, out = rows, pack = 32 / bits codes per int32,
 * the first in the lowest bits:
 *   qweight int32 [in / pack, out]: qweight[i, o] packs q[o, i*pack + j];
 *   qzeros  int32 [groups, out / pack]: packs zero[g, o*pack + j] - 1 (the
 *           format stores zero points minus one);
 *   scales  fp16 [groups, out]; g_idx int32 [in]. */
/* 1 when the layer's shape packs (in and out multiples of 32 / bits). */
int mt_gptq_packable(int bits, int64_t rows, int64_t cols);
void mt_gptq_pack(const mt_gptq_result *r, int32_t *qweight, int32_t *qzeros, uint16_t *scales16);
/* The inverse: a dequantized w [rows, cols] (fp32) from the four tensors;
 * -1 when a g_idx entry is outside [0, groups) (what names the layer). */
int mt_gptq_unpack_dequant(int bits, int64_t rows, int64_t cols, int64_t groups, const int32_t *qweight,
                           const int32_t *qzeros, const uint16_t *scales16, const int32_t *g_idx, float *w,
                           const char *what, mt_error *err);

#endif
