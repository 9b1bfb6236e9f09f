/* JSON reader and writer (RFC 8259). See json.h.
 *
 * The parser is a recursive-descent parser over text[0..len) (the text need
 * not be NUL-terminated). Nodes, decoded strings and number literals live in
 * one chunked arena owned by the document, so freeing is one walk over the
 * chunks. Strings may contain invalid UTF-8 bytes: they are copied through
 * unchanged (the grammar only forbids raw control characters). Escapes are
 * validated strictly: \uXXXX needs four hex digits and a high surrogate must
 * be followed by an escaped low surrogate (and a low one must not stand
 * alone). Numbers follow the JSON grammar exactly; a literal whose value
 * overflows a double is rejected, as is one longer than MAX_NUMBER_LEN. */
#include "core/json.h"
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NUMBER_LEN 1024
#define CHUNK_MIN (64u * 1024u)

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) char data[];
} chunk;

struct mt_json_doc {
    chunk *chunks;
    mt_json *root;
};

static void *arena_alloc(mt_json_doc *d, size_t bytes) {
    bytes = (bytes + 15) & ~(size_t)15;
    chunk *c = d->chunks;
    if (!c || c->cap - c->used < bytes) {
        size_t cap = bytes > CHUNK_MIN ? bytes : CHUNK_MIN;
        c = mt_xmalloc(sizeof(chunk) + cap, "JSON parse tree");
        c->cap = cap;
        c->used = 0;
        c->next = d->chunks;
        d->chunks = c;
    }
    void *p = c->data + c->used;
    c->used += bytes;
    return p;
}

typedef struct {
    const char *s;
    size_t len, pos;
    int max_depth;
    mt_json_doc *doc;
    mt_error *err;
} parser;

static const char *describe_byte(const parser *p, char *buf, size_t n) {
    if (p->pos >= p->len) return "end of input";
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c >= 0x20 && c < 0x7f) snprintf(buf, n, "'%c'", c);
    else snprintf(buf, n, "byte 0x%02x", c);
    return buf;
}

static int fail(parser *p, const char *what) {
    char b[16];
    return mt_errorf(p->err, "JSON parse error at byte %zu: %s, got %s", p->pos, what, describe_byte(p, b, sizeof b));
}

static int fail_at(parser *p, size_t pos, const char *what) {
    return mt_errorf(p->err, "JSON parse error at byte %zu: %s", pos, what);
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->pos++;
        else break;
    }
}

static int hex4(const char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* At the opening quote. Decodes into the arena; the decoded form is never
 * longer than the raw text (an escape of 6 or 12 bytes yields <= 4). */
static int parse_string(parser *p, const char **out, size_t *out_len) {
    size_t start = ++p->pos;
    size_t end = start;
    while (end < p->len && p->s[end] != '"') {
        if (p->s[end] == '\\') end++;
        end++;
    }
    if (end >= p->len) return fail_at(p, start - 1, "unterminated string (no closing '\"' before end of input)");
    char *o = arena_alloc(p->doc, end - start + 1);
    size_t n = 0;
    while (p->pos < end) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c < 0x20) return fail(p, "raw control character in string (must be escaped)");
        if (c != '\\') { o[n++] = (char)c; p->pos++; continue; }
        size_t esc = p->pos;
        char e = p->s[p->pos + 1];
        p->pos += 2;
        switch (e) {
        case '"': o[n++] = '"'; break;
        case '\\': o[n++] = '\\'; break;
        case '/': o[n++] = '/'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'n': o[n++] = '\n'; break;
        case 'r': o[n++] = '\r'; break;
        case 't': o[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (p->pos + 4 > end || hex4(p->s + p->pos, &cp))
                return fail_at(p, esc, "bad \\u escape (expected 4 hex digits)");
            p->pos += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return fail_at(p, esc, "unpaired low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (p->pos + 6 > end || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u' ||
                    hex4(p->s + p->pos + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return fail_at(p, esc, "high surrogate \\u escape not followed by a low surrogate \\u escape");
                p->pos += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            n += put_utf8(o + n, cp);
            break;
        }
        default: return fail_at(p, esc, "bad escape (expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
        }
    }
    o[n] = '\0';
    p->pos = end + 1;
    *out = o;
    *out_len = n;
    return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int parse_number(parser *p, mt_json *v) {
    size_t start = p->pos, i = p->pos;
    const char *s = p->s;
    if (i < p->len && s[i] == '-') i++;
    if (i >= p->len || !is_digit(s[i])) { p->pos = i; return fail(p, "expected a digit in number"); }
    if (s[i] == '0') i++;
    else while (i < p->len && is_digit(s[i])) i++;
    if (i < p->len && s[i] == '.') {
        i++;
        if (i >= p->len || !is_digit(s[i])) { p->pos = i; return fail(p, "expected a digit after '.' in number"); }
        while (i < p->len && is_digit(s[i])) i++;
    }
    if (i < p->len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < p->len && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= p->len || !is_digit(s[i])) { p->pos = i; return fail(p, "expected a digit in number exponent"); }
        while (i < p->len && is_digit(s[i])) i++;
    }
    size_t n = i - start;
    if (n > MAX_NUMBER_LEN) return mt_errorf(p->err, "JSON parse error at byte %zu: number literal is %zu characters long (limit %d)", start, n, MAX_NUMBER_LEN);
    char *t = arena_alloc(p->doc, n + 1);
    memcpy(t, s + start, n);
    t[n] = '\0';
    errno = 0;
    double d = strtod(t, NULL);
    if (isinf(d)) return mt_errorf(p->err, "JSON parse error at byte %zu: number %.40s%s is too large for a double", start, t, n > 40 ? "..." : "");
    v->type = MT_JSON_NUMBER;
    v->number = d;
    v->num_text = t;
    p->pos = i;
    return 0;
}

static int match_word(parser *p, const char *w) {
    size_t n = strlen(w);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, w, n) != 0) return -1;
    p->pos += n;
    return 0;
}

static int parse_value(parser *p, mt_json *v, int depth);

static int parse_container(parser *p, mt_json *v, int depth, int is_obj) {
    if (depth >= p->max_depth) {
        return mt_errorf(p->err, "JSON parse error at byte %zu: nesting deeper than %d levels", p->pos, p->max_depth);
    }
    v->type = is_obj ? MT_JSON_OBJECT : MT_JSON_ARRAY;
    char close = is_obj ? '}' : ']';
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; return 0; }
    mt_json *tail = NULL;
    for (;;) {
        mt_json *c = arena_alloc(p->doc, sizeof *c);
        memset(c, 0, sizeof *c);
        if (is_obj) {
            if (p->pos >= p->len || p->s[p->pos] != '"') return fail(p, "expected '\"' starting an object key");
            if (parse_string(p, &c->key, &c->key_len)) return -1;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') return fail(p, "expected ':' after object key");
            p->pos++;
            skip_ws(p);
        }
        if (parse_value(p, c, depth + 1)) return -1;
        if (tail) tail->next = c;
        else v->child = c;
        tail = c;
        v->count++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') { p->pos++; skip_ws(p); continue; }
        if (p->pos < p->len && p->s[p->pos] == close) { p->pos++; return 0; }
        return fail(p, is_obj ? "expected ',' or '}' after object member" : "expected ',' or ']' after array element");
    }
}

static int parse_value(parser *p, mt_json *v, int depth) {
    if (p->pos >= p->len) return fail(p, "expected a value");
    char c = p->s[p->pos];
    switch (c) {
    case '{': return parse_container(p, v, depth, 1);
    case '[': return parse_container(p, v, depth, 0);
    case '"':
        v->type = MT_JSON_STRING;
        return parse_string(p, &v->str, &v->str_len);
    case 't':
        if (match_word(p, "true")) return fail(p, "expected a value");
        v->type = MT_JSON_BOOL; v->boolean = 1; return 0;
    case 'f':
        if (match_word(p, "false")) return fail(p, "expected a value");
        v->type = MT_JSON_BOOL; v->boolean = 0; return 0;
    case 'n':
        if (match_word(p, "null")) return fail(p, "expected a value");
        v->type = MT_JSON_NULL; return 0;
    default:
        if (c == '-' || is_digit(c)) return parse_number(p, v);
        return fail(p, "expected a value");
    }
}

mt_json_doc *mt_json_parse(const char *text, size_t len, int max_depth, mt_error *err) {
    mt_json_doc *d = mt_xcalloc(1, sizeof *d, "JSON document");
    parser p = {text, len, 0, max_depth > 0 ? max_depth : 64, d, err};
    if (!text && len) { mt_errorf(err, "JSON parse error: NULL text of length %zu", len); mt_json_free(d); return NULL; }
    d->root = arena_alloc(d, sizeof(mt_json));
    memset(d->root, 0, sizeof(mt_json));
    skip_ws(&p);
    if (parse_value(&p, d->root, 0)) { mt_json_free(d); return NULL; }
    skip_ws(&p);
    if (p.pos != len) {
        fail(&p, "expected end of input after the JSON value (trailing garbage)");
        mt_json_free(d);
        return NULL;
    }
    return d;
}

const mt_json *mt_json_root(const mt_json_doc *doc) { return doc ? doc->root : NULL; }

void mt_json_free(mt_json_doc *doc) {
    if (!doc) return;
    chunk *c = doc->chunks;
    while (c) { chunk *n = c->next; free(c); c = n; }
    free(doc);
}

const mt_json *mt_json_get(const mt_json *obj, const char *key) {
    if (!obj || obj->type != MT_JSON_OBJECT || !key) return NULL;
    size_t n = strlen(key);
    for (const mt_json *c = obj->child; c; c = c->next)
        if (c->key_len == n && memcmp(c->key, key, n) == 0) return c;
    return NULL;
}

const mt_json *mt_json_at(const mt_json *arr, size_t i) {
    if (!arr || arr->type != MT_JSON_ARRAY || i >= arr->count) return NULL;
    const mt_json *c = arr->child;
    while (i-- && c) c = c->next;
    return c;
}

int mt_json_int64(const mt_json *node, int64_t *out) {
    if (!node || node->type != MT_JSON_NUMBER || !node->num_text) return -1;
    const char *s = node->num_text;
    int neg = *s == '-';
    const char *q = s + neg;
    uint64_t v = 0;
    const char *r = q;
    while (is_digit(*r)) {
        unsigned dg = (unsigned)(*r - '0');
        if (v > (UINT64_MAX - dg) / 10) { v = UINT64_MAX; break; }
        v = v * 10 + dg;
        r++;
    }
    if (*r == '\0' && r > q) { /* plain integer literal: exact */
        if (neg) {
            if (v > (uint64_t)INT64_MAX + 1) return -1;
            *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
        } else {
            if (v > (uint64_t)INT64_MAX) return -1;
            *out = (int64_t)v;
        }
        return 0;
    }
    /* Fraction or exponent (e.g. 3.0, 1e3): exact only within 2^53. */
    double d = node->number;
    if (d != floor(d) || fabs(d) > 9007199254740992.0) return -1;
    *out = (int64_t)d;
    return 0;
}

static const char *type_name(mt_json_type t) {
    switch (t) {
    case MT_JSON_NULL: return "null";
    case MT_JSON_BOOL: return "a boolean";
    case MT_JSON_NUMBER: return "a number";
    case MT_JSON_STRING: return "a string";
    case MT_JSON_ARRAY: return "an array";
    case MT_JSON_OBJECT: return "an object";
    }
    return "?";
}

static const mt_json *get_typed(const mt_json *obj, const char *key, mt_json_type t, const char *want, mt_error *err) {
    if (!obj || obj->type != MT_JSON_OBJECT) {
        mt_errorf(err, "cannot look up key '%s': the enclosing JSON value is %s, not an object", key,
                  obj ? type_name(obj->type) : "missing");
        return NULL;
    }
    const mt_json *v = mt_json_get(obj, key);
    if (!v) { mt_errorf(err, "JSON key '%s' is missing", key); return NULL; }
    if (v->type != t) { mt_errorf(err, "JSON key '%s' is %s, expected %s", key, type_name(v->type), want); return NULL; }
    return v;
}

int mt_json_get_int64(const mt_json *obj, const char *key, int64_t *out, mt_error *err) {
    const mt_json *v = get_typed(obj, key, MT_JSON_NUMBER, "an integer", err);
    if (!v) return -1;
    if (mt_json_int64(v, out))
        return mt_errorf(err, "JSON key '%s' = %.40s is not an exact integer in int64 range", key, v->num_text);
    return 0;
}

int mt_json_get_double(const mt_json *obj, const char *key, double *out, mt_error *err) {
    const mt_json *v = get_typed(obj, key, MT_JSON_NUMBER, "a number", err);
    if (!v) return -1;
    *out = v->number;
    return 0;
}

int mt_json_get_string(const mt_json *obj, const char *key, const char **out, mt_error *err) {
    const mt_json *v = get_typed(obj, key, MT_JSON_STRING, "a string", err);
    if (!v) return -1;
    *out = v->str;
    return 0;
}

/* ---- writer ---- */

static void jw_reserve(mt_json_writer *w, size_t extra) {
    if (w->len + extra + 1 <= w->cap) return;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + extra + 1) {
        if (cap > SIZE_MAX / 2) mt_die("JSON writer: output would exceed %zu bytes", SIZE_MAX / 2);
        cap *= 2;
    }
    char *b = realloc(w->buf, cap);
    if (!b) mt_die("out of memory growing the JSON writer buffer to %zu bytes", cap);
    w->buf = b;
    w->cap = cap;
}

static void jw_put(mt_json_writer *w, const char *s, size_t n) {
    jw_reserve(w, n);
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

static void jw_putc(mt_json_writer *w, char c) { jw_put(w, &c, 1); }

/* Called before every value: separates it from the previous sibling (a value
 * right after a key finds need_comma cleared by mt_jw_key). */
static void jw_pre_value(mt_json_writer *w) {
    if (w->need_comma[w->depth]) jw_putc(w, ',');
    w->need_comma[w->depth] = 1;
}

void mt_jw_init(mt_json_writer *w) {
    memset(w, 0, sizeof *w);
    jw_reserve(w, 0);
    w->buf[0] = '\0';
}

void mt_jw_free(mt_json_writer *w) {
    free(w->buf);
    memset(w, 0, sizeof *w);
}

static void jw_open(mt_json_writer *w, char c) {
    jw_pre_value(w);
    if (w->depth + 1 >= (int)(sizeof w->need_comma / sizeof w->need_comma[0]))
        mt_die("JSON writer: nesting deeper than %d levels", (int)(sizeof w->need_comma / sizeof w->need_comma[0]) - 1);
    jw_putc(w, c);
    w->depth++;
    w->need_comma[w->depth] = 0;
}

static void jw_close(mt_json_writer *w, char c) {
    if (w->depth <= 0) mt_die("JSON writer: '%c' without a matching open", c);
    w->depth--;
    jw_putc(w, c);
}

void mt_jw_begin_object(mt_json_writer *w) { jw_open(w, '{'); }
void mt_jw_end_object(mt_json_writer *w) { jw_close(w, '}'); }
void mt_jw_begin_array(mt_json_writer *w) { jw_open(w, '['); }
void mt_jw_end_array(mt_json_writer *w) { jw_close(w, ']'); }

/* Length of a valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static int utf8_valid_len(const unsigned char *s) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int n;
    unsigned cp;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; cp = c & 0x07; }
    else return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0; /* also stops at the NUL terminator */
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

/* Escapes quotes, backslashes and control characters; invalid UTF-8 bytes
 * become \ufffd so the output is always valid JSON. */
static void jw_quoted(mt_json_writer *w, const char *s) {
    jw_putc(w, '"');
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        unsigned c = *u;
        if (c == '"') { jw_put(w, "\\\"", 2); u++; }
        else if (c == '\\') { jw_put(w, "\\\\", 2); u++; }
        else if (c == '\n') { jw_put(w, "\\n", 2); u++; }
        else if (c == '\t') { jw_put(w, "\\t", 2); u++; }
        else if (c == '\r') { jw_put(w, "\\r", 2); u++; }
        else if (c < 0x20) {
            char b[8];
            snprintf(b, sizeof b, "\\u%04x", c);
            jw_put(w, b, 6);
            u++;
        } else {
            int n = utf8_valid_len(u);
            if (n == 0) { jw_put(w, "\\ufffd", 6); u++; }
            else { jw_put(w, (const char *)u, (size_t)n); u += n; }
        }
    }
    jw_putc(w, '"');
}

void mt_jw_key(mt_json_writer *w, const char *key) {
    if (w->need_comma[w->depth]) jw_putc(w, ',');
    jw_quoted(w, key);
    jw_putc(w, ':');
    w->need_comma[w->depth] = 0;
}

void mt_jw_string(mt_json_writer *w, const char *s) {
    jw_pre_value(w);
    jw_quoted(w, s ? s : "");
}

void mt_jw_int(mt_json_writer *w, int64_t v) {
    char b[32];
    int n = snprintf(b, sizeof b, "%" PRId64, v);
    jw_pre_value(w);
    jw_put(w, b, (size_t)n);
}

void mt_jw_float(mt_json_writer *w, float v) {
    if (!isfinite(v)) { mt_jw_null(w); return; }
    char b[40];
    int n = 0;
    /* Shortest of 1..9 significant digits that reads back as the same float
     * (1e-05, not the double 9.9999997473787516e-06). */
    for (int prec = 1; prec <= 9; prec++) {
        n = snprintf(b, sizeof b, "%.*g", prec, (double)v);
        if ((float)strtod(b, NULL) == v) break;
    }
    jw_pre_value(w);
    jw_put(w, b, (size_t)n);
}

void mt_jw_double(mt_json_writer *w, double v) {
    if (!isfinite(v)) { mt_jw_null(w); return; }
    char b[40];
    int n = 0;
    /* Shortest of 15..17 significant digits that reads back exactly. */
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(b, sizeof b, "%.*g", prec, v);
        if (strtod(b, NULL) == v) break;
    }
    jw_pre_value(w);
    jw_put(w, b, (size_t)n);
}

void mt_jw_bool(mt_json_writer *w, int v) {
    jw_pre_value(w);
    if (v) jw_put(w, "true", 4);
    else jw_put(w, "false", 5);
}

void mt_jw_null(mt_json_writer *w) {
    jw_pre_value(w);
    jw_put(w, "null", 4);
}

static int jw_value(mt_json_writer *w, const mt_json *v, int depth, mt_error *err) {
    if (depth > 48) return mt_errorf(err, "JSON value nests deeper than 48 levels");
    switch (v->type) {
    case MT_JSON_NULL: mt_jw_null(w); return 0;
    case MT_JSON_BOOL: mt_jw_bool(w, v->boolean); return 0;
    case MT_JSON_NUMBER: /* its literal text: the value read back exactly as written */
        jw_pre_value(w);
        jw_put(w, v->num_text, strlen(v->num_text));
        return 0;
    case MT_JSON_STRING:
        if (strlen(v->str) != v->str_len) return mt_errorf(err, "JSON string contains a NUL character (\\u0000)");
        mt_jw_string(w, v->str);
        return 0;
    case MT_JSON_ARRAY:
    case MT_JSON_OBJECT:
        if (v->type == MT_JSON_ARRAY) mt_jw_begin_array(w);
        else mt_jw_begin_object(w);
        for (const mt_json *c = v->child; c; c = c->next) {
            if (v->type == MT_JSON_OBJECT) {
                if (strlen(c->key) != c->key_len) return mt_errorf(err, "JSON key contains a NUL character");
                mt_jw_key(w, c->key);
            }
            if (jw_value(w, c, depth + 1, err)) return -1;
        }
        if (v->type == MT_JSON_ARRAY) mt_jw_end_array(w);
        else mt_jw_end_object(w);
        return 0;
    }
    return mt_errorf(err, "JSON value of unknown node type %d", (int)v->type);
}

int mt_jw_value(mt_json_writer *w, const mt_json *v, mt_error *err) { return jw_value(w, v, 0, err); }
