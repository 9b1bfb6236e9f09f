/* meshtrain quantize: a checkpoint -> a Hugging Face directory quantized as
 * bitsandbytes stores it (interop/bnb.h), for transformers' 4-bit / 8-bit
 * loading. */
#include <stdio.h>
#include <string.h>
#include "interop/bnb.h"
#include "cli/args.h"
#include "cli/cli.h"

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

int mt_cli_quantize(int argc, char **argv) {
    const char *ckpt = NULL, *out = NULL, *format = NULL;
    int dq = 0, help = 0;
    mt_arg spec[] = {
        {"ckpt", MT_ARG_STR, &ckpt, "checkpoint of a whole model (a LoRA run: merge it first)", 0},
        {"format", MT_ARG_STR, &format, "nf4 (bitsandbytes 4-bit NormalFloat, blocks of 64) | int8 (per-row absmax)", 0},
        {"double-quant", MT_ARG_FLAG, &dq, "nf4: the block absmaxes quantized to 8 bits as well", 0},
        {"out", MT_ARG_STR, &out, "Hugging Face directory to write (model.safetensors, config.json)", 0},
        {"help", MT_ARG_FLAG, &help, "show this help", 0},
    };
    mt_error err = {{0}};
    if (mt_args_parse(argc, argv, spec, NARGS(spec), NULL, 0, NULL, &err)) return mt_cli_fail("quantize", &err);
    if (help) {
        mt_args_usage("quantize", "--ckpt CKPT --format nf4|int8 [--double-quant] --out HFDIR", spec, NARGS(spec));
        return 0;
    }
    mt_quant_kind kind;
    if (!ckpt || !out || !format) {
        mt_errorf(&err, "--ckpt, --format and --out are required");
        return mt_cli_fail("quantize", &err);
    }
    if (mt_quant_kind_parse(format, &kind, &err) || kind == MT_QUANT_NONE) {
        mt_errorf(&err, "--format must be nf4 or int8, got '%s'", format);
        return mt_cli_fail("quantize", &err);
    }
    if (dq && kind != MT_QUANT_NF4) {
        mt_errorf(&err, "--double-quant goes with --format nf4");
        return mt_cli_fail("quantize", &err);
    }
    mt_ckpt *ck = mt_ckpt_open(ckpt, &err);
    if (!ck) return mt_cli_fail("quantize", &err);
    mt_weights w;
    int rc = mt_weights_from_ckpt(ck, &w, &err);
    mt_ckpt_close(ck);
    if (rc) return mt_cli_fail("quantize", &err);
    rc = mt_bnb_export(out, &w, kind, dq, &err);
    if (!rc)
        printf("quantized %s (%s model, %d layers) into %s: the blocks' linear weights as bitsandbytes %s%s, the rest fp32\n",
               ckpt, mt_family_name(w.cfg.family), w.cfg.n_layer, out, format, dq ? " with double quantization" : "");
    mt_weights_free(&w);
    return rc ? mt_cli_fail("quantize", &err) : 0;
}
