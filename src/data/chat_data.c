/* Instruction and chat data: see chat_data.h. */
#include "data/chat_data.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fileio.h"
#include "core/json.h"
#include "data/shard.h"

int mt_train_on_parse(const char *s, mt_train_on *out, mt_error *err) {
    if (!strcmp(s, "assistant")) *out = MT_TRAIN_ON_ASSISTANT;
    else if (!strcmp(s, "all")) *out = MT_TRAIN_ON_ALL;
    else if (!strcmp(s, "last")) *out = MT_TRAIN_ON_LAST;
    else return mt_errorf(err, "unknown {train-on} '%s' (expected assistant, all or last)", s);
    return 0;
}

int mt_overlong_parse(const char *s, mt_overlong *out, mt_error *err) {
    if (!strcmp(s, "drop")) *out = MT_OVERLONG_DROP;
    else if (!strcmp(s, "truncate")) *out = MT_OVERLONG_TRUNCATE;
    else if (!strcmp(s, "error")) *out = MT_OVERLONG_ERROR;
    else return mt_errorf(err, "unknown {overlong} '%s' (expected drop, truncate or error)", s);
    return 0;
}

/* A special token named in tokenizer_config.json: a string or {"content": ...}. */
static void token_text(const mt_json *v, char *out, size_t cap) {
    out[0] = '\0';
    if (v && v->type == MT_JSON_OBJECT) v = mt_json_get(v, "content");
    if (v && v->type == MT_JSON_STRING && v->str_len < cap) memcpy(out, v->str, v->str_len + 1);
}

int mt_tokenizer_config_read(const char *path, mt_tokenizer_config *c, mt_error *err) {
    memset(c, 0, sizeof *c);
    char *text;
    size_t len;
    if (mt_read_file(path, (size_t)1 << 30, &text, &len, err)) return -1;
    mt_json_doc *doc = mt_json_parse(text, len, 64, err);
    free(text);
    if (!doc) {
        char msg[MT_ERROR_LEN];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return mt_errorf(err, "%s: %s", path, msg);
    }
    const mt_json *root = mt_json_root(doc);
    const mt_json *ct = mt_json_get(root, "chat_template");
    if (ct && ct->type == MT_JSON_ARRAY) /* [{"name": "default", "template": ...}, ...] */
        for (const mt_json *e = ct->child; e; e = e->next) {
            const mt_json *nm = mt_json_get(e, "name");
            if (nm && nm->type == MT_JSON_STRING && !strcmp(nm->str, "default")) {
                ct = mt_json_get(e, "template");
                break;
            }
        }
    if (ct && ct->type == MT_JSON_STRING) {
        c->chat_template = mt_xmalloc(ct->str_len + 1, "chat template");
        memcpy(c->chat_template, ct->str, ct->str_len + 1);
    }
    token_text(mt_json_get(root, "bos_token"), c->bos, sizeof c->bos);
    token_text(mt_json_get(root, "eos_token"), c->eos, sizeof c->eos);
    const mt_json *ab = mt_json_get(root, "add_bos_token");
    c->add_bos = ab && ab->type == MT_JSON_BOOL ? ab->boolean : c->bos[0] != '\0';
    mt_json_free(doc);
    return 0;
}

void mt_tokenizer_config_free(mt_tokenizer_config *c) {
    free(c->chat_template);
    c->chat_template = NULL;
}

int32_t mt_tokenizer_single_id(mt_tokenizer *tk, const char *s) {
    mt_tokens t = {0};
    mt_error e;
    int32_t id = -1;
    if (!mt_tokenizer_encode_append(tk, (const unsigned char *)s, strlen(s), &t, &e) && t.len == 1) id = t.data[0];
    mt_tokens_free(&t);
    return id;
}

int32_t mt_chat_eot_piecewise_id(mt_tokenizer *tk, mt_chat_template t) {
    const char *e = mt_chat_template_eot(t);
    int32_t id = mt_tokenizer_eot(tk);
    size_t l, el = strlen(e);
    const unsigned char *b = id >= 0 ? mt_tokenizer_token_bytes(tk, id, &l) : NULL;
    if (!b || l != el || memcmp(b, e, el) || mt_tokenizer_single_id(tk, e) >= 0) return -1;
    return id;
}

int mt_chat_encode_append(mt_tokenizer *tk, mt_chat_template t, int32_t eot_id, const unsigned char *text, size_t len,
                          mt_tokens *out, mt_error *err) {
    const char *e = mt_chat_template_eot(t);
    size_t el = strlen(e);
    while (eot_id >= 0 && len) {
        const unsigned char *at = memmem(text, len, e, el);
        if (!at) break;
        if (mt_tokenizer_encode_append(tk, text, (size_t)(at - text), out, err)) return -1;
        mt_tokens_push(out, eot_id);
        len -= (size_t)(at - text) + el;
        text = at + el;
    }
    return mt_tokenizer_encode_append(tk, text, len, out, err);
}

void mt_chat_data_free(mt_chat_data *d) {
    mt_tokens_free(&d->tokens);
    free(d->flags);
    mt_bytes_free(&d->text);
    mt_tokens_free(&d->tmp);
    free(d->msgs);
    d->flags = NULL;
    d->msgs = NULL;
}

/* ---- one sample: tmp tokens + a parallel flag array ---- */

typedef struct {
    mt_tokens *tok;
    uint8_t *fl;
    size_t cap;
} sample_buf;

static void sb_push(sample_buf *s, int32_t id, int counted) {
    mt_tokens_push(s->tok, id);
    if (s->tok->len > s->cap) {
        s->cap = s->tok->cap;
        s->fl = realloc(s->fl, s->cap);
        if (!s->fl) mt_die("out of memory for a sample's flags (%zu bytes)", s->cap);
    }
    s->fl[s->tok->len - 1] = counted ? MT_TOK_LOSS : 0;
}

/* Text (chat: a rendered conversation, its end-of-turn texts the token
 * mt_chat_eot_piecewise_id finds) appended with its flags. */
static int sb_encode_as(mt_chat_data *d, sample_buf *s, const char *p, size_t n, int counted, int chat, mt_error *err) {
    size_t before = s->tok->len;
    if (chat && !d->eot_known) {
        d->eot_piecewise = mt_chat_eot_piecewise_id(d->tk, d->tpl);
        d->eot_known = 1;
    }
    if (chat ? mt_chat_encode_append(d->tk, d->tpl, d->eot_piecewise, (const unsigned char *)p, n, s->tok, err)
             : mt_tokenizer_encode_append(d->tk, (const unsigned char *)p, n, s->tok, err))
        return -1;
    if (s->tok->len > s->cap) {
        s->cap = s->tok->cap;
        s->fl = realloc(s->fl, s->cap);
        if (!s->fl) mt_die("out of memory for a sample's flags (%zu bytes)", s->cap);
    }
    if (s->tok->len > before) /* nothing encoded: fl may still be NULL */
        memset(s->fl + before, counted ? MT_TOK_LOSS : 0, s->tok->len - before);
    return 0;
}
static int sb_encode(mt_chat_data *d, sample_buf *s, const char *p, size_t n, int counted, mt_error *err) {
    return sb_encode_as(d, s, p, n, counted, 0, err);
}

/* The rendered conversation text[0..n) with trained byte ranges spans[0..ns):
 * encoded whole, each token counted when it overlaps a range; if the token
 * bytes do not spell the text (a normalising tokenizer), piece by piece. */
static int encode_spans(mt_chat_data *d, sample_buf *s, const char *text, size_t n, const mt_chat_span *sp, int ns,
                        mt_error *err) {
    size_t start = s->tok->len;
    if (sb_encode_as(d, s, text, n, 0, 1, err)) return -1;
    size_t off = 0, k = 0;
    int exact = 1;
    for (size_t i = start; i < s->tok->len && exact; i++) {
        size_t l;
        const unsigned char *b = mt_tokenizer_token_bytes(d->tk, s->tok->data[i], &l);
        if (b && l > 0 && b[0] == ' ' && (off + l > n || memcmp(text + off, b, l)) && off + l - 1 <= n &&
            !memcmp(text + off, b + 1, l - 1)) { /* SentencePiece: the space the tokenizer put before a run */
            b++;
            l--;
        }
        if (!b || off + l > n || memcmp(text + off, b, l)) {
            exact = 0;
            break;
        }
        while (k < (size_t)ns && sp[k].end <= off) k++;
        if (k < (size_t)ns && sp[k].begin < off + l && l > 0) s->fl[i] = MT_TOK_LOSS;
        off += l;
    }
    if (exact && off == n) return 0;
    d->piecewise++;
    s->tok->len = start;
    size_t at = 0;
    for (int j = 0; j < ns; j++) {
        if (sp[j].begin > at && sb_encode_as(d, s, text + at, sp[j].begin - at, 0, 1, err)) return -1;
        if (sb_encode_as(d, s, text + sp[j].begin, sp[j].end - sp[j].begin, 1, 1, err)) return -1;
        at = sp[j].end;
    }
    if (at < n && sb_encode_as(d, s, text + at, n - at, 0, 1, err)) return -1;
    return 0;
}

static const mt_json *string_member(const mt_json *o, const char *key, const char *what, mt_error *err) {
    const mt_json *v = mt_json_get(o, key);
    if (!v) {
        mt_errorf(err, "%s has no \"%s\"", what, key);
        return NULL;
    }
    if (v->type != MT_JSON_STRING) {
        mt_errorf(err, "%s's \"%s\" is not a string", what, key);
        return NULL;
    }
    return v;
}

static int only_space(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))) return 0;
    return 1;
}

/* One JSON object -> tokens and flags in s; -1 with err (no file/line). */
static int sample_of(mt_chat_data *d, const mt_json *o, sample_buf *s, mt_error *err) {
    if (o->type != MT_JSON_OBJECT) return mt_errorf(err, "the line is not a JSON object");
    const mt_json *msgs = mt_json_get(o, "messages"), *text = mt_json_get(o, "text"),
                  *prompt = mt_json_get(o, "prompt"), *completion = mt_json_get(o, "completion");
    int all = d->train_on == MT_TRAIN_ON_ALL;
    if (msgs) {
        if (msgs->type != MT_JSON_ARRAY) return mt_errorf(err, "\"messages\" is not an array");
        if (!d->has_template)
            return mt_errorf(err, "a \"messages\" sample needs a chat template: the tokenizer has no "
                             "tokenizer_config.json with a chat_template beside it; name one with {chat-template} %s",
                             mt_chat_template_names());
        if (msgs->count == 0) return mt_errorf(err, "\"messages\" is empty");
        if (msgs->count > d->msgs_cap) {
            d->msgs_cap = msgs->count * 2;
            free(d->msgs);
            d->msgs = mt_xmalloc(d->msgs_cap * sizeof *d->msgs, "chat messages");
        }
        int n = 0, last_answer = -1;
        for (const mt_json *m = msgs->child; m; m = m->next, n++) {
            char what[48];
            snprintf(what, sizeof what, "messages[%d]", n);
            if (m->type != MT_JSON_OBJECT) return mt_errorf(err, "%s is not an object", what);
            const mt_json *r = string_member(m, "role", what, err), *c = r ? string_member(m, "content", what, err) : NULL;
            if (!c) return -1;
            mt_chat_role role;
            if (!strcmp(r->str, "system")) role = MT_ROLE_SYSTEM;
            else if (!strcmp(r->str, "user")) role = MT_ROLE_USER;
            else if (!strcmp(r->str, "assistant")) role = MT_ROLE_ASSISTANT;
            else
                return mt_errorf(err, "%s has the unknown role \"%.40s\" (expected system, user or assistant)", what,
                                 r->str);
            if (role == MT_ROLE_ASSISTANT && only_space(c->str, c->str_len))
                return mt_errorf(err, "%s is an empty assistant turn (nothing to train on)", what);
            if (role == MT_ROLE_ASSISTANT) last_answer = n;
            d->msgs[n] = (mt_chat_msg){role, c->str, c->str_len};
        }
        if (last_answer < 0) return mt_errorf(err, "the conversation has no assistant turn");
        mt_chat_span *sp = mt_xmalloc((size_t)n * sizeof *sp, "answer spans");
        int ns = 0;
        d->text.len = 0;
        if (mt_chat_render(d->tpl, d->msgs, n, &d->text, sp, &ns, err)) {
            free(sp);
            return -1;
        }
        mt_chat_span whole = {0, d->text.len};
        const mt_chat_span *use = sp;
        int nuse = ns;
        if (all) use = &whole, nuse = 1;
        else if (d->train_on == MT_TRAIN_ON_LAST && ns > 0) use = &sp[ns - 1], nuse = 1;
        int rc = encode_spans(d, s, (const char *)d->text.data, d->text.len, use, nuse, err);
        free(sp);
        return rc;
    }
    if (text) {
        if (text->type != MT_JSON_STRING) return mt_errorf(err, "\"text\" is not a string");
        if (d->bos >= 0) sb_push(s, d->bos, 1);
        if (sb_encode(d, s, text->str, text->str_len, 1, err)) return -1;
        if (d->eos >= 0) sb_push(s, d->eos, 1);
        return 0;
    }
    if (prompt || completion) {
        const mt_json *p = string_member(o, "prompt", "the sample", err);
        const mt_json *c = p ? string_member(o, "completion", "the sample", err) : NULL;
        if (!c) return -1;
        if (only_space(c->str, c->str_len)) return mt_errorf(err, "the completion is empty (nothing to train on)");
        if (d->bos >= 0) sb_push(s, d->bos, all);
        if (sb_encode(d, s, p->str, p->str_len, all, err) || sb_encode(d, s, c->str, c->str_len, 1, err)) return -1;
        if (d->eos >= 0) sb_push(s, d->eos, 1);
        return 0;
    }
    return mt_errorf(err, "the sample has none of \"text\", \"prompt\" and \"completion\", or \"messages\"");
}

static void grow_flags(mt_chat_data *d) {
    if (d->tokens.len > d->flags_cap) {
        d->flags_cap = d->tokens.cap;
        d->flags = realloc(d->flags, d->flags_cap);
        if (!d->flags) mt_die("out of memory for token flags (%zu bytes)", d->flags_cap);
    }
}

/* Pads the open window to seq_len tokens. */
static void close_window(mt_chat_data *d) {
    size_t T = (size_t)d->seq_len;
    if (!d->win_used) return;
    size_t at = d->tokens.len;
    for (size_t i = d->win_used; i < T; i++) mt_tokens_push(&d->tokens, d->pad);
    grow_flags(d);
    memset(d->flags + at, MT_TOK_PAD, T - d->win_used);
    d->win_used = 0;
}

void mt_chat_data_finish(mt_chat_data *d) { close_window(d); }

/* Appends sample s (its first n tokens): in a window of its own, or packed
 * after the samples of the open window when it fits. */
static void add_window(mt_chat_data *d, const sample_buf *s, size_t n) {
    size_t T = (size_t)d->seq_len;
    if (n == 0) return; /* a sample of no tokens: no window (counting one would leave the shard a window short) */
    if (!d->packing || d->win_used + n > T) close_window(d);
    if (d->win_used == 0) d->windows++;
    size_t at = d->tokens.len;
    for (size_t i = 0; i < n; i++) mt_tokens_push(&d->tokens, s->tok->data[i]);
    grow_flags(d);
    for (size_t i = 0; i < n; i++) {
        uint8_t f = s->fl[i];
        if (i == 0) f = MT_TOK_DOC; /* nothing predicts a sample's first token */
        d->flags[at + i] = f;
        d->counted += f & MT_TOK_LOSS;
    }
    d->win_used += n;
    if (!d->packing) close_window(d);
    d->samples++;
    d->sample_tokens += (int64_t)n;
}

int mt_chat_data_add_jsonl(mt_chat_data *d, const char *path, const char *text, size_t len, mt_error *err) {
    sample_buf s = {&d->tmp, NULL, 0};
    size_t pos = 0;
    int64_t line = 0;
    int rc = 0;
    d->bytes += (int64_t)len;
    while (pos < len && !rc) {
        const char *b = text + pos, *nl = memchr(b, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - b) : len - pos;
        pos += n + (nl ? 1 : 0);
        line++;
        d->lines++;
        if (only_space(b, n)) continue;
        mt_error e = {{0}};
        mt_json_doc *doc = mt_json_parse(b, n, 64, &e);
        if (!doc) {
            rc = mt_errorf(err, "%s:%lld: malformed JSON: %s", path, (long long)line, e.msg);
            break;
        }
        d->tmp.len = 0;
        if (sample_of(d, mt_json_root(doc), &s, &e)) {
            rc = mt_errorf(err, "%s:%lld: %s", path, (long long)line, e.msg);
        } else if (d->tmp.len > (size_t)d->seq_len) {
            if (d->overlong == MT_OVERLONG_ERROR)
                rc = mt_errorf(err, "%s:%lld: the sample has %zu tokens, more than {seq-len} %d (use {overlong} "
                               "truncate or drop to go on)", path, (long long)line, d->tmp.len, d->seq_len);
            else if (d->overlong == MT_OVERLONG_DROP)
                d->dropped++;
            else {
                d->truncated++;
                add_window(d, &s, (size_t)d->seq_len);
            }
        } else
            add_window(d, &s, d->tmp.len);
        mt_json_free(doc);
    }
    free(s.fl);
    return rc;
}
