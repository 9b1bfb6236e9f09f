/* llm.c token-shard files, in llm.c's two layouts.
 *
 * Layout (little-endian): a 1024-byte header of 256 int32 — [0] magic,
 * [1] version, [2] token count N, the rest zero — followed by N tokens:
 *   magic 20240520, version 1: uint16 tokens (GPT-2), file 1024 + 2N bytes;
 *   magic 20240801, version 7: uint32 tokens (llm.c's Llama 3 shards), file
 *   1024 + 4N bytes.
 * The writer uses the uint16 layout whenever every id fits (ids up to
 * 65535: GPT-2 shards are unchanged) and the uint32 one otherwise;
 * readers take both and give uint32 ids.
 *
 * meshtrain's extension (loss masks and document boundaries, for
 * instruction data): the same magic, version MT_SHARD_VERSION_EXT (101,
 * uint16 ids) or MT_SHARD_VERSION_U32_EXT (107, uint32 ids); the header's
 * [3] is the extension's revision (1), [4] the window length T the samples
 * are laid out for (0: a plain stream), [5] the number of documents; the N
 * tokens are followed by N bytes of per-token flags:
 *   bit 0 (MT_TOK_LOSS):  the token is a counted target (its prediction
 *                         enters the loss);
 *   bit 1 (MT_TOK_DOC):   the token starts a document (a sample);
 *   bit 2 (MT_TOK_PAD):   padding (never a target).
 * File 1024 + 2N + N (or 4N + N) bytes. llm.c and older meshtrain refuse
 * the new versions instead of training on the flags as tokens; plain
 * shards (versions 1 and 7) read as before, every token a counted target.
 * With a window length T, the file holds S whole windows of T tokens and one
 * trailing padding token (N = S*T + 1): sample w of a loader with sequence
 * length T is exactly window w, and its last target (the next window's first
 * token) is never counted.
 *
 * Writing is atomic: the data goes to a temporary file in the same
 * directory, is fsync'ed, and renamed over the destination, so a reader never
 * sees a half-written shard. Opening validates the header against the file
 * size and maps the tokens read-only. */
#ifndef MT_DATA_SHARD_H
#define MT_DATA_SHARD_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

#define MT_SHARD_MAGIC 20240520
#define MT_SHARD_VERSION 1
#define MT_SHARD_MAGIC_U32 20240801
#define MT_SHARD_VERSION_U32 7
#define MT_SHARD_VERSION_EXT 101
#define MT_SHARD_VERSION_U32_EXT 107
#define MT_SHARD_EXT_REVISION 1
#define MT_SHARD_HEADER_INTS 256
#define MT_SHARD_HEADER_BYTES (MT_SHARD_HEADER_INTS * 4)
enum { MT_TOK_LOSS = 1, MT_TOK_DOC = 2, MT_TOK_PAD = 4 };
#define MT_SHARD_MAX_TOKENS 2147483647LL /* the count is an int32 */

typedef struct {
    const uint16_t *tokens;   /* n tokens of a uint16 shard (read-only mapping of the file), else NULL */
    const uint32_t *tokens32; /* n tokens of a uint32 shard, else NULL */
    size_t n;
    uint32_t max_token;       /* largest id in the shard, to check against the model's vocabulary */
    const uint8_t *flags;     /* extension: n MT_TOK_* bytes, else NULL (plain shard) */
    int window;               /* extension: the window length T the samples are laid out for, 0 none */
    int64_t n_docs;           /* extension: documents (samples) in the shard */
    /* private */
    void *map;
    size_t map_len;
} mt_shard;

/* Opens and validates a shard. On failure returns -1 with a one-line err
 * naming the file and the numbers (too short for the header, wrong magic,
 * wrong version, count disagreeing with the file size, zero tokens). */
int mt_shard_open(mt_shard *s, const char *path, mt_error *err);
void mt_shard_close(mt_shard *s);

/* Convenience: opens, validates and copies the tokens into a malloc'd
 * array (*tokens, free with free()); *max_token may be NULL. */
int mt_shard_read(const char *path, uint32_t **tokens, size_t *n, uint32_t *max_token, mt_error *err);

/* mt_shard_read and, for an extended shard, a malloc'd copy of its flags
 * (*flags, NULL for a plain shard) and its window length (*window, 0 for a
 * plain shard). */
int mt_shard_read_ext(const char *path, uint32_t **tokens, size_t *n, uint32_t *max_token, uint8_t **flags,
                      int *window, mt_error *err);

/* Every id of tokens[0..n) (read from the shard at path) is below
 * vocab_size (compared as unsigned, so no id of a uint32 shard slips
 * through as a negative int); else -1 with a line naming the file, the
 * first offending position and id, and the vocabulary size. */
int mt_shard_check_vocab(const char *path, const uint32_t *tokens, size_t n, int vocab_size, mt_error *err);

/* Writes tokens[0..n) atomically: uint16 when every id is at most 65535,
 * else uint32. Refuses negative ids (naming the first one and its
 * position), n == 0 and n > MT_SHARD_MAX_TOKENS; nothing is written then. */
int mt_shard_write(const char *path, const int32_t *tokens, size_t n, mt_error *err);
/* The extended layout: tokens[0..n) and their flags[0..n) (MT_TOK_*),
 * window length window (0: none; else n must be a multiple of it plus
 * one), n_docs documents. Same checks and atomicity as mt_shard_write. */
int mt_shard_write_ext(const char *path, const int32_t *tokens, const uint8_t *flags, size_t n, int window,
                       int64_t n_docs, mt_error *err);
int mt_shard_write_u16(const char *path, const uint16_t *tokens, size_t n, mt_error *err);

#endif
