/* ggml's two simplest block formats (llama.cpp's GGUF tensor types), with
 * the rounding of ggml's reference quantizers, so that a tensor equals what
 * llama.cpp's own quantizer writes byte for byte:
 *   Q8_0, 34 bytes per 32 values: an fp16 scale d = amax / 127, then 32 int8
 *     round(x / d) (computed as x * (1/d) in fp32; d = 0 gives zeros);
 *   Q4_0, 18 bytes per 32 values: an fp16 scale d = m / -8, m the value of
 *     largest magnitude with its sign, then 16 bytes whose low nibbles hold
 *     values 0..15 and high nibbles 16..31, each min(15, trunc(x/d + 8.5));
 *     a value is (q - 8) d.
 * n is a multiple of 32. */
#ifndef MT_QUANT_GGML_BLOCKS_H
#define MT_QUANT_GGML_BLOCKS_H
#include <stddef.h>

#define MT_GGML_QK 32

void mt_ggml_q8_0_encode(const float *x, size_t n, unsigned char *out);
void mt_ggml_q4_0_encode(const float *x, size_t n, unsigned char *out);
void mt_ggml_q8_0_decode(const unsigned char *in, size_t n, float *x);
void mt_ggml_q4_0_decode(const unsigned char *in, size_t n, float *x);

#endif
