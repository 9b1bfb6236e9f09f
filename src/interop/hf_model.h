/* A model as a Hugging Face directory (config.json + model.safetensors, or
 * shards + model.safetensors.index.json), for any family: the family
 * gives the tensor names, transposes and config.json keys
 * (models/family.h); interop/hf_dir.h reads and writes the files. The
 * embedding's (and an untied head's) padding rows are not exported;
 * import pads them with zeros. */
#ifndef MT_INTEROP_HF_MODEL_H
#define MT_INTEROP_HF_MODEL_H
#include "interop/weights.h"
#include "core/dtype.h"

/* Writes dir (created if absent) with tensors in dtype (fp32, bf16 or
 * fp16); shard_bytes > 0 splits model.safetensors into shards of at most
 * that size with the index file. */
int mt_hf_export(const char *dir, const mt_weights *w, mt_dtype dtype, size_t shard_bytes, mt_error *err);
/* -1 with err when cfg has no Hugging Face form (the family's hf_export_check): what every HF writer asks
 * before it writes anything. */
int mt_hf_export_check(const mt_model_config *cfg, mt_error *err);
/* Reads dir into freshly allocated weights (free with mt_weights_free):
 * model_type picks the family; every tensor of the family's layout must be
 * present with its shape, no other (but known buffers) may be, and every
 * value must be finite. A GPTQ directory (interop/gptq.h) is read with its
 * quantized layers dequantized to fp32. */
int mt_hf_import(const char *dir, mt_weights *out, mt_error *err);
/* A parsed config.json into cfg: the family by model_type (gpt2, llama,
 * qwen2), the family's reader, seq_len/max_pos defaults and the padded
 * vocabulary (not validated). */
int mt_hf_config_read(const mt_json *config, mt_model_config *cfg, mt_error *err);
/* Writes DIR/config.json: the family's config.json (float32) with the object
 * quantization_json (e.g. {"quant_method":"gptq",...}) as its
 * "quantization_config", atomically. */
int mt_hf_config_write_quantized(const char *dir, const mt_model_config *cfg, const char *quantization_json,
                                 mt_error *err);

#endif
