/* Training options: their defaults and their checks (train/opts.h). */
#include "train/opts.h"
#include "optim/loss_scaler.h"
#include "quant/qweight.h"
#include <math.h>
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
    o->opt = (mt_opt_hparams){MT_OPT_ADAMW, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.9f, 0.0f, 0.0f};
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

/* Every optimizer's hyperparameters from the train options. */
mt_opt_config mt_train_opts_optimizer_config(const mt_train_opts *o) {
    mt_opt_config c = {o->opt, o->adafactor_beta1, o->adafactor_scale_parameter, o->adafactor_clip};
    return c;
}

/* What the CUDA backend does not run yet (its kernel table has no entry for
 * the ops these need): refused before the run starts, naming the option,
 * rather than failing mid-step. Layouts of several processes (dp, ZeRO,
 * tp, sp, pp) run: their collectives of device buffers are host-staged
 * (comm.h, "Streams and device buffers"). */
static int check_cuda(const mt_train_opts *op, int world_size, mt_error *err) {
    const char *what = NULL;
    const mt_adapter_spec *a = &op->cfg.adapters;
    (void)world_size; /* dp, tp (with sequence parallelism), pp: their collectives of device buffers are host-staged */
    if (op->mesh.cp > 1) what = "{cp} > 1 (ring attention's block kernels)";
    /* LoRA (with its dropout), IA3 and NF4 / int8 bases run (cuda/adapters.cu, cuda/quant.cu); a GPTQ
     * base's dequantization and LLM.int8()'s outlier product have no kernel yet */
    else if (a->quant == MT_QUANT_GPTQ) what = "{quantize-base} gptq (no CUDA kernel for its row tiles yet)";
    else if (a->int8_threshold > 0.0f) what = "{int8-threshold} (no CUDA kernel for LLM.int8()'s outlier product yet)";
    else if (op->zeropp_hpz || op->zeropp_qwz || op->zeropp_qgz) what = "ZeRO++ ({zeropp-hpz}, {zeropp-qwz}, {zeropp-qgz})";
    else if (op->opt.kind != MT_OPT_ADAMW && op->opt.kind != MT_OPT_ADAM && op->opt.kind != MT_OPT_SGD)
        what = op->opt.kind == MT_OPT_ADAFACTOR ? "{optimizer} adafactor"
               : op->opt.kind == MT_OPT_ADAGRAD ? "{optimizer} adagrad"
                                                : "{optimizer} adamw8bit";
    else if (op->offload_dir) what = "{offload-optimizer}";
    else if (op->precision == MT_FP16) what = "{precision} fp16";
    else if (op->compress_acts == MT_ACT_COMPRESS_INT8) what = "{compress-activations} int8 (no CUDA int8 codec yet)";
    if (!what) return 0;
    return mt_errorf(err, "%s is not yet supported on {device} cuda (it runs adamw, adam or sgd, fp32 or bf16, "
                          "LoRA and IA3 on fp32, NF4 or int8 bases): use {device} cpu for it",
                     what);
}

/* Context parallelism: what it composes with (the sequence-length check
 * needs the model, mt_trainer_init). */
static int check_cp(const mt_train_opts *op, mt_error *err) {
    int cp = mt_mesh_cp_size(&op->mesh);
    if (cp == 1) return 0;
    if (op->cfg.num_experts)
        return mt_errorf(err, "{cp} %d with a mixture-of-experts model is not supported (the routing statistics and "
                              "capacity are per microbatch of whole sequences): use {cp} 1", cp);
    if (op->cfg.adapters.dropout > 0.0f)
        return mt_errorf(err, "{cp} %d with {lora-dropout} > 0 is not supported (its masks are keyed by the local "
                              "row): use {lora-dropout} 0 or {cp} 1", cp);
    if (op->dump_grads) return mt_errorf(err, "{dump-grads} needs {cp} 1 (it writes rank 0's gradient)");
    return 0;
}

int mt_train_opts_check(mt_train_opts *op, int world_size, mt_error *err) {
    if (op->device == MT_DEVICE_CUDA && check_cuda(op, world_size, err)) return -1;
    if (op->compress_acts != MT_ACT_COMPRESS_OFF) {
        const mt_adapter_spec *a = &op->cfg.adapters;
        const mt_family *fam = mt_family_get(op->cfg.family);
        if (!fam->block_buf_group)
            return mt_errorf(err, "{compress-activations} %s: {family} %s does not name its compressible activations "
                                  "yet (gpt2 and llama do); use {compress-activations} off",
                             mt_act_compress_name(op->compress_acts), fam->name);
        if (op->compress_acts == MT_ACT_COMPRESS_LOSSLESS) {
            if (op->precision == MT_FP32)
                return mt_errorf(err, "{compress-activations} lossless stores the linear layers' inputs in the 16 bits "
                                      "their GEMMs round them to: it needs {precision} bf16 or fp16 (under fp32 no "
                                      "encoding is exact); use bf16 or int8 for a lossy one");
            if (a->kind != MT_PEFT_NONE || a->quant || a->int8_threshold > 0.0f || op->cfg.num_experts)
                return mt_errorf(err, "{compress-activations} lossless is exact only where the linear layers' inputs "
                                      "feed nothing but their 16-bit GEMMs: not with adapters ({peft}), {quantize-base} "
                                      "or experts ({moe-experts}); use bf16 or int8");
        }
    }
    if (op->comm_nccl && op->device != MT_DEVICE_CUDA)
        return mt_errorf(err, "{comm} nccl reduces device buffers: it needs {device} cuda");
    if (op->sequence_parallel && op->mesh.tp < 2)
        return mt_errorf(err, "{sequence-parallel} splits the tensor-parallel group's rows: it needs {tp} > 1, got {tp} %d",
                         op->mesh.tp);
    mt_loss_scaler scaler; /* its ranges, checked by the scaler's own init */
    if (op->precision == MT_FP16 &&
        mt_loss_scaler_init(&scaler, op->loss_scale, op->loss_scale_window, 1.0f, 16777216.0f, err))
        return -1;
    if (op->test_overflow_step && op->precision != MT_FP16)
        return mt_errorf(err, "{test-overflow-step} exercises the fp16 loss scaler: it needs {precision} fp16");
    if ((op->test_nonfinite_step || op->on_nonfinite_skip) && op->precision == MT_FP16)
        return mt_errorf(err, "{on-nonfinite} and {test-nonfinite-step} apply to fp32 and bf16: under {precision} "
                              "fp16 the loss scaler skips non-finite steps (see {test-overflow-step})");
    const mt_optimizer *optimizer = mt_optimizer_get(op->opt.kind);
    if (op->mesh.tp > 1 && optimizer->whole_tensors)
        return mt_errorf(err, "{optimizer} %s with {tp} %d is not supported: its statistics of whole tensors "
                              "(factored row/column moments) of a tensor-parallel slice would need a sum over tp; "
                              "use adamw or adamw8bit",
                         optimizer->name, op->mesh.tp);
    if (op->cfg.adapters.int8_threshold > 0.0f && op->mesh.tp > 1)
        return mt_errorf(err, "{int8-threshold} runs LLM.int8() on whole weight rows of one process: it needs {tp} 1, "
                              "got {tp} %d", op->mesh.tp);
    if (mt_mesh_check(&op->mesh, world_size, err)) return -1;
    if (op->mesh.ep > 1 && (op->zeropp_hpz || op->zeropp_qwz || op->zeropp_qgz))
        return mt_errorf(err, "ZeRO++ ({zeropp-hpz}, {zeropp-qwz}, {zeropp-qgz}) is not supported with {ep} %d: "
                              "drop them or {ep}", op->mesh.ep);
    if (check_cp(op, err)) return -1;
    if (op->partition_activations && op->mesh.tp < 2)
        return mt_errorf(err, "{partition-activations} splits the kept block inputs over the tensor-parallel group: it "
                              "needs {tp} > 1, got {tp} %d", op->mesh.tp);
    if (op->partition_activations && op->recompute != MT_RECOMPUTE_FULL)
        return mt_errorf(err, "{partition-activations} partitions the block inputs that {recompute} full keeps (and "
                              "gathers them before each block's recomputation): it needs {recompute} full, got %s",
                         mt_recompute_name(op->recompute));

    if (op->test_slow_ms < 0 || (op->test_slow_ms > 0 && (op->test_slow_rank < 0 || op->test_slow_rank >= world_size)))
        return mt_errorf(err, "{test-slow-rank} R:MS needs a rank R in [0, %d) and MS >= 0, got %d:%d", world_size,
                         op->test_slow_rank, op->test_slow_ms);
    if (op->zero < 0 || op->zero > 3) return mt_errorf(err, "{zero} must be 0, 1, 2 or 3, got %d", op->zero);
    if (!(op->bucket_mb >= 0)) return mt_errorf(err, "{bucket-mb} must be >= 0 MB, got %g", (double)op->bucket_mb);
    if (op->bucket_mb > 0 && op->zero != 0)
        return mt_errorf(err, "{bucket-mb} applies to {zero} 0 only: ZeRO stages 1-3 reduce each unit's "
                              "shard-aligned gradient on its own (the unit is the bucket); drop {bucket-mb}");
    if (op->dump_grads && (op->zero != 0 || op->mesh.pp != 1 || op->mesh.tp != 1 || op->precision != MT_FP32))
        return mt_errorf(err, "{dump-grads} needs {zero} 0, {pp} 1 and {tp} 1, and {precision} fp32 (it writes the "
                              "full fp32 gradient of rank 0)");
    mt_opt_config opt_cfg = mt_train_opts_optimizer_config(op);
    if (mt_opt_config_check(&opt_cfg, err)) return -1;
    if (op->grad_reduce != MT_FP32 && !(op->grad_reduce == MT_BF16 && op->precision == MT_BF16))
        return mt_errorf(err, "{grad-reduce-dtype} %s needs {precision} bf16 (the gradients are held in bf16 "
                              "there); this run uses {precision} %s",
                         mt_dtype_name(op->grad_reduce), mt_dtype_name(op->precision));
    if (op->bucket_mb > 0 && op->precision != MT_FP32)
        return mt_errorf(err, "{bucket-mb} needs {precision} fp32: under mixed precision each unit's gradient is "
                              "reduced from its own fp32 buffer as its backward ends; drop {bucket-mb}");
    if (op->mesh.pp > 1 && op->zero >= 2)
        return mt_errorf(err, "{zero} %d with {pp} %d is not supported: ZeRO-2/3 reduce or gather every unit per "
                              "microbatch, which pipelining interleaves; use {zero} 0 or 1 with pipelines",
                         op->zero, op->mesh.pp);
    if (op->offload_dir && !(op->offload_buffer_mb > 0))
        return mt_errorf(err, "{offload-buffer-mb} must be > 0, got %g", (double)op->offload_buffer_mb);
    if (op->mesh.pp > 1 && op->bucket_mb > 0)
        return mt_errorf(err, "{bucket-mb} needs {pp} 1 (a stage reduces the units it holds one by one)");
    const int dp = op->mesh.dp;
    if (op->batch < 1) return mt_errorf(err, "{batch} must be >= 1, got %d", op->batch);
    if (op->micro_batch <= 0) {
        if (op->batch % dp)
            return mt_errorf(err, "{batch} %d is not a multiple of {dp} %d", op->batch, dp);
        op->micro_batch = op->batch / dp;
    }
    if (op->batch % (op->micro_batch * dp) != 0)
        return mt_errorf(err, "{batch} %d is not a multiple of {micro-batch} %d x {dp} %d (accumulation steps must be whole)",
                         op->batch, op->micro_batch, dp);
    if (op->steps < 0) return mt_errorf(err, "{steps} must be >= 0, got %lld", (long long)op->steps);
    op->lr.lr = op->opt.lr;
    op->lr.total_steps = op->steps;
    if (op->lr.warmup < 0) return mt_errorf(err, "{warmup} must be >= 0");
    if (!(op->opt.lr >= 0)) return mt_errorf(err, "{lr} must be >= 0");
    /* a value beyond the float range parses as a number but narrows to inf */
    if (!isfinite(op->opt.lr))
        return mt_errorf(err, "{lr} is not finite as a 32-bit float (got %g; at most 3.4e38): give a learning rate such as 3e-4",
                         (double)op->opt.lr);
    if (!isfinite(op->lr.min_lr))
        return mt_errorf(err, "{min-lr} is not finite as a 32-bit float (got %g; at most 3.4e38)", (double)op->lr.min_lr);
    if (!(op->lr.min_lr >= 0)) return mt_errorf(err, "{min-lr} must be >= 0, got %g", (double)op->lr.min_lr);
    if (!(op->moe_capacity >= 0.0f && isfinite(op->moe_capacity)))
        return mt_errorf(err, "{moe-capacity-factor} must be a finite number > 0, got %g (leave it out for dropless "
                              "routing)", (double)op->moe_capacity);
    if (!(op->grad_clip >= 0 && isfinite(op->grad_clip)))
        return mt_errorf(err, "{grad-clip} must be a finite number >= 0 (0 = off), got %g", (double)op->grad_clip);
    if (op->ckpt_every < 0) return mt_errorf(err, "{ckpt-every} must be >= 0 (0 = only at the end), got %lld", (long long)op->ckpt_every);
    if (op->eval_every < 0) return mt_errorf(err, "{eval-every} must be >= 0 (0 = never), got %lld", (long long)op->eval_every);
    if (op->eval_batches < 1) return mt_errorf(err, "{eval-batches} must be >= 1, got %d", op->eval_batches);
    if (op->eval_batch < 0 || (op->eval_batch > 0 && op->eval_batch % op->micro_batch))
        return mt_errorf(err, "{eval-batch} %d must be a multiple of {micro-batch} %d (0: {batch}, %d)", op->eval_batch,
                         op->micro_batch, op->batch);
    if (op->log_every < 0) return mt_errorf(err, "{log-every} must be >= 0 (0 = quiet), got %d", op->log_every);
    if (op->init_from && op->resume) return mt_errorf(err, "{init-from} and {resume} cannot be combined");
    if (op->resume && !op->ckpt_dir) return mt_errorf(err, "{resume} needs {ckpt-dir}");
    if (op->ckpt_async && !op->ckpt_dir) return mt_errorf(err, "{ckpt-async} needs {ckpt-dir} (and {ckpt-every} K)");
    return 0;
}
