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
#include "quant/qweight.h"

/* res: mt_gptq_run's results (res[u][i].rows == 0: tensor not quantized). */
int mt_gptq_export(const char *dir, const mt_weights *w, mt_gptq_result *const *res, const mt_gptq_opts *o,
                   mt_error *err);
/* What config.json's quantization_config says of a GPTQ directory. */
typedef struct {
    int bits;       /* 4 or 8; 0: not a GPTQ directory */
    int group_size; /* -1: one group over all input columns */
    int desc_act, sym;
} mt_gptq_config;
/* config.json's quantization_config names GPTQ: *c from it (bits 4 or 8,
 * checkpoint_format "gptq" or absent -- the zero points stored minus one);
 * 0 and c->bits = 0 when the directory is not GPTQ; -1 with one line on
 * what meshtrain does not read (other bits, gptq_v2's zero points, a
 * malformed object). */
int mt_gptq_config_read(const mt_json *config, mt_gptq_config *c, mt_error *err);
/* The same, its bits alone. */
int mt_gptq_config_bits(const mt_json *config, int *bits, mt_error *err);
/* The module of HF tensor name `weight` ("<m>.weight") has GPTQ tensors in
 * hd: dequantizes them into dst [rows = out, cols = in] and returns 1; 0 when
 * <m>.qweight is absent; -1 on a malformed layer (shapes, dtypes, g_idx). */
int mt_gptq_read_layer(mt_hf_dir *hd, const char *weight, int bits, int64_t rows, int64_t cols, float *dst,
                       mt_error *err);
/* The same layer's four tensors as the file holds them (packed, checked:
 * shapes, dtypes, every g_idx entry within the groups) into *g: 1; 0 when
 * <m>.qweight is absent; -1 on a malformed layer. */
int mt_gptq_read_packed(mt_hf_dir *hd, const char *weight, int bits, int64_t rows, int64_t cols, mt_gptqw *g,
                        mt_error *err);
/* 1 when HF tensor `name` is one of the GPTQ tensors of module `weight`'s layer. */
int mt_gptq_is_layer_tensor(const char *weight, const char *name);

#endif
