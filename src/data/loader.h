/* The distributed data loader. The data order is a pure function of (seed,
 * global sample index): sample i of global batch k has global index
 * g = k*B + i, and every rank (whatever its slice of the batch) reads the
 * same tokens for the same g. Samples are windows of T+1 tokens (inputs
 * and shifted targets).
 *   sequential: llm.c's order: batch k starts at (k mod nb)*B*T where nb
 *               is the number of batches before the next one would run past
 *               the end (then it wraps to the start); sample i at +i*T.
 *   shuffled:   the stream is cut into W = (n-1)/T windows (window w starts
 *               at w*T); epoch e = g / W visits them in a permutation drawn
 *               from (seed, e) (Fisher-Yates on Philox numbers).
 * With loss masks (an extended shard's flags, data/shard.h) a target whose
 * token is not a counted target (MT_TOK_LOSS clear) is delivered as -1,
 * which the cross-entropy ignores; mt_loader_count gives the number of
 * counted targets of a range of samples, so the trainer can normalise the
 * loss by the global batch's count before any rank computes. */
#ifndef MT_DATA_LOADER_H
#define MT_DATA_LOADER_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

typedef enum { MT_ORDER_SHUFFLED = 0, MT_ORDER_SEQUENTIAL } mt_data_order;

typedef struct {
    const uint32_t *tokens;
    size_t n_tokens;
    int T, B;            /* sequence length, global batch (sequences per step) */
    mt_data_order order;
    uint64_t seed;
    size_t n_windows;    /* shuffled: W */
    size_t n_batches;    /* sequential: nb */
    uint32_t *perm;      /* shuffled: permutation of the current epoch */
    int64_t perm_epoch;  /* epoch the permutation belongs to (-1: none) */
    const uint8_t *flags; /* per-token MT_TOK_* flags (mt_loader_set_flags), NULL: every target counts */
    int packed;           /* some window holds more than one document (a sample starts inside it) */
} mt_loader;

int mt_data_order_parse(const char *s, mt_data_order *out, mt_error *err);
const char *mt_data_order_name(mt_data_order o); /* "shuffled" | "sequential" */
/* Fails (with a message naming the sizes) if the stream is too short for
 * one batch, or if a token id is >= vocab_size. */
int mt_loader_init(mt_loader *ld, const uint32_t *tokens, size_t n_tokens, int T, int B, mt_data_order order,
                   uint64_t seed, int vocab_size, mt_error *err);
void mt_loader_free(mt_loader *ld);
/* Attaches the per-token flags of an extended shard (flags[n_tokens],
 * owned by the caller). window is the shard's window length: it must be 0
 * or equal to T (else -1 with a message naming both, from `path`), so the
 * samples are the windows they were laid out for. */
int mt_loader_set_flags(mt_loader *ld, const uint8_t *flags, int window, const char *path, mt_error *err);
/* For packed windows: per row of global samples g0 .. g0+count-1 the
 * index in its window where its document begins (doc_start) and its
 * position in that document (pos). Returns ld->packed (0: nothing written;
 * every window is one document). */
int mt_loader_fill_docs(mt_loader *ld, uint64_t g0, int count, int32_t *doc_start, int32_t *pos);
/* Context parallelism: the rows of global samples g0 .. g0+count-1 that
 * rank r of a cp group of n holds -- each window cut into 2n chunks of
 * c = T / (2n) tokens, the rank's chunks r and 2n-1-r one after the other
 * ([count][2c] rows; causal load balancing) -- with their targets (masked
 * as mt_loader_fill's), their positions (pos: the position in the window,
 * or in its document for packed windows) and, for packed windows, their
 * document's start in the window (doc_start; global window indices, what
 * ring attention's masks compare). Returns ld->packed. T % (2n) == 0. */
int mt_loader_fill_cp(mt_loader *ld, uint64_t g0, int count, int n, int r, int32_t *inputs, int32_t *targets,
                      uint64_t *sample_ids, int32_t *doc_start, int32_t *pos);
/* The number of counted targets of global samples g0 .. g0+count-1
 * (count*T without flags). */
int64_t mt_loader_count(mt_loader *ld, uint64_t g0, int count);
/* Token offset of global sample g's window. */
size_t mt_loader_sample_start(mt_loader *ld, uint64_t g);
/* Fills inputs/targets [count, T] for global samples g0 .. g0+count-1. */
void mt_loader_fill(mt_loader *ld, uint64_t g0, int count, int32_t *inputs, int32_t *targets, uint64_t *sample_ids);

#endif
