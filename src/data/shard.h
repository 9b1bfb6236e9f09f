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
#define MT_SHARD_HEADER_INTS 256
#define MT_SHARD_HEADER_BYTES (MT_SHARD_HEADER_INTS * 4)
#define MT_SHARD_MAX_TOKENS 2147483647LL /* the count is an int32 */

typedef struct {
    const uint16_t *tokens;   /* n tokens of a uint16 shard (read-only mapping of the file), else NULL */
    const uint32_t *tokens32; /* n tokens of a uint32 shard, else NULL */
    size_t n;
    uint32_t max_token;       /* largest id in the shard, to check against the model's vocabulary */
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

/* Every id of tokens[0..n) (read from the shard at path) is below
 * vocab_size (compared as unsigned, so no id of a uint32 shard slips
 * through as a negative int); else -1 with a line naming the file, the
 * first offending position and id, and the vocabulary size. */
int mt_shard_check_vocab(const char *path, const uint32_t *tokens, size_t n, int vocab_size, mt_error *err);

/* Writes tokens[0..n) atomically: uint16 when every id is at most 65535,
 * else uint32. Refuses negative ids (naming the first one and its
 * position), n == 0 and n > MT_SHARD_MAX_TOKENS; nothing is written then. */
int mt_shard_write(const char *path, const int32_t *tokens, size_t n, mt_error *err);
int mt_shard_write_u16(const char *path, const uint16_t *tokens, size_t n, mt_error *err);

#endif
