/* meshtrain eval / generate: run a checkpoint's model. */
#include "cli/args.h"
#include "cli/cli.h"
#include "interop/peft.h"
#include "data/chat_data.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "models/model.h"
#include "train/generate.h"
#include "train/train_io.h"
#include "optim/loss_scaler.h"
#include "core/fileio.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The checkpoint's model for the decoder (batch 1): a LoRA / --freeze
 * checkpoint merged (the decoder reads whole weights); info->cfg becomes
 * the decoded model's. */
static int load_for_decoding(const char *ckpt, mt_ckpt_info *info, mt_model *m, mt_backend *be, mt_mem *mem,
                             mt_error *err) {
    if (!mt_adapter_spec_active(&info->cfg.adapters)) {
        mt_model_create(m, be, &info->cfg, 1, 1, 0, mem);
        return mt_model_load_checkpoint(m, ckpt, err);
    }
    mt_weights w, merged;
    mt_ckpt *ck = mt_ckpt_open(ckpt, err);
    if (!ck) return -1;
    int rc = mt_weights_from_ckpt(ck, &w, err);
    mt_ckpt_close(ck);
    if (rc) return -1;
    rc = mt_weights_load_frozen(&w, err);
    if (!rc) rc = mt_peft_merge(&w, &merged, err);
    mt_weights_free(&w);
    if (rc) return -1;
    info->cfg = merged.cfg;
    mt_model_create(m, be, &info->cfg, 1, 1, 0, mem);
    for (int u = 0; u < m->layout.n_units; u++)
        memcpy(m->params[u], merged.unit[u], m->layout.units[u].numel * sizeof(float));
    mt_weights_free(&merged);
    return 0;
}

/* eval --dump-logits: the logits after each token of ids_path (whitespace-
 * separated ids; each line a sequence of its own, from position 0) as
 * little-endian float32 [n, vocab_size] to out (written whole or not at
 * all), through the decoder with its KV cache (what generate runs); then
 * `greedy` argmax tokens continue the last sequence and are printed, one
 * line "greedy: ID ...". For comparing with another program
 * position by position (tests/check_gguf.sh: llama.cpp on the GGUF export). */
static int dump_logits(const char *ckpt, const char *ids_path, const char *out, int greedy, mt_error *err) {
    mt_ckpt_info info;
    if (mt_train_ckpt_peek(ckpt, &info, err)) return -1;
    info.cfg.dropout = 0.0f;
    char *text = NULL;
    size_t len = 0;
    if (mt_read_file(ids_path, 1 << 26, &text, &len, err)) return -1;
    mt_tokens ids = {0}, ends = {0}; /* ends: where each line's sequence ends in ids */
    size_t longest = 0, start = 0;
    for (char *p = text, *e;; p = e) {
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == ',') p++;
        if (*p == '\n' || !*p) {
            if (ids.len > start) {
                mt_tokens_push(&ends, (int32_t)ids.len);
                longest = ids.len - start > longest ? ids.len - start : longest;
                start = ids.len;
            }
            if (!*p) break;
            e = p + 1;
            continue;
        }
        long v = strtol(p, &e, 10);
        if (e == p || v < 0 || v >= info.cfg.vocab_size) {
            free(text);
            mt_tokens_free(&ids);
            mt_tokens_free(&ends);
            return mt_errorf(err, "%s: '%.20s' is not a token id of this model (0 to %d)", ids_path, p,
                             info.cfg.vocab_size - 1);
        }
        mt_tokens_push(&ids, (int32_t)v);
    }
    free(text);
    if (ids.len == 0 || longest + (size_t)greedy > (size_t)info.cfg.seq_len) {
        mt_tokens_free(&ids);
        mt_tokens_free(&ends);
        return mt_errorf(err, "%s: each line must hold 1 to %d ids (the context, less %d greedy tokens); the longest "
                              "holds %zu", ids_path, info.cfg.seq_len - greedy, greedy, longest);
    }
    mt_backend be = mt_backend_cpu(MT_GEMM_DEFAULT);
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_model m;
    if (load_for_decoding(ckpt, &info, &m, &be, &mem, err)) {
        mt_tokens_free(&ids);
        return -1;
    }
    mt_decoder g;
    mt_decoder_init(&g, m.be, &info.cfg, &m.layout, m.params);
    char *tmp = NULL;
    FILE *f = mt_fopen_temp(out, &tmp, err);
    int failed = !f;
    const float *logits = NULL;
    for (size_t i = 0, line = 0; i < ids.len && !failed; i++) {
        if (line > 0 && i == (size_t)ends.data[line - 1]) g.pos = 0; /* a new sequence */
        if (i + 1 == (size_t)ends.data[line]) line++;
        logits = mt_decoder_step(&g, ids.data[i]);
        failed = !logits || fwrite(logits, sizeof(float), (size_t)info.cfg.vocab_size, f) != (size_t)info.cfg.vocab_size;
    }
    int rc = f ? mt_fcommit_temp(f, tmp, out, failed, err) : -1;
    if (!rc && greedy > 0) {
        printf("greedy:");
        for (int i = 0; i < greedy && logits; i++) {
            int32_t best = mt_sample(logits, info.cfg.vocab_size, 0.0f, 0, 0, 0, NULL); /* temperature 0: argmax */
            printf(" %d", best);
            logits = i + 1 < greedy ? mt_decoder_step(&g, best) : NULL;
        }
        printf("\n");
    }
    mt_decoder_free(&g);
    mt_model_free(&m);
    mt_tokens_free(&ids);
    mt_tokens_free(&ends);
    return rc;
}

int mt_cli_eval(int argc, char **argv) {
    const char *ckpt = NULL, *val = NULL, *dump = NULL, *ids = NULL, *device = "cpu";
    int batch = 8, batches = 0, help = 0, greedy = 0;
    mt_arg spec[] = {
        {"ckpt", MT_ARG_STR, &ckpt, "checkpoint directory", 0},
        {"val", MT_ARG_STR, &val, "token shard to evaluate on", 0},
        {"dump-logits", MT_ARG_STR, &dump, "instead: write the logits after each token of --ids as float32 "
                                           "[tokens, vocab] to this file (a --peft run merged)", 0},
        {"ids", MT_ARG_STR, &ids, "with --dump-logits: a text file of token ids", 0},
        {"greedy", MT_ARG_INT, &greedy, "with --dump-logits: then print this many greedy tokens' ids", 0},
        {"batch", MT_ARG_INT, &batch, "sequences per forward pass (default 8)", 0},
        {"batches", MT_ARG_INT, &batches, "evaluate at most this many batches (default: the whole file)", 0},
        {"device", MT_ARG_STR, &device, "cpu | cuda: where the --val forward passes run (default cpu; cuda needs a `make gpu` or `make gpu-emu` build)", 0},
        {"help", MT_ARG_FLAG, &help, "show this help", 0},
    };
    mt_error err = {{0}};
    if (mt_args_parse(argc, argv, spec, NARGS(spec), NULL, 0, NULL, &err)) return mt_cli_fail("eval", &err);
    mt_device_kind kind;
    if (mt_device_kind_parse(device, &kind)) {
        mt_errorf(&err, "--device must be cpu or cuda, got '%s'", device);
        return mt_cli_fail("eval", &err);
    }
    if (kind == MT_DEVICE_CUDA && (dump || ids || greedy)) {
        mt_errorf(&err, "--dump-logits is not yet supported on --device cuda (the decode step runs on the CPU): drop --device");
        return mt_cli_fail("eval", &err);
    }
    if (help) {
        mt_args_usage("eval", "--ckpt DIR --val FILE | --ckpt DIR --dump-logits FILE --ids FILE", spec, NARGS(spec));
        return 0;
    }
    if (dump || ids || greedy) {
        if (!ckpt || !dump || !ids || val) mt_errorf(&err, "--dump-logits FILE goes with --ckpt DIR and --ids FILE (not --val)");
        else if (greedy < 0) mt_errorf(&err, "--greedy must be >= 0, got %d", greedy);
        else if (!dump_logits(ckpt, ids, dump, greedy, &err)) return 0;
        return mt_cli_fail("eval", &err);
    }
    if (!ckpt || !val) {
        mt_errorf(&err, "--ckpt DIR and --val FILE are required");
        return mt_cli_fail("eval", &err);
    }
    if (batch < 1) {
        mt_errorf(&err, "--batch must be >= 1, got %d", batch);
        return mt_cli_fail("eval", &err);
    }
    mt_ckpt_info info;
    if (mt_train_ckpt_peek(ckpt, &info, &err)) return mt_cli_fail("eval", &err);
    info.cfg.dropout = 0.0f;
    uint32_t *tok = NULL;
    size_t n = 0;
    uint8_t *flags = NULL;
    int window = 0;
    mt_loader ld;
    if (mt_train_read_tokens(val, info.cfg.vocab_size, &tok, &n, &err) ||
        mt_loader_init(&ld, tok, n, info.cfg.seq_len, batch, MT_ORDER_SEQUENTIAL, 0, info.cfg.vocab_size, &err) ||
        mt_train_read_flags(val, &flags, &window, &err) ||
        (flags && mt_loader_set_flags(&ld, flags, window, val, &err)))
        return mt_cli_fail("eval", &err);
    if (kind == MT_DEVICE_CUDA && ld.packed) {
        mt_errorf(&err, "packed samples (a window of %s holds several documents) are not yet supported on --device "
                        "cuda: use --device cpu", val);
        return mt_cli_fail("eval", &err);
    }
    mt_backend be;
    if (mt_backend_open(&be, kind, MT_GEMM_DEFAULT, &err)) return mt_cli_fail("eval", &err);
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_backend_attach_mem(&be, &mem);
    mt_model m;
    mt_model_create(&m, &be, &info.cfg, batch, info.cfg.seq_len, 0, &mem);
    if (mt_model_load_checkpoint(&m, ckpt, &err)) return mt_cli_fail("eval", &err);
    int nb = (int)ld.n_batches;
    if (batches > 0 && batches < nb) nb = batches;
    mt_fwd_ctx fc = {0, 0, 0.0f, 0.0f};
    double sum = 0;
    for (int k = 0; k < nb; k++) {
        mt_backend_sync(&be); /* the previous batch's kernels may still read the rows */
        mt_loader_fill(&ld, (uint64_t)k * batch, batch, m.acts.h_tokens, m.acts.h_targets, m.acts.h_sample_ids);
        m.acts.packed = mt_loader_fill_docs(&ld, (uint64_t)k * batch, batch, m.acts.h_doc_start, m.acts.h_pos);
        mt_model_upload_batch(&m, &m.acts);
        double l = mt_model_forward(&m, &fc, 0.0f);
        if (!isfinite(l)) { /* a loss of inf/NaN is no measurement: say where it came from */
            mt_errorf(&err, "the loss of batch %d of %s is %g (not finite): the weights of %s produce inf/NaN logits", k,
                      val, l, ckpt);
            return mt_cli_fail("eval", &err);
        }
        sum += l;
    }
    double tokens = (double)mt_loader_count(&ld, 0, nb * batch); /* the counted targets (all without a loss mask) */
    if (tokens == 0) {
        mt_errorf(&err, "%s has no counted target (its loss mask is empty) in the %d batches evaluated", val, nb);
        return mt_cli_fail("eval", &err);
    }
    printf("val_loss %.6f over %d batches (%.0f tokens) of %s at step %lld\n", sum / tokens, nb, tokens, val,
           (long long)info.step);
    mt_model_free(&m);
    mt_backend_close(&be);
    mt_loader_free(&ld);
    free(tok);
    free(flags);
    return 0;
}

/* --chat's template: named, or matched from the tokenizer_config.json beside
 * an hf tokenizer.json. */
static int mt_generate_chat_template(const char *tokenizer, const char *name, mt_chat_template *t, mt_error *err) {
    if (name) return mt_chat_template_parse(name, t, err);
    if (strncmp(tokenizer, "hf:", 3))
        return mt_errorf(err, "--chat needs a chat template: name one with --chat-template %s", mt_chat_template_names());
    const char *j = tokenizer + 3, *slash = strrchr(j, '/');
    char path[4096];
    snprintf(path, sizeof path, "%.*stokenizer_config.json", slash ? (int)(slash - j + 1) : 0, j);
    mt_tokenizer_config tc;
    if (access(path, F_OK))
        return mt_errorf(err, "--chat needs a chat template: there is no %s; name one with --chat-template %s", path,
                         mt_chat_template_names());
    if (mt_tokenizer_config_read(path, &tc, err)) return -1;
    if (!tc.chat_template) {
        mt_tokenizer_config_free(&tc);
        return mt_errorf(err, "--chat needs a chat template: %s has none; name one with --chat-template %s", path,
                         mt_chat_template_names());
    }
    int rc = mt_chat_template_match(tc.chat_template, strlen(tc.chat_template), t, err);
    mt_tokenizer_config_free(&tc);
    return rc;
}

int mt_cli_generate(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = "", *tokenizer = NULL, *vocab_dir = NULL, *chat_template = NULL;
    int ntok = 64, top_k = 0, help = 0, chat = 0;
    float temperature = 1.0f;
    int64_t seed = 1337;
    mt_arg spec[] = {
        {"ckpt", MT_ARG_STR, &ckpt, "checkpoint directory", 0},
        {"prompt", MT_ARG_STR, &prompt, "text to continue (default: empty; starts from <|endoftext|> for gpt2)", 0},
        {"tokens", MT_ARG_INT, &ntok, "tokens to generate (default 64)", 0},
        {"temperature", MT_ARG_FLOAT, &temperature, "sampling temperature; 0 = greedy (default 1)", 0},
        {"top-k", MT_ARG_INT, &top_k, "sample among the k most likely tokens (0 = all)", 0},
        {"seed", MT_ARG_I64, &seed, "sampling seed (default 1337)", 0},
        {"tokenizer", MT_ARG_STR, &tokenizer,
         "byte | gpt2 | hf:PATH/tokenizer.json (default: byte if the vocabulary is 256, else gpt2)", 0},
        {"vocab-dir", MT_ARG_STR, &vocab_dir, "directory with encoder.json and vocab.bpe (gpt2)", 0},
        {"chat", MT_ARG_FLAG, &chat,
         "the prompt is a user turn: render it with the chat template, answer, stop at the end-of-turn token", 0},
        {"chat-template", MT_ARG_STR, &chat_template,
         "with --chat: llama3|llama2|mistral|chatml|qwen3|gemma|zephyr (default: matched from tokenizer_config.json "
         "beside an hf tokenizer.json)", 0},
        {"help", MT_ARG_FLAG, &help, "show this help", 0},
    };
    mt_error err = {{0}};
    if (mt_args_parse(argc, argv, spec, NARGS(spec), NULL, 0, NULL, &err)) return mt_cli_fail("generate", &err);
    if (chat_template && !chat) {
        mt_errorf(&err, "--chat-template applies to --chat only");
        return mt_cli_fail("generate", &err);
    }
    if (help) {
        mt_args_usage("generate", "--ckpt DIR [--prompt TEXT] [--tokens N]", spec, NARGS(spec));
        return 0;
    }
    if (!ckpt) {
        mt_errorf(&err, "--ckpt DIR is required");
        return mt_cli_fail("generate", &err);
    }
    if (ntok < 0 || top_k < 0 || temperature < 0) {
        mt_errorf(&err, "--tokens, --top-k and --temperature must be >= 0");
        return mt_cli_fail("generate", &err);
    }
    mt_ckpt_info info;
    if (mt_train_ckpt_peek(ckpt, &info, &err)) return mt_cli_fail("generate", &err);
    info.cfg.dropout = 0.0f;
    if (!tokenizer) tokenizer = info.cfg.vocab_size == 256 ? "byte" : "gpt2";
    mt_tokenizer *tk = mt_tokenizer_open(tokenizer, vocab_dir, &err);
    if (!tk) return mt_cli_fail("generate", &err);
    if (mt_tokenizer_vocab_size(tk) > info.cfg.vocab_size) {
        mt_errorf(&err, "tokenizer %s has %d tokens but the model's vocabulary is %d; pass --tokenizer", tokenizer,
                  mt_tokenizer_vocab_size(tk), info.cfg.vocab_size);
        return mt_cli_fail("generate", &err);
    }
    mt_backend be = mt_backend_cpu(MT_GEMM_DEFAULT);
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_model m;
    if (load_for_decoding(ckpt, &info, &m, &be, &mem, &err)) return mt_cli_fail("generate", &err);
    mt_layout layout;
    mt_model_layout_build(&info.cfg, 1, 0, &layout);
    int32_t *ptok = NULL;
    size_t np = 0;
    mt_bytes rendered = {0};
    const char *eot_text = NULL; /* --chat: the answer ends at the template's end of turn */
    int32_t eot_id = -1;
    if (chat) {
        mt_chat_template tpl;
        if (mt_generate_chat_template(tokenizer, chat_template, &tpl, &err)) return mt_cli_fail("generate", &err);
        mt_chat_msg msg = {MT_ROLE_USER, prompt, strlen(prompt)};
        mt_chat_span none;
        int ns;
        if (mt_chat_render(tpl, &msg, 1, &rendered, &none, &ns, &err)) return mt_cli_fail("generate", &err);
        const char *gp = mt_chat_template_generation_prompt(tpl);
        mt_bytes_append(&rendered, gp, strlen(gp));
        eot_text = mt_chat_template_eot(tpl);
        eot_id = mt_tokenizer_single_id(tk, eot_text);
        int32_t piecewise = mt_chat_eot_piecewise_id(tk, tpl); /* GPT-2's <|endoftext|>: its one token */
        if (piecewise >= 0) eot_id = piecewise;
        prompt = ""; /* the answer alone is printed */
        mt_tokens pt = {0};
        if (mt_chat_encode_append(tk, tpl, piecewise, rendered.data, rendered.len, &pt, &err))
            return mt_cli_fail("generate", &err);
        ptok = pt.data;
        np = pt.len;
    } else if (mt_tokenizer_encode(tk, (const unsigned char *)prompt, strlen(prompt), &ptok, &np, &err))
        return mt_cli_fail("generate", &err);
    if (np == 0 && mt_tokenizer_eot(tk) >= 0) {
        ptok = realloc(ptok, sizeof(int32_t));
        if (!ptok) mt_die("out of memory");
        ptok[0] = mt_tokenizer_eot(tk);
        np = 1;
    }
    mt_decoder g;
    mt_decoder_init(&g, m.be, &info.cfg, &m.layout, m.params);
    float *work = mt_xcalloc((size_t)info.cfg.padded_vocab, sizeof(float), "sampling work");
    mt_bytes out = {0};
    fputs(prompt, stdout);
    const float *logits = NULL;
    if (np == 0) { /* byte model, empty prompt: start from a newline */
        ptok = realloc(ptok, sizeof(int32_t));
        if (!ptok) mt_die("out of memory");
        ptok[0] = '\n';
        np = 1;
    }
    /* All tokens so far; when the context is full the cache is rebuilt from
     * the last T/2 tokens (a sliding window), so any length can be sampled. */
    int T = info.cfg.seq_len;
    size_t cap = np + (size_t)ntok + 1, nh = 0;
    int32_t *hist = mt_xcalloc(cap, sizeof(int32_t), "generation history");
    for (size_t i = 0; i < np; i++) hist[nh++] = ptok[i];
    size_t keep = (size_t)(T > 1 ? T / 2 : 1);
    size_t first = nh > (size_t)T ? nh - keep : 0;
    for (size_t i = first; i < nh; i++) logits = mt_decoder_step(&g, hist[i]);
    for (int i = 0; i < ntok && logits; i++) {
        if (mt_found_nonfinite(logits, (size_t)info.cfg.vocab_size)) { /* sampling from them would be garbage */
            fputc('\n', stdout);
            mt_errorf(&err, "the logits of generated token %d are not finite (inf/NaN): the weights of %s are not usable",
                      i + 1, ckpt);
            return mt_cli_fail("generate", &err);
        }
        int32_t next = mt_sample(logits, info.cfg.vocab_size, temperature, top_k, (uint64_t)seed, (uint64_t)i, work);
        if (chat) { /* the answer is printed whole: its end-of-turn text may take several tokens */
            if (next == eot_id) break;
            if (mt_tokenizer_decode(tk, &next, 1, &out, &err)) return mt_cli_fail("generate", &err);
            size_t el = strlen(eot_text);
            if (out.len >= el && !memcmp(out.data + out.len - el, eot_text, el)) {
                out.len -= el;
                break;
            }
        } else {
            out.len = 0;
            if (mt_tokenizer_decode(tk, &next, 1, &out, &err)) return mt_cli_fail("generate", &err);
            fwrite(out.data, 1, out.len, stdout);
            fflush(stdout);
        }
        hist[nh++] = next;
        if (g.pos >= T) {
            g.pos = 0;
            for (size_t j = nh - keep; j < nh; j++) logits = mt_decoder_step(&g, hist[j]);
        } else {
            logits = mt_decoder_step(&g, next);
        }
    }
    if (chat) fwrite(out.data, 1, out.len, stdout);
    mt_bytes_free(&rendered);
    fputc('\n', stdout);
    free(hist);
    mt_bytes_free(&out);
    free(work);
    free(ptok);
    mt_decoder_free(&g);
    mt_model_free(&m);
    mt_layout_free(&layout);
    mt_tokenizer_free(tk);
    return 0;
}
