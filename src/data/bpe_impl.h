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

/* The added tokens of one kind (normalized or not) as an Aho-Corasick
 * automaton over their reversed contents: run backwards over the text, the
 * state reached at byte i names the longest token starting at i, so finding
 * them costs the text's length whatever their number or shared prefixes. */
typedef struct {
    int32_t *fail;          /* per state: the state of its longest proper suffix */
    int32_t *best;          /* per state: index in added[] of the longest token that is a suffix of it, -1 none */
    uint64_t *edge_key;     /* (state << 8 | byte) of a non-root state's edge, 0 = empty slot */
    int32_t *edge_to;
    size_t edge_mask;
    int32_t root_next[256]; /* the root's edges (-1: back to the root) */
    uint32_t max_len;       /* the longest token */
    int32_t *at;            /* scratch: the longest token starting at each byte of a window */
    size_t at_cap;
} mt_bpe_acm;

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
    /* SentencePiece-style BPE (byte_fallback; see hf_tokenizer.c): tokens
     * hold the text they stand for (the vocabulary's U+2581 as a space),
     * the <0xXX> tokens are byte_tok[XX] (kind BYTE, not looked up by
     * string), and a text run is encoded whole, not pre-tokenized */
    int sp;
    int sp_prepend;          /* 1: a space before every non-empty run (the Prepend normalizer) */
    int sp_meta;             /* Metaspace: 0 none, 1 prepend always, 2 first run only, 3 never */
    int sp_split;            /* Metaspace split: words begin at each space */
    int sp_strip_first;      /* decoding drops the space the encoder prepended */
    int32_t unk;             /* the unknown token, -1 none */
    int fuse_unk;
    const unsigned char *enc_start; /* the text mt_bpe_encode was given (Metaspace "first") */
    mt_bytes sp_norm;        /* scratch: a run with its prepended space */
    mt_bpe_added *added;
    size_t n_added;
    unsigned char *added_bytes;
    /* the added tokens with normalized == k (mt_bpe_index_added) */
    mt_bpe_acm added_ac[2];
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

enum { MT_BPE_TOK_NONE = 0, MT_BPE_TOK_MODEL = 1, MT_BPE_TOK_ADDED = 2, MT_BPE_TOK_BYTE = 3 };

void *mt_bpe_xrealloc(void *p, size_t n, size_t size, const char *what);
void mt_bpe_build_alphabet(uint32_t byte_to_cp[256], int16_t cp_to_byte[MT_BPE_ALPHABET_MAX]);
/* Translates a string in GPT-2's alphabet into raw bytes (out has room for
 * n bytes). Returns the raw length, or -1 with *bad_cp the offending code
 * point (0xFFFFFFFF for invalid UTF-8). */
long mt_bpe_from_alphabet(const int16_t cp_to_byte[MT_BPE_ALPHABET_MAX], const unsigned char *s, size_t n,
                          unsigned char *out, uint32_t *bad_cp);
/* s[0..n) for an error message, truncated and with control bytes escaped. */
const char *mt_bpe_show(const void *s, size_t n, char *buf, size_t cap);

/* The raw-bytes -> id table over ids whose tok_kind is MODEL (all when NULL):
 * allocates it and inserts them; -1 when two ids have the same bytes
 * (*dup_a, *dup_b are then the two ids). */
int mt_bpe_build_str_table(mt_bpe *b, int32_t *dup_a, int32_t *dup_b);
int32_t mt_bpe_str_lookup(const mt_bpe *b, const unsigned char *s, size_t n);
/* Sets (a, c) -> (rank, merged), replacing an earlier entry for the pair. */
void mt_bpe_pair_set(mt_bpe *b, int32_t a, int32_t c, int32_t rank, int32_t merged);
/* Sorts b->added (by kind, first byte, longest first, lowest id first) and
 * builds added_ac and n_added_kind. Of added tokens of one kind with the same
 * content the lowest id is the one matched. -1 with err (naming path) when
 * they hold more bytes than the automaton's int32 states can number. */
int mt_bpe_index_added(mt_bpe *b, const char *path, mt_error *err);
/* Appends a pre-tokenizer regex (PCRE2 syntax, compiled with UTF and
 * options); `what` names it in errors. */
int mt_bpe_add_regex(mt_bpe *b, const char *pattern, size_t len, uint32_t options, const char *what, mt_error *err);

#endif
