/* One token at a time through a whole model (tp = 1, every unit's full
 * parameters at hand), with a KV cache: the family's decode step runs the
 * new row through every block, attending to the cached keys and values of
 * all earlier positions. Used by generation; the cache holds only what the
 * family needs (Llama: n_kv_head heads). */
#ifndef MT_MODELS_DECODE_H
#define MT_MODELS_DECODE_H
#include <stdint.h>
#include "device/backend.h"
#include "models/config.h"
#include "models/family.h"

typedef struct mt_decoder {
    mt_model_config cfg;
    const mt_family *fam;
    mt_backend *be; /* the backend of its kernels (not owned) */
    const mt_layout *l;
    float *const *params;  /* [n_units] full parameters */
    float *cache;          /* the family's KV cache and row scratch (decode_cache_floats) */
    float *logits;         /* [padded_vocab] after a step */
    int pos;               /* next position */
} mt_decoder;

void mt_decoder_init(mt_decoder *d, mt_backend *be, const mt_model_config *cfg, const mt_layout *l,
                     float *const *params);
void mt_decoder_free(mt_decoder *d);
/* Feeds one token at d->pos; returns the logits of the next token
 * ([padded_vocab], first vocab_size valid), or NULL at the context limit or
 * for a token outside the vocabulary. */
const float *mt_decoder_step(mt_decoder *d, int32_t token);

#endif
