/* ZeRO stages 0-3 and hybrid sharding over flat units (FSDP-style).
 *
 * Every unit u of numel elements is split evenly over the n ranks of the
 * shard group: S = ceil(numel / n), the buffer padded to n*S, rank r owns
 * [r*S, (r+1)*S) (padding is zero and stays zero). Stage 0 does not shard
 * (n = 1 in this sense, S = numel) and all-reduces gradients over dp.
 *
 *   stage 0: full params, full grads, full optimizer state; all-reduce of each
 *            unit's gradient after its backward on the last microbatch.
 *   stage 1: full params and grads, optimizer state for the owned shard;
 *            reduce-scatter (in place) on the last microbatch, update the
 *            owned range, all-gather the params after the step.
 *   stage 2: full params, grads only as owned shards: every microbatch each
 *            unit's gradient is computed into a transient pooled buffer and
 *            reduce-scattered into the accumulating shard.
 *   stage 3: params only as shards too: a unit's params are all-gathered into
 *            a pooled buffer before its forward and again before its backward
 *            (the next unit's gather is prefetched); unit 0 (the input unit,
 *            which a tied output layer shares) is gathered once per microbatch
 *            and held until its backward.
 * Hybrid (shard group G < dp): reduce-scatter inside the shard group, then
 * all-reduce the shard across the replica group.
 * Expert parallelism ({ep} N, mesh.h): the shard group is the expert-data-
 * parallel group (dp / N ranks holding the same experts) and the replica
 * group the N ranks of the ep group, which hold the same dense tensors but
 * different experts. A unit's dense part is its elements before the first
 * expert tensor (nn/unit.h's dense_numel).
 *   ZeRO 1-3 in fp32 without ZeRO++ (split): a unit holding experts is two
 *   state units, [0, dense) sharded over all dp ranks and [dense, numel)
 *   over the shard group, each with its own shard, owned range, optimizer
 *   state and collectives (reduce-scatter, all-gather), so a rank holds
 *   1/dp of the dense state and 1/(dp/N) of its experts'. The layout starts
 *   the experts at a multiple of dp (mt_layout_shard_experts' dense_align):
 *   the dense part splits evenly and no collective of one part touches the
 *   other's elements. Nothing is summed over the ep group; the gradient norm
 *   sums every rank's owned elements over dp. (Two owned ranges per unit
 *   would have reached into the optimizer, its offload regions and the
 *   checkpoint streams; as state units those keep one range each.)
 *   Otherwise (stage 0, mixed precision, ZeRO++): every unit is sharded
 *   (ZeRO 1-3) or reduced (stage 0) over the shard group; afterwards the
 *   dense part of each unit is all-reduced across the ep group, so dense
 *   gradients are summed over all dp ranks and expert gradients over the
 *   expert-data-parallel group (dense parameters sharded over dp / N ranks,
 *   as hybrid sharding does). The gradient norm counts the dense part once
 *   and sums the experts' over the ep group.
 *
 * Buckets (stage 0, DDP-style): by default each unit's gradient is all-reduced
 * on its own as soon as its backward ends. With bucket_bytes > 0 the
 * gradients of all units live in one flat buffer in unit order, read in
 * backward order (output, last block, ..., input: from the buffer's end) as
 * messages of bucket_bytes each (the last one shorter), whatever the units'
 * sizes -- ZeRO-R's constant-size buffers: a message, and any temporary the
 * MPI library makes for it, stays the same size as the model grows, and
 * needs no staging copy (it is reduced in place). A message's all-reduce
 * starts as soon as the backward of every unit it overlaps has ended. Bigger
 * buckets mean fewer, larger messages and less overlap. Stages 1-3 reduce
 * per unit: their shards are laid out per unit, so the unit is the bucket (as
 * in FSDP).
 *
 * Memory categories: params/grads/optimizer as above; pooled full-unit
 * buffers (stages 2/3) count as MT_MEM_COMM. Nothing is allocated per step.
 *
 * Mixed precision (the model's precision is bf16 or fp16). Parameters and
 * gradients are HELD in 16 bits and the fp32 master copy only for the owned
 * range, so with AdamW (K = 12: master, m, v) a rank holds
 *   stage 0: (2 + 2 + K) Psi    stage 1: 2 Psi + 2 Psi + K Psi / N
 *   stage 2: 2 Psi + (2 + K) Psi / N    stage 3: (2 + 2 + K) Psi / N
 * (ZeRO paper, section 5). Before a unit's forward or backward its 16-bit
 * parameters are widened into an fp32 buffer for the non-GEMM ops, and the
 * model's 16-bit weight copy (m->w16) points at the 16-bit storage itself;
 * only unit 0 (which a tied output layer shares) keeps its fp32 copy across units (made
 * once per step; stage 3: once per microbatch). Every stage computes a
 * unit's gradient into a transient fp32 buffer (as stage 2 does) and then:
 *   stages 0-1, microbatches before the last: adds it into the 16-bit
 *     gradient (one rounding per microbatch);
 *   stages 0-1, the last microbatch: fp32 reduction -- the earlier
 *     microbatches are added into the fp32 buffer, which is all-reduced /
 *     reduce-scattered and rounded into the 16-bit gradient once; bf16
 *     reduction ({grad-reduce-dtype} bf16) -- the buffer is added into the
 *     bf16 gradient, which is reduced in place in bf16;
 *   stages 2-3: the buffer is reduce-scattered in fp32 (or rounded to bf16
 *     and reduce-scattered in bf16) and the shard added into the 16-bit
 *     gradient shard.
 * The optimizer updates the fp32 master with the owned gradient widened a
 * chunk at a time (mt_zero_owned_grad) and rounds each updated chunk into
 * the 16-bit parameters while it is in cache (mt_zero_round_owned_params);
 * mt_zero_after_step then all-gathers them in 16 bits (stages 1-2).
 * Checkpoints read and write the fp32 master.
 *
 * The hooks are called by the trainer around the model's unit functions
 * (train/trainer.c shows the order). */
#ifndef MT_PARALLEL_ZERO_H
#define MT_PARALLEL_ZERO_H
#include "comm/comm.h"
#include "core/mem.h"
#include "models/model.h"
#include "parallel/mesh.h"

/* Stage 0 buckets (DDP-style, see above): all units' gradients in one flat
 * buffer, all-reduced in place as messages of one constant size;
 * bucket_bytes == 0: off (gflat NULL). */
typedef struct {
    float *gflat;                  /* all units' gradients, unit order */
    size_t gflat_len;
    size_t *unit_off;              /* per unit: its gradient's offset in gflat */
    size_t msg_floats;             /* a message: bucket_bytes of floats (the first one from gflat's end) */
    int n_buckets;                 /* messages per step: ceil(gflat_len / msg_floats) */
    int next;                      /* the next message to start this step (0: the one at gflat's end) */
    mt_comm_req *req;              /* [n_buckets] */
} mt_zero_buckets;

/* Mixed precision (see above); dt16 == MT_FP32: off. */
typedef struct {
    mt_dtype dt16;
    int reduce16;                  /* gradient collectives in bf16 */
    uint16_t **p16;                /* per unit: stages 0-2 the full (padded) parameters, stage 3 the shard */
    uint16_t **g16;                /* per unit: stages 0-1 the full (padded) gradient, 2-3 the shard;
                                      the owned part starts at element 0 once reduced */
    float **master;                /* per unit: fp32 master of the owned range (S floats) */
    uint16_t *p16unit0, *p16pool[2]; /* stage 3: gathered 16-bit parameters */
    uint16_t *g16unit0, *g16pool[2]; /* stages 2-3 with bf16 reduction: a gradient buffer rounded to bf16 */
    uint16_t **gslot16;            /* per unit: the bf16 buffer its reduction is in flight in */
    unsigned char *g16_used;       /* per unit: the 16-bit gradient holds a contribution this step */
    double *g16_sumsq;             /* per unit: sum of squares of the owned 16-bit gradient, taken while
                                      rounding it (stages 0-1, fp32 reduction) ... */
    unsigned char *g16_sumsq_ok;   /* ... and whether it is this step's (else mt_zero_grad_sumsq reads it) */
    float *gscratch;               /* one unit's owned gradient widened to fp32 */
    size_t gscratch_len;           /* its floats: the largest owned range */
    uint64_t punit0_version;       /* stages 0-2: m->param_version unit 0's fp32 copy was made at (0: none) */
    int conv_k;                    /* stages 0-2: the pool buffer the next unit is widened into */
} mt_zero_mixed;

typedef struct {
    int stage;
    mt_comm *dp, *shard, *replica; /* borrowed from the mesh (under expert parallelism dp is the
                                      expert-data-parallel group: stage 0's all-reduce runs there) */
    mt_comm *ep;                   /* expert parallelism (NULL: none): the replica group of ep ranks, over
                                      which only each unit's dense part is summed (its experts differ) */
    size_t *dense;                 /* per unit: elements before its experts' (the layout's dense_numel) */
    int n, r;                      /* shard group size and index (1, 0 for stage 0) */
    int n_units;
    size_t *numel, *S;             /* per state unit: its elements and shard length */
    float **full_p, **full_g;      /* per state unit, stages 0-2 / 0-1: its start in its unit's full
                                      (padded) buffer */
    float **pshard, **gshard;      /* per state unit, stage 3 / stages 2-3: owned shards */
    int own_full_p, own_full_g;    /* whether full_p/full_g were allocated here */
    size_t pool_len;               /* floats per pool slot (max padded unit >= 1) */
    float *gunit0, *gpool[2];      /* stages 2-3: transient full-unit grad buffers */
    mt_comm_req *greq;             /* per state unit: gradient reduction in flight */
    float **gslot;                 /* per unit: slot its gradient sits in (stages 2-3) */
    float *punit0, *ppool[2];      /* stage 3: gathered params */
    mt_comm_req preq[2];
    int seq_len, seq_i;            /* stage 3: gather sequence of this microbatch */
    mt_mem *mem;
    mt_backend *be;                /* the model's backend (not owned) */
    int no_overlap;                /* measurement aid: wait for each reduction at once */
    double exposed_s;              /* time spent waiting for gradient reductions */
    mt_zero_buckets bk;            /* stage 0 buckets (parallel/zero_buckets.c) */
    mt_zero_mixed mp;              /* mixed precision (parallel/zero_mixed.c) */
    int g0_open;                   /* unit 0's gradient buffer is set up for this microbatch */
    /* State units: the parts of units whose elements are sharded together over one group, each with one
       owned range (what the optimizer and checkpoints see). Without split every state unit is a whole unit
       (k == u); with split a unit holding dense and expert tensors is two: [0, dense) and [dense, numel). */
    int split;                     /* {ep}, fp32, stages 1-3: dense parts sharded over every dp rank */
    int n_state;
    int *state_unit;               /* per state unit: the unit it is part of */
    int *first;                    /* per unit: its first state unit (first[n_units] = n_state) */
    size_t *off;                   /* per state unit: its first element in its unit */
    mt_comm **kcomm;               /* per state unit: the group it is sharded over */
    int *kn, *kr;                  /* per state unit: that group's size and this rank's index (1, 0: stage 0) */
    size_t *unumel;                /* per unit: its elements (0: not held) */
    mt_comm_req preq_e[2];         /* split, stage 3: the experts' gather of each pool slot */
    mt_comm *dp_all;               /* every dp rank (split: the dense parts' group) */
    mt_unit_layout *state_ul;      /* per state unit: its unit's layout (a copy: the optimizer's table) */
    unsigned char *in_norm;        /* per unit: counted in mt_zero_grad_sumsq (a replica of a unit held
                                      by another stage too -- a shared unit -- is not) */
    /* ZeRO++ hierarchical partitioning (parallel/zero_hpz.c); hpz == NULL: off */
    mt_comm *hpz;                  /* G consecutive ranks of the shard group (a node) */
    int hpz_j;                     /* this rank's index in it */
    size_t *hpz_len;               /* per unit: elements of its secondary part (padded / G) */
    void **hpz_part;               /* per unit: the secondary part (16-bit under mixed precision) */
    /* ZeRO++ quantized weight all-gather (parallel/zero_qwz.c); qwz == 0: off */
    int qwz;
    uint8_t *qsend[2], *qrecv[2];  /* per gather slot: this rank's record, every rank's */
    size_t qrec_max;               /* bytes of the largest unit's record */
    float *qtmp;                   /* a shard widened to fp32, or a record dequantized (largest S floats) */
    /* ZeRO++ quantized gradient reduce-scatter (parallel/zero_qgz.c); qgz_intra == NULL: off */
    mt_comm *qgz_intra, *qgz_inter; /* the shard group's ranks on this node; those of this local index on every node */
    uint8_t *qg_send, *qg_recv;    /* n records of the largest shard */
    float *qg_partial;             /* the node's sums of this rank's column: A shards */
    float *qg_tmp;                 /* one shard dequantized */
    size_t qg_smax;
} mt_zero;

/* bucket_bytes: stage 0 all-reduce bucket size (0 = one bucket per unit);
 * must be 0 for stages 1-3 and under mixed precision. grad_reduce: the
 * dtype of the gradient collectives, MT_FP32, or MT_BF16 when the model's
 * precision is bf16. Mixed precision follows m->precision. */
int mt_zero_init(mt_zero *z, mt_model *m, const mt_mesh *mesh, int stage, size_t bucket_bytes,
                 mt_dtype grad_reduce, mt_mem *mem, mt_error *err);
/* Units the model does not hold (m->held[u] == 0: another
 * pipeline stage's) get no buffers and no communication; the hooks must not
 * be called for them. */
/* ZeRO++ hpZ (stage 3): each rank also keeps part hpz_j of every block
 * and head unit's gathered parameters, one of G equal parts, from the
 * unit's forward all-gather; the backward all-gather then runs over the G
 * consecutive ranks of the shard group (a node) instead of all of them.
 * The gathered values are the same, so training is bitwise unchanged; the
 * price is padded / G more parameter elements per unit held (accounted as
 * params). G >= 2 must divide the shard group. Collective over the shard
 * group. */
int mt_zero_enable_hpz(mt_zero *z, const mt_model *m, int group, mt_error *err);
/* ZeRO++ qwZ (stage 3): every all-gather of parameters over the shard
 * group sends each rank's shard as int8 codes with an fp32 scale per block
 * of MT_ZPP_BLOCK elements (parallel/zeropp_quant.h) and dequantizes on
 * arrival (into 16 bits under mixed precision): about a quarter of the
 * fp32 bytes, half of bf16's. The forward and backward then compute with
 * the dequantized weights; the optimizer updates the exact shard. hpZ's
 * intra-node gather stays exact (it copies the dequantized forward values).
 * Buffers (MT_MEM_COMM): two slots of one record and of n records, and one
 * shard in fp32. */
int mt_zero_enable_qwz(mt_zero *z, mt_error *err);
/* Bytes of one rank's qwZ record for a shard of S elements: fp32 scales per
 * block of 256, then int8 codes padded to 4 bytes (the planner counts with it). */
size_t mt_zero_qwz_record_bytes(size_t S);
/* ZeRO++ qgZ (stages 2-3): a unit's gradient is reduce-scattered over the
 * shard group in two hops of int4 blocks (parallel/zeropp_quant.h): an
 * all-to-all inside the node (each rank receives its column: the shards
 * a*G + j of every node a, from its G node peers; blocks of 64), dequantized and summed,
 * re-quantized, then an all-to-all across the nodes among the ranks of the
 * same local index j; the A node sums of this rank's shard are dequantized
 * and summed. One quantization of each hop instead of one per ring step.
 * The shard group must be node-major with the same G ranks on every node;
 * otherwise mt_zero_enable_qgz returns 1 (the caller tells the user), and
 * the plain reduce-scatter runs. Blocking (no overlap with
 * backward). Collective over the shard group. */
int mt_zero_enable_qgz(mt_zero *z, mt_error *err);
/* Bytes of one qgZ record for a shard of S elements: fp32 scales per block
 * of 64, then int4 codes padded to 4 bytes. */
size_t mt_zero_qgz_record_bytes(size_t S);
/* Frees what zero allocated; call before mt_model_free. */
void mt_zero_free(mt_zero *z, mt_model *m);

void mt_zero_begin_step(mt_zero *z, mt_model *m);
/* backward: whether the microbatch will run backward (eval: 0). */
void mt_zero_begin_microbatch(mt_zero *z, mt_model *m, int backward);
void mt_zero_pre_forward(mt_zero *z, mt_model *m, int unit);
void mt_zero_pre_backward(mt_zero *z, mt_model *m, int unit);
void mt_zero_post_backward(mt_zero *z, mt_model *m, int unit, int last_microbatch);
void mt_zero_end_microbatch(mt_zero *z, mt_model *m);
void mt_zero_progress(mt_zero *z);
/* Waits for every reduction; hybrid: all-reduce across replicas. */
void mt_zero_finish_grads(mt_zero *z, mt_model *m);
/* Sum of squares of the (reduced) gradient, each element counted once. */
double mt_zero_grad_sumsq(mt_zero *z, mt_model *m);
/* State units (see mt_zero): the optimizer's state, the owned ranges and
 * the checkpoint streams are per state unit k, the compute and the hooks per
 * unit. The functions below that name a state unit take k (today k == u). */
int mt_zero_n_state(const mt_zero *z);
/* The unit state unit k is part of. */
int mt_zero_state_unit(const mt_zero *z, int k);
/* The layouts of the state units (their units'), for the optimizer. */
const mt_unit_layout *mt_zero_state_layouts(const mt_zero *z);
/* The ranks that share state unit k's whole-tensor statistics (each holds
 * a shard of it), or NULL where this rank holds it whole. */
mt_comm *mt_zero_state_group(const mt_zero *z, int k);
/* The owned range [*b, *e) of unit u, and the pointers to its first
 * element: *p the fp32 parameters the optimizer updates (mixed precision:
 * the master; NULL once mt_zero_release_master handed it elsewhere), *g the
 * fp32 gradient (mixed precision: NULL -- use mt_zero_owned_grad). */
void mt_zero_owned(const mt_zero *z, mt_model *m, int u, size_t *b, size_t *e, float **p, float **g);
/* The owned gradient elements [b + off, b + off + n) of unit u in fp32 (a
 * pointer into the gradient, or under mixed precision to a scratch buffer
 * widened now, valid until the next call). */
float *mt_zero_owned_grad(mt_zero *z, int u, size_t off, size_t n);
/* Test aid: the first owned gradient element of unit u becomes +inf. */
void mt_zero_poison_grad(mt_zero *z, int u);
/* Sums the owned gradient of unit u over comm (the shared unit's replicas
 * of the first and last pipeline stage); blocking. */
void mt_zero_allreduce_owned_grad(mt_zero *z, int u, mt_comm *comm);
/* Mixed precision: rounds the updated master elements [b + off, b + off + n)
 * of unit u, which master points at (element off; the held master, or a
 * chunk streamed from disk), into its 16-bit parameters; every optimizer
 * update calls it for what it changed (a no-op under fp32). */
void mt_zero_round_owned_params(mt_zero *z, int u, size_t off, size_t n, const float *master);
/* Mixed precision, disk offload: frees unit u's fp32 master after the caller
 * copied it (mt_zero_owned's *p) to where it will live from now on; the
 * optimizer then passes the master chunks it streams, checkpoints go through
 * mt_zero_get_full_state / mt_zero_set_full_params (which then sets only the
 * 16-bit parameters). A no-op under fp32. */
void mt_zero_release_master(mt_zero *z, int u);
/* Mixed precision: the owned 16-bit gradient and parameters of unit u (at
 * the owned range's first element) and their type, for an update that reads
 * and rounds in one pass instead of mt_zero_owned_grad and
 * mt_zero_round_owned_params. Returns MT_FP32 (pointers NULL) otherwise. */
mt_dtype mt_zero_owned_16(mt_zero *z, int u, const uint16_t **g16, uint16_t **p16);
/* Floats of optimizer state per unit (owned shard length). */
size_t mt_zero_state_len(const mt_zero *z, int u);
/* After the optimizer: stages 1-2 all-gather the updated params. */
void mt_zero_after_step(mt_zero *z, mt_model *m);

/* Checkpoint helpers (collective over the shard group; not for the hot
 * path). dst/src hold the unit's numel elements; tmp holds n*S floats. */
void mt_zero_get_full_params(mt_zero *z, mt_model *m, int u, float *dst, float *tmp);
void mt_zero_set_full_params(mt_zero *z, mt_model *m, int u, const float *src);
/* 1 if unit u's fp32 master was released (it lives with the caller). */
int mt_zero_master_released(const mt_zero *z, int u);
void mt_zero_get_full_state(mt_zero *z, int u, const float *state, float *dst, float *tmp);
void mt_zero_set_full_state(mt_zero *z, int u, float *state, const float *src);
/* Floats of the largest padded unit (size for tmp above). */
size_t mt_zero_max_padded(const mt_zero *z);

#endif
