/* Adapters and frozen tensors as a layout transform (seam 2 of the design).
 * mt_model_layout_build applies the config's adapter spec to the family's
 * layout: it freezes the base (all of it under --peft, the tensors matching
 * --freeze otherwise), adds LoRA's A [r, in] and B [out, r] next to each
 * target linear weight (by the family's Hugging Face module name) and
 * attaches them to it (mt_tensor.lora_a / lora_b), then moves the frozen
 * tensors to each unit's frozen store. Tensor parallelism cuts the adapter
 * with its target: a column-parallel target (rows cut) gets B cut by rows
 * and A whole; a row-parallel one (columns cut) gets A cut by columns and B
 * whole. The families do not change: their linears go through
 * mt_unit_linear_* (models/unit_ops.h), which apply what is attached. */
#ifndef MT_ADAPTERS_ADAPTERS_H
#define MT_ADAPTERS_ADAPTERS_H
#include "adapters/spec.h"
#include "models/config.h"
#include "nn/unit.h"

/* Applies cfg->adapters to a family layout just built (before any store
 * exists); a no-op when nothing is frozen or added. */
void mt_adapters_apply(const mt_model_config *cfg, mt_layout *l);
/* Every target names a linear module of the model, and something is left
 * to train; the message lists the model's linear module names. */
int mt_adapters_check(const mt_model_config *cfg, mt_error *err);
/* The HF module name of a tensor ("h.0.attn.c_attn" of "h.0.attn.c_attn.weight"). */
void mt_adapters_module_name(const mt_model_config *cfg, const char *tensor, char *buf, size_t cap);

#endif
