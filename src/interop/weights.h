/* A model's parameters outside the trainer, for any family: its layout
 * (nn/unit.h, tp = 1) and one flat fp32 buffer per unit (the same buffers
 * mt_model holds), used by the interop converters (Hugging Face, llm.c)
 * and the import/export commands. */
#ifndef MT_INTEROP_WEIGHTS_H
#define MT_INTEROP_WEIGHTS_H
#include "ckpt/checkpoint.h"
#include "models/family.h"

typedef struct {
    mt_model_config cfg;
    mt_layout layout;
    float **unit; /* [layout.n_units]: unit u holds layout.units[u].numel floats */
    float **frozen; /* [layout.n_units]: frozen stores (frozen_numel floats; NULL when none) */
    char base[4096]; /* a PEFT / {freeze} checkpoint's base (where its frozen tensors are), or "" */
    /* read from a GPTQ directory (mt_hf_import): its absolute path and quantization, which
     * mt_weights_to_ckpt records as the state's "gptq" object ({quantize-base} gptq reads the codes
     * from there); gptq_dir "" otherwise */
    char gptq_dir[4096];
    int gptq_bits, gptq_group_size, gptq_desc_act, gptq_sym;
} mt_weights;

/* Builds the layout for cfg and allocates zeroed unit buffers. */
void mt_weights_alloc(mt_weights *w, const mt_model_config *cfg);
void mt_weights_free(mt_weights *w);
/* Data of tensor `name` (our layout, e.g. "h.0.attn.c_attn.weight"), NULL if
 * absent; *t (if non-NULL) receives its description. */
float *mt_weights_tensor(const mt_weights *w, const char *name, const mt_tensor **t);

/* Reads state.config and every "model/<name>" tensor from a checkpoint,
 * checking each tensor's presence and shape. */
int mt_weights_from_ckpt(const mt_ckpt *ck, mt_weights *w, mt_error *err);
/* Saves the weights as a checkpoint holding only the model/<name> tensors and the
 * state {"config": ..., "step": step} (with "base" and "gptq" where the weights have them). */
int mt_weights_to_ckpt(const char *dir, const mt_weights *w, int64_t step, mt_error *err);
/* The frozen stores of a PEFT / {freeze} model from its base checkpoint (w->base). */
int mt_weights_load_frozen(mt_weights *w, mt_error *err);

#endif
