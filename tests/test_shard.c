/* Token shards: round trip, atomic writer refusals, and every malformed file
 * rejected with a one-line error holding the expected words. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "data/shard.h"
#include "testlib.h"

static char dir[64], path[128];

static void write_raw(const char *p, const int32_t *header, int nheader_ints, const uint16_t *tok, size_t n) {
    FILE *f = fopen(p, "wb");
    if (!f) {
        perror(p);
        exit(1);
    }
    if (nheader_ints) {
        int32_t h[MT_SHARD_HEADER_INTS] = {0};
        memcpy(h, header, 3 * sizeof *h);
        fwrite(h, sizeof *h, (size_t)nheader_ints, f);
    }
    if (n) fwrite(tok, sizeof *tok, n, f);
    if (fclose(f)) {
        perror(p);
        exit(1);
    }
}

/* Expects mt_shard_open to fail with a message containing every word. */
static void expect_reject(const char *what, const char *w1, const char *w2, const char *w3) {
    mt_shard s;
    mt_error err = {{0}};
    int rc = mt_shard_open(&s, path, &err);
    CHECK(rc == -1, "%s: accepted", what);
    CHECK(strchr(err.msg, '\n') == NULL, "%s: message has a newline: %s", what, err.msg);
    CHECK(strstr(err.msg, path) != NULL, "%s: message does not name the file: %s", what, err.msg);
    const char *words[3] = {w1, w2, w3};
    for (int i = 0; i < 3; i++)
        if (words[i]) CHECK(strstr(err.msg, words[i]) != NULL, "%s: '%s' not in: %s", what, words[i], err.msg);
    printf("  %-12s -> %s\n", what, err.msg);
    if (rc == 0) mt_shard_close(&s);
}

int main(void) {
    strcpy(dir, "/tmp/mt_test_shard_XXXXXX");
    tl_mkdtemp(dir);
    snprintf(path, sizeof path, "%s/s.bin", dir);
    mt_error err = {{0}};

    /* round trip, int32 writer */
    enum { N = 100003 };
    int32_t *t32 = malloc(N * sizeof *t32);
    uint16_t *t16 = malloc(N * sizeof *t16);
    if (!t32 || !t16) return 1;
    for (int i = 0; i < N; i++) t32[i] = (int32_t)((i * 2654435761u) % 50257u);
    t32[777] = 65535;
    CHECK(mt_shard_write(path, t32, N, &err) == 0, "%s", err.msg);
    mt_shard s;
    CHECK(mt_shard_open(&s, path, &err) == 0, "%s", err.msg);
    CHECK(s.n == N, "n %zu", s.n);
    CHECK(s.max_token == 65535, "max %u", s.max_token);
    int same = s.n == N;
    for (size_t i = 0; same && i < s.n; i++) same = s.tokens[i] == (uint16_t)t32[i];
    CHECK(same, "tokens differ after the round trip");
    mt_shard_close(&s);
    /* the file is exactly header + 2N bytes with llm.c's header */
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "reopen");
    if (f) {
        int32_t h[3];
        CHECK(fread(h, sizeof *h, 3, f) == 3, "header read");
        CHECK(h[0] == 20240520 && h[1] == 1 && h[2] == N, "header %d %d %d", h[0], h[1], h[2]);
        fseek(f, 0, SEEK_END);
        CHECK(ftell(f) == 1024 + 2L * N, "size %ld", ftell(f));
        fclose(f);
    }

    /* round trip, uint16 writer and mt_shard_read */
    for (int i = 0; i < N; i++) t16[i] = (uint16_t)(i % 256);
    CHECK(mt_shard_write_u16(path, t16, N, &err) == 0, "%s", err.msg);
    uint32_t *back = NULL, mx = 0;
    size_t n = 0;
    CHECK(mt_shard_read(path, &back, &n, &mx, &err) == 0, "%s", err.msg);
    int same16 = back != NULL;
    for (int i = 0; same16 && i < N; i++) same16 = back[i] == t16[i];
    CHECK(n == N && mx == 255 && same16, "u16 round trip n=%zu max=%u", n, mx);
    free(back);

    /* an id over 65535: llm.c's uint32 layout (magic 20240801, version 7, 4 bytes a token) */
    t32[5] = 128255;
    CHECK(mt_shard_write(path, t32, N, &err) == 0, "%s", err.msg);
    CHECK(mt_shard_open(&s, path, &err) == 0 && s.tokens32 && !s.tokens && s.max_token == 128255, "u32 open: %s", err.msg);
    struct stat st32;
    CHECK(stat(path, &st32) == 0 && st32.st_size == MT_SHARD_HEADER_BYTES + 4 * (off_t)N, "u32 size");
    CHECK(((const int32_t *)s.map)[0] == MT_SHARD_MAGIC_U32 && ((const int32_t *)s.map)[1] == MT_SHARD_VERSION_U32, "u32 header");
    mt_shard_close(&s);
    CHECK(mt_shard_read(path, &back, &n, &mx, &err) == 0 && n == N && mx == 128255, "u32 read: %s", err.msg);
    int same32 = back != NULL;
    for (int i = 0; same32 && i < N; i++) same32 = back[i] == (uint32_t)t32[i];
    CHECK(same32, "u32 round trip");
    /* the vocabulary check compares unsigned: 2^31 is no negative id that passes */
    CHECK(mt_shard_check_vocab(path, back, N, 128256, &err) == 0, "128255 < 128256 refused: %s", err.msg);
    CHECK(mt_shard_check_vocab(path, back, N, 128255, &err) == -1 && strstr(err.msg, "token 5 has id 128255") &&
              strstr(err.msg, "s.bin") && strstr(err.msg, "vocabulary of 128255"),
          "128255 >= 128255 accepted: %s", err.msg);
    back[9] = 0x80000000u;
    CHECK(mt_shard_check_vocab(path, back, N, 50257, &err) == -1 && strstr(err.msg, "token 5 has id 128255"),
          "first offender: %s", err.msg);
    back[5] = 0;
    CHECK(mt_shard_check_vocab(path, back, N, 128256, &err) == -1 && strstr(err.msg, "token 9 has id 2147483648"),
          "2^31 accepted: %s", err.msg);
    free(back);
    CHECK(mt_shard_write_u16(path, t16, N, &err) == 0, "%s", err.msg); /* the uint16 file again */

    /* the writer refuses negative ids and empty shards, leaving the old file */
    t32[5] = -1;
    CHECK(mt_shard_write(path, t32, N, &err) == -1, "-1 accepted");
    CHECK(strstr(err.msg, "-1") != NULL, "msg: %s", err.msg);
    CHECK(mt_shard_write(path, t32, 0, &err) == -1 && strstr(err.msg, "zero tokens"), "empty write: %s", err.msg);
    CHECK(mt_shard_read(path, &back, &n, NULL, &err) == 0 && n == N, "old file damaged: %s", err.msg);
    free(back);
    char tmpname[200];
    snprintf(tmpname, sizeof tmpname, "%s.tmp.%ld", path, (long)getpid());
    CHECK(access(tmpname, F_OK) != 0, "temporary file left behind");
    char baddir[200];
    snprintf(baddir, sizeof baddir, "%s/no/such/dir/x.bin", dir);
    CHECK(mt_shard_write(baddir, t32 + 6, 10, &err) == -1 && strstr(err.msg, "no/such/dir"), "bad dir: %s", err.msg);

    /* malformed files */
    uint16_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    printf("rejections:\n");
    snprintf(path, sizeof path, "%s/missing.bin", dir);
    expect_reject("missing", "cannot open", "No such file", NULL);
    snprintf(path, sizeof path, "%s/bad.bin", dir);
    write_raw(path, (int32_t[]){MT_SHARD_MAGIC, 1, 8}, 0, tok, 8); /* 16 bytes: no header */
    expect_reject("tiny", "16 bytes", "1024-byte header", NULL);
    write_raw(path, (int32_t[]){0, 0, 0}, 0, NULL, 0); /* empty file */
    expect_reject("empty file", "0 bytes", "header", NULL);
    write_raw(path, (int32_t[]){12345, 1, 8}, 256, tok, 8);
    expect_reject("bad magic", "magic 12345", "20240520", "not an llm.c token shard");
    write_raw(path, (int32_t[]){20240326, 1, 8}, 256, tok, 8);
    expect_reject("model file", "magic 20240326", "model file", NULL);
    write_raw(path, (int32_t[]){MT_SHARD_MAGIC, 2, 8}, 256, tok, 8);
    expect_reject("bad version", "version 2", "versions 1 (llm.c) and 101", NULL);
    write_raw(path, (int32_t[]){MT_SHARD_MAGIC, 1, 8}, 256, tok, 5);
    expect_reject("truncated", "truncated", "8 tokens", "1034 bytes");
    write_raw(path, (int32_t[]){MT_SHARD_MAGIC, 1, 5}, 256, tok, 8);
    expect_reject("oversized", "1040 bytes", "5 tokens", "6 extra");
    write_raw(path, (int32_t[]){MT_SHARD_MAGIC, 1, 0}, 256, NULL, 0);
    expect_reject("zero tokens", "zero tokens", NULL, NULL);
    write_raw(path, (int32_t[]){MT_SHARD_MAGIC, 1, -3}, 256, tok, 8);
    expect_reject("negative", "negative", "-3", NULL);
    /* the loss-mask extension: round trip (uint16 and uint32), a plain
     * shard has no flags, and a window length the count does not fit is refused */
    {
        int32_t xt[9] = {5, 6, 7, 8, 9, 10, 11, 12, 0};
        uint8_t xf[9] = {MT_TOK_DOC, MT_TOK_LOSS, MT_TOK_LOSS, MT_TOK_PAD, MT_TOK_DOC, 0, MT_TOK_LOSS, MT_TOK_PAD,
                         MT_TOK_PAD};
        uint8_t *fb = NULL;
        int win = -1;
        snprintf(path, sizeof path, "%s/x.bin", dir);
        for (int wide = 0; wide < 2; wide++) {
            xt[1] = wide ? 100000 : 6;
            CHECK(mt_shard_write_ext(path, xt, xf, 9, 4, 2, &err) == 0, "ext write: %s", err.msg);
            mt_shard s;
            CHECK(mt_shard_open(&s, path, &err) == 0 && s.flags && s.window == 4 && s.n_docs == 2 && s.n == 9 &&
                      !memcmp(s.flags, xf, 9) && (wide ? s.tokens32 != NULL : s.tokens != NULL),
                  "ext open (wide %d): %s", wide, err.msg);
            mt_shard_close(&s);
            CHECK(mt_shard_read_ext(path, &back, &n, NULL, &fb, &win, &err) == 0 && n == 9 && win == 4 && fb &&
                      !memcmp(fb, xf, 9) && back[1] == (uint32_t)xt[1],
                  "ext read: %s", err.msg);
            free(back);
            free(fb);
        }
        CHECK(mt_shard_write_ext(path, xt, xf, 8, 4, 2, &err) == -1 && strstr(err.msg, "whole windows of 4"),
              "8 tokens in windows of 4 (+1) accepted: %s", err.msg);
        CHECK(mt_shard_write(path, xt, 9, &err) == 0 && mt_shard_read_ext(path, &back, &n, NULL, &fb, &win, &err) == 0 &&
                  fb == NULL && win == 0,
              "plain shard with flags: %s", err.msg);
        free(back);
        unlink(path);
        snprintf(path, sizeof path, "%s/bad.bin", dir);
    }
    /* a directory is not a shard */
    snprintf(path, sizeof path, "%s", dir);
    expect_reject("directory", "not a regular file", NULL, NULL);

    snprintf(path, sizeof path, "%s/s.bin", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/bad.bin", dir);
    unlink(path);
    rmdir(dir);
    free(t32);
    free(t16);
    TEST_MAIN_END("test_shard");
}
