/* The layout planner's model: for a model config, a layout (dp, cp, tp, pp,
 * ZeRO stage, shard group, micro-batch, recompute, precision) and a cluster,
 * the bytes one rank holds per category, the pipeline bubble, the bytes sent
 * per step per link level and a predicted step time. One implementation of
 * the closed forms: parameter counts come from the family's real unit
 * layout (vocabulary padding and tp cuts included), the state bytes follow
 * the allocation rules of parallel/zero.c (each unit padded to a multiple of
 * the shard group), activations follow the family's buffer table (GPT-2
 * exactly as models/gpt2 allocates them; Megatron's 16-bit formula for a
 * GPU cluster). Speaks in configs, not flags. */
#ifndef MT_PLAN_PLAN_H
#define MT_PLAN_PLAN_H
#include <stddef.h>
#include "models/config.h"

typedef struct {
    const char *name;
    double peak_flops;     /* per device, FLOP/s of bf16 GEMMs (fp32 accumulation) */
    double peak_flops_fp32; /* per device, FLOP/s of fp32 GEMMs (layouts planned with {precision} fp32) */
    double mem_bytes;      /* per device */
    double bw_intra;       /* per device, bytes/s one way, to devices of the same node */
    double bw_inter;       /* per device, bytes/s one way, to other nodes */
    double efficiency;     /* fraction of peak_flops the GEMMs reach (documented constant) */
    int gpus, per_node;
    int cores;             /* {cpu}: cores the node's ranks share (0: one per rank) */
    double latency;        /* seconds one collective or message costs beyond its bytes (0: not modelled) */
    double mb_cost, mb_cost_fp32; /* {cpu}: seconds a microbatch costs beyond its FLOPs through the whole model
                                     (bf16, fp32): small operations, GEMM edges (0: not modelled) */
    int act_bytes;         /* bytes per activation element: 2 (GPU, 16-bit) or 4 (this CPU engine) */
    int engine_exact;      /* 1: activations as this engine allocates them ({cpu}); 0: Megatron's formula */
} mt_plan_cluster;

/* Which parts of a GPU's time model come from the published record and
 * which were measured on a GPU by meshtrain itself (tests/gpu/run.sh): one
 * line for the plan's header. */
const char *mt_plan_gpu_provenance(void);
/* Fills a named device's table ("a100", "h100", "h200"); -1 when unknown. */
int mt_plan_cluster_gpu(const char *name, mt_plan_cluster *c);

typedef enum { MT_PLAN_RC_NONE = 0, MT_PLAN_RC_SELECTIVE, MT_PLAN_RC_FULL } mt_plan_recompute;

typedef struct {
    int dp, tp, pp, zero, shard; /* shard: ZeRO shard group (<= dp, dividing it) */
    int micro_batch, chunks;     /* chunks: interleaved schedule's model chunks per rank (1: 1F1B) */
    int sequence_parallel;
    mt_plan_recompute recompute;
    int bf16;                    /* 0: fp32; 1: bf16 params/grads + fp32 master (K = 12) */
    /* ZeRO++ (as train's {zeropp}-*): qwz int8 parameter gathers (stage 3); hpz the group of
     * shard-group ranks keeping a secondary copy for the backward gathers (stage 3; 0 off); qgz
     * int4 two-hop gradient reduce-scatter (stages 2-3) over the shard group's nodes */
    int qwz, hpz, qgz;
    int ep;                      /* expert parallelism (train's {ep}; 0 or 1: none): the experts spread over ep of
                                    the dp ranks, ZeRO's shard group the dp / ep ranks holding the same experts */
    /* context parallelism (train's {cp}, ring; 0 or 1: none): each sequence split over cp ranks, which
     * hold s / cp of its rows; gradients and ZeRO's shards over the dp x cp ranks holding the same
     * parameters. Ranks are placed tp innermost, then cp, then dp, then pp. */
    int cp;
} mt_plan_layout;

enum { MT_PLAN_PARAMS = 0, MT_PLAN_GRADS, MT_PLAN_OPTIM, MT_PLAN_ACTS, MT_PLAN_FROZEN, MT_PLAN_NCAT };

typedef struct {
    double bytes[MT_PLAN_NCAT];  /* rank 0 (first pipeline stage, first tp rank) */
    double total;
    int fits;
    double params_total;         /* parameters of the whole model (tp 1 layout) */
    double params_rank;          /* parameters rank 0 holds before ZeRO sharding */
    int microbatches;            /* per pipeline per step */
    double bubble;               /* (p-1)/(m v + p - 1)... see plan.c */
    double comm_intra, comm_inter; /* bytes sent per step per rank */
    double comm_tp, comm_pp, comm_dp; /* the same by group: tp, pipeline sends, dp/ZeRO (shard + replicas) */
    double comm_ep, t_alltoall;  /* {ep}: the token all-to-alls' bytes per step per rank and their time */
    double expert_params_rank;   /* {ep}: expert parameters rank 0 holds before ZeRO (its E / ep experts) */
    double comm_cp;              /* ring attention's K|V and dK|dV sends (context parallelism) */
    double calls;                /* collectives and sends per step (each costs the latency) */
    double flops_step;           /* per rank, Megatron's count (recompute included) */
    double t_compute, t_bubble, t_comm_exposed, t_step;
    double tflops_per_gpu, mfu;  /* Megatron's count / t_step; model FLOPs (6N + attention, no recompute) / peak */
} mt_plan_result;

/* The whole model's parameters as the family lays them out (tp 1). */
double mt_plan_param_count(const mt_model_config *cfg);
/* Megatron-LM's FLOPs per iteration (Narayanan et al. 2021, eq. 3):
 * 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), full recompute included. */
double mt_plan_megatron_flops(double B, double s, double l, double h, double V);
/* The ZeRO paper's model-state bytes per device (mixed-precision Adam,
 * K = 12): stage 0 (2+2+K)Psi, 1: 4Psi + K Psi/N, 2: 2Psi + (2+K)Psi/N,
 * 3: (2+2+K)Psi/N. */
double mt_plan_zero_model_states(double psi, int n_d, int stage);
/* Checks the layout against model and cluster (divisibility); 0 or -1 with
 * err saying which constraint failed. */
int mt_plan_check(const mt_model_config *cfg, const mt_plan_cluster *c, const mt_plan_layout *lay, int global_batch,
                  mt_error *err);
/* ZeRO++ where the layout's stage allows it, as train does: qwZ and hpZ
 * with stage 3 (hpZ over the shard group's ranks of one node, when they are
 * at least 2 and divide the group), qgZ with stages 2-3 when every node
 * holds the same number of the group's ranks (else train falls back to the
 * plain reduce-scatter); the flags are the user's, per_node the devices a
 * node holds. */
void mt_plan_set_zeropp(mt_plan_layout *y, int per_node, int qwz, int hpz, int qgz);
/* Makespan of one step of a pipeline whose p ranks share c cores (c <= p),
 * in units of one microbatch's forward through a rank's blocks (a backward
 * costs bwd of them): the schedule the executor runs (1F1B, or interleaved
 * with v chunks) with processor sharing -- the ranks whose next compute
 * action has its input split the cores evenly, none faster than one core,
 * as the scheduler shares them among runnable processes (a waiting rank
 * sleeps). With c = p it is the dependency-bound makespan, (m + p - 1)(1 +
 * bwd) for 1F1B; with c = 1 the whole work, p m (1 + bwd). A pipeline
 * deeper than its cores idles cores in fill and drain: pp 4 with 4
 * microbatches on 2 cores takes 1.125x its work / 2. -1 when the schedule
 * cannot be built or is too large to simulate (p m v > 200000). */
double mt_plan_pipeline_makespan(int p, int m, int v, double c, double bwd);
/* The bytes of mt_plan_eval's result alone (rank 0's, by category), without
 * the times: what train checks against the memory before allocating. Needs
 * dp, tp, pp, micro_batch, chunks and shard >= 1, and pp x chunks dividing
 * the layers. */
void mt_plan_bytes(const mt_model_config *cfg, const mt_plan_cluster *c, const mt_plan_layout *lay, int global_batch,
                   double bytes[MT_PLAN_NCAT]);
/* Evaluates one (checked) layout. */
void mt_plan_eval(const mt_model_config *cfg, const mt_plan_cluster *c, const mt_plan_layout *lay, int global_batch,
                  mt_plan_result *r);

#endif
