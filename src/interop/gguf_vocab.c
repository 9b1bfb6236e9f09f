#include "interop/gguf_vocab.h"
#include "core/fileio.h"
#include "core/json.h"
#include "data/tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5 };

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
        rc = mt_errorf(err, "%s: not a byte-level BPE tokenizer.json (model.type BPE with vocab and merges): it cannot "
                            "be represented as llama.cpp's gpt2 tokenizer",
                       path);
    if (!rc) rc = pre_name(mt_json_get(root, "pre_tokenizer"), path, &v->pre, err);
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
    mt_json_free(doc);
    if (rc) return -1;
    v->bos = find_token(v, "<|begin_of_text|>");
    v->eos = find_token(v, "<|end_of_text|>");
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
        mt_gguf_kv_string(w, "tokenizer.ggml.model", "gpt2");
        mt_gguf_kv_string(w, "tokenizer.ggml.pre", v.pre);
        mt_gguf_kv_string_array(w, "tokenizer.ggml.tokens", (size_t)vocab_size, (const char *const *)v.tok, lens);
        mt_gguf_kv_i32_array(w, "tokenizer.ggml.token_type", (size_t)vocab_size, v.type);
        mt_gguf_kv_string_array(w, "tokenizer.ggml.merges", v.n_merges, (const char *const *)v.merge, NULL);
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
