/* JSON reader/writer: values, escapes (surrogate pairs), malformed input with
 * byte offsets, depth limits, a 50257-entry object like GPT-2's encoder.json,
 * and writer output that parses back to the same values. */
#include "core/json.h"
#include "testlib.h"
#include <stdlib.h>

static mt_json_doc *parse(const char *s, mt_error *e) { return mt_json_parse(s, strlen(s), 64, e); }

/* Expects a parse failure whose message contains `want`. */
static void bad(const char *text, size_t len, const char *want, int line) {
    mt_error e = {{0}};
    mt_json_doc *d = mt_json_parse(text, len, 64, &e);
    CHECK(d == NULL, "line %d: accepted malformed input", line);
    CHECK(strstr(e.msg, want) != NULL, "line %d: message '%s' lacks '%s'", line, e.msg, want);
    mt_json_free(d);
}
#define BAD(s, want) bad(s, strlen(s), want, __LINE__)

static void test_values(void) {
    mt_error e = {{0}};
    mt_json_doc *d = parse(" {\"a\": 1, \"b\": [true, false, null, -2.5e3, \"x\"], \"c\": {}, \"d\": [], "
                           "\"big\": 9007199254740993, \"neg\": -9223372036854775808, \"f\": 3.0} ", &e);
    CHECK(d != NULL, "%s", e.msg);
    if (!d) return;
    const mt_json *r = mt_json_root(d);
    CHECK(r->type == MT_JSON_OBJECT && r->count == 7, "root");
    int64_t v = 0;
    CHECK(mt_json_get_int64(r, "a", &v, &e) == 0 && v == 1, "a");
    const mt_json *b = mt_json_get(r, "b");
    CHECK(b && b->type == MT_JSON_ARRAY && b->count == 5, "b");
    CHECK(mt_json_at(b, 0)->type == MT_JSON_BOOL && mt_json_at(b, 0)->boolean == 1, "true");
    CHECK(mt_json_at(b, 1)->boolean == 0, "false");
    CHECK(mt_json_at(b, 2)->type == MT_JSON_NULL, "null");
    CHECK(mt_json_at(b, 3)->number == -2500.0, "num");
    CHECK(strcmp(mt_json_at(b, 3)->num_text, "-2.5e3") == 0, "num text");
    CHECK(mt_json_at(b, 5) == NULL, "out of range at");
    CHECK(strcmp(mt_json_at(b, 4)->str, "x") == 0, "str");
    CHECK(mt_json_get(r, "c")->count == 0 && mt_json_get(r, "d")->count == 0, "empty");
    CHECK(mt_json_get_int64(r, "big", &v, &e) == 0 && v == 9007199254740993LL, "exact int64 beyond 2^53: %lld", (long long)v);
    CHECK(mt_json_get_int64(r, "neg", &v, &e) == 0 && v == INT64_MIN, "int64 min");
    CHECK(mt_json_get_int64(r, "f", &v, &e) == 0 && v == 3, "3.0 is an integer");
    double dv = 0;
    CHECK(mt_json_get_double(r, "a", &dv, &e) == 0 && dv == 1.0, "double");
    CHECK(mt_json_get_int64(r, "zz", &v, &e) == -1 && strstr(e.msg, "'zz' is missing"), "%s", e.msg);
    CHECK(mt_json_get_int64(r, "b", &v, &e) == -1 && strstr(e.msg, "'b' is an array"), "%s", e.msg);
    const char *s = NULL;
    CHECK(mt_json_get_string(r, "a", &s, &e) == -1 && strstr(e.msg, "expected a string"), "%s", e.msg);
    CHECK(mt_json_get(b, "a") == NULL && mt_json_at(r, 0) == NULL, "wrong container type");
    mt_json_free(d);

    d = parse("{\"x\": 1.5, \"y\": 9223372036854775808, \"z\": 1e3}", &e);
    CHECK(d != NULL, "%s", e.msg);
    r = mt_json_root(d);
    CHECK(mt_json_get_int64(r, "x", &v, &e) == -1 && strstr(e.msg, "not an exact integer"), "%s", e.msg);
    CHECK(mt_json_get_int64(r, "y", &v, &e) == -1, "int64 overflow");
    CHECK(mt_json_get_int64(r, "z", &v, &e) == 0 && v == 1000, "1e3");
    mt_json_free(d);

    d = parse("42", &e);
    CHECK(d && mt_json_root(d)->type == MT_JSON_NUMBER, "scalar root");
    mt_json_free(d);
}

static void test_strings(void) {
    mt_error e = {{0}};
    /* \u00e9 = é (2 bytes), \u20ac = € (3), \ud83d\ude00 = 😀 (4), \u0000 embedded NUL,
     * raw UTF-8 passes through, \u0120 = Ġ (GPT-2's space marker). */
    const char *t = "[\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\", \"\\u00e9\\u20AC\\ud83d\\ude00\", \"x\\u0000y\", \"\xc3\xa9\", \"\\u0120the\"]";
    mt_json_doc *d = parse(t, &e);
    CHECK(d != NULL, "%s", e.msg);
    if (!d) return;
    const mt_json *r = mt_json_root(d);
    CHECK(strcmp(mt_json_at(r, 0)->str, "a\"b\\c/d\b\f\n\r\t") == 0, "simple escapes");
    CHECK(strcmp(mt_json_at(r, 1)->str, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80") == 0, "unicode escapes");
    CHECK(mt_json_at(r, 1)->str_len == 9, "len %zu", mt_json_at(r, 1)->str_len);
    CHECK(mt_json_at(r, 2)->str_len == 3 && memcmp(mt_json_at(r, 2)->str, "x\0y", 3) == 0, "embedded NUL");
    CHECK(strcmp(mt_json_at(r, 3)->str, "\xc3\xa9") == 0, "raw utf8");
    CHECK(strcmp(mt_json_at(r, 4)->str, "\xc4\xa0the") == 0, "G-dot");
    mt_json_free(d);
    /* Invalid UTF-8 inside strings is accepted and copied through. */
    d = parse("{\"k\xff\": \"\xc3\x28\x80\"}", &e);
    CHECK(d != NULL, "invalid utf8 accepted: %s", e.msg);
    if (d) CHECK(mt_json_root(d)->child->key_len == 2 && mt_json_root(d)->child->str_len == 3, "bytes kept");
    mt_json_free(d);
}

static void test_malformed(void) {
    BAD("", "byte 0: expected a value");
    BAD("   ", "byte 3");
    BAD("{\"a\": 1", "byte 7: expected ',' or '}'");
    BAD("[1, 2", "byte 5");
    BAD("[1, 2,]", "byte 6: expected a value");
    BAD("{\"a\" 1}", "byte 5: expected ':'");
    BAD("{a: 1}", "byte 1: expected '\"'");
    BAD("{\"a\": 1,}", "byte 8");
    BAD("\"abc", "byte 0: unterminated string");
    BAD("\"abc\\", "unterminated string");
    BAD("\"a\\qb\"", "byte 2: bad escape");
    BAD("\"\\u12\"", "byte 1: bad \\u escape");
    BAD("\"\\u12G4\"", "bad \\u escape");
    BAD("\"\\ud83d\"", "high surrogate");
    BAD("\"\\ud83dx\"", "high surrogate");
    BAD("\"\\ud83d\\u0041\"", "high surrogate");
    BAD("\"\\ude00\"", "unpaired low surrogate");
    BAD("\"a\nb\"", "byte 2: raw control character");
    BAD("{} x", "byte 3: expected end of input");
    BAD("1 2", "trailing garbage");
    BAD("[1]]", "byte 3");
    BAD("tru", "byte 0: expected a value");
    BAD("nul", "expected a value");
    BAD("01", "byte 1: expected end of input");
    BAD("-", "byte 1: expected a digit");
    BAD("1.", "byte 2: expected a digit after '.'");
    BAD("1e", "expected a digit in number exponent");
    BAD("+1", "byte 0");
    BAD(".5", "byte 0");
    BAD("1e400", "too large for a double");
    BAD("-1e99999", "too large");
    BAD("[NaN]", "byte 1");
    bad("[1,\0 2]", 7, "byte 3", __LINE__); /* NUL byte inside text */
    bad("[1, 2]", 4, "byte 4", __LINE__);  /* truncated by len */
    /* A 2000-digit number exceeds the literal limit. */
    char *big = malloc(2001);
    memset(big, '9', 2000);
    big[2000] = 0;
    BAD(big, "characters long");
    free(big);
    /* Depth: 64 levels ok with max_depth 64, 65 fails; a deep attack string fails cleanly. */
    char deep[200];
    for (int n = 63; n <= 65; n++) {
        int i = 0;
        for (int k = 0; k < n; k++) deep[i++] = '[';
        for (int k = 0; k < n; k++) deep[i++] = ']';
        deep[i] = 0;
        mt_error e = {{0}};
        mt_json_doc *d = mt_json_parse(deep, (size_t)i, 64, &e);
        if (n <= 64) CHECK(d != NULL, "depth %d: %s", n, e.msg);
        else CHECK(d == NULL && strstr(e.msg, "byte 64: nesting deeper than 64"), "depth %d: %s", n, e.msg);
        mt_json_free(d);
    }
    size_t huge = 1000000;
    char *attack = malloc(huge);
    memset(attack, '{', huge);
    mt_error e = {{0}};
    CHECK(mt_json_parse(attack, huge, 64, &e) == NULL && strstr(e.msg, "byte 1: expected '\"'"), "%s", e.msg);
    memset(attack, '[', huge);
    CHECK(mt_json_parse(attack, huge, 64, &e) == NULL && strstr(e.msg, "nesting deeper"), "%s", e.msg);
    free(attack);
}

static void test_writer(void) {
    mt_json_writer w;
    mt_jw_init(&w);
    CHECK(w.buf && w.buf[0] == 0 && w.len == 0, "init empty");
    mt_jw_begin_object(&w);
    mt_jw_key(&w, "name"); mt_jw_string(&w, "q\"\\\n\t\x01 \xc3\xa9 \xff end");
    mt_jw_key(&w, "n"); mt_jw_int(&w, -9223372036854775807LL - 1);
    mt_jw_key(&w, "d"); mt_jw_double(&w, 0.1);
    mt_jw_key(&w, "f"); mt_jw_double(&w, (double)0.1f);
    mt_jw_key(&w, "nan"); mt_jw_double(&w, NAN);
    mt_jw_key(&w, "inf"); mt_jw_double(&w, -INFINITY);
    mt_jw_key(&w, "arr");
    mt_jw_begin_array(&w);
    mt_jw_bool(&w, 1); mt_jw_bool(&w, 0); mt_jw_null(&w);
    mt_jw_begin_array(&w); mt_jw_end_array(&w);
    mt_jw_begin_object(&w); mt_jw_end_object(&w);
    mt_jw_begin_object(&w); mt_jw_key(&w, "x"); mt_jw_int(&w, 1); mt_jw_key(&w, "y"); mt_jw_int(&w, 2); mt_jw_end_object(&w);
    mt_jw_end_array(&w);
    mt_jw_key(&w, "tiny"); mt_jw_double(&w, 5e-324);
    mt_jw_key(&w, "big"); mt_jw_double(&w, 1.7976931348623157e308);
    mt_jw_end_object(&w);
    CHECK(w.len == strlen(w.buf), "NUL-terminated");
    CHECK(strstr(w.buf, "\"d\":0.1,") != NULL, "shortest double: %s", w.buf);
    CHECK(strstr(w.buf, "\"arr\":[true,false,null,[],{},{\"x\":1,\"y\":2}]") != NULL, "compact: %s", w.buf);
    CHECK(strstr(w.buf, "\"nan\":null,\"inf\":null") != NULL, "nan: %s", w.buf);
    CHECK(strstr(w.buf, "\\u0001") && strstr(w.buf, "\\ufffd"), "escapes: %s", w.buf);
    mt_error e = {{0}};
    mt_json_doc *d = mt_json_parse(w.buf, w.len, 64, &e);
    CHECK(d != NULL, "writer output parses: %s (%s)", e.msg, w.buf);
    if (d) {
        const mt_json *r = mt_json_root(d);
        const char *s = NULL;
        CHECK(mt_json_get_string(r, "name", &s, &e) == 0 && strcmp(s, "q\"\\\n\t\x01 \xc3\xa9 \xef\xbf\xbd end") == 0, "string round trip");
        int64_t v;
        CHECK(mt_json_get_int64(r, "n", &v, &e) == 0 && v == INT64_MIN, "int");
        double dv;
        CHECK(mt_json_get_double(r, "f", &dv, &e) == 0 && dv == (double)0.1f, "float round trip");
        CHECK(mt_json_get_double(r, "tiny", &dv, &e) == 0 && dv == 5e-324, "denormal");
        CHECK(mt_json_get_double(r, "big", &dv, &e) == 0 && dv == 1.7976931348623157e308, "max double");
    }
    mt_json_free(d);
    mt_jw_free(&w);
}

/* An encoder.json-shaped object: 50257 string keys with \u escapes. */
static void test_big_object(void) {
    mt_json_writer w;
    mt_jw_init(&w);
    mt_jw_begin_object(&w);
    char key[64];
    for (int i = 0; i < 50257; i++) {
        snprintf(key, sizeof key, "\xc4\xa0tok%d\"\\", i);
        mt_jw_key(&w, key);
        mt_jw_int(&w, i);
    }
    mt_jw_end_object(&w);
    mt_error e = {{0}};
    mt_json_doc *d = mt_json_parse(w.buf, w.len, 64, &e);
    CHECK(d != NULL, "%s", e.msg);
    if (d) {
        const mt_json *r = mt_json_root(d);
        CHECK(r->count == 50257, "count %zu", r->count);
        int ok = 1, i = 0;
        for (const mt_json *c = r->child; c; c = c->next, i++) {
            snprintf(key, sizeof key, "\xc4\xa0tok%d\"\\", i);
            int64_t v = -1;
            if (strcmp(c->key, key) != 0 || mt_json_int64(c, &v) || v != i) ok = 0;
        }
        CHECK(ok && i == 50257, "entries");
    }
    mt_json_free(d);
    mt_jw_free(&w);
}

/* Random byte mutations of a valid document: every result either parses or
 * fails with a message naming a byte offset; nothing crashes (run under ASan
 * to make this strict). */
static void test_mutations(void) {
    const char *base = "{\"a\":[1,-2.5e3,\"x\\u00e9\\ud83d\\ude00\",true,null,{\"b\":\"\\n\"}],\"c\":0}";
    size_t n = strlen(base);
    char buf[128];
    uint32_t s = 12345;
    int bad_msgs = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(buf, base, n);
        size_t len = n;
        for (int k = 0; k < 3; k++) {
            s = s * 1664525u + 1013904223u;
            size_t pos = (s >> 8) % n;
            s = s * 1664525u + 1013904223u;
            if ((s >> 28) == 0) len = pos;
            else buf[pos] = (char)(s >> 16);
        }
        mt_error e = {{0}};
        mt_json_doc *d = mt_json_parse(buf, len, 64, &e);
        if (!d && !strstr(e.msg, "at byte")) bad_msgs++;
        mt_json_free(d);
    }
    CHECK(bad_msgs == 0, "%d errors without a byte offset", bad_msgs);
}

int main(void) {
    test_mutations();
    test_values();
    test_strings();
    test_malformed();
    test_writer();
    test_big_object();
    TEST_MAIN_END("test_json");
}
