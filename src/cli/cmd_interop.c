/* meshtrain export / import: checkpoint <-> a Hugging Face model directory
 * (any family), a GPT-2 safetensors file, or an llm.c model file; export
 * also to GGUF (llama.cpp: the model, or a LoRA run's adapter alone). See
 * interop/hf_model.h, interop/safetensors.h, interop/llmc.h and
 * interop/gguf_model.h for the formats. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "interop/weights.h"
#include "interop/hf_model.h"
#include "interop/llmc.h"
#include "interop/safetensors.h"
#include "interop/peft.h"
#include "interop/gguf_model.h"
#include "interop/hf_dir_tokenizer.h"
#include "core/fileio.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "optim/loss_scaler.h"

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* export --format gguf | gguf-lora: the model (a {peft} / {freeze} run
 * merged into its base first, a QLoRA base dequantized) or a LoRA run's
 * adapter alone, as llama.cpp loads them. */
static int export_gguf(const char *ckpt, const char *format, const char *out, const char *dtype, const char *tokenizer,
                       const char *vocab_dir, const char *template_file, mt_error *err) {
    mt_gguf_export_opts o = {MT_GGUF_F32, tokenizer, vocab_dir, NULL, NULL, 0};
    int lora = !strcmp(format, "gguf-lora");
    o.q4_k_m = !strcmp(dtype, "q4_k_m");
    if (mt_gguf_type_parse(!strcmp(dtype, "fp32") ? "f32" : !strcmp(dtype, "fp16") ? "f16" : o.q4_k_m ? "q4_k" : dtype,
                           &o.dtype))
        return mt_errorf(err, "--dtype for --format gguf must be f32, f16, bf16, q8_0, q4_0, q4_k, q6_k or q4_k_m, got "
                              "'%s' (other K-quant mixes are not written)", dtype);
    if (lora && o.dtype != MT_GGUF_F32) return mt_errorf(err, "--format gguf-lora writes f32 adapters; drop --dtype %s", dtype);
    char *tmpl = NULL;
    size_t tl = 0;
    if (template_file && mt_read_file(template_file, 1 << 24, &tmpl, &tl, err)) return -1;
    o.chat_template = tmpl;
    mt_ckpt *ck = mt_ckpt_open(ckpt, err);
    if (!ck) {
        free(tmpl);
        return -1;
    }
    mt_weights w, merged;
    int rc = mt_weights_from_ckpt(ck, &w, err);
    mt_ckpt_close(ck);
    if (rc) {
        free(tmpl);
        return -1;
    }
    /* a default only where the vocabulary says which: a wrong tokenizer would load and talk garbage */
    if (!o.tokenizer) o.tokenizer = w.cfg.vocab_size == 256 ? "byte" : w.cfg.vocab_size == 50257 ? "gpt2" : NULL;
    if (!o.tokenizer && !lora) {
        mt_errorf(err, "which tokenizer %s was trained with is not known from its vocabulary of %d: pass "
                       "--tokenizer byte|gpt2|hf:PATH/tokenizer.json", ckpt, w.cfg.vocab_size);
        mt_weights_free(&w);
        free(tmpl);
        return -1;
    }
    o.name = ckpt;
    if (lora) {
        rc = mt_gguf_export_lora(out, &w, ckpt, err);
    } else if (mt_adapter_spec_active(&w.cfg.adapters)) {
        rc = mt_weights_load_frozen(&w, err);
        if (!rc) rc = mt_peft_merge(&w, &merged, err);
        if (!rc) {
            rc = mt_gguf_export(out, &merged, &o, err);
            mt_weights_free(&merged);
        }
    } else {
        rc = mt_gguf_export(out, &w, &o, err);
    }
    if (!rc)
        printf("exported %s (%s, %d layers, %d dim, %d heads, vocab %d) to %s as %s%s%s\n", ckpt,
               mt_gguf_arch(&w.cfg, NULL), w.cfg.n_layer, w.cfg.n_embd, w.cfg.n_head, w.cfg.vocab_size, out,
               lora ? "a LoRA adapter GGUF" : "GGUF ", lora ? "" : o.q4_k_m ? "q4_k_m" : mt_gguf_type_name(o.dtype),
               lora || !mt_adapter_spec_active(&w.cfg.adapters) ? "" : " (adapters merged)");
    mt_weights_free(&w);
    free(tmpl);
    return rc;
}

static int check_format(const char *fmt, int exporting, mt_error *err) {
    const char *list = exporting ? "hf, safetensors, llmc, peft, gguf or gguf-lora" : "hf, safetensors, llmc or peft";
    if (!fmt) return mt_errorf(err, "--format is required (%s)", list);
    if (strcmp(fmt, "hf") != 0 && strcmp(fmt, "safetensors") != 0 && strcmp(fmt, "llmc") != 0 && strcmp(fmt, "peft") != 0)
        return mt_errorf(err, "--format must be %s, got '%s'%s", list, fmt,
                         !exporting && !strncmp(fmt, "gguf", 4) ? " (GGUF is written by export only)" : "");
    return 0;
}

/* The GPT-2-only formats refuse another family's checkpoint by name. */
static int check_family(const char *fmt, const mt_model_config *cfg, mt_error *err) {
    if (strcmp(fmt, "hf") == 0 || strcmp(fmt, "peft") == 0 || cfg->family == MT_FAMILY_GPT2) return 0;
    return mt_errorf(err, "--format %s holds GPT-2 models; this checkpoint is a %s model: use --format hf", fmt,
                     mt_family_name(cfg->family));
}

/* Imported weights must be finite: an inf or NaN would surface as a NaN
 * loss or garbage text far from its cause. Names the first bad tensor. */
static int check_finite(const mt_weights *w, const char *in, mt_error *err) {
    for (int u = 0; u < w->layout.n_units; u++)
        for (int i = 0; i < w->layout.units[u].n_tensors; i++) {
            const mt_tensor *t = &w->layout.units[u].t[i];
            const float *x = w->unit[u] + t->offset;
            if (!mt_found_nonfinite(x, t->numel)) continue;
            size_t k = 0;
            while (k < t->numel && isfinite(x[k])) k++;
            return mt_errorf(err, "%s: tensor %s holds a non-finite value (%g at element %zu of %zu): refusing to "
                                  "import it (the file is corrupt or the model diverged)",
                             in, t->name, (double)x[k], k, t->numel);
        }
    return 0;
}

int mt_cli_export(int argc, char **argv) {
    const char *ckpt = NULL, *format = NULL, *out = NULL, *dtype = "fp32", *tokenizer = NULL, *vocab_dir = NULL,
               *chat_template = NULL;
    int help = 0;
    float shard_mb = 0.0f;
    mt_arg spec[] = {
        {"ckpt", MT_ARG_STR, &ckpt, "checkpoint directory to read", 0},
        {"format", MT_ARG_STR, &format, "hf (a Hugging Face model directory, any family), safetensors (one GPT-2 "
                                        "file, Hugging Face names), llmc (llm.c fp32 model file), peft (a --peft lora "
                                        "run's adapters as a Hugging Face peft directory), gguf (llama.cpp's model "
                                        "file; a --peft / --freeze run merged into its base) or gguf-lora (a --peft "
                                        "lora run's adapter as a llama.cpp LoRA adapter GGUF)", 0},
        {"out", MT_ARG_STR, &out, "output file (hf: directory)", 0},
        {"dtype", MT_ARG_STR, &dtype, "hf: tensor type fp32 | bf16 | fp16 (default fp32); gguf: the matrices' "
                                      "type f32 | f16 | bf16 | q8_0 | q4_0 | q4_k | q6_k | q4_k_m (norms and biases stay f32)", 0},
        {"tokenizer", MT_ARG_STR, &tokenizer, "gguf: the tokenizer written into the file: byte | gpt2 | "
                                              "hf:PATH/tokenizer.json (default: byte for a vocabulary of 256, gpt2 "
                                              "for 50257, else required); hf: also write its tokenizer files, "
                                              "tokenizer_config.json and generation_config.json", 0},
        {"vocab-dir", MT_ARG_STR, &vocab_dir, "gguf with --tokenizer gpt2: directory with encoder.json and vocab.bpe", 0},
        {"chat-template", MT_ARG_STR, &chat_template, "gguf, hf: a file holding the Jinja chat template to embed "
                                                      "(default: tokenizer_config.json's beside tokenizer.json)", 0},
        {"shard-mb", MT_ARG_FLOAT, &shard_mb, "hf: split the weights into files of at most this many MB with "
                                              "model.safetensors.index.json (default: one file)", 0},
        {"help", MT_ARG_FLAG, &help, "show this help", 0},
    };
    mt_error err = {{0}};
    if (mt_args_parse(argc, argv, spec, NARGS(spec), NULL, 0, NULL, &err)) return mt_cli_fail("export", &err);
    if (help) {
        mt_args_usage("export", "--ckpt DIR --format hf|safetensors|llmc|peft|gguf|gguf-lora --out FILE|DIR", spec, NARGS(spec));
        return 0;
    }
    if (!ckpt) { mt_errorf(&err, "--ckpt DIR is required"); return mt_cli_fail("export", &err); }
    if (!out) { mt_errorf(&err, "--out FILE is required"); return mt_cli_fail("export", &err); }
    if (format && (!strcmp(format, "gguf") || !strcmp(format, "gguf-lora")) && mt_arg_seen(spec, NARGS(spec), "shard-mb")) {
        mt_errorf(&err, "--shard-mb goes with --format hf (a GGUF is one file)");
        return mt_cli_fail("export", &err);
    }
    if (format && (!strcmp(format, "gguf") || !strcmp(format, "gguf-lora")))
        return export_gguf(ckpt, format, out, dtype, tokenizer, vocab_dir, chat_template, &err) ? mt_cli_fail("export", &err)
                                                                                                  : 0;
    if ((tokenizer || vocab_dir || chat_template) && (!format || strcmp(format, "hf"))) {
        mt_errorf(&err, "--tokenizer, --vocab-dir and --chat-template go with --format gguf or hf");
        return mt_cli_fail("export", &err);
    }
    if ((vocab_dir || chat_template) && !tokenizer) {
        mt_errorf(&err, "--vocab-dir and --chat-template go with --tokenizer for --format hf");
        return mt_cli_fail("export", &err);
    }
    if (check_format(format, 1, &err)) return mt_cli_fail("export", &err);
    mt_dtype dt = MT_FP32;
    if (mt_dtype_parse(dtype, &dt)) {
        mt_errorf(&err, "--dtype must be fp32, bf16 or fp16, got '%s'", dtype);
        return mt_cli_fail("export", &err);
    }
    if (!(shard_mb >= 0.0f)) {
        mt_errorf(&err, "--shard-mb must be >= 0, got %g", (double)shard_mb);
        return mt_cli_fail("export", &err);
    }
    mt_ckpt *ck = mt_ckpt_open(ckpt, &err);
    if (!ck) return mt_cli_fail("export", &err);
    mt_weights w;
    int rc = mt_weights_from_ckpt(ck, &w, &err);
    mt_ckpt_close(ck);
    if (rc) return mt_cli_fail("export", &err);
    rc = check_family(format, &w.cfg, &err);
    if (!rc && strcmp(format, "peft") && mt_adapter_spec_active(&w.cfg.adapters))
        rc = mt_errorf(&err, "%s holds only what a --peft / --freeze run trained: export the adapters with --format "
                             "peft, or fold them into the base first (`meshtrain merge --ckpt %s --out DIR`)", ckpt, ckpt);
    char *tmpl = NULL;
    size_t tl = 0;
    if (!rc && chat_template && mt_read_file(chat_template, 1 << 24, &tmpl, &tl, &err)) rc = -1;
    if (!rc)
        rc = strcmp(format, "peft") == 0 ? mt_peft_export(out, &w, &err)
             : strcmp(format, "hf") == 0     ? mt_hf_export(out, &w, dt, (size_t)((double)shard_mb * 1048576.0), &err) ||
                                               (tokenizer && mt_hf_dir_write_tokenizer(out, tokenizer, vocab_dir, tmpl,
                                                                                       w.cfg.seq_len, &err))
             : strcmp(format, "llmc") == 0 ? mt_llmc_export(out, &w, &err)
                                           : mt_safetensors_export_gpt2(out, &w, &err);
    if (!rc)
        printf("exported %s (%d layers, %d dim, %d heads, vocab %d, %zu parameters) to %s as %s\n", ckpt,
               w.cfg.n_layer, w.cfg.n_embd, w.cfg.n_head, w.cfg.vocab_size, w.layout.total_params, out, format);
    mt_weights_free(&w);
    free(tmpl);
    return rc ? mt_cli_fail("export", &err) : 0;
}

int mt_cli_import(int argc, char **argv) {
    const char *in = NULL, *format = NULL, *out = NULL, *base = NULL;
    int heads = 0, help = 0;
    mt_arg spec[] = {
        {"format", MT_ARG_STR, &format, "hf (a Hugging Face model directory), safetensors, llmc or peft (a Hugging "
                                        "Face peft LoRA adapter directory, onto --base)", 0},
        {"base", MT_ARG_STR, &base, "peft: the checkpoint of the model the adapter adapts", 0},
        {"in", MT_ARG_STR, &in, "input file (hf: directory with config.json)", 0},
        {"heads", MT_ARG_INT, &heads, "attention heads (safetensors: else from config.json beside the file)", 0},
        {"out", MT_ARG_STR, &out, "checkpoint directory to create", 0},
        {"help", MT_ARG_FLAG, &help, "show this help", 0},
    };
    mt_error err = {{0}};
    if (mt_args_parse(argc, argv, spec, NARGS(spec), NULL, 0, NULL, &err)) return mt_cli_fail("import", &err);
    if (help) {
        mt_args_usage("import", "--format hf|safetensors|llmc --in FILE|DIR [--heads H] --out DIR", spec, NARGS(spec));
        return 0;
    }
    if (check_format(format, 0, &err)) return mt_cli_fail("import", &err);
    if (!in) { mt_errorf(&err, "--in FILE is required"); return mt_cli_fail("import", &err); }
    if (!out) { mt_errorf(&err, "--out DIR is required"); return mt_cli_fail("import", &err); }
    if (mt_arg_seen(spec, NARGS(spec), "heads") && heads < 1) {
        mt_errorf(&err, "--heads must be at least 1, got %d", heads);
        return mt_cli_fail("import", &err);
    }
    char man[4096];
    snprintf(man, sizeof man, "%s/manifest.json", out);
    if (access(man, F_OK) == 0) {
        mt_errorf(&err, "%s already holds a checkpoint (%s exists); choose a new --out directory", out, man);
        return mt_cli_fail("import", &err);
    }
    if ((strcmp(format, "peft") == 0) != (base != NULL)) {
        mt_errorf(&err, base ? "--base goes with --format peft" : "--format peft needs --base CKPT (the model the adapter adapts)");
        return mt_cli_fail("import", &err);
    }
    mt_weights w;
    int rc = strcmp(format, "peft") == 0   ? mt_peft_import(in, base, &w, &err)
             : strcmp(format, "hf") == 0   ? mt_hf_import(in, &w, &err)
             : strcmp(format, "llmc") == 0 ? mt_llmc_import(in, heads, &w, &err)
                                           : mt_safetensors_import_gpt2(in, heads, &w, &err);
    if (rc) return mt_cli_fail("import", &err);
    rc = check_finite(&w, in, &err);
    if (!rc) rc = mt_weights_to_ckpt(out, &w, 0, &err);
    if (!rc)
        printf("imported %s (%d layers, %d dim, %d heads, vocab %d padded to %d, context %d, %zu parameters) into %s\n", in,
               w.cfg.n_layer, w.cfg.n_embd, w.cfg.n_head, w.cfg.vocab_size, w.cfg.padded_vocab, w.cfg.seq_len,
               w.layout.total_params, out);
    mt_weights_free(&w);
    return rc ? mt_cli_fail("import", &err) : 0;
}
