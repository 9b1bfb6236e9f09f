/* meshtrain export / import: checkpoint <-> Hugging Face safetensors or
 * llm.c model file. See ckpt/safetensors.h and ckpt/llmc.h for the formats. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "ckpt/weights.h"
#include "ckpt/llmc.h"
#include "ckpt/safetensors.h"
#include "cli/args.h"
#include "cli/cli.h"

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int check_format(const char *fmt, mt_error *err) {
    if (!fmt) return mt_errorf(err, "--format is required (safetensors or llmc)");
    if (strcmp(fmt, "safetensors") != 0 && strcmp(fmt, "llmc") != 0)
        return mt_errorf(err, "--format must be safetensors or llmc, got '%s'", fmt);
    return 0;
}

int mt_cli_export(int argc, char **argv) {
    const char *ckpt = NULL, *format = NULL, *out = NULL;
    int help = 0;
    mt_arg spec[] = {
        {"ckpt", MT_ARG_STR, &ckpt, "checkpoint directory to read", 0},
        {"format", MT_ARG_STR, &format, "safetensors (Hugging Face GPT-2 names) or llmc (llm.c fp32 model file)", 0},
        {"out", MT_ARG_STR, &out, "output file", 0},
        {"help", MT_ARG_FLAG, &help, "show this help", 0},
    };
    mt_error err = {{0}};
    if (mt_args_parse(argc, argv, spec, NARGS(spec), NULL, 0, NULL, &err)) return mt_cli_fail("export", &err);
    if (help) {
        mt_args_usage("export", "--ckpt DIR --format safetensors|llmc --out FILE", spec, NARGS(spec));
        return 0;
    }
    if (!ckpt) { mt_errorf(&err, "--ckpt DIR is required"); return mt_cli_fail("export", &err); }
    if (!out) { mt_errorf(&err, "--out FILE is required"); return mt_cli_fail("export", &err); }
    if (check_format(format, &err)) return mt_cli_fail("export", &err);
    mt_ckpt *ck = mt_ckpt_open(ckpt, &err);
    if (!ck) return mt_cli_fail("export", &err);
    mt_weights w;
    int rc = mt_weights_from_ckpt(ck, &w, &err);
    mt_ckpt_close(ck);
    if (rc) return mt_cli_fail("export", &err);
    rc = strcmp(format, "llmc") == 0 ? mt_llmc_export(out, &w, &err) : mt_safetensors_export_gpt2(out, &w, &err);
    if (!rc)
        printf("exported %s (%d layers, %d dim, %d heads, vocab %d, %zu parameters) to %s as %s\n", ckpt,
               w.cfg.n_layer, w.cfg.n_embd, w.cfg.n_head, w.cfg.vocab_size, w.layout.total_params, out, format);
    mt_weights_free(&w);
    return rc ? mt_cli_fail("export", &err) : 0;
}

int mt_cli_import(int argc, char **argv) {
    const char *in = NULL, *format = NULL, *out = NULL;
    int heads = 0, help = 0;
    mt_arg spec[] = {
        {"format", MT_ARG_STR, &format, "safetensors or llmc", 0},
        {"in", MT_ARG_STR, &in, "input file", 0},
        {"heads", MT_ARG_INT, &heads, "attention heads (safetensors: else from config.json beside the file)", 0},
        {"out", MT_ARG_STR, &out, "checkpoint directory to create", 0},
        {"help", MT_ARG_FLAG, &help, "show this help", 0},
    };
    mt_error err = {{0}};
    if (mt_args_parse(argc, argv, spec, NARGS(spec), NULL, 0, NULL, &err)) return mt_cli_fail("import", &err);
    if (help) {
        mt_args_usage("import", "--format safetensors|llmc --in FILE [--heads H] --out DIR", spec, NARGS(spec));
        return 0;
    }
    if (check_format(format, &err)) return mt_cli_fail("import", &err);
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
    mt_weights w;
    int rc = strcmp(format, "llmc") == 0 ? mt_llmc_import(in, heads, &w, &err) : mt_safetensors_import_gpt2(in, heads, &w, &err);
    if (rc) return mt_cli_fail("import", &err);
    rc = mt_weights_to_ckpt(out, &w, 0, &err);
    if (!rc)
        printf("imported %s (%d layers, %d dim, %d heads, vocab %d padded to %d, context %d, %zu parameters) into %s\n", in,
               w.cfg.n_layer, w.cfg.n_embd, w.cfg.n_head, w.cfg.vocab_size, w.cfg.padded_vocab, w.cfg.seq_len,
               w.layout.total_params, out);
    mt_weights_free(&w);
    return rc ? mt_cli_fail("import", &err) : 0;
}
