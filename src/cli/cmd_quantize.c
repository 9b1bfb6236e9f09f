/* meshtrain quantize: a checkpoint -> a Hugging Face directory quantized as
 * bitsandbytes stores it (interop/bnb.h), for transformers' 4-bit / 8-bit
 * loading, or by GPTQ from calibration data in the GPTQ layout
 * (train/gptq_run.h, interop/gptq.h; under mpirun the calibration samples
 * are spread over the ranks and rank 0 writes the directory). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "interop/bnb.h"
#include "interop/gptq.h"
#include "train/gptq_run.h"
#include "train/train_io.h"
#include "cli/args.h"
#include "cli/cli.h"

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int quantize_gptq(const char *ckpt, const char *out, const char *calib, int samples, mt_gptq_opts *o,
                         mt_error *err) {
    mt_comm_ctx *ctx = mt_comm_ctx_create(MT_COMM_DEFAULT_TIMEOUT_S * 10, err);
    if (!ctx) return -1;
    mt_comm *world = mt_comm_world(ctx);
    int rank = mt_comm_rank(world);
    mt_weights w;
    memset(&w, 0, sizeof w);
    uint32_t *tok = NULL;
    size_t n = 0;
    mt_gptq_result **res = NULL;
    mt_ckpt *ck = mt_ckpt_open(ckpt, err);
    int rc = ck ? 0 : -1;
    if (!rc) {
        rc = mt_weights_from_ckpt(ck, &w, err);
        mt_ckpt_close(ck);
    }
    if (!rc && calib) rc = mt_train_read_tokens(calib, w.cfg.vocab_size, &tok, &n, err);
    if (!rc) rc = calib ? mt_gptq_run(&w, tok, n, samples, o, world, 1, &res, err) : mt_gptq_rtn(&w, o, &res, err);
    /* every rank holds the same results (the Hessians were summed): rank 0 writes */
    if (!rc && rank == 0) rc = mt_gptq_export(out, &w, res, o, err);
    if (!rc && rank == 0)
        printf("quantized %s (%s model, %d layers) by %s into %s: the blocks' linear weights as %d-bit codes, groups "
               "of %d%s, %s grid; damp %g, %d calibration samples of %d tokens\n",
               ckpt, mt_family_name(w.cfg.family), w.cfg.n_layer, calib ? "GPTQ" : "round-to-nearest", out, o->bits,
               o->group_size, o->act_order ? ", act order" : "", o->sym ? "symmetric" : "asymmetric", o->damp,
               calib ? samples : 0, w.cfg.seq_len);
    if (res) mt_gptq_results_free(&w, res);
    if (w.unit) mt_weights_free(&w);
    free(tok);
    mt_comm_ctx_free(ctx);
    return rc;
}

int mt_cli_quantize(int argc, char **argv) {
    const char *ckpt = NULL, *out = NULL, *format = NULL, *method = "bnb", *calib = NULL;
    int dq = 0, help = 0, bits = 4, group = 128, act_order = 0, asym = 0, samples = 128;
    float damp = 0.01f;
    mt_arg spec[] = {
        {"ckpt", MT_ARG_STR, &ckpt, "checkpoint of a whole model (a LoRA run: merge it first)", 0},
        {"method", MT_ARG_STR, &method, "bnb (bitsandbytes storage, --format) | gptq (GPTQ from --calib data, the Hugging Face GPTQ layout) | rtn (round-to-nearest on GPTQ's grid, same layout: the baseline) (default bnb)", 0},
        {"format", MT_ARG_STR, &format, "bnb: nf4 (bitsandbytes 4-bit NormalFloat, blocks of 64) | int8 (per-row absmax)", 0},
        {"double-quant", MT_ARG_FLAG, &dq, "nf4: the block absmaxes quantized to 8 bits as well", 0},
        {"bits", MT_ARG_INT, &bits, "gptq: 4 or 8 bits per weight (default 4)", 0},
        {"group-size", MT_ARG_INT, &group, "gptq: input columns per scale and zero point; divides every layer's inputs (default 128)", 0},
        {"act-order", MT_ARG_FLAG, &act_order, "gptq: quantize columns in decreasing Hessian diagonal (desc_act)", 0},
        {"damp", MT_ARG_FLOAT, &damp, "gptq: dampening, a fraction of the Hessian's mean diagonal (default 0.01)", 0},
        {"asym", MT_ARG_FLAG, &asym, "gptq: asymmetric grid with a zero point per group (default symmetric)", 0},
        {"calib", MT_ARG_STR, &calib, "gptq: token shard of calibration text (meshtrain tokenize)", 0},
        {"calib-samples", MT_ARG_INT, &samples, "gptq: windows of the model's context taken from the start of --calib (default 128)", 0},
        {"out", MT_ARG_STR, &out, "Hugging Face directory to write (model.safetensors, config.json)", 0},
        {"help", MT_ARG_FLAG, &help, "show this help", 0},
    };
    mt_error err = {{0}};
    int rank = mt_comm_process_rank();
#define FAIL() return rank ? 1 : mt_cli_fail("quantize", &err)
    if (mt_args_parse(argc, argv, spec, NARGS(spec), NULL, 0, NULL, &err)) FAIL();
    if (help) {
        if (rank == 0)
            mt_args_usage("quantize",
                          "--ckpt CKPT --out HFDIR (--format nf4|int8 [--double-quant] | --method gptq --calib SHARD "
                          "[--bits 4|8] [--group-size G] [--act-order] [--damp D] [--calib-samples N])",
                          spec, NARGS(spec));
        return 0;
    }
    if (!ckpt || !out) {
        mt_errorf(&err, "--ckpt and --out are required");
        FAIL();
    }
    if (!strcmp(method, "gptq") || !strcmp(method, "rtn")) {
        int rtn = !strcmp(method, "rtn");
        if (rtn && calib) {
            mt_errorf(&err, "--method rtn rounds each weight to nearest without calibration: drop --calib");
            FAIL();
        }
        if (!rtn && !calib) {
            mt_errorf(&err, "--method gptq needs calibration data: --calib SHARD (a token shard of text like the "
                            "model's, from meshtrain tokenize)");
            FAIL();
        }
        if (format || dq) {
            mt_errorf(&err, "--format and --double-quant are bitsandbytes' (--method bnb); GPTQ takes --bits");
            FAIL();
        }
        mt_gptq_opts o = {bits, group, act_order, !asym, (double)damp};
        /* the group size against each layer's columns is checked when the layer is reached */
        if (mt_gptq_opts_check(&o, group > 0 ? group : 1, &err)) FAIL();
        if (quantize_gptq(ckpt, out, rtn ? NULL : calib, samples, &o, &err)) FAIL();
        return 0;
    }
    if (strcmp(method, "bnb")) {
        mt_errorf(&err, "--method must be bnb, gptq or rtn, got '%s'", method);
        FAIL();
    }
    mt_quant_kind kind;
    if (!format) {
        mt_errorf(&err, "--format is required with --method bnb");
        FAIL();
    }
    if (mt_quant_kind_parse(format, &kind, &err) || kind == MT_QUANT_NONE || kind == MT_QUANT_GPTQ) {
        mt_errorf(&err, "--format must be nf4 or int8, got '%s'", format);
        FAIL();
    }
    if (dq && kind != MT_QUANT_NF4) {
        mt_errorf(&err, "--double-quant goes with --format nf4");
        FAIL();
    }
    mt_ckpt *ck = mt_ckpt_open(ckpt, &err);
    if (!ck) FAIL();
    mt_weights w;
    int rc = mt_weights_from_ckpt(ck, &w, &err);
    mt_ckpt_close(ck);
    if (rc) FAIL();
    rc = rank == 0 ? mt_bnb_export(out, &w, kind, dq, &err) : 0;
    if (!rc && rank == 0)
        printf("quantized %s (%s model, %d layers) into %s: the blocks' linear weights as bitsandbytes %s%s, the rest fp32\n",
               ckpt, mt_family_name(w.cfg.family), w.cfg.n_layer, out, format, dq ? " with double quantization" : "");
    mt_weights_free(&w);
    if (rc) FAIL();
    return 0;
#undef FAIL
}
