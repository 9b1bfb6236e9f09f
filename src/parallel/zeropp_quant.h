/* The block quantizers of ZeRO++ (Wang et al. 2023): symmetric, one fp32
 * scale per block of `block` consecutive elements (the last block may be
 * shorter), scale = absmax / qmax, code = round-half-to-even(x / scale)
 * (an all-zero block has scale 0 and codes 0), value = code * scale.
 *   int8 (qwZ, the parameter all-gather): qmax 127, one byte per element;
 *   int4 (qgZ, the gradient reduce-scatter): qmax 7, two's complement
 *        nibbles, element 2i in the low nibble of byte i, 2i+1 in the high.
 * Exactly these operations in fp32, so tests/zeropp_quant_ref.py (PyTorch)
 * reproduces every byte. */
#ifndef MT_PARALLEL_ZEROPP_QUANT_H
#define MT_PARALLEL_ZEROPP_QUANT_H
#include <stddef.h>
#include <stdint.h>

#define MT_ZPP_BLOCK 256 /* elements per scale */

static inline size_t mt_zpp_blocks(size_t n, size_t block) { return (n + block - 1) / block; }
/* Bytes of codes: n (int8), ceil(n / 2) (int4). */
static inline size_t mt_zpp_code_bytes(size_t n, int bits) { return bits == 8 ? n : (n + 1) / 2; }

/* The quantizer and dequantizer are kernels: op_block_quantize and
 * op_block_dequantize (ops/ops.h). */

#endif
