/* Helper for tests/check_tokenizer_oracle.sh and
 * tests/check_hf_tokenizer_oracle.sh (not a unit test).
 *   tok_dump VOCAB_DIR FILE          prints FILE's GPT-2 tokens, one per line
 *   tok_dump hf:TOKENIZER_JSON FILE  the same with a tokenizer.json
 *   tok_dump ... FILE --nul          FILE holds records separated by NUL
 *                                    bytes; prints one line per record with
 *                                    its tokens separated by spaces
 * Also checks decode(encode(x)) == x (unless --no-round-trip, for text a
 * normalizer changes) and reports the encoding time on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "data/tokenizer.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int check_round_trip(mt_tokenizer *t, const mt_tokens *toks, const unsigned char *s, size_t n, size_t rec) {
    mt_bytes back = {0};
    mt_error err;
    int bad = mt_tokenizer_decode(t, toks->data, toks->len, &back, &err) || back.len != n || memcmp(back.data, s, n);
    if (bad) fprintf(stderr, "tok_dump: record %zu: decode(encode(x)) != x\n", rec);
    mt_bytes_free(&back);
    return bad;
}

int main(int argc, char **argv) {
    int nul = 0, round_trip = 1;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--nul")) nul = 1;
        else if (!strcmp(argv[i], "--no-round-trip")) round_trip = 0;
        else argc = 0;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: tok_dump VOCAB_DIR|hf:TOKENIZER_JSON FILE [--nul] [--no-round-trip]\n");
        return 2;
    }
    mt_error err;
    mt_tokenizer *t = strncmp(argv[1], "hf:", 3) ? mt_tokenizer_gpt2(argv[1], &err) : mt_tokenizer_open(argv[1], NULL, &err);
    if (!t) {
        fprintf(stderr, "tok_dump: %s\n", err.msg);
        return 1;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    mt_bytes in = {0};
    unsigned char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) mt_bytes_append(&in, buf, got);
    if (ferror(f)) {
        perror(argv[2]);
        return 1;
    }
    fclose(f);
    int rc = 0;
    if (!nul) {
        mt_tokens toks = {0};
        double t0 = now();
        if (mt_tokenizer_encode_append(t, in.data, in.len, &toks, &err)) {
            fprintf(stderr, "tok_dump: %s\n", err.msg);
            return 1;
        }
        double dt = now() - t0;
        fprintf(stderr, "tok_dump: %zu bytes -> %zu tokens in %.3f s (%.1f MB/s)\n", in.len, toks.len, dt,
                in.len / dt / 1e6);
        if (round_trip) rc |= check_round_trip(t, &toks, in.data, in.len, 0);
        for (size_t i = 0; i < toks.len; i++) printf("%d\n", (int)toks.data[i]);
        mt_tokens_free(&toks);
    } else {
        size_t start = 0, rec = 0;
        while (start <= in.len) {
            const unsigned char *nul = in.len > start ? memchr(in.data + start, 0, in.len - start) : NULL;
            size_t end = nul ? (size_t)(nul - in.data) : in.len;
            if (!nul && end == start) break; /* nothing after the last separator */
            mt_tokens toks = {0};
            if (mt_tokenizer_encode_append(t, in.data + start, end - start, &toks, &err)) {
                fprintf(stderr, "tok_dump: %s\n", err.msg);
                return 1;
            }
            if (round_trip) rc |= check_round_trip(t, &toks, in.data + start, end - start, rec);
            for (size_t i = 0; i < toks.len; i++) printf(i ? " %d" : "%d", (int)toks.data[i]);
            printf("\n");
            mt_tokens_free(&toks);
            start = end + 1;
            rec++;
        }
    }
    mt_bytes_free(&in);
    mt_tokenizer_free(t);
    return rc;
}
