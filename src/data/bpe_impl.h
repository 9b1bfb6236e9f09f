/* Byte-level BPE internals shared by its two loaders: bpe.c (GPT-2's
 * encoder.json + vocab.bpe, and the encoder itself) and hf_tokenizer.c (a
 * Hugging Face tokenizer.json). Nothing outside src/data/bpe*.c and
 * src/data/hf_tokenizer.c includes this. */
#ifndef MT_DATA_BPE_IMPL_H
#define MT_DATA_BPE_IMPL_H
#include "data/bpe.h"
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* GPT-2's byte <-> character alphabet (shared by every byte-level BPE):
 * code points below ALPHABET_MAX. */
#define MT_BPE_ALPHABET_MAX 0x144
#define MT_BPE_MAX_REGEX 8 /* pre-tokenizer regexes applied one after the other */

typedef struct {
    int32_t rank, pos, a, c, merged;
} mt_bpe_hent;

typedef struct {
    uint64_t h;
    uint32_t key_off, tok_off;
    uint16_t key_len, tok_len; /* key_len 0: empty slot */
} mt_bpe_centry;

/* A token matched in the text before pre-tokenization (tokenizer.json's
 * added_tokens). */
typedef struct {
    uint32_t off, len; /* content: added_bytes[off .. off+len) */
    int32_t id;
    uint8_t lstrip, rstrip, normalized;
    uint8_t first; /* its first byte (mt_bpe_index_added) */
} mt_bpe_added;

struct mt_bpe {
    mt_bpe_flavor flavor;
    int n_vocab;             /* ids are 0 .. n_vocab-1; HF vocabularies may leave gaps */
    int32_t eot;
    uint32_t *tok_off;       /* token i's raw bytes: tok_bytes[tok_off[i] .. tok_off[i+1]) */
    unsigned char *tok_bytes;
    uint8_t *tok_kind;       /* NULL: every id is a model token; else MT_BPE_TOK_* per id */
    int32_t *str_tab;        /* raw bytes -> id of the model's tokens, open addressing, -1 empty */
    size_t str_mask;
    int32_t byte_tok[256];
    uint64_t *pair_key;      /* (a << 32 | c) -> rank, merged; UINT64_MAX empty */
    int32_t *pair_rank, *pair_merged;
    size_t pair_mask, pair_count;
    /* pre-tokenizer: re[0] splits the text, re[1] splits each piece of re[0], ... */
    pcre2_code *re[MT_BPE_MAX_REGEX];
    pcre2_match_data *md[MT_BPE_MAX_REGEX];
    int n_re;
    int ignore_merges;       /* a pre-token that is a model token is emitted whole */
    /* tests: when set, pre-tokens go here instead of to BPE (mt_bpe_pretokens) */
    void (*piece_fn)(void *ctx, const unsigned char *s, size_t n);
    void *piece_ctx;
    int nfc;                 /* normalize each text run to NFC before pre-tokenization */
    mt_bpe_added *added;
    size_t n_added;
    unsigned char *added_bytes;
    /* added[added_lo[k][c] .. added_hi[k][c]) start with byte c and have
     * normalized == k, longest first (mt_bpe_index_added) */
    uint32_t added_lo[2][256], added_hi[2][256];
    size_t n_added_kind[2];
    /* word cache */
    mt_bpe_centry *ctab;
    size_t cmask, ccount;
    mt_bytes ckeys;
    mt_tokens ctoks;
    /* scratch for one word */
    int32_t *sid, *snext, *sprev;
    size_t scap;
    mt_bpe_hent *heap, *lst;
    size_t hcap, lcap;
    int32_t *mpos;
    /* scratch for NFC */
    uint16_t *u16a, *u16b;
    size_t u16cap;
    mt_bytes nfc_out;
};

enum { MT_BPE_TOK_NONE = 0, MT_BPE_TOK_MODEL = 1, MT_BPE_TOK_ADDED = 2 };

void *mt_bpe_xrealloc(void *p, size_t n, size_t size, const char *what);
void mt_bpe_build_alphabet(uint32_t byte_to_cp[256], int16_t cp_to_byte[MT_BPE_ALPHABET_MAX]);
/* Translates a string in GPT-2's alphabet into raw bytes (out has room for
 * n bytes). Returns the raw length, or -1 with *bad_cp the offending code
 * point (0xFFFFFFFF for invalid UTF-8). */
long mt_bpe_from_alphabet(const int16_t cp_to_byte[MT_BPE_ALPHABET_MAX], const unsigned char *s, size_t n,
                          unsigned char *out, uint32_t *bad_cp);
int mt_bpe_read_file(const char *path, char **data, size_t *len, mt_error *err);
/* s[0..n) for an error message, truncated and with control bytes escaped. */
const char *mt_bpe_show(const void *s, size_t n, char *buf, size_t cap);

/* The raw-bytes -> id table over ids whose tok_kind is MODEL (all when NULL):
 * allocates it and inserts them; -1 when two ids have the same bytes
 * (*dup_a, *dup_b are then the two ids). */
int mt_bpe_build_str_table(mt_bpe *b, int32_t *dup_a, int32_t *dup_b);
int32_t mt_bpe_str_lookup(const mt_bpe *b, const unsigned char *s, size_t n);
/* Sets (a, c) -> (rank, merged), replacing an earlier entry for the pair. */
void mt_bpe_pair_set(mt_bpe *b, int32_t a, int32_t c, int32_t rank, int32_t merged);
/* Sorts b->added and fills added_lo/hi and n_added_kind. */
void mt_bpe_index_added(mt_bpe *b);
/* Appends a pre-tokenizer regex (PCRE2 syntax, compiled with UTF and
 * options); `what` names it in errors. */
int mt_bpe_add_regex(mt_bpe *b, const char *pattern, size_t len, uint32_t options, const char *what, mt_error *err);

#endif
