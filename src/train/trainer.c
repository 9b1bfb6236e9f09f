#include "train/trainer.h"
#include "ops/ops.h"
#include "train/train_io.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mt_train_opts_defaults(mt_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->cfg.n_layer = 4;
    o->cfg.n_embd = 128;
    o->cfg.n_head = 4;
    o->cfg.vocab_size = 256;
    o->cfg.padded_vocab = 256;
    o->cfg.seq_len = 64;
    o->batch = 8;
    o->micro_batch = 0; /* = batch */
    o->steps = 10;
    o->seed = 1337;
    o->opt = (mt_opt_hparams){MT_OPT_ADAMW, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.9f};
    o->lr = (mt_lr_schedule){MT_LR_CONSTANT, 3e-4f, 0.0f, 0, 0};
    o->grad_clip = 1.0f;
    o->order = MT_ORDER_SHUFFLED;
    o->eval_batches = 8;
    o->log_every = 1;
}

static void alloc_opt_state(mt_trainer *tr) {
    const mt_gpt_layout *l = &tr->model.layout;
    int ns = mt_opt_state_count(tr->o.opt.kind);
    for (int s = 0; s < ns; s++) {
        tr->opt_state[s] = mt_xcalloc((size_t)l->n_units, sizeof(float *), "optimizer state table");
        for (int u = 0; u < l->n_units; u++)
            tr->opt_state[s][u] = mt_mem_alloc(&tr->mem, MT_MEM_OPTIM, l->units[u].numel * sizeof(float),
                                               "optimizer state");
    }
}

int mt_trainer_init(mt_trainer *tr, const mt_train_opts *o, mt_error *err) {
    memset(tr, 0, sizeof *tr);
    tr->o = *o;
    mt_train_opts *op = &tr->o;
    if (op->micro_batch <= 0) op->micro_batch = op->batch;
    if (op->batch < 1) return mt_errorf(err, "--batch must be >= 1, got %d", op->batch);
    if (op->batch % op->micro_batch != 0)
        return mt_errorf(err, "--batch %d is not a multiple of --micro-batch %d", op->batch, op->micro_batch);
    if (op->steps < 0) return mt_errorf(err, "--steps must be >= 0, got %lld", (long long)op->steps);
    op->lr.lr = op->opt.lr;
    op->lr.total_steps = op->steps;
    if (op->lr.warmup < 0) return mt_errorf(err, "--warmup must be >= 0");
    if (!(op->opt.lr >= 0)) return mt_errorf(err, "--lr must be >= 0");
    if (op->init_from && op->resume) return mt_errorf(err, "--init-from and --resume cannot be combined");
    if (op->resume && !op->ckpt_dir) return mt_errorf(err, "--resume needs --ckpt-dir");

    /* A checkpoint to start from decides the model shape. */
    const char *from = op->init_from ? op->init_from : (op->resume ? op->ckpt_dir : NULL);
    mt_ckpt_info info;
    memset(&info, 0, sizeof info);
    if (from) {
        if (mt_train_ckpt_peek(from, &info, err)) return -1;
        if (op->resume && info.has_config) {
            op->cfg.dropout = op->cfg.dropout; /* dropout may differ only by flag; keep the run's */
            float d = op->cfg.dropout;
            op->cfg = info.cfg;
            op->cfg.dropout = d;
        } else if (op->init_from) {
            float d = op->cfg.dropout;
            op->cfg = info.cfg;
            op->cfg.dropout = d;
        }
    }
    if (mt_gpt_config_validate(&op->cfg, err)) return -1;

    if (!op->train_path) return mt_errorf(err, "--train FILE is required");
    if (mt_train_read_tokens(op->train_path, &tr->train_tokens, &tr->n_train, err)) return -1;
    if (mt_loader_init(&tr->train_ld, tr->train_tokens, tr->n_train, op->cfg.seq_len, op->batch, op->order, op->seed,
                       op->cfg.vocab_size, err))
        return -1;
    if (op->val_path) {
        if (mt_train_read_tokens(op->val_path, &tr->val_tokens, &tr->n_val, err)) return -1;
        if (mt_loader_init(&tr->val_ld, tr->val_tokens, tr->n_val, op->cfg.seq_len, op->micro_batch,
                           MT_ORDER_SEQUENTIAL, op->seed, op->cfg.vocab_size, err))
            return -1;
        tr->has_val = 1;
    }

    mt_model_create(&tr->model, &op->cfg, op->micro_batch, op->cfg.seq_len, op->seed, &tr->mem);
    alloc_opt_state(tr);
    if (from) {
        if (mt_train_ckpt_load(tr, from, op->resume, err)) return -1;
    }
    if (op->metrics_path) {
        tr->metrics = fopen(op->metrics_path, op->resume ? "a" : "w");
        if (!tr->metrics) return mt_errorf(err, "cannot open --metrics file '%s' for writing", op->metrics_path);
    }
    return 0;
}

static double grad_sumsq(mt_trainer *tr) {
    double s = 0.0;
    for (int u = 0; u < tr->model.layout.n_units; u++) s += op_sumsq(tr->model.grads[u], tr->model.layout.units[u].numel);
    return s;
}

double mt_trainer_step(mt_trainer *tr) {
    mt_model *m = &tr->model;
    mt_train_opts *o = &tr->o;
    int b = o->micro_batch, T = o->cfg.seq_len, accum = o->batch / b;
    mt_fwd_ctx fc = {1, (uint32_t)tr->step};
    /* The loader never yields ignored (-1) targets, so the loss is the mean
     * over all B*T targets of the global batch. */
    double count = (double)o->batch * T;
    float dscale = (float)(1.0 / count);
    mt_model_zero_grads(m);
    double loss_sum = 0.0;
    uint64_t g0 = (uint64_t)tr->step * (uint64_t)o->batch;
    for (int j = 0; j < accum; j++) {
        mt_loader_fill(&tr->train_ld, g0 + (uint64_t)j * b, b, m->acts.tokens, m->acts.targets, m->acts.sample_ids);
        loss_sum += mt_model_forward(m, &fc, dscale);
        mt_model_backward(m, &fc);
    }
    if (o->dump_grads && tr->step == 0) mt_train_dump_grads(tr, o->dump_grads);
    double norm = sqrt(grad_sumsq(tr));
    float coef = mt_clip_coef(norm, o->grad_clip);
    float lr = mt_lr_at(&o->lr, tr->step);
    int64_t t = tr->step + 1;
    int ns = mt_opt_state_count(o->opt.kind);
    for (int u = 0; u < m->layout.n_units; u++) {
        float *st[2] = {tr->opt_state[0][u], ns > 1 ? tr->opt_state[1][u] : NULL};
        mt_opt_update_range(&o->opt, &m->layout.units[u], 0, m->layout.units[u].numel, m->params[u], m->grads[u], st,
                            lr, t, coef);
    }
    tr->step++;
    tr->last_norm = norm;
    tr->last_loss = loss_sum / count;
    return tr->last_loss;
}

double mt_trainer_eval(mt_trainer *tr) {
    mt_model *m = &tr->model;
    int b = tr->o.micro_batch, T = tr->o.cfg.seq_len;
    mt_fwd_ctx fc = {0, (uint32_t)tr->step};
    double sum = 0.0;
    int nb = tr->o.eval_batches > 0 ? tr->o.eval_batches : 1;
    for (int k = 0; k < nb; k++) {
        mt_loader_fill(&tr->val_ld, (uint64_t)k * b, b, m->acts.tokens, m->acts.targets, m->acts.sample_ids);
        sum += mt_model_forward(m, &fc, 0.0f);
    }
    return sum / ((double)nb * b * T);
}

int mt_trainer_run(mt_trainer *tr, mt_error *err) {
    mt_train_opts *o = &tr->o;
    double flops_tok = mt_model_flops_per_token(&tr->model.layout, o->cfg.seq_len);
    double tokens = (double)o->batch * o->cfg.seq_len;
    int64_t saved = o->resume ? tr->step : -1;
    while (tr->step < o->steps) {
        double t0 = now_s();
        float lr = mt_lr_at(&o->lr, tr->step);
        double loss = mt_trainer_step(tr);
        double ms = (now_s() - t0) * 1e3;
        double tps = tokens / (ms * 1e-3), gflops = flops_tok * tps * 1e-9;
        if (!isfinite(loss)) return mt_errorf(err, "loss became %g at step %lld; lower --lr or enable --grad-clip", loss, (long long)tr->step);
        if (o->log_every > 0 && (tr->step % o->log_every == 0 || tr->step == o->steps))
            printf("step %5lld/%lld | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | %.1f GFLOP/s\n",
                   (long long)tr->step, (long long)o->steps, loss, (double)lr, tr->last_norm, ms, tps, gflops);
        if (tr->metrics) {
            fprintf(tr->metrics,
                    "{\"step\":%lld,\"loss\":%.17g,\"lr\":%.9g,\"grad_norm\":%.17g,\"ms\":%.3f,\"tokens_per_s\":%.1f,\"gflops\":%.3f}\n",
                    (long long)tr->step, loss, (double)lr, tr->last_norm, ms, tps, gflops);
            fflush(tr->metrics);
        }
        if (tr->has_val && o->eval_every > 0 && (tr->step % o->eval_every == 0 || tr->step == o->steps)) {
            double vl = mt_trainer_eval(tr);
            printf("step %5lld | val_loss %.6f\n", (long long)tr->step, vl);
            if (tr->metrics) {
                fprintf(tr->metrics, "{\"step\":%lld,\"val_loss\":%.17g}\n", (long long)tr->step, vl);
                fflush(tr->metrics);
            }
        }
        if (o->ckpt_dir && o->ckpt_every > 0 && tr->step % o->ckpt_every == 0) {
            if (mt_trainer_save(tr, err)) return -1;
            saved = tr->step;
        }
    }
    /* Always leave a checkpoint of the final state (also of step 0, which
     * is how an initial model is written for export). */
    if (o->ckpt_dir && saved != tr->step && mt_trainer_save(tr, err)) return -1;
    fflush(stdout);
    return 0;
}

void mt_trainer_free(mt_trainer *tr) {
    if (tr->metrics) fclose(tr->metrics);
    int ns = mt_opt_state_count(tr->o.opt.kind);
    for (int s = 0; s < ns; s++) {
        if (!tr->opt_state[s]) continue;
        for (int u = 0; u < tr->model.layout.n_units; u++)
            mt_mem_free(&tr->mem, MT_MEM_OPTIM, tr->opt_state[s][u], tr->model.layout.units[u].numel * sizeof(float));
        free(tr->opt_state[s]);
    }
    mt_model_free(&tr->model);
    mt_loader_free(&tr->train_ld);
    mt_loader_free(&tr->val_ld);
    free(tr->train_tokens);
    free(tr->val_tokens);
}
