/* ggml's K-quant super-blocks of 256 values (llama.cpp's GGUF tensor types
 * Q4_K and Q6_K), with the search of ggml's reference quantizers (the ones
 * llama.cpp's quantizer uses without an importance matrix), so that a
 * tensor equals what llama.cpp writes byte for byte:
 *   Q4_K, 144 bytes: fp16 d and dmin, 12 bytes packing eight 6-bit scales
 *     and eight 6-bit mins, 128 bytes of 4-bit values; sub-block j of 32
 *     values is x = d sc_j q - dmin m_j. Each sub-block's (scale, min) is
 *     fitted by weighted least squares over 21 candidate grids (weights
 *     rms(x) + |x|), the scales and mins quantized to 6 bits against their
 *     maxima, then the values re-rounded to those;
 *   Q6_K, 210 bytes: 128 bytes of low 4 bits, 64 of high 2 bits, sixteen
 *     int8 scales, fp16 d; sub-block j of 16 values is x = d sc_j (q - 32).
 *     Each sub-block's scale is the best (weights x^2) of 19 grids around
 *     amax / 32, the scales quantized to int8 against the largest.
 * The arithmetic is fp32 in ggml's order of operations (rounding to
 * nearest with its 1.5 * 2^23 trick, ties to even). n is a multiple of
 * 256. */
#ifndef MT_QUANT_GGML_KQUANTS_H
#define MT_QUANT_GGML_KQUANTS_H
#include <stddef.h>

#define MT_GGML_QK_K 256
#define MT_GGML_Q4_K_BYTES 144
#define MT_GGML_Q6_K_BYTES 210

void mt_ggml_q4_k_encode(const float *x, size_t n, unsigned char *out);
void mt_ggml_q6_k_encode(const float *x, size_t n, unsigned char *out);
void mt_ggml_q4_k_decode(const unsigned char *in, size_t n, float *x);
void mt_ggml_q6_k_decode(const unsigned char *in, size_t n, float *x);

#endif
