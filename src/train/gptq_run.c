/* GPTQ over a whole model, block by block (see gptq_run.h). */
#include "train/gptq_run.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "models/model.h"

#define MAX_GEMMS 16

/* The Hessians of the current block's GEMMs, filled by the model's hook. */
typedef struct {
    int unit;   /* the block unit being calibrated (-1: none) */
    int n;
    struct {
        int k, span, cols;
        double *H;
    } g[MAX_GEMMS];
} calib;

static void on_linear_input(void *ctx, int u, int k, int n, const float *inp, int N, int C) {
    calib *c = ctx;
    if (u != c->unit) return;
    int i = 0;
    while (i < c->n && c->g[i].k != k) i++;
    if (i == c->n) {
        if (c->n == MAX_GEMMS) mt_die("GPTQ: more than %d linear layers in one block", MAX_GEMMS);
        c->g[i].k = k, c->g[i].span = n, c->g[i].cols = C;
        c->g[i].H = mt_xcalloc((size_t)C * (size_t)C, sizeof(double), "GPTQ Hessian");
        c->n++;
    }
    mt_gptq_hessian_add(c->g[i].H, inp, N, C);
}

void mt_gptq_results_free(const mt_weights *w, mt_gptq_result **res) {
    if (!res) return;
    for (int u = 0; u < w->layout.n_units; u++) {
        for (int i = 0; res[u] && i < w->layout.units[u].n_tensors; i++) mt_gptq_result_free(&res[u][i]);
        free(res[u]);
    }
    free(res);
}

/* The input of block l for global sample g: the embedding of its tokens (l
 * == 0), or its cached output of block l - 1. */
static void set_input(mt_model *m, const mt_fwd_ctx *fc, const uint32_t *tokens, int64_t g, int l, const float *cached,
                      size_t act) {
    int T = m->acts.T;
    for (int t = 0; t < T; t++) m->acts.h_tokens[t] = (int32_t)tokens[g * T + t], m->acts.h_targets[t] = -1;
    m->acts.h_sample_ids[0] = (uint64_t)g;
    mt_model_upload_batch(m, &m->acts);
    if (l == 0) mt_unit_forward(m, 0, fc);
    else memcpy(mt_model_block_out(m, l - 1), cached, act * sizeof(float));
}

/* GPTQ's per-block calibration and its packed layout cover dense blocks; a mixture-of-experts block (a
 * router, experts seen only by their routed tokens) is refused with one line, not half-quantized. */
static int refuse_moe(const mt_weights *w, const char *method, mt_error *err) {
    if (!w->cfg.num_experts) return 0;
    return mt_errorf(err, "{method} %s does not quantize mixture-of-experts models ({moe-experts} %d): the router and "
                          "the experts, calibrated by their routed tokens, have no GPTQ layout here; for QLoRA on "
                          "this model use {quantize-base} nf4 or int8 at train time",
                     method, w->cfg.num_experts);
}

int mt_gptq_run(mt_weights *w, const uint32_t *tokens, size_t ntok, int samples, const mt_gptq_opts *o,
                mt_comm *world, int verbose, mt_gptq_result ***res_out, mt_error *err) {
    *res_out = NULL;
    if (refuse_moe(w, "gptq", err)) return -1;
    mt_model_config cfg = w->cfg;
    int T = cfg.seq_len, C = cfg.n_embd, L = cfg.n_layer;
    if (mt_adapter_spec_active(&cfg.adapters))
        return mt_errorf(err, "this checkpoint holds only what a {peft} / {freeze} run trained: fold it into its base "
                              "first (`meshtrain merge`), then quantize");
    if (samples < 1) return mt_errorf(err, "{calib-samples} must be >= 1, got %d", samples);
    if ((size_t)samples * (size_t)T > ntok)
        return mt_errorf(err, "the calibration shard holds %zu tokens: %d samples of the model's %d-token context "
                              "need %zu; give a larger {calib} shard or fewer {calib-samples}",
                         ntok, samples, T, (size_t)samples * (size_t)T);
    for (size_t i = 0; i < (size_t)samples * (size_t)T; i++)
        if (tokens[i] >= (uint32_t)cfg.vocab_size)
            return mt_errorf(err, "calibration token %zu is %u, outside the model's vocabulary of %d", i, tokens[i],
                             cfg.vocab_size);
    cfg.dropout = 0.0f;
    int rank = mt_comm_rank(world), ranks = mt_comm_size(world);
    int mine = samples / ranks + (rank < samples % ranks);
    mt_backend be = mt_backend_cpu(MT_GEMM_DEFAULT); /* this subcommand's process: the CPU */
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_model m;
    mt_model_create(&m, &be, &cfg, 1, T, 0, &mem);
    for (int u = 0; u < m.layout.n_units; u++)
        op_copy_from_host(&be, m.params[u], w->unit[u], m.layout.units[u].numel * sizeof(float));
    mt_model_params_changed(&m);
    mt_gptq_result **res = mt_xcalloc((size_t)w->layout.n_units, sizeof *res, "GPTQ results");
    for (int u = 0; u < w->layout.n_units; u++)
        res[u] = mt_xcalloc((size_t)w->layout.units[u].n_tensors, sizeof **res, "GPTQ results");
    size_t act = (size_t)T * (size_t)C;
    float *cache = mt_xmalloc((size_t)(mine > 0 ? mine : 1) * act * sizeof(float), "GPTQ block inputs");
    calib cb = {.unit = -1};
    m.linear_input_hook = on_linear_input;
    m.linear_input_ctx = &cb;
    mt_fwd_ctx fc = {0, 0, 0.0f, 0.0f};
    int rc = 0;
    for (int l = 0; l < L && !rc; l++) {
        int u = l + 1;
        cb.unit = u;
        for (int s = 0; s < mine; s++) {
            set_input(&m, &fc, tokens, rank + s * ranks, l, cache + (size_t)s * act, act);
            mt_unit_forward(&m, u, &fc);
        }
        cb.unit = -1;
        for (int i = 0; i < cb.n && !rc; i++) {
            size_t hn = (size_t)cb.g[i].cols * (size_t)cb.g[i].cols;
            if (ranks > 1) mt_comm_allreduce_ctl(world, cb.g[i].H, cb.g[i].H, hn, MT_COMM_F64, MT_COMM_SUM);
            double *Hc = mt_xmalloc(hn * sizeof(double), "GPTQ Hessian copy");
            for (int j = 0; j < cb.g[i].span && !rc; j++) {
                int k = cb.g[i].k + j;
                const mt_tensor *t = &m.layout.units[u].t[k];
                float *wt = m.params[u] + t->offset;
                memcpy(Hc, cb.g[i].H, hn * sizeof(double));
                rc = mt_gptq_quantize(o, wt, t->shape[0], t->shape[1], Hc, t->name, &res[u][k], err);
                if (rc) break;
                if (!mt_gptq_packable(o->bits, t->shape[0], t->shape[1])) {
                    rc = mt_errorf(err, "GPTQ: %s is [%lld, %lld]; the Hugging Face layout packs %d codes per int32 "
                                        "along both dimensions, which must be multiples of %d",
                                   t->name, (long long)t->shape[0], (long long)t->shape[1], 32 / o->bits,
                                   32 / o->bits);
                    break;
                }
                mt_gptq_dequant(&res[u][k], wt);
                memcpy(w->unit[u] + t->offset, wt, t->numel * sizeof(float));
            }
            free(Hc);
        }
        mt_model_params_changed(&m);
        if (!rc && verbose && rank == 0)
            printf("gptq: block %d/%d: %d linear layers quantized from %d samples\n", l + 1, L, cb.n, samples);
        for (int i = 0; i < cb.n; i++) free(cb.g[i].H);
        cb.n = 0;
        if (l + 1 < L)
            for (int s = 0; s < mine && !rc; s++) { /* the next block's inputs, through the quantized block */
                set_input(&m, &fc, tokens, rank + s * ranks, l, cache + (size_t)s * act, act);
                mt_unit_forward(&m, u, &fc);
                memcpy(cache + (size_t)s * act, mt_model_block_out(&m, l), act * sizeof(float));
            }
    }
    free(cache);
    mt_model_free(&m);
    if (rc) mt_gptq_results_free(w, res);
    else *res_out = res;
    return rc;
}

int mt_gptq_rtn(mt_weights *w, const mt_gptq_opts *o, mt_gptq_result ***res_out, mt_error *err) {
    *res_out = NULL;
    if (refuse_moe(w, "rtn", err)) return -1;
    const mt_layout *L = &w->layout;
    mt_gptq_result **res = mt_xcalloc((size_t)L->n_units, sizeof *res, "RTN results");
    int rc = 0;
    for (int u = 0; u < L->n_units; u++) {
        res[u] = mt_xcalloc((size_t)L->units[u].n_tensors, sizeof **res, "RTN results");
        for (int i = 0; i < L->units[u].n_tensors && !rc && L->units[u].role == MT_UNIT_BLOCK; i++) {
            const mt_tensor *t = &L->units[u].t[i];
            if (t->ndim != 2) continue;
            int64_t C = t->gshape[1];
            double *H = mt_xcalloc((size_t)(C * C), sizeof(double), "identity");
            for (int64_t c = 0; c < C; c++) H[c * C + c] = 1.0;
            rc = mt_gptq_quantize(o, w->unit[u] + t->offset, t->gshape[0], C, H, t->name, &res[u][i], err);
            free(H);
            if (!rc) mt_gptq_dequant(&res[u][i], w->unit[u] + t->offset);
        }
    }
    if (rc) mt_gptq_results_free(w, res);
    else *res_out = res;
    return rc;
}
