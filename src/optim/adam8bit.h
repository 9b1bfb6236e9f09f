/* 8-bit AdamW (Dettmers et al. 2022, "8-bit optimizers via block-wise
 * quantization"). The moments m and v of a unit's owned range [begin, end)
 * are stored as one byte per element in blocks of MT_Q8_BLOCK elements laid
 * from `begin`, each block with an fp32 absmax. A step dequantises a block
 * (code value x absmax), runs the ordinary fp32 AdamW update on it (weight
 * decay following the tensors), and re-quantises it to the nearest code with
 * the block's new absmax. State: 2 bytes per parameter + 8 bytes per block.
 * With AVX-512 (F, BW, DQ, VL, VBMI) the blocks go through vector kernels
 * whose results equal the portable path's bitwise (dequantise,
 * op_adamw_update, scalar nearest-code search): about 2x the time of
 * fp32 AdamW per parameter on Zen 4 (10M parameters, 1 thread), against 30x
 * for the portable path.
 *
 * Code maps (dynamic tree quantization, derived from the paper's
 * description). A code's magnitude bits read, from the top: z zero bits (the
 * decade: the value lies in (10^-(z+1), 10^-z]), a one bit (the indicator),
 * then f = bits-1-z fraction bits k selecting one of 2^f linear levels:
 *     value = 10^-z * (0.1 + 0.9 * (k + 1) / 2^f);   all bits zero: 0.
 * m (signed) has a sign bit and 7 magnitude bits (z = 0..6, smallest 1e-6);
 * v (unsigned) uses all 8 bits (z = 0..7, smallest 1e-7, twice the
 * fraction levels per decade). The top code is exactly 1.0, so a block's
 * absmax element is stored exactly, and magnitude codes are monotone in
 * value. A nonzero v never rounds to zero: with m nonzero that would make
 * m/sqrt(v) explode; it takes the smallest code instead.
 *
 * The table entry mt_optimizer_adamw8bit (optim/optimizer.h) wraps this
 * module for the trainer (optim/opt_state.h); used directly:
 *   init:  per unit u, mt_adam8bit_init(&s[u], &layout.units[u], lo, hi, &mem) with the owned
 *          range [lo, hi) of mt_zero_owned (allocated under MT_MEM_OPTIM).
 *   step:  mt_adam8bit_update(be, &s[u], &opt, &layout.units[u], p, g, lr, t,
 *          coef) with p, g from mt_zero_owned (as for mt_opt_update_range;
 *          opt.beta1/beta2/eps/weight_decay are used, opt.kind is ignored).
 *   checkpoint (the existing fp32 format, names mt_opt_state_name: m, v):
 *          save: mt_adam8bit_get_state(be, &s[u], k, buf) fills hi-lo floats;
 *                zero the rest of an S-float buffer and pass it to
 *                mt_zero_get_full_state as if it were fp32 state.
 *          load: mt_adam8bit_set_state(be, &s[u], k, full) from the unit's full
 *                fp32 stream (numel floats). Save then load with the same
 *                layout gives back exactly the same codes.
 *   free:  mt_adam8bit_free(&s[u], &mem). */
#ifndef MT_OPTIM_ADAM8BIT_H
#define MT_OPTIM_ADAM8BIT_H
#include <stddef.h>
#include <stdint.h>
#include "core/mem.h"
#include "nn/unit.h"
#include "ops/ops.h"
#include "ops/q8.h" /* MT_Q8_BLOCK, the code maps */
#include "optim/optimizer.h"

#define MT_Q8_BLOCK 2048

/* Value of a code in [-1, 1] (signed) or [0, 1] (unsigned). */
float mt_q8_decode(int is_signed, uint8_t code);
/* Nearest code to x (clamped to [-1, 1] / [0, 1]). */
uint8_t mt_q8_encode(int is_signed, float x);
/* Quantises n floats into codes with their absmax (returned; 0 for an
 * all-zero block, whose codes are all 0). */
float mt_q8_quantize(int is_signed, const float *x, size_t n, uint8_t *codes);
void mt_q8_dequantize(int is_signed, const uint8_t *codes, float absmax, size_t n, float *x);

typedef struct {
    size_t begin, end; /* the owned range of the unit */
    size_t n_blocks;
    float *m_absmax, *v_absmax; /* per block */
    uint8_t *m, *v;             /* per element: signed / unsigned codes */
    void *mem_block;            /* the one accounted allocation holding all of the above */
    mt_tensor_span *spans;      /* the unit's tensors (offsets, weight decay) for the kernel (host) */
    int n_spans;
    size_t bytes;               /* its size (MT_MEM_OPTIM) */
} mt_adam8bit;

void mt_adam8bit_init(mt_adam8bit *s, const mt_unit_layout *unit, size_t begin, size_t end, mt_mem *mem);
void mt_adam8bit_free(mt_adam8bit *s, mt_mem *mem);
/* One AdamW step on [begin, end) (the kernel op_adamw8bit_update); p, g
 * point at element begin; step is 1-based; unit is init's; blocks run in
 * parallel (OpenMP), each exactly as alone. */
void mt_adam8bit_update(mt_backend *be, mt_adam8bit *s, const mt_opt_hparams *h, const mt_unit_layout *unit,
                        float *p, const float *g, float lr, int64_t step, float grad_scale);
/* k = 0 (m) or 1 (v): the dequantised state of [begin, end) into dst. */
void mt_adam8bit_get_state(mt_backend *be, const mt_adam8bit *s, int k, float *dst);
/* k = 0 (m) or 1 (v): quantises full[begin, end) (full: the unit's whole
 * fp32 stream, indexed by unit element). */
void mt_adam8bit_set_state(mt_backend *be, mt_adam8bit *s, int k, const float *full);

#endif
