/* The options of a training run, their defaults and their checks: what a
 * front end (the CLI, a config file, a program linking the library) fills
 * before mt_trainer_init. */
#ifndef MT_TRAIN_OPTS_H
#define MT_TRAIN_OPTS_H
#include <stdint.h>
#include "core/dtype.h"
#include "data/loader.h"
#include "models/model.h"
#include "optim/optimizer.h"
#include "parallel/mesh.h"
#include "parallel/pipeline_schedule.h"

typedef struct {
    mt_model_config cfg;
    int batch;           /* B: sequences per optimizer step */
    int micro_batch;     /* b: sequences per forward/backward */
    int64_t steps;
    uint64_t seed;
    mt_opt_hparams opt;
    mt_lr_schedule lr;   /* total_steps is filled from steps */
    float grad_clip;     /* 0 = off */
    /* mixture of experts: the model's loss terms and capacity, set on the model config whatever its source */
    float moe_aux_coef, moe_z_coef;
    float moe_capacity;  /* 0: dropless (the default) */
    float peak_gflops;   /* {peak-gflops}: a rank's peak GFLOP/s; > 0 adds "mfu" to the metrics */
    mt_data_order order;
    const char *train_path, *val_path;
    const char *metrics_path;
    const char *ckpt_dir;
    int64_t ckpt_every;
    int ckpt_async;      /* {ckpt-async}: {ckpt-every} saves are written by a thread while training goes on */
    int resume;
    const char *init_from;
    int init_seq_len;    /* {seq-len} given with {init-from}: a family without a position table trains at it (0: the checkpoint's) */
    int64_t eval_every;
    int eval_batches;
    int log_every;       /* print a line every k steps (1 = every step) */
    const char *dump_grads; /* test aid: write the first step's gradients (raw fp32, layout order) */
    mt_mesh_shape mesh;  /* dp x cp x pp x tp (+ shard group) */
    mt_cp_mode cp_mode;  /* {cp-mode}: how attention spans the {cp} ranks' chunks (models/ring_attention.h) */
    int zero;            /* ZeRO stage 0..3 */
    const char *report_json; /* memory per category and bytes sent per collective */
    int no_overlap;      /* measurement aid: wait for each unit's gradient reduction at once */
    float bucket_mb;     /* ZeRO-0: gradient all-reduces in messages of this many MB (0 = one per unit) */
    mt_pp_kind pp_schedule; /* pipeline schedule (default 1f1b) */
    int pp_chunks;       /* model chunks per pipeline rank (interleaved; default 1) */
    const char *pp_layers; /* "a,b,..." blocks per virtual stage (default: even split) */
    const char *trace_path; /* Chrome trace-event JSON of every rank's spans */
    mt_recompute recompute; /* activation recomputation */
    mt_act_compress compress_acts; /* {compress-activations}: the kept activations' storage (models/model.h) */
    int partition_activations; /* {partition-activations}: each tp rank keeps 1/tp of every block's kept input
                                  (models/model.h, "Partitioned activation checkpoints") */
    const char *offload_dir; /* optimizer state in a file in this directory (disk offload) */
    float offload_buffer_mb; /* resident budget for the streamed state (default 64) */
    int profile;         /* {profile}: time per category per step */
    int sequence_parallel; /* {sequence-parallel} (needs tp > 1) */
    mt_dtype precision;  /* {precision}: bf16/fp16 hold params and grads in 16 bits (parallel/zero.h),
                            GEMM operands in 16 bits, fp32 master weights */
    float adafactor_beta1; /* {adafactor-beta1}: 0 = no momentum (the factored state only) */
    int adafactor_scale_parameter; /* {adafactor-scale-parameter}: {lr} is relative to each tensor's RMS */
    float adafactor_clip;  /* {adafactor-clip}: update clipping threshold d (default 1) */
    mt_dtype grad_reduce; /* {grad-reduce-dtype}: fp32, or bf16 (with {precision} bf16) */
    mt_gemm_lib gemm;    /* {gemm}: the fp32 GEMM library of the linear layers */
    mt_device_kind device; /* {device}: cpu (default) or cuda (device/backend.h) */
    int gpus_per_node;     /* {gpus-per-node}: GPUs a node's ranks spread over (0: every GPU a process sees) */
    int comm_nccl;         /* {comm} nccl: device buffers reduced by NCCL (a GPU per rank) instead of host-staged MPI */
    float loss_scale;    /* fp16: initial dynamic loss scale */
    int64_t loss_scale_window; /* fp16: clean steps per doubling of the scale */
    int64_t test_overflow_step; /* test aid: the last rank finds an inf gradient at this step (1-based; 0 = never) */
    int64_t test_nonfinite_step; /* test aid (fp32/bf16): the same, for {on-nonfinite} */
    int test_slow_rank, test_slow_ms; /* test aid: world rank test_slow_rank sleeps test_slow_ms ms at the start of
                                         every step, outside communication (0 ms = off) */
    int on_nonfinite_skip; /* {on-nonfinite} skip: a step with a non-finite loss or gradient is left out
                              (default stop: the run ends with the step number) */
    int zeropp_hpz;        /* ZeRO++ hpZ group (consecutive ranks of the shard group; 0 = off): see zero.h */
    int zeropp_qwz;        /* ZeRO++ qwZ: int8 parameter all-gathers (zero.h) */
    int zeropp_qgz;        /* ZeRO++ qgZ: int4 two-hop gradient reduce-scatter (zero.h) */
    int eval_batch;        /* sequences per validation batch (0: {batch}); see mt_trainer_eval */
    const char *log_path;  /* {log-file}: rank 0 writes its progress lines there too */
    int allow_schedule_change; /* {allow-schedule-change}: a resume may change {steps}/{lr}/{min-lr}/{warmup}/{lr-schedule} */
    const char *option_prefix; /* how the front end names an option in messages: {name} -> prefix name
                                  (the CLI: "--"; NULL: the bare name), see core/error.h */
    const char *run_config; /* the run's settings as YAML (cli/config_file.h), saved beside every checkpoint (NULL: none) */
} mt_train_opts;

void mt_train_opts_defaults(mt_train_opts *o);
/* Checks the options alone (ranges, combinations, the mesh against
 * world_size ranks) and fills what follows from them (micro_batch 0: the
 * batch over dp; the LR schedule's peak and length). Pure: the same on every
 * rank, no I/O and no communication. */
int mt_train_opts_check(mt_train_opts *o, int world_size, mt_error *err);
/* Every optimizer's hyperparameters from the options. */
mt_opt_config mt_train_opts_optimizer_config(const mt_train_opts *o);

#endif
