/* Adapters and frozen tensors as a layout transform (seam 2 of the design).
 * mt_model_layout_build applies the config's adapter spec to the family's
 * layout: it freezes the base (all of it under {peft}, the tensors matching
 * {freeze} otherwise), adds LoRA's A [r, in] and B [out, r] next to each
 * target linear weight (by the family's Hugging Face module name) and
 * attaches them to it (mt_tensor.lora_a / lora_b), then moves the frozen
 * tensors to each unit's frozen store. Tensor parallelism cuts the adapter
 * with its target: a column-parallel target (rows cut) gets B cut by rows
 * and A whole; a row-parallel one (columns cut) gets A cut by columns and B
 * whole. The families do not change: their linears go through
 * mt_unit_linear_* (models/unit_ops.h), which apply what is attached. */
#ifndef MT_NN_ADAPTERS_H
#define MT_NN_ADAPTERS_H
#include "nn/adapter_spec.h"
#include "nn/unit.h"

/* What the transform needs of a model family: its Hugging Face tensor names
 * (targets and patterns speak them) and its default target lists. The
 * model layer fills it (mt_model_adapter_names); nn/ never sees a family. */
typedef struct {
    const void *ctx; /* passed back to hf_name (the model config) */
    void (*hf_name)(const void *ctx, const char *tensor, char *buf, size_t cap);
    const char *lora_targets, *ia3_targets, *ia3_feedforward; /* the family's defaults */
    const char *model_name;                                   /* for messages ("gpt2") */
} mt_adapter_names;

/* Applies spec s to a family layout just built (before any store exists);
 * a no-op when nothing is frozen or added. */
void mt_adapters_apply(const mt_adapter_spec *s, const mt_adapter_names *nm, mt_layout *l);
/* Every target names a linear module of base (the layout without adapters),
 * and something is left to train (trained: the adapted layout's trainable
 * parameters); the message lists the model's linear module names. */
int mt_adapters_check_targets(const mt_adapter_spec *s, const mt_adapter_names *nm, const mt_layout *base,
                              size_t trained, mt_error *err);
/* The HF module name of a tensor ("h.0.attn.c_attn" of "h.0.attn.c_attn.weight"). */
void mt_adapters_module_name(const mt_adapter_names *nm, const char *tensor, char *buf, size_t cap);

#endif
