/* Autoregressive sampling with a KV cache: each new token runs one row
 * through every block, attending to the cached keys and values of all
 * earlier positions. */
#ifndef MT_TRAIN_GENERATE_H
#define MT_TRAIN_GENERATE_H
#include <stdint.h>
#include "model/gpt.h"

typedef struct {
    const mt_gpt_layout *l;
    float *const *params;
    float *kcache, *vcache;    /* [L][T][C] */
    float *x, *ln, *qkv, *att, *tmp, *fc, *fcg, *logits, *mean, *rstd, *scores;
    int pos;                   /* next position */
} mt_generator;

void mt_generator_init(mt_generator *g, const mt_gpt_layout *l, float *const *params);
void mt_generator_free(mt_generator *g);
/* Feeds one token at position g->pos; returns the logits of the next token
 * ([padded_vocab], first vocab_size valid). Fails (returns NULL) at the
 * context limit. */
const float *mt_generator_step(mt_generator *g, int32_t token);
/* Samples from logits: temperature 0 = greedy; top_k 0 = whole vocabulary.
 * The draw is Philox(seed, index). */
int32_t mt_sample(const float *logits, int V, float temperature, int top_k, uint64_t seed, uint64_t index,
                  float *work);

#endif
