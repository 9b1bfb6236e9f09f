/* A Hugging Face model directory quantized as bitsandbytes stores it, so that
 * transformers loads it as a 4-bit (NF4) or 8-bit model: the blocks' linear
 * weights [out, in] (GPT-2's Conv1D transposed to that, as transformers'
 * bnb integration does) under bitsandbytes' keys, everything else fp32 in HF
 * layout, and config.json with a quantization_config.
 *   NF4:  <m>.weight U8 [ceil(n/2), 1] (two codes a byte, first in the high
 *         nibble), <m>.weight.absmax (U8 [blocks] with double quantization,
 *         else F32), <m>.weight.quant_map F32 [16], with double quantization
 *         <m>.weight.nested_absmax F32 [ceil(blocks/256)] and
 *         <m>.weight.nested_quant_map F32 [256], and
 *         <m>.weight.quant_state.bitsandbytes__nf4 U8: the UTF-8 of Python's
 *         json.dumps of {quant_type, blocksize, dtype, shape[, nested_blocksize,
 *         nested_dtype, nested_offset]}.
 *   int8: <m>.weight I8 [out, in], <m>.SCB F32 [out], <m>.weight_format U8 0. */
#ifndef MT_INTEROP_BNB_H
#define MT_INTEROP_BNB_H
#include "interop/weights.h"
#include "quant/qweight.h"

int mt_bnb_export(const char *dir, const mt_weights *w, mt_quant_kind kind, int double_quant, mt_error *err);

#endif
