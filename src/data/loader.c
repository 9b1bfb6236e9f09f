#include "data/loader.h"
#include "core/philox.h"
#include "data/shard.h"
#include <stdlib.h>
#include <string.h>

#define MT_TAG_SHUFFLE 0x53485546u

int mt_data_order_parse(const char *s, mt_data_order *out, mt_error *err) {
    if (!strcmp(s, "shuffled")) *out = MT_ORDER_SHUFFLED;
    else if (!strcmp(s, "sequential")) *out = MT_ORDER_SEQUENTIAL;
    else return mt_errorf(err, "unknown {data-order} '%s' (expected shuffled or sequential)", s);
    return 0;
}

const char *mt_data_order_name(mt_data_order o) { return o == MT_ORDER_SEQUENTIAL ? "sequential" : "shuffled"; }

int mt_loader_init(mt_loader *ld, const uint32_t *tokens, size_t n_tokens, int T, int B, mt_data_order order,
                   uint64_t seed, int vocab_size, mt_error *err) {
    memset(ld, 0, sizeof *ld);
    if (T < 1 || B < 1) return mt_errorf(err, "loader needs T >= 1 and B >= 1 (got T=%d, B=%d)", T, B);
    if (vocab_size < 1) return mt_errorf(err, "loader needs a vocabulary of at least one id, got %d", vocab_size);
    /* unsigned: an id >= 2^31 of a uint32 shard must not pass as a negative int */
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] >= (uint32_t)vocab_size)
            return mt_errorf(err,
                             "token %u at position %zu is outside the model vocabulary of %d ids (0..%d); the data "
                             "was made with another tokenizer, or the model's vocabulary size is wrong",
                             tokens[i], i, vocab_size, vocab_size - 1);
    ld->tokens = tokens;
    ld->n_tokens = n_tokens;
    ld->T = T;
    ld->B = B;
    ld->order = order;
    ld->seed = seed;
    ld->perm_epoch = -1;
    if (order == MT_ORDER_SEQUENTIAL) {
        size_t bt = (size_t)B * (size_t)T;
        ld->n_batches = n_tokens > 0 ? (n_tokens - 1) / bt : 0;
        if (ld->n_batches == 0)
            return mt_errorf(err, "data has %zu tokens, fewer than one batch of %d x %d (+1) tokens; use more data or smaller {batch}/{seq-len}",
                             n_tokens, B, T);
    } else {
        ld->n_windows = n_tokens > 0 ? (n_tokens - 1) / (size_t)T : 0;
        if (ld->n_windows == 0)
            return mt_errorf(err, "data has %zu tokens, fewer than one window of %d (+1) tokens", n_tokens, T);
        if (ld->n_windows > 0xFFFFFFFFu) return mt_errorf(err, "data has too many windows (%zu)", ld->n_windows);
        ld->perm = malloc(ld->n_windows * sizeof(uint32_t));
        if (!ld->perm) return mt_errorf(err, "out of memory for a permutation of %zu windows", ld->n_windows);
    }
    return 0;
}

void mt_loader_free(mt_loader *ld) {
    free(ld->perm);
    ld->perm = NULL;
}

/* Fisher-Yates with the j-th swap drawn from Philox(j, epoch, seed): the
 * permutation is a function of (seed, epoch) only. */
static void build_perm(mt_loader *ld, int64_t epoch) {
    size_t W = ld->n_windows;
    for (size_t i = 0; i < W; i++) ld->perm[i] = (uint32_t)i;
    for (size_t i = W - 1; i > 0; i--) {
        mt_u32x4 r = mt_philox4x32((uint32_t)i, (uint32_t)((uint64_t)i >> 32), (uint32_t)epoch, MT_TAG_SHUFFLE,
                                   (uint32_t)ld->seed, (uint32_t)(ld->seed >> 32));
        uint64_t x = ((uint64_t)r.v[0] << 32) | r.v[1];
        size_t j = (size_t)(x % (uint64_t)(i + 1));
        uint32_t t = ld->perm[i];
        ld->perm[i] = ld->perm[j];
        ld->perm[j] = t;
    }
    ld->perm_epoch = epoch;
}

size_t mt_loader_sample_start(mt_loader *ld, uint64_t g) {
    size_t T = (size_t)ld->T;
    if (ld->order == MT_ORDER_SEQUENTIAL) {
        uint64_t k = g / (uint64_t)ld->B, i = g % (uint64_t)ld->B;
        return (size_t)(k % ld->n_batches) * (size_t)ld->B * T + (size_t)i * T;
    }
    int64_t epoch = (int64_t)(g / ld->n_windows);
    if (epoch != ld->perm_epoch) build_perm(ld, epoch);
    return (size_t)ld->perm[g % ld->n_windows] * T;
}

int mt_loader_set_flags(mt_loader *ld, const uint8_t *flags, int window, const char *path, mt_error *err) {
    if (window > 0 && window != ld->T)
        return mt_errorf(err,
                         "%s holds samples laid out in windows of %d tokens, but {seq-len} is %d: tokenize it again "
                         "with {seq-len} %d, or train with {seq-len} %d",
                         path, window, ld->T, ld->T, window);
    ld->flags = flags;
    ld->packed = 0;
    if (window > 0) /* a document starting inside a window */
        for (size_t i = 0; i < ld->n_tokens && !ld->packed; i++)
            ld->packed = (flags[i] & MT_TOK_DOC) && i % (size_t)window != 0;
    return 0;
}

int mt_loader_fill_docs(mt_loader *ld, uint64_t g0, int count, int32_t *doc_start, int32_t *pos) {
    if (!ld->packed) return 0;
    int T = ld->T;
    for (int s = 0; s < count; s++) {
        const uint8_t *f = ld->flags + mt_loader_sample_start(ld, g0 + (uint64_t)s);
        int cur = 0;
        for (int t = 0; t < T; t++) {
            if (f[t] & MT_TOK_DOC) cur = t;
            doc_start[(size_t)s * T + t] = cur;
            pos[(size_t)s * T + t] = t - cur;
        }
    }
    return 1;
}

int64_t mt_loader_count(mt_loader *ld, uint64_t g0, int count) {
    int T = ld->T;
    if (!ld->flags) return (int64_t)count * T;
    int64_t c = 0;
    for (int s = 0; s < count; s++) {
        const uint8_t *f = ld->flags + mt_loader_sample_start(ld, g0 + (uint64_t)s) + 1;
        for (int t = 0; t < T; t++) c += f[t] & MT_TOK_LOSS;
    }
    return c;
}

void mt_loader_fill(mt_loader *ld, uint64_t g0, int count, int32_t *inputs, int32_t *targets, uint64_t *sample_ids) {
    int T = ld->T;
    for (int s = 0; s < count; s++) {
        size_t start = mt_loader_sample_start(ld, g0 + (uint64_t)s);
        const uint32_t *src = ld->tokens + start;
        for (int t = 0; t < T; t++) {
            inputs[(size_t)s * T + t] = src[t];
            targets[(size_t)s * T + t] = src[t + 1];
        }
        if (ld->flags) {
            const uint8_t *f = ld->flags + start + 1;
            for (int t = 0; t < T; t++)
                if (!(f[t] & MT_TOK_LOSS)) targets[(size_t)s * T + t] = -1;
        }
        if (sample_ids) sample_ids[s] = g0 + (uint64_t)s;
    }
}

int mt_loader_fill_cp(mt_loader *ld, uint64_t g0, int count, int n, int r, int32_t *inputs, int32_t *targets,
                      uint64_t *sample_ids, int32_t *doc_start, int32_t *pos) {
    const int T = ld->T, c = T / (2 * n);
    for (int s = 0; s < count; s++) {
        size_t start = mt_loader_sample_start(ld, g0 + (uint64_t)s);
        const uint32_t *src = ld->tokens + start;
        const uint8_t *f = ld->flags ? ld->flags + start : NULL;
        /* the document start of the chunk's first row: the last document flag at or before it */
        for (int a = 0; a < 2; a++) {
            const int t0 = (a == 0 ? r : 2 * n - 1 - r) * c;
            int cur = 0;
            if (ld->packed)
                for (int t = t0; t >= 0; t--)
                    if (f[t] & MT_TOK_DOC) {
                        cur = t;
                        break;
                    }
            for (int j = 0; j < c; j++) {
                const int t = t0 + j;
                const size_t i = (size_t)s * 2 * c + (size_t)a * c + (size_t)j;
                inputs[i] = (int32_t)src[t];
                targets[i] = f && !(f[t + 1] & MT_TOK_LOSS) ? -1 : (int32_t)src[t + 1];
                if (ld->packed && (f[t] & MT_TOK_DOC)) cur = t;
                pos[i] = t - cur;
                if (ld->packed) doc_start[i] = cur;
            }
        }
        if (sample_ids) sample_ids[s] = g0 + (uint64_t)s;
    }
    return ld->packed;
}
