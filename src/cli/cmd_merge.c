/* meshtrain merge: a PEFT (or --freeze) run's checkpoint folded into a plain
 * checkpoint of the whole model (interop/peft.h: mt_peft_merge), with the
 * largest logit difference the folding caused on a batch of tokens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "interop/peft.h"
#include "quant/qweight.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "models/model.h"
#include "train/train_io.h"

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Tokens of one B x T batch: the start of `data` if given, else a fixed
 * pseudo-random sequence. */
static int fill_batch(mt_model *m, const char *data, int V, mt_error *err) {
    size_t N = (size_t)m->acts.B * (size_t)m->acts.T;
    uint32_t *tok = NULL;
    size_t n = 0;
    if (data && mt_train_read_tokens(data, V, &tok, &n, err)) return -1;
    if (data && n < N + 1) {
        free(tok);
        return mt_errorf(err, "--data %s holds %zu tokens, fewer than the %zu of one batch", data, n, N + 1);
    }
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i <= N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int32_t t = data ? (int32_t)tok[i] : (int32_t)(x % (uint64_t)V);
        if (i < N) m->acts.h_tokens[i] = t;
        if (i > 0) m->acts.h_targets[i - 1] = t;
    }
    for (int b = 0; b < m->acts.B; b++) m->acts.h_sample_ids[b] = (uint64_t)b;
    mt_model_upload_batch(m, &m->acts);
    free(tok);
    return 0;
}

/* The logits of a model over one batch, into out [N, V]. */
static void logits_of(mt_model *m, float *out) {
    mt_fwd_ctx fc = {0, 0, 0.0f, 0.0f};
    mt_model_forward(m, &fc, 0.0f);
    size_t N = (size_t)m->acts.B * (size_t)m->acts.T, V = (size_t)m->cfg.vocab_size, Vp = (size_t)m->cfg.padded_vocab;
    for (size_t i = 0; i < N; i++) memcpy(out + i * V, m->acts.logits + i * Vp, V * sizeof(float));
}

int mt_cli_merge(int argc, char **argv) {
    const char *ckpt = NULL, *out = NULL, *data = NULL;
    int help = 0, batch = 2;
    mt_arg spec[] = {
        {"ckpt", MT_ARG_STR, &ckpt, "checkpoint of a --peft lora (or --freeze) run", 0},
        {"out", MT_ARG_STR, &out, "checkpoint directory to create: the whole model, adapters folded in", 0},
        {"data", MT_ARG_STR, &data, "token shard whose first batch measures the logit difference (default: fixed "
                                    "pseudo-random tokens)", 0},
        {"batch", MT_ARG_INT, &batch, "sequences of that batch (default 2)", 0},
        {"help", MT_ARG_FLAG, &help, "show this help", 0},
    };
    mt_error err = {{0}};
    if (mt_args_parse(argc, argv, spec, NARGS(spec), NULL, 0, NULL, &err)) return mt_cli_fail("merge", &err);
    if (help) {
        mt_args_usage("merge", "--ckpt CKPT --out DIR [--data FILE]", spec, NARGS(spec));
        return 0;
    }
    if (!ckpt || !out) {
        mt_errorf(&err, "--ckpt CKPT and --out DIR are required");
        return mt_cli_fail("merge", &err);
    }
    if (batch < 1) {
        mt_errorf(&err, "--batch must be >= 1, got %d", batch);
        return mt_cli_fail("merge", &err);
    }
    char man[4200];
    snprintf(man, sizeof man, "%s/manifest.json", out);
    if (access(man, F_OK) == 0) {
        mt_errorf(&err, "%s already holds a checkpoint; choose a new --out directory", out);
        return mt_cli_fail("merge", &err);
    }
    mt_ckpt *ck = mt_ckpt_open(ckpt, &err);
    if (!ck) return mt_cli_fail("merge", &err);
    mt_weights w, merged;
    int rc = mt_weights_from_ckpt(ck, &w, &err);
    mt_ckpt_close(ck);
    if (rc) return mt_cli_fail("merge", &err);
    if (!mt_adapter_spec_active(&w.cfg.adapters)) {
        mt_weights_free(&w);
        mt_errorf(&err, "%s was not trained with --peft or --freeze: it is whole already", ckpt);
        return mt_cli_fail("merge", &err);
    }
    rc = mt_weights_load_frozen(&w, &err);
    if (!rc) rc = mt_peft_merge(&w, &merged, &err);
    if (rc) {
        mt_weights_free(&w);
        return mt_cli_fail("merge", &err);
    }
    /* the adapted model and the merged one on the same batch */
    mt_model_config cfg = w.cfg, mcfg = merged.cfg;
    cfg.dropout = mcfg.dropout = 0.0f;
    mt_backend be = mt_backend_cpu(MT_GEMM_DEFAULT);
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_model a, b;
    mt_model_create(&a, &be, &cfg, batch, cfg.seq_len, 0, &mem);
    mt_model_create(&b, &be, &mcfg, batch, mcfg.seq_len, 0, &mem);
    int gptq = cfg.adapters.quant == MT_QUANT_GPTQ;
    /* a GPTQ base's codes come from the directory its base was imported from, as training read them */
    if (gptq) rc = mt_model_read_frozen(&a, w.base, &err);
    for (int u = 0; u < a.layout.n_units && !rc; u++) {
        memcpy(a.params[u], w.unit[u], a.layout.units[u].numel * sizeof(float));
        memcpy(b.params[u], merged.unit[u], b.layout.units[u].numel * sizeof(float));
        /* the frozen tensors by name: w holds them in fp32, the model may hold some quantized */
        for (int i = 0; i < a.layout.units[u].n_frozen && !rc && !gptq; i++) {
            const mt_tensor *t = &a.layout.units[u].ft[i];
            int su;
            const mt_tensor *src = mt_layout_find_tensor(&w.layout, t->name, &su);
            const float *x = w.frozen[su] + src->offset;
            if (t->quant) rc = mt_model_set_quantized(&a, u, i, x, &err);
            else memcpy(a.frozen[u] + t->offset, x, t->numel * sizeof(float));
        }
    }
    mt_model_frozen_changed(&a);
    size_t nl = (size_t)batch * (size_t)cfg.seq_len * (size_t)cfg.vocab_size;
    float *la = mt_xmalloc(nl * sizeof(float), "logits"), *lb = mt_xmalloc(nl * sizeof(float), "logits");
    if (!rc) rc = fill_batch(&a, data, cfg.vocab_size, &err);
    if (!rc) rc = fill_batch(&b, data, cfg.vocab_size, &err);
    double diff = 0, mx = 0;
    if (!rc) {
        logits_of(&a, la);
        logits_of(&b, lb);
        for (size_t i = 0; i < nl; i++) {
            diff = fabs((double)la[i] - lb[i]) > diff ? fabs((double)la[i] - lb[i]) : diff;
            mx = fabs((double)la[i]) > mx ? fabs((double)la[i]) : mx;
        }
        if (!isfinite(diff)) rc = mt_errorf(&err, "the merged model's logits are not finite");
    }
    if (!rc) rc = mt_weights_to_ckpt(out, &merged, 0, &err);
    if (!rc)
        printf("merged %s (%s, base %s) into %s: largest logit difference %.3g (largest logit %.3g) over %d x %d tokens\n",
               ckpt, w.cfg.adapters.kind == MT_PEFT_NONE ? "--freeze" : mt_peft_kind_name(w.cfg.adapters.kind),
               w.base[0] ? w.base : "from the seed", out, diff, mx, batch, cfg.seq_len);
    free(la);
    free(lb);
    mt_model_free(&a);
    mt_model_free(&b);
    mt_weights_free(&merged);
    mt_weights_free(&w);
    return rc ? mt_cli_fail("merge", &err) : 0;
}
