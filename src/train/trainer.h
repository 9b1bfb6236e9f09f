/* The training loop: microbatches with gradient accumulation, global-norm
 * clipping, the optimizer step, evaluation, metrics and checkpoints. */
#ifndef MT_TRAIN_TRAINER_H
#define MT_TRAIN_TRAINER_H
#include <stdint.h>
#include <stdio.h>
#include "core/error.h"
#include "core/mem.h"
#include "data/loader.h"
#include "models/model.h"
#include "optim/optimizer.h"
#include "parallel/mesh.h"
#include "parallel/pipeline_schedule.h"
#include "core/trace.h"
#include "core/profile.h"
#include "optim/opt_state.h"
#include "parallel/zero.h"
#include "optim/loss_scaler.h"

typedef struct {
    mt_model_config cfg;
    int batch;           /* B: sequences per optimizer step */
    int micro_batch;     /* b: sequences per forward/backward */
    int64_t steps;
    uint64_t seed;
    mt_opt_hparams opt;
    mt_lr_schedule lr;   /* total_steps is filled from steps */
    float grad_clip;     /* 0 = off */
    float peak_gflops;   /* --peak-gflops: a rank's peak GFLOP/s; > 0 adds "mfu" to the metrics */
    mt_data_order order;
    const char *train_path, *val_path;
    const char *metrics_path;
    const char *ckpt_dir;
    int64_t ckpt_every;
    int resume;
    const char *init_from;
    int64_t eval_every;
    int eval_batches;
    int log_every;       /* print a line every k steps (1 = every step) */
    const char *dump_grads; /* test aid: write the first step's gradients (raw fp32, layout order) */
    mt_mesh_shape mesh;  /* dp x pp x tp (+ shard group) */
    int zero;            /* ZeRO stage 0..3 */
    const char *report_json; /* memory per category and bytes sent per collective */
    int no_overlap;      /* measurement aid: wait for each unit's gradient reduction at once */
    float bucket_mb;     /* ZeRO-0: gradient all-reduce buckets of >= this many MB of units (0 = one per unit) */
    mt_pp_kind pp_schedule; /* pipeline schedule (default 1f1b) */
    int pp_chunks;       /* model chunks per pipeline rank (interleaved; default 1) */
    const char *pp_layers; /* "a,b,..." blocks per virtual stage (default: even split) */
    const char *trace_path; /* Chrome trace-event JSON of every rank's spans */
    mt_recompute recompute; /* activation recomputation */
    const char *offload_dir; /* optimizer state in a file in this directory (disk offload) */
    float offload_buffer_mb; /* resident budget for the streamed state (default 64) */
    int profile;         /* --profile: time per category per step */
    int sequence_parallel; /* --sequence-parallel (needs tp > 1) */
    mt_dtype precision;  /* --precision: bf16/fp16 hold params and grads in 16 bits (parallel/zero.h),
                            GEMM operands in 16 bits, fp32 master weights */
    float adafactor_beta1; /* --adafactor-beta1: 0 = no momentum (the factored state only) */
    int adafactor_scale_parameter; /* --adafactor-scale-parameter: --lr is relative to each tensor's RMS */
    float adafactor_clip;  /* --adafactor-clip: update clipping threshold d (default 1) */
    mt_dtype grad_reduce; /* --grad-reduce-dtype: fp32, or bf16 (with --precision bf16) */
    mt_gemm_lib gemm;    /* --gemm: the fp32 GEMM library of the linear layers */
    float loss_scale;    /* fp16: initial dynamic loss scale */
    int64_t loss_scale_window; /* fp16: clean steps per doubling of the scale */
    int64_t test_overflow_step; /* test aid: the last rank finds an inf gradient at this step (1-based; 0 = never) */
    int64_t test_nonfinite_step; /* test aid (fp32/bf16): the same, for --on-nonfinite */
    int on_nonfinite_skip; /* --on-nonfinite skip: a step with a non-finite loss or gradient is left out
                              (default stop: the run ends with the step number) */
    int zeropp_hpz;        /* ZeRO++ hpZ group (consecutive ranks of the shard group; 0 = off): see zero.h */
    int zeropp_qwz;        /* ZeRO++ qwZ: int8 parameter all-gathers (zero.h) */
    int zeropp_qgz;        /* ZeRO++ qgZ: int4 two-hop gradient reduce-scatter (zero.h) */
    int eval_batch;        /* sequences per validation batch (0: --batch); see mt_trainer_eval */
    const char *log_path;  /* --log-file: rank 0 writes its progress lines there too */
    int allow_schedule_change; /* --allow-schedule-change: a resume may change --steps/--lr/--min-lr/--warmup/--lr-schedule */
    const char *run_config; /* the run's settings as YAML (cli/config_file.h), saved beside every checkpoint (NULL: none) */
} mt_train_opts;

void mt_train_opts_defaults(mt_train_opts *o);

typedef struct {
    mt_train_opts o;
    mt_mem mem;
    mt_model model;
    mt_opt_states optim;    /* the optimizer: its state streams per unit (optim/opt_state.h) */
    uint32_t *train_tokens, *val_tokens;
    size_t n_train, n_val;
    mt_loader train_ld, val_ld;
    int has_val;
    int64_t step;           /* steps completed */
    FILE *metrics;
    double last_loss, last_norm;
    double step_s, backward_s; /* summed over the steps run by this process */
    int64_t steps_run;
    mt_mesh mesh;
    mt_tp tp;               /* tensor parallelism over the mesh's tp group (model.tp points here) */
    mt_loss_scaler scaler;  /* --precision fp16 */
    mt_zero zero;
    int rank;               /* world rank; only rank 0 prints and writes files */
    int dp, dp_rank;
    int mesh_ok;
    mt_comm *world;         /* borrowed */
    /* pipeline (pipeline_step.c); a single process runs the 1-stage schedule */
    int pp, pp_rank, micro_steps;
    mt_pp_schedule sched;
    int *chunk_lo, *chunk_hi;   /* [chunks] blocks [lo, hi) of each local chunk */
    int *layer_rank;            /* [n_layer] pipeline rank holding each block */
    mt_comm *embed_group;       /* first and last stage (a replicated shared unit: the tied embedding);
                                   NULL if pp == 1 or nothing is shared */
    mt_comm_req *act_req, *grad_req; /* [slots * chunks] sends in flight */
    mt_profile prof;            /* with --profile (model.prof points here) */
    mt_trace trace_buf;
    mt_trace *trace;            /* &trace_buf with --trace, else NULL (recording is then a no-op) */
    double *acct_start, *acct_end; /* [world size][record] accounting records (accounting.c) */
    /* non-finite state (fp32/bf16; fp16 has its loss scaler) */
    int grad_nonfinite;         /* this step's loss or gradient norm is not finite: no update was applied */
    int params_nonfinite;       /* this rank's owned parameters are not finite after this step's update */
    int64_t nonfinite_skipped;  /* steps left out by --on-nonfinite skip */
    /* --metrics is written by rank 0; a failed write is agreed at the step boundary */
    int metrics_failed;
    mt_error metrics_err;
    int stopped_by_signal;      /* the run ended early on SIGINT/SIGTERM (after a checkpoint if --ckpt-dir) */
    /* progress (rank 0): --log-file, and on a terminal one updating step line */
    FILE *log_file;
    int tty, line_open;         /* stdout is a terminal; a '\r' step line is on screen without its newline */
    double run_t0;              /* when mt_trainer_run started (elapsed time and ETA) */
    char base_dir[4096]; /* where the frozen tensors were read from (--init-from, or the base a resumed run recorded) */
} mt_trainer;

/* Collective over world (a process is the mesh 1x1x1: world of size 1).
 * On failure every rank returns -1 with the same message (a rank-local
 * failure is broadcast, prefixed with the rank). */
int mt_trainer_init(mt_trainer *tr, const mt_train_opts *o, mt_comm *world, mt_error *err);
/* Runs one optimizer step; returns the mean loss over the global batch. */
double mt_trainer_step(mt_trainer *tr);
/* Mean validation loss over the first eval_batches x eval_batch sequences of the val set (layout-free). */
double mt_trainer_eval(mt_trainer *tr);
int mt_trainer_run(mt_trainer *tr, mt_error *err);
int mt_trainer_save(mt_trainer *tr, mt_error *err);
/* Accounting (accounting.c), collective over world: at start (after init)
 * and at the end every rank's bytes per memory category and bytes sent per
 * step per collective are gathered; rank 0 prints them (unless --log-every
 * 0) and writes --report-json with rank 0's numbers at top level and every
 * rank's under "ranks". */
void mt_trainer_accounting_alloc(mt_trainer *tr, mt_comm *world);
void mt_trainer_accounting_free(mt_trainer *tr);
void mt_trainer_report_start(mt_trainer *tr);
/* Pipeline (pipeline_step.c): builds the schedule and the layer split and
 * fills the model part this rank holds; then runs one step's microbatches
 * (forward, backward, messages, the ZeRO hooks) and returns this rank's
 * loss sum; the forward-only pass of evaluation. */
int mt_pipeline_plan(mt_trainer *tr, mt_model_part *part, unsigned char *own_layer, mt_error *err);
int mt_pipeline_init(mt_trainer *tr, mt_error *err);
void mt_pipeline_free(mt_trainer *tr);
double mt_pipeline_step(mt_trainer *tr, uint64_t first_sample, float dlogits_scale);
double mt_pipeline_eval_batch(mt_trainer *tr, uint64_t first_sample);
/* Pipeline rank whose copy of unit u is authoritative (unit 0: the first). */
int mt_pipeline_unit_rank(const mt_trainer *tr, int u);
/* The unit whose tensors the output unit shares (a tied embedding), or -1. */
int mt_pipeline_shared_unit(const mt_trainer *tr);
int mt_trainer_report_end(mt_trainer *tr, mt_error *err);
/* Optimizer state stream k of unit u as fp32, for checkpoints (the only
 * door to the state: names from mt_trainer_opt_stream_name; k =
 * MT_OPT_STREAM_MASTER: the fp32 master where it is a stream of the state,
 * see mt_zero_master_released): the rank's shard (mt_zero_state_len floats,
 * zero padding; `buf` holds it unless the stream is fp32 in memory), and
 * setting the rank's part from the unit's full stream. */
int mt_trainer_opt_stream_count(const mt_trainer *tr);
const char *mt_trainer_opt_stream_name(const mt_trainer *tr, int k);
const float *mt_trainer_opt_shard(mt_trainer *tr, int u, int k, float *buf);
int mt_trainer_set_opt_state(mt_trainer *tr, int u, int k, const float *full, mt_error *err);

/* Collective: with --trace, writes every rank's spans into one file (rank 0)
 * and prints each rank's idle fraction (time in no compute span over the
 * traced window). */
int mt_trainer_write_trace(mt_trainer *tr, mt_error *err);
void mt_trainer_free(mt_trainer *tr);

#endif
