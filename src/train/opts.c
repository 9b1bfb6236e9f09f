/* Training options: defaults (train/opts.h). */
#include "train/opts.h"
#include <string.h>

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
    o->adafactor_clip = 1.0f;
    o->order = MT_ORDER_SHUFFLED;
    o->eval_batches = 8;
    o->log_every = 1;
    o->pp_schedule = MT_PP_1F1B;
    o->pp_chunks = 1;
    o->offload_buffer_mb = 64.0f;
    o->precision = MT_FP32;
    o->grad_reduce = MT_FP32;
    o->gemm = MT_GEMM_DEFAULT;
    o->loss_scale = 65536.0f;
    o->loss_scale_window = 1000;
}
