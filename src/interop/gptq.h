/* Hugging Face directories in the GPTQ layout (AutoGPTQ's "gptq" checkpoint
 * format, what transformers' GPTQ integration loads): every quantized linear
 * layer <m> (the blocks' linear weights, GPT-2's Conv1D as its [out, in]
 * transpose, as AutoGPTQ packs it) as
 *   <m>.qweight I32 [in / pack, out], <m>.qzeros I32 [groups, out / pack],
 *   <m>.scales F16 [groups, out], <m>.g_idx I32 [in]
 * (quant/gptq.h describes the packing), its bias and everything else fp32 in
 * the family's HF layout, and config.json with
 *   "quantization_config": {"quant_method": "gptq", "bits", "group_size",
 *   "desc_act", "sym", "damp_percent", "true_sequential": false,
 *   "static_groups": false, "checkpoint_format": "gptq", "model_seqlen"}.
 * Import (interop/hf_model.h) reads such a directory back with every
 * quantized layer dequantized to fp32. */
#ifndef MT_INTEROP_GPTQ_H
#define MT_INTEROP_GPTQ_H
#include "interop/hf_dir.h"
#include "interop/weights.h"
#include "quant/gptq.h"

/* res: mt_gptq_run's results (res[u][i].rows == 0: tensor not quantized). */
int mt_gptq_export(const char *dir, const mt_weights *w, mt_gptq_result *const *res, const mt_gptq_opts *o,
                   mt_error *err);
/* config.json's quantization_config names GPTQ: its bits (4 or 8) in *bits;
 * 0 and *bits = 0 when the directory is not GPTQ; -1 on a malformed one. */
int mt_gptq_config_bits(const mt_json *config, int *bits, mt_error *err);
/* The module of HF tensor name `weight` ("<m>.weight") has GPTQ tensors in
 * hd: dequantizes them into dst [rows = out, cols = in] and returns 1; 0 when
 * <m>.qweight is absent; -1 on a malformed layer (shapes, dtypes, g_idx). */
int mt_gptq_read_layer(mt_hf_dir *hd, const char *weight, int bits, int64_t rows, int64_t cols, float *dst,
                       mt_error *err);
/* 1 when HF tensor `name` is one of the GPTQ tensors of module `weight`'s layer. */
int mt_gptq_is_layer_tensor(const char *weight, const char *name);

#endif
