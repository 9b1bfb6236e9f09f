#include "models/decode.h"
#include "core/error.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void mt_decoder_init(mt_decoder *d, mt_backend *be, const mt_model_config *cfg, const mt_layout *l,
                     float *const *params) {
    memset(d, 0, sizeof *d);
    d->cfg = *cfg;
    d->fam = mt_family_get(cfg->family);
    d->be = be;
    d->l = l;
    d->params = params;
    d->cache = mt_xcalloc(d->fam->decode_cache_floats(cfg), sizeof(float), "KV cache");
    d->logits = mt_xcalloc((size_t)cfg->padded_vocab, sizeof(float), "generation logits");
}

void mt_decoder_free(mt_decoder *d) {
    free(d->cache);
    free(d->logits);
    memset(d, 0, sizeof *d);
}

const float *mt_decoder_step(mt_decoder *d, int32_t token) {
    if (d->pos >= d->cfg.seq_len || token < 0 || token >= d->cfg.vocab_size) return NULL;
    d->fam->decode_step(d, token);
    d->pos++;
    return d->logits;
}
