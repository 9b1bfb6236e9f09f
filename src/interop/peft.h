/* PEFT adapter directories (Hugging Face peft's save_pretrained layout):
 *   adapter_model.safetensors  base_model.model.<module>.lora_A.weight [r, in]
 *                              base_model.model.<module>.lora_B.weight [out, r]
 *   adapter_config.json        peft_type, r, lora_alpha, lora_dropout,
 *                              target_modules, fan_in_fan_out, use_rslora, bias,
 *                              base_model_name_or_path, task_type
 * <module> is the family's Hugging Face module name (GPT-2 with peft's
 * "transformer." prefix). Export takes a PEFT run's checkpoint (its
 * trainable tensors are the adapters); import puts an adapter onto a base
 * checkpoint and gives the weights of a PEFT checkpoint whose base is it. */
#ifndef MT_INTEROP_PEFT_H
#define MT_INTEROP_PEFT_H
#include "interop/weights.h"

/* adapter_config.json of dir -> an adapter spec (LORA or IA3), validated. */
int mt_peft_read_config(const char *dir, mt_adapter_spec *s, mt_error *err);
int mt_peft_export(const char *dir, const mt_weights *w, mt_error *err);
/* The adapter in dir onto the base checkpoint `base` (its config decides the
 * model); out->base is set to base. */
int mt_peft_import(const char *dir, const char *base, mt_weights *out, mt_error *err);

/* A PEFT or {freeze} model (trainable tensors in w, frozen stores loaded)
 * folded into a plain model: frozen and trained tensors copied, each LoRA
 * target W += s B A (in fp32, accumulated in double). */
int mt_peft_merge(const mt_weights *w, mt_weights *out, mt_error *err);

#endif
