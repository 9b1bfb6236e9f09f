/* 8-bit AdamW's code maps (optim/adam8bit.h describes them): the scalar
 * codec and a block's quantisation, for the optimizer's tests and tools; the
 * kernels over a whole range are op_adamw8bit_update and
 * op_q8_quantize_blocks / op_q8_dequantize_blocks (ops/ops.h). */
#ifndef MT_OPS_Q8_H
#define MT_OPS_Q8_H
#include <stddef.h>
#include <stdint.h>

#define MT_Q8_BLOCK 2048 /* elements per block, each with its fp32 absmax */

float mt_q8_decode(int is_signed, uint8_t code);
uint8_t mt_q8_encode(int is_signed, float x);
float mt_q8_quantize(int is_signed, const float *x, size_t n, uint8_t *codes);
void mt_q8_dequantize(int is_signed, const uint8_t *codes, float absmax, size_t n, float *x);

#endif
