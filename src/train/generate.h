/* Autoregressive generation: the family's decode step with a KV cache
 * (models/decode.h) and sampling from its logits. */
#ifndef MT_TRAIN_GENERATE_H
#define MT_TRAIN_GENERATE_H
#include <stdint.h>
#include "models/decode.h"

/* Samples from logits: temperature 0 = greedy; top_k 0 = whole vocabulary.
 * The draw is Philox(seed, index). */
int32_t mt_sample(const float *logits, int V, float temperature, int top_k, uint64_t seed, uint64_t index,
                  float *work);

#endif
