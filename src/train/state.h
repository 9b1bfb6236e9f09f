/* A training process's state (one per process): the options, the model,
 * the optimizer state, ZeRO, the mesh, the pipeline, data, metrics and
 * progress. trainer.c runs it; train_io.c reads and writes its checkpoints
 * from it. */
#ifndef MT_TRAIN_STATE_H
#define MT_TRAIN_STATE_H
#include <stdint.h>
#include <stdio.h>
#include "core/error.h"
#include "core/mem.h"
#include "core/profile.h"
#include "core/trace.h"
#include "data/loader.h"
#include "models/model.h"
#include "optim/loss_scaler.h"
#include "optim/opt_state.h"
#include "parallel/mesh.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/zero.h"
#include "train/opts.h"
#include "train/straggler.h"

typedef struct mt_ckpt_async mt_ckpt_async; /* {ckpt-async}'s snapshot and writer (train_io.c) */

typedef struct {
    mt_train_opts o;
    mt_mem mem;
    mt_backend be; /* the device every kernel of this process runs on */
    size_t device_used_open; /* a GPU's used bytes when be opened (cudaMemGetInfo); 0 on the CPU */
    mt_model model;
    mt_opt_states optim;    /* the optimizer: its state streams per unit (optim/opt_state.h) */
    uint32_t *train_tokens, *val_tokens;
    uint8_t *train_flags, *val_flags; /* loss masks of extended shards, NULL for plain ones */
    size_t n_train, n_val;
    mt_loader train_ld, val_ld;
    int has_val;
    int64_t step;           /* steps completed */
    FILE *metrics;
    double last_loss, last_norm;
    /* MoE (num_experts > 0): the last step's mean load-balancing and z losses per block and microbatch,
       the slots dropped over capacity and routed (all ranks), the largest expert load of one block */
    double moe_aux, moe_z;
    float block_loss_weight; /* this step's mt_fwd_ctx.block_loss_weight */
    int64_t *moe_load;       /* [n_layer][num_experts] the step's rows per expert, all ranks (NULL: dense) */
    char *moe_load_json;     /* its metrics field, ",\"moe_load\":[[...],...]" (and under {ep}
                                ",\"moe_ep_rows\":[[...],...]") */
    int64_t *moe_ep_rows;    /* {ep} > 1: [ep][ep] token rows ep rank i sent to ep rank j in the step's
                                forwards (all ranks; NULL: no expert parallelism) */
    mt_comm *ep_comm;        /* {ep} > 1: the ep group (the mesh's replica ranks, a communicator of its own
                                so that its all-to-alls are counted apart); NULL otherwise */
    int64_t moe_dropped, moe_routed, moe_max_load;
    double step_s, backward_s; /* summed over the steps run by this process */
    int64_t steps_run;
    mt_mesh mesh;
    mt_tp tp;               /* tensor parallelism over the mesh's tp group (model.tp points here) */
    mt_cp cp;               /* context parallelism over the mesh's cp group (model.cp points here) */
    mt_ring_probe ring_probe; /* with {profile} and a ring of cp > 1 (cp.probe points here): its comm and
                                 per-ring-step times, allocated at init */
    mt_loss_scaler scaler;  /* {precision} fp16 */
    mt_zero zero;
    int rank;               /* world rank; only rank 0 prints and writes files */
    int dp, dp_rank;        /* data-parallel size and index (the samples; gradients are reduced over dp x cp) */
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
    mt_profile prof;            /* with {profile} (model.prof points here) */
    mt_trace trace_buf;
    mt_trace *trace;            /* &trace_buf with {trace}, else NULL (recording is then a no-op) */
    double *acct_start, *acct_end; /* [world size][record] accounting records (accounting.c) */
    /* non-finite state (fp32/bf16; fp16 has its loss scaler) */
    int grad_nonfinite;         /* this step's loss or gradient norm is not finite: no update was applied */
    int params_nonfinite;       /* this rank's owned parameters are not finite after this step's update */
    int64_t nonfinite_skipped;  /* steps left out by {on-nonfinite} skip */
    /* {metrics} is written by rank 0; a failed write is agreed at the step boundary */
    int metrics_failed;
    mt_error metrics_err;
    char *metrics_line;         /* a line longer than the stack buffer (per-rank arrays): grown, never per step */
    size_t metrics_line_cap;
    int stopped_by_signal;      /* the run ended early on SIGINT/SIGTERM (after a checkpoint if {ckpt-dir}) */
    /* progress (rank 0): {log-file}, and on a terminal one updating step line */
    FILE *log_file;
    int tty, line_open;         /* stdout is a terminal; a '\r' step line is on screen without its newline */
    double run_t0;              /* when mt_trainer_run started (elapsed time and ETA) */
    mt_straggler straggler;     /* every rank's step and wait times, the slow-rank warning (train/straggler.h) */
    mt_ckpt_async *ckpt_async;  /* NULL until the first {ckpt-async} save */
    char base_dir[4096]; /* where the frozen tensors were read from ({init-from}, or the base a resumed run recorded) */
} mt_trainer;

#endif
