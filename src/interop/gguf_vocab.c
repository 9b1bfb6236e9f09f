#include "interop/gguf_vocab.h"
#include "core/fileio.h"
#include "core/json.h"
#include "data/tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

#define VOCAB_FILE_LIMIT ((size_t)1 << 30)

typedef struct {
    int n;            /* vocab_size */
    char **tok;       /* [n] NUL-terminated (NULL: not yet set) */
    int32_t *type;    /* [n] */
    char **merge;     /* [n_merges] */
    size_t n_merges;
    int32_t bos, eos; /* -1: none */
    const char *pre;
    char *chat_template;
    int sp;               /* SentencePiece style: llama.cpp's "llama" tokenizer */
    int add_space_prefix; /* sp: a space before the text and after each special token */
    float *score;         /* sp: [n] */
} vocab;

static char *dup_n(const char *s, size_t n) {
    char *d = mt_xmalloc(n + 1, "GGUF token string");
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static void vocab_free(vocab *v) {
    for (int i = 0; i < v->n && v->tok; i++) free(v->tok[i]);
    for (size_t i = 0; i < v->n_merges; i++) free(v->merge[i]);
    free(v->tok);
    free(v->type);
    free(v->merge);
    free(v->chat_template);
    free(v->score);
}

size_t mt_bytelevel_char(unsigned b, char out[2]) {
    unsigned cp = b;
    if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) {
        unsigned k = 0; /* the rank of b among the bytes not printable */
        for (unsigned c = 0; c < b; c++)
            if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static int set_token(vocab *v, int64_t id, const char *s, size_t n, int32_t type, const char *what, mt_error *err) {
    if (id < 0 || id >= v->n)
        return mt_errorf(err, "%s: token id %lld is outside the model's vocabulary of %d: the tokenizer does not "
                              "belong to this model (pass the one it was trained with)",
                         what, (long long)id, v->n);
    free(v->tok[id]);
    v->tok[id] = dup_n(s, n);
    v->type[id] = type;
    return 0;
}

static int byte_vocab(vocab *v, mt_error *err) {
    if (v->n < 256)
        return mt_errorf(err, "the byte tokenizer has 256 tokens, the model's vocabulary only %d: pass the tokenizer it was trained with", v->n);
    for (unsigned b = 0; b < 256 && (int)b < v->n; b++) {
        char c[4];
        size_t k = mt_bytelevel_char(b, c);
        v->tok[b] = dup_n(c, k);
        v->type[b] = TT_NORMAL;
    }
    v->pre = "gpt-2";
    return 0;
}

static void add_merge(vocab *v, size_t *cap, const char *a, size_t na, const char *b, size_t nb) {
    if (v->n_merges == *cap) {
        *cap = *cap ? 2 * *cap : 1024;
        char **m = realloc(v->merge, *cap * sizeof *m);
        if (!m) mt_die("out of memory for %zu BPE merges", *cap);
        v->merge = m;
    }
    char *s = mt_xmalloc(na + nb + 2, "BPE merge");
    memcpy(s, a, na);
    s[na] = ' ';
    memcpy(s + na + 1, b, nb);
    s[na + nb + 1] = 0;
    v->merge[v->n_merges++] = s;
}

static int gpt2_vocab(vocab *v, const char *vocab_dir, mt_error *err) {
    char dir[4096];
    if (vocab_dir) snprintf(dir, sizeof dir, "%s", vocab_dir);
    else if (mt_tokenizer_find_gpt2_vocab(dir, sizeof dir, err)) return -1;
    char *enc = mt_path_join(dir, "encoder.json"), *bpe = mt_path_join(dir, "vocab.bpe"), *text = NULL;
    size_t len = 0;
    int rc = mt_read_file(enc, VOCAB_FILE_LIMIT, &text, &len, err);
    mt_json_doc *doc = rc ? NULL : mt_json_parse(text, len, 8, err);
    if (!rc && !doc) rc = -1;
    const mt_json *root = doc ? mt_json_root(doc) : NULL;
    if (!rc && root->type != MT_JSON_OBJECT) rc = mt_errorf(err, "%s is not a JSON object", enc);
    for (const mt_json *e = root && !rc ? root->child : NULL; e && !rc; e = e->next) {
        int64_t id;
        if (mt_json_int64(e, &id)) rc = mt_errorf(err, "%s: the id of '%s' is not an integer", enc, e->key);
        else rc = set_token(v, id, e->key, e->key_len, TT_NORMAL, enc, err);
    }
    mt_json_free(doc);
    free(text);
    text = NULL;
    if (!rc) rc = mt_read_file(bpe, VOCAB_FILE_LIMIT, &text, &len, err);
    size_t cap = 0;
    for (char *line = text, *end; !rc && line && *line; line = end ? end + 1 : NULL) {
        end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        if (n && line[n - 1] == '\r') n--;
        if (!n || line[0] == '#') continue; /* "#version: 0.2" */
        char *sp = memchr(line, ' ', n);
        if (!sp || sp == line) {
            rc = mt_errorf(err, "%s: the merge '%.*s' is not two symbols separated by a space", bpe, (int)n, line);
            break;
        }
        add_merge(v, &cap, line, (size_t)(sp - line), sp + 1, n - (size_t)(sp - line) - 1);
    }
    free(text);
    if (!rc && v->n > 50256 && v->tok[50256] && !strcmp(v->tok[50256], "<|endoftext|>")) {
        v->type[50256] = TT_CONTROL;
        v->bos = v->eos = 50256;
    }
    v->pre = "gpt-2";
    free(enc);
    free(bpe);
    return rc;
}

/* Known pre-tokenizer regexes, by the name llama.cpp gives them. */
static const struct {
    const char *name, *regex;
} known_pre[] = {
    {"llama-bpe", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                  "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

static int pre_name(const mt_json *pt, const char *path, const char **out, mt_error *err) {
    const mt_json *type = pt ? mt_json_get(pt, "type") : NULL;
    if (type && type->type == MT_JSON_STRING && !strcmp(type->str, "ByteLevel")) {
        const mt_json *ur = mt_json_get(pt, "use_regex");
        if (!ur || (ur->type == MT_JSON_BOOL && ur->boolean)) {
            *out = "gpt-2";
            return 0;
        }
    }
    const mt_json *seq = pt ? mt_json_get(pt, "pretokenizers") : NULL;
    const mt_json *first = seq && seq->count == 2 ? mt_json_at(seq, 0) : NULL;
    const mt_json *pat = first ? mt_json_get(first, "pattern") : NULL;
    const mt_json *re = pat ? mt_json_get(pat, "Regex") : NULL;
    for (size_t i = 0; re && re->type == MT_JSON_STRING && i < sizeof known_pre / sizeof known_pre[0]; i++)
        if (!strcmp(re->str, known_pre[i].regex)) {
            *out = known_pre[i].name;
            return 0;
        }
    return mt_errorf(err, "%s: its pre-tokenizer is none llama.cpp knows by name (Llama 3's, Qwen2's or GPT-2's "
                          "split): the tokenizer cannot be represented in GGUF",
                     path);
}

/* The token of an "eos_token" value (a string, or {"content": ...}). */
static const char *token_text(const mt_json *j) {
    if (!j) return NULL;
    if (j->type == MT_JSON_STRING) return j->str;
    const mt_json *c = j->type == MT_JSON_OBJECT ? mt_json_get(j, "content") : NULL;
    return c && c->type == MT_JSON_STRING ? c->str : NULL;
}

static int32_t find_token(const vocab *v, const char *s) {
    for (int i = 0; s && i < v->n; i++)
        if (v->tok[i] && !strcmp(v->tok[i], s)) return i;
    return -1;
}

/* ---- SentencePiece style (byte_fallback BPE) as llama.cpp's "llama" tokenizer ----
 * llama.cpp does not read merges for it: it joins, again and again, the
 * adjacent pair of symbols (UTF-8 characters at first) whose concatenation
 * is a token with the highest score, the leftmost on a tie, and spells what
 * is no token in <0xXX> byte tokens. That is this BPE's merge order when a
 * token's score is minus the rank of its first merge, and every split of a
 * token into two tokens is one of the merges (else llama.cpp would join
 * where the merges do not): checked, and refused otherwise. Files converted
 * from a SentencePiece model (Llama 2, Mistral) list every such split. */

typedef struct {
    const char **key; /* borrowed, NUL-terminated */
    int32_t *val;
    size_t cap;
} strmap;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static void strmap_init(strmap *m, size_t n) {
    m->cap = 16;
    while (m->cap < 2 * n + 1) m->cap *= 2;
    m->key = mt_xcalloc(m->cap, sizeof *m->key, "tokenizer hash table");
    m->val = mt_xcalloc(m->cap, sizeof *m->val, "tokenizer hash table");
}

static void strmap_free(strmap *m) {
    free(m->key);
    free(m->val);
}

static int32_t strmap_get(const strmap *m, const char *k, size_t n) {
    for (size_t i = hash_bytes(k, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->key[i]) return -1;
        if (strlen(m->key[i]) == n && !memcmp(m->key[i], k, n)) return m->val[i];
    }
}

/* The first value put for a key stays (a merge's first rank). */
static void strmap_put(strmap *m, const char *k, int32_t v) {
    size_t n = strlen(k);
    for (size_t i = hash_bytes(k, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->key[i]) {
            m->key[i] = k;
            m->val[i] = v;
            return;
        }
        if (!strcmp(m->key[i], k)) return;
    }
}

static int utf8_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

static int is_byte_token(const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    return strlen(s) == 6 && !strncmp(s, "<0x", 3) && strchr(hex, s[3]) && strchr(hex, s[4]) && s[5] == '>';
}

/* Where llama.cpp puts the space SentencePiece writes before a text:
 * Llama 2's normalizer Prepend(U+2581) + Replace, or a Metaspace
 * pre-tokenizer prepending always or never. *split: Metaspace splits words
 * at each space. */
static int sp_layout(const mt_json *root, const char *path, vocab *v, int *split, mt_error *err) {
    const mt_json *pt = mt_json_get(root, "pre_tokenizer"), *norm = mt_json_get(root, "normalizer");
    *split = 0;
    if (pt && pt->type == MT_JSON_OBJECT) {
        const mt_json *seq = mt_json_get(pt, "pretokenizers");
        if (seq && seq->type == MT_JSON_ARRAY && seq->count == 1) pt = mt_json_at(seq, 0);
        const mt_json *type = mt_json_get(pt, "type"), *ps = mt_json_get(pt, "prepend_scheme"),
                      *aps = mt_json_get(pt, "add_prefix_space"), *sp = mt_json_get(pt, "split");
        if (!type || type->type != MT_JSON_STRING || strcmp(type->str, "Metaspace"))
            return mt_errorf(err, "%s: a byte_fallback BPE whose pre-tokenizer is not Metaspace cannot be represented "
                                  "in GGUF (llama.cpp's llama tokenizer)", path);
        const char *scheme = ps && ps->type == MT_JSON_STRING ? ps->str
                             : aps && aps->type == MT_JSON_BOOL && !aps->boolean ? "never" : "always";
        if (!strcmp(scheme, "first"))
            return mt_errorf(err, "%s: Metaspace prepend_scheme 'first' (a space before the text, none after a special "
                                  "token) cannot be represented in GGUF: llama.cpp's llama tokenizer puts one after "
                                  "each special token too", path);
        v->add_space_prefix = !strcmp(scheme, "always");
        *split = !sp || sp->type != MT_JSON_BOOL || sp->boolean;
        return 0;
    }
    /* Prepend in the normalizer (alone or in a Sequence) */
    const mt_json *list = norm ? mt_json_get(norm, "normalizers") : NULL;
    for (const mt_json *n = list && list->type == MT_JSON_ARRAY ? list->child : norm; n; n = list ? n->next : NULL) {
        const mt_json *type = mt_json_get(n, "type");
        if (type && type->type == MT_JSON_STRING && !strcmp(type->str, "Prepend")) v->add_space_prefix = 1;
    }
    return 0;
}

/* Scores from the merges, byte and unknown token types, and the checks
 * that llama.cpp's tokenizer then encodes as this one. */
static int sp_finish(vocab *v, const mt_json *model, const char *path, int split, mt_error *err) {
    strmap text, merge;
    strmap_init(&text, (size_t)v->n);
    strmap_init(&merge, v->n_merges);
    for (int i = 0; i < v->n; i++)
        if (v->tok[i]) strmap_put(&text, v->tok[i], i);
    v->score = mt_xcalloc((size_t)v->n, sizeof(float), "GGUF token scores");
    unsigned char *scored = mt_xcalloc((size_t)v->n, 1, "GGUF token scores");
    int rc = 0, n_bytes = 0;
    char buf[1024];
    for (size_t r = 0; r < v->n_merges && !rc; r++) {
        strmap_put(&merge, v->merge[r], (int32_t)r);
        const char *m = v->merge[r], *sp = strchr(m, ' ');
        size_t la = (size_t)(sp - m), lb = strlen(sp + 1);
        if (la + lb >= sizeof buf) continue; /* no token is that long */
        memcpy(buf, m, la);
        memcpy(buf + la, sp + 1, lb + 1);
        int32_t id = strmap_get(&text, buf, la + lb);
        if (id < 0) rc = mt_errorf(err, "%s: merge %zu '%s' gives a string that is not in model.vocab", path, r, m);
        else if (!scored[id]) {
            v->score[id] = -(float)(r + 1); /* exact: ranks < 2^24 */
            scored[id] = 1;
        }
    }
    if (!rc && v->n_merges >= (1u << 24)) rc = mt_errorf(err, "%s: %zu merges are more than GGUF's float scores order "
                                                              "exactly", path, v->n_merges);
    for (int i = 0; i < v->n && !rc; i++) {
        if (!v->tok[i] || v->type[i] != TT_NORMAL) continue;
        const char *t = v->tok[i];
        if (is_byte_token(t)) {
            v->type[i] = TT_BYTE;
            n_bytes++;
            continue;
        }
        size_t n = strlen(t);
        if (split && n > 3 && memmem(t + 1, n - 1, "\xE2\x96\x81", 3))
            rc = mt_errorf(err, "%s: the Metaspace pre-tokenizer splits at spaces, but token %d '%s' holds one inside: "
                                "llama.cpp's llama tokenizer (no split) would use it; it cannot be represented in GGUF",
                           path, i, t);
        for (size_t k = (size_t)utf8_len((unsigned char)t[0]); k < n && !rc; k += (size_t)utf8_len((unsigned char)t[k])) {
            if (strmap_get(&text, t, k) < 0 || strmap_get(&text, t + k, n - k) < 0) continue;
            if (n + 2 > sizeof buf) break;
            snprintf(buf, sizeof buf, "%.*s %s", (int)k, t, t + k);
            if (strmap_get(&merge, buf, n + 1) < 0)
                rc = mt_errorf(err, "%s: token %d '%s' is the tokens '%.*s' and '%s', which no merge joins: llama.cpp's "
                                    "llama tokenizer (it joins any pair that makes a token) would encode otherwise; "
                                    "the tokenizer cannot be represented in GGUF",
                               path, i, t, (int)k, t, t + k);
        }
    }
    if (!rc && n_bytes != 256)
        rc = mt_errorf(err, "%s: %d of the 256 byte tokens <0x00>..<0xFF>: llama.cpp's byte fallback needs all of them; "
                            "the tokenizer cannot be represented in GGUF", path, n_bytes);
    const mt_json *u = rc ? NULL : mt_json_get(model, "unk_token");
    if (u && u->type == MT_JSON_STRING) {
        int32_t id = strmap_get(&text, u->str, u->str_len);
        if (id >= 0) v->type[id] = TT_UNKNOWN;
    }
    free(scored);
    strmap_free(&text);
    strmap_free(&merge);
    return rc;
}

static int hf_vocab(vocab *v, const char *path, mt_error *err) {
    char *text = NULL;
    size_t len = 0;
    if (mt_read_file(path, VOCAB_FILE_LIMIT, &text, &len, err)) return -1;
    mt_json_doc *doc = mt_json_parse(text, len, 64, err);
    free(text);
    if (!doc) return -1;
    const mt_json *root = mt_json_root(doc), *model = mt_json_get(root, "model");
    const mt_json *mtype = model ? mt_json_get(model, "type") : NULL;
    const mt_json *vj = model ? mt_json_get(model, "vocab") : NULL, *mj = model ? mt_json_get(model, "merges") : NULL;
    int rc = 0;
    if (!mtype || mtype->type != MT_JSON_STRING || strcmp(mtype->str, "BPE") || !vj || vj->type != MT_JSON_OBJECT ||
        !mj || mj->type != MT_JSON_ARRAY)
        rc = mt_errorf(err, "%s: not a BPE tokenizer.json (model.type BPE with vocab and merges): it cannot be "
                            "represented as llama.cpp's gpt2 or llama tokenizer",
                       path);
    const mt_json *bf = rc ? NULL : mt_json_get(model, "byte_fallback");
    v->sp = bf && bf->type == MT_JSON_BOOL && bf->boolean; /* SentencePiece style: Llama 2, Mistral */
    int split = 0;
    if (!rc) rc = v->sp ? sp_layout(root, path, v, &split, err) : pre_name(mt_json_get(root, "pre_tokenizer"), path, &v->pre, err);
    for (const mt_json *e = rc ? NULL : vj->child; e && !rc; e = e->next) {
        int64_t id;
        if (mt_json_int64(e, &id)) rc = mt_errorf(err, "%s: the id of '%s' is not an integer", path, e->key);
        else rc = set_token(v, id, e->key, e->key_len, TT_NORMAL, path, err);
    }
    size_t cap = 0;
    for (const mt_json *m = rc ? NULL : mj->child; m && !rc; m = m->next) {
        if (m->type == MT_JSON_STRING) {
            const char *sp = memchr(m->str, ' ', m->str_len);
            if (!sp || sp == m->str) rc = mt_errorf(err, "%s: the merge '%s' is not two symbols", path, m->str);
            else add_merge(v, &cap, m->str, (size_t)(sp - m->str), sp + 1, m->str_len - (size_t)(sp - m->str) - 1);
        } else if (m->type == MT_JSON_ARRAY && m->count == 2 && m->child->type == MT_JSON_STRING &&
                   m->child->next->type == MT_JSON_STRING) {
            add_merge(v, &cap, m->child->str, m->child->str_len, m->child->next->str, m->child->next->str_len);
        } else {
            rc = mt_errorf(err, "%s: a merge is neither \"a b\" nor [\"a\", \"b\"]", path);
        }
    }
    const mt_json *added = rc ? NULL : mt_json_get(root, "added_tokens");
    for (const mt_json *a = added && added->type == MT_JSON_ARRAY ? added->child : NULL; a && !rc; a = a->next) {
        int64_t id;
        const char *content = NULL;
        const mt_json *sp = mt_json_get(a, "special");
        if (mt_json_get_int64(a, "id", &id, err) || mt_json_get_string(a, "content", &content, err)) rc = -1;
        else rc = set_token(v, id, content, mt_json_get(a, "content")->str_len,
                            sp && sp->type == MT_JSON_BOOL && sp->boolean ? TT_CONTROL : TT_USER_DEFINED, path, err);
    }
    if (!rc && v->sp) rc = sp_finish(v, model, path, split, err);
    mt_json_free(doc);
    if (rc) return -1;
    v->bos = find_token(v, v->sp ? "<s>" : "<|begin_of_text|>");
    v->eos = find_token(v, v->sp ? "</s>" : "<|end_of_text|>");
    if (v->eos < 0) v->eos = find_token(v, "<|endoftext|>");
    /* tokenizer_config.json beside it: the chat template and the EOS a chat turn ends with */
    const char *slash = strrchr(path, '/');
    char *dir = slash ? dup_n(path, (size_t)(slash - path)) : dup_n(".", 1), *cfgp = mt_path_join(dir, "tokenizer_config.json");
    mt_error e2 = {{0}};
    if (!mt_read_file(cfgp, VOCAB_FILE_LIMIT, &text, &len, &e2)) {
        mt_json_doc *cd = mt_json_parse(text, len, 64, &e2);
        free(text);
        if (!cd) rc = mt_errorf(err, "%s: %s", cfgp, e2.msg);
        const mt_json *cr = cd ? mt_json_root(cd) : NULL;
        const mt_json *ct = cr ? mt_json_get(cr, "chat_template") : NULL;
        if (ct && ct->type == MT_JSON_STRING) v->chat_template = dup_n(ct->str, ct->str_len);
        int32_t e = find_token(v, token_text(cr ? mt_json_get(cr, "eos_token") : NULL));
        if (e >= 0) v->eos = e;
        mt_json_free(cd);
    }
    free(cfgp);
    free(dir);
    return rc;
}

int mt_gguf_add_vocab(mt_gguf_writer *w, const char *spec, const char *vocab_dir, int vocab_size,
                      const char *chat_template, mt_error *err) {
    vocab v;
    memset(&v, 0, sizeof v);
    v.n = vocab_size;
    v.bos = v.eos = -1;
    v.tok = mt_xcalloc((size_t)vocab_size, sizeof(char *), "GGUF tokens");
    v.type = mt_xcalloc((size_t)vocab_size, sizeof(int32_t), "GGUF token types");
    int rc = !strcmp(spec, "byte")                ? byte_vocab(&v, err)
             : !strcmp(spec, "gpt2")              ? gpt2_vocab(&v, vocab_dir, err)
             : !strncmp(spec, "hf:", 3) && spec[3] ? hf_vocab(&v, spec + 3, err)
                                                   : mt_errorf(err, "unknown tokenizer '%s' (byte, gpt2 or "
                                                                    "hf:PATH/tokenizer.json)", spec);
    size_t *lens = rc ? NULL : mt_xcalloc((size_t)vocab_size, sizeof(size_t), "GGUF token lengths");
    for (int i = 0; i < vocab_size && !rc; i++) {
        if (!v.tok[i]) {
            char pad[32];
            snprintf(pad, sizeof pad, "[PAD%d]", i);
            v.tok[i] = dup_n(pad, strlen(pad));
            v.type[i] = TT_UNUSED;
        }
        lens[i] = strlen(v.tok[i]);
    }
    if (!rc) {
        mt_gguf_kv_string(w, "tokenizer.ggml.model", v.sp ? "llama" : "gpt2");
        mt_gguf_kv_string(w, "tokenizer.ggml.pre", v.sp ? "default" : v.pre);
        mt_gguf_kv_string_array(w, "tokenizer.ggml.tokens", (size_t)vocab_size, (const char *const *)v.tok, lens);
        if (v.sp) mt_gguf_kv_f32_array(w, "tokenizer.ggml.scores", (size_t)vocab_size, v.score);
        mt_gguf_kv_i32_array(w, "tokenizer.ggml.token_type", (size_t)vocab_size, v.type);
        if (!v.sp) mt_gguf_kv_string_array(w, "tokenizer.ggml.merges", v.n_merges, (const char *const *)v.merge, NULL);
        for (int i = 0; v.sp && i < vocab_size; i++)
            if (v.type[i] == TT_UNKNOWN) {
                mt_gguf_kv_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)i);
                break;
            }
        if (v.sp) mt_gguf_kv_bool(w, "tokenizer.ggml.add_space_prefix", v.add_space_prefix);
        if (v.bos >= 0) mt_gguf_kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v.bos);
        if (v.eos >= 0) mt_gguf_kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v.eos);
        mt_gguf_kv_bool(w, "tokenizer.ggml.add_bos_token", 0);
        mt_gguf_kv_bool(w, "tokenizer.ggml.add_eos_token", 0);
        const char *tmpl = chat_template ? chat_template : v.chat_template;
        if (tmpl) mt_gguf_kv_string(w, "tokenizer.chat_template", tmpl);
    }
    free(lens);
    vocab_free(&v);
    return rc;
}
