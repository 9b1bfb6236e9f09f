/* GPT-2 byte-level BPE: internal interface behind data/tokenizer.h (the
 * tests use the word-level entry points directly). */
#ifndef MT_DATA_BPE_H
#define MT_DATA_BPE_H
#include "data/tokenizer.h"

typedef struct mt_bpe mt_bpe;

/* Reads dir/encoder.json and dir/vocab.bpe; NULL with a one-line err. */
mt_bpe *mt_bpe_load(const char *dir, mt_error *err);
void mt_bpe_free(mt_bpe *b);

int mt_bpe_vocab_size(const mt_bpe *b);
int32_t mt_bpe_eot(const mt_bpe *b);
const unsigned char *mt_bpe_token_bytes(const mt_bpe *b, int32_t id, size_t *len);
int32_t mt_bpe_byte_token(const mt_bpe *b, unsigned char byte);

/* Encodes any byte string (see tokenizer.h for invalid UTF-8). */
int mt_bpe_encode(mt_bpe *b, const unsigned char *text, size_t len, mt_tokens *out, mt_error *err);

/* Rank of merging adjacent symbols (a, b) as gpt-3-encoder looks it up, and
 * the merged token in *merged; -1 when the pair never merges. */
int32_t mt_bpe_pair_rank(const mt_bpe *b, int32_t a, int32_t c, int32_t *merged);
/* BPE of one pre-token (raw bytes), bypassing the cache: appends its tokens. */
void mt_bpe_word(mt_bpe *b, const unsigned char *w, size_t n, mt_tokens *out);

/* Length of the valid UTF-8 sequence starting at s[0..n), or 0 if s[0] does
 * not start one (RFC 3629: no overlongs, no surrogates, max U+10FFFF). */
size_t mt_utf8_seq_len(const unsigned char *s, size_t n);

#endif
