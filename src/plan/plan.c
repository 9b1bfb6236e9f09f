#include "plan/plan.h"
#include "models/family.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/zero.h"
#include <stdlib.h>
#include <math.h>
#include <string.h>

/* Device tables. Peak: dense bf16 tensor-core FLOP/s (fp32: the SIMT
 * FP32 rate, as an exact-fp32 run would get without TF32). Bandwidths are one
 * way per device: NVLink's aggregate (A100 600 GB/s, H100/H200 900 GB/s
 * both ways) halved; InfiniBand per node (A100 8 x 200 Gb/s, H100/H200
 * 8 x 400 Gb/s) divided over the node's 8 devices. Efficiency 0.5: the
 * fraction of peak large transformer GEMMs reach in practice (Megatron-LM
 * reports 44-52% end to end on A100 with small communication overheads);
 * one constant, not fitted per model. */
const char *mt_plan_gpu_provenance(void) {
    /* the measurement: tests/gpu/run.sh on one H200, 2026-11-26 (docs/usage.md, "Measured on a GPU") */
    return "time model: peak FLOP/s, link bandwidths and --efficiency 0.5 are the published record (vendor "
           "sheets; Megatron-LM's 44-52% end to end), not meshtrain's; measured on a GPU (one H200, tests/gpu/run.sh): "
           "meshtrain's own GPT-2 124M bf16 step reaches 12.7% MFU today (pass --efficiency 0.127 to plan with its "
           "kernels), two ranks sharing the GPU match one; multi-GPU collectives (NCCL) not yet measured";
}

int mt_plan_cluster_gpu(const char *name, mt_plan_cluster *c) {
    static const struct {
        const char *name;
        double peak, peak_fp32, mem, intra, inter;
    } gpus[] = {
        {"a100", 312e12, 19.5e12, 80e9, 300e9, 8 * 200e9 / 8 / 8},
        {"h100", 989e12, 67e12, 80e9, 450e9, 8 * 400e9 / 8 / 8},
        {"h200", 989e12, 67e12, 141e9, 450e9, 8 * 400e9 / 8 / 8},
    };
    for (size_t i = 0; i < sizeof gpus / sizeof gpus[0]; i++) {
        if (strcmp(name, gpus[i].name)) continue;
        c->name = gpus[i].name;
        c->peak_flops = gpus[i].peak;
        c->peak_flops_fp32 = gpus[i].peak_fp32;
        c->mem_bytes = gpus[i].mem;
        c->bw_intra = gpus[i].intra;
        c->bw_inter = gpus[i].inter;
        c->efficiency = 0.5;
        c->act_bytes = 2;
        c->engine_exact = 0;
        return 0;
    }
    return -1;
}

double mt_plan_param_count(const mt_model_config *cfg) {
    mt_layout l;
    mt_model_layout_build(cfg, 1, 0, &l);
    double n = (double)l.gtotal_params;
    mt_layout_free(&l);
    return n;
}

double mt_plan_megatron_flops(double B, double s, double l, double h, double V) {
    return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

double mt_plan_zero_model_states(double psi, int n_d, int stage) {
    const double K = 12, N = n_d;
    switch (stage) {
    case 0: return (2 + 2 + K) * psi;
    case 1: return 4 * psi + K * psi / N;
    case 2: return 2 * psi + (2 + K) * psi / N;
    default: return (2 + 2 + K) * psi / N;
    }
}

/* The context-parallel size (1: none), and the ranks holding the same parameters (dp x cp). */
static int cp_of(const mt_plan_layout *y) { return y->cp > 1 ? y->cp : 1; }
static int replicas_of(const mt_plan_layout *y) { return y->dp * cp_of(y); }

int mt_plan_check(const mt_model_config *cfg, const mt_plan_cluster *c, const mt_plan_layout *y, int global_batch,
                  mt_error *err) {
    if (y->dp < 1 || y->tp < 1 || y->pp < 1 || y->micro_batch < 1 || y->chunks < 1 || y->cp < 0)
        return mt_errorf(err, "dp, tp, pp, cp, micro-batch and chunks must be >= 1");
    if (cp_of(y) > 1 && y->dp * y->tp * y->pp * y->cp != c->gpus)
        return mt_errorf(err, "dp %d x cp %d x tp %d x pp %d = %d, not the %d devices", y->dp, y->cp, y->tp, y->pp,
                         y->dp * y->cp * y->tp * y->pp, c->gpus);
    if (cp_of(y) == 1 && y->dp * y->tp * y->pp != c->gpus)
        return mt_errorf(err, "dp %d x tp %d x pp %d = %d, not the %d devices", y->dp, y->tp, y->pp,
                         y->dp * y->tp * y->pp, c->gpus);
    if (cfg->seq_len % (2 * cp_of(y)))
        return mt_errorf(err, "cp %d cuts the sequence into %d chunks, which do not divide seq-len %d", cp_of(y),
                         2 * cp_of(y), cfg->seq_len);
    if (y->tp > c->per_node) return mt_errorf(err, "tp %d exceeds the %d devices per node", y->tp, c->per_node);
    if (mt_model_tp_check(cfg, y->tp, err)) return -1;
    if (cfg->n_layer % (y->pp * y->chunks))
        return mt_errorf(err, "pp %d x chunks %d does not divide the %d layers", y->pp, y->chunks, cfg->n_layer);
    if (y->chunks > 1 && y->pp == 1) return mt_errorf(err, "chunks %d needs pp >= 2", y->chunks);
    if (global_batch % (y->dp * y->micro_batch))
        return mt_errorf(err, "global batch %d is not a multiple of dp %d x micro-batch %d", global_batch, y->dp,
                         y->micro_batch);
    if (y->chunks > 1 && (global_batch / (y->dp * y->micro_batch)) % y->pp)
        return mt_errorf(err, "the interleaved schedule needs the microbatches (%d) to be a multiple of pp %d",
                         global_batch / (y->dp * y->micro_batch), y->pp);
    if (y->zero < 0 || y->zero > 3) return mt_errorf(err, "ZeRO stage must be 0-3, got %d", y->zero);
    if (y->shard < 1 || replicas_of(y) % y->shard)
        return mt_errorf(err, "shard group %d does not divide dp %d%s", y->shard, replicas_of(y), cp_of(y) > 1 ? " x cp" : "");
    if (y->ep > 1 && !cfg->num_experts) return mt_errorf(err, "ep %d needs a mixture-of-experts model", y->ep);
    if (y->ep > 1 && cp_of(y) > 1)
        return mt_errorf(err, "ep %d with cp %d: expert and context parallelism do not combine", y->ep, cp_of(y));
    if (y->ep > 1 && (cfg->num_experts % y->ep || y->dp % y->ep))
        return mt_errorf(err, "ep %d must divide the %d experts and dp %d", y->ep, cfg->num_experts, y->dp);
    if (y->ep > 1 && y->shard != y->dp / y->ep)
        return mt_errorf(err, "ep %d shards ZeRO over dp / ep = %d ranks, not %d", y->ep, y->dp / y->ep, y->shard);
    if (c->engine_exact && y->zero >= 2 && y->pp > 1)
        return mt_errorf(err, "ZeRO %d with pp %d: this engine pipelines with ZeRO 0-1 only", y->zero, y->pp);
    if (y->sequence_parallel && y->tp == 1) return mt_errorf(err, "sequence parallelism needs tp > 1");
    if (y->sequence_parallel && ((size_t)y->micro_batch * (size_t)(cfg->seq_len / cp_of(y))) % (size_t)y->tp)
        return mt_errorf(err, "sequence parallelism: micro-batch x seq-len not divisible by tp %d", y->tp);
    return 0;
}

/* Units rank 0 holds: the input unit, the blocks of the first pipeline
 * stage (chunk 0 of an interleaved schedule: blocks are split into pp x
 * chunks equal stages, rank 0 holding stages 0, pp, 2 pp, ...), and with
 * pp 1 the output unit; a unit sharing tensors with a held unit (a tied
 * head) brings that unit too -- as models/model.c decides. */
static int held(const mt_model_config *cfg, const mt_plan_layout *y, int u) {
    int L = cfg->n_layer, S = y->pp * y->chunks, per = L / S;
    if (u == 0) return 1;
    if (u == L + 1) return y->pp == 1;
    int stage = (u - 1) / per;
    return stage % y->pp == 0;
}

/* Bytes of parameters, gradients and optimizer state (AdamW: m, v) rank 0
 * holds, by parallel/zero.c's rules: each held unit of n elements is
 * padded to S = ceil(n / G) per rank of the shard group G (G = 1 at stage
 * 0); fp32: params 4n (stages 0) / 4 G S (1-2) / 4 S (3), grads 4n / 4 G S
 * (1) / 4 S (2-3), state 8 S; bf16: params 2 G S (0-2) / 2 S (3), grads
 * 2 G S (0-1) / 2 S (2-3), state (4 master + 8) S. */
/* Bytes of a quantized frozen matrix of n = rows x cols weights (quant/qweight.h): NF4 half a byte a
 * weight and an fp32 absmax per block of 64 (double quantization: a byte per block, an fp32 scale
 * per 256 blocks and the offset), int8 a byte a weight and an fp32 scale per row, GPTQ its packed
 * layout (mt_gptqw_bytes). */
static double quant_bytes(const mt_adapter_spec *a, int kind, double rows, double cols) {
    double n = rows * cols, nb = ceil(n / 64);
    if (kind == 2) return n + 4 * rows;
    if (kind == 3) { /* GPTQ: packed codes, packed zero points and fp16 scales per row and group, g_idx (int32) */
        double b = a->gptq_bits, groups = a->gptq_group_size > 0 ? ceil(cols / a->gptq_group_size) : 1;
        return n * b / 8 + groups * rows * b / 8 + 2 * groups * rows + 4 * cols;
    }
    int dq = a->double_quant;
    return ceil(n / 2) + (dq ? nb + 4 * ceil(nb / 256) + 4 : 4 * nb);
}

/* The held units' element counts the collectives move: n, their shards S
 * (all units, and unit 0's alone) -- zero.c's per-unit padding. */
typedef struct {
    double n, S, S0;
    double Sd, ne;      /* {ep}: rank 0's shards' dense elements (what the ep group sums); its expert elements */
    double gS, gS0;     /* sum over the held units' parts of (group size - 1) x shard: a ring reduce-scatter's
                           or all-gather's elements sent per rank (all units, and unit 0's alone) */
    double q8, q8_0, q4; /* ZeRO++ records of the shards: qwZ (all, unit 0's), qgZ */
} held_sizes;

/* {ep} with ZeRO 1-3 in fp32 without ZeRO++: zero.c shards the dense parameters over every dp rank and
 * each unit's experts over the shard group (two parts; elsewhere the whole unit over the shard group). */
static int split_dense(const mt_plan_layout *y) {
    return y->ep > 1 && y->zero >= 1 && !y->bf16 && !y->qwz && !y->hpz && !y->qgz;
}

static void state_bytes(const mt_model_config *cfg, const mt_plan_layout *y, double out[MT_PLAN_NCAT], held_sizes *hs) {
    mt_layout l;
    mt_model_layout_build(cfg, y->tp, 0, &l);
    if (y->ep > 1) mt_layout_shard_experts(&l, cfg->num_experts, y->ep, 0, 1); /* rank 0's experts, as the trainer */
    int z = y->zero;
    size_t G = z == 0 ? 1 : (size_t)y->shard;
    double p = 0, g = 0, o = 0, fz = 0;
    *hs = (held_sizes){0};
    for (int u = 0; u < l.n_units; u++) {
        /* the frozen store (PEFT, {freeze}): replicated over dp, fp32 (plus its 16-bit copy under
         * bf16); a quantized matrix whole on every tp rank */
        if (held(cfg, y, u)) {
            fz += (y->bf16 ? 6.0 : 4.0) * (double)l.units[u].frozen_numel;
            for (int i = 0; i < l.units[u].n_frozen; i++)
                if (l.units[u].ft[i].quant && !mt_tensor_elsewhere(&l.units[u].ft[i])) /* {ep}: rank 0's experts */
                    fz += quant_bytes(&cfg->adapters, l.units[u].ft[i].quant,
                                      (double)l.units[u].ft[i].gshape[0], (double)l.units[u].ft[i].gshape[1]);
        }
        if (!held(cfg, y, u) || !l.units[u].numel) continue;
        size_t n = l.units[u].numel, S = (n + G - 1) / G, P = G * S, gS = (G - 1) * S;
        if (split_dense(y)) { /* the dense part over dp (its experts starting at a multiple of dp), the experts over G */
            size_t dp = (size_t)y->dp, d = l.units[u].dense_numel, Sd = (d + dp - 1) / dp, Se = (n - d + G - 1) / G;
            if (d == n) Se = 0;
            if (d == 0) Sd = 0;
            S = Sd + Se;
            P = dp * Sd + G * Se;
            gS = (dp - 1) * Sd + (G - 1) * Se;
        }
        hs->gS += (double)gS;
        if (u == 0) hs->gS0 = (double)gS;
        hs->n += (double)n;
        hs->S += (double)S; /* = n at stage 0 (G = 1) */
        hs->Sd += (double)(l.units[u].dense_numel < S ? l.units[u].dense_numel : S); /* rank 0's shard: [0, S) */
        hs->ne += (double)(n - l.units[u].dense_numel);
        hs->q8 += (double)mt_zero_qwz_record_bytes(S);
        hs->q4 += (double)mt_zero_qgz_record_bytes(S);
        if (u == 0) hs->S0 = (double)S, hs->q8_0 = (double)mt_zero_qwz_record_bytes(S);
        if (y->bf16) {
            p += 2.0 * (double)(z == 3 ? S : P);
            g += 2.0 * (double)(z >= 2 ? S : P);
            o += 12.0 * (double)S;
        } else {
            p += 4.0 * (double)(z == 0 ? n : z == 3 ? S : P);
            g += 4.0 * (double)(z == 0 ? n : z == 1 ? P : S);
            o += 8.0 * (double)S;
        }
    }
    mt_layout_free(&l);
    out[MT_PLAN_PARAMS] = p;
    out[MT_PLAN_GRADS] = g;
    out[MT_PLAN_OPTIM] = o;
    out[MT_PLAN_FROZEN] = fz;
}

/* Activation bytes rank 0 keeps. Engine-exact (this CPU engine, fp32,
 * where the family states its buffers: mt_family.plan_act_floats): per
 * block and microbatch of N = b s rows (n = N / t under sequence
 * parallelism, else N) the family's floats, plus per microbatch the tokens,
 * targets, packed samples' document starts and positions (int32) and sample ids (u64), the embedding output n C, and with
 * the output unit the family's head floats, and once the logits N Vp / t. A
 * 1F1B pipeline's first stage holds min(pp, m) microbatches. At stage 1
 * (check_act_formula.sh asserts the same forms against measurement):
 * GPT-2's 4 s b (16h + a + 4) etc.
 * Megatron (Korthikanti et al. 2022), 16-bit, per layer per microbatch:
 * none s b h (34 + 5 a s / h) / t with sequence parallelism (else
 * s b h (10 + 24 / t + 5 a s / (h t))), selective s b h 34 / t (10 + 24 / t),
 * full 2 s b h (/ t); the first stage holds L layers' worth (pp
 * microbatches of L / pp layers), x (1 + (p - 1) / (p v)) interleaved.
 * Under context parallelism s is a rank's s / cp rows. */
static double act_bytes(const mt_model_config *cfg, const mt_plan_cluster *c, const mt_plan_layout *y, int m) {
    /* context parallelism: a rank keeps s / cp rows of every sequence (ring attention stores no score matrix) */
    double t = y->tp, b = y->micro_batch, s = (double)(cfg->seq_len / cp_of(y)), h = cfg->n_embd, a = cfg->n_head,
           L = cfg->n_layer;
    double N = b * s, n = y->sequence_parallel ? N / t : N;
    int p = y->pp, v = y->chunks;
    const mt_family *fam = mt_family_get(cfg->family);
    if (c->engine_exact && fam->plan_act_floats) {
        double per_layer, output;
        int rc = y->recompute == MT_PLAN_RC_NONE ? 0 : y->recompute == MT_PLAN_RC_SELECTIVE ? 1 : 2;
        fam->plan_act_floats(cfg, rc, N, n, t, &per_layer, &output);
        double layers = L / (p * v) * v;
        double slot = 16 * N + 8 * b + 4 * (n * h + layers * per_layer);
        if (p == 1) slot += 4 * output;
        int slots = p == 1 ? 1 : (p < m ? p : m);
        double logits = p == 1 ? 4 * N * (double)(mt_model_vocab_rows(cfg, y->tp) / y->tp) : 0;
        return slots * slot + logits;
    }
    double sp = y->sequence_parallel, sbh = s * b * h, per_layer;
    switch (y->recompute) {
    case MT_PLAN_RC_NONE:
        per_layer = sp ? sbh * (34 + 5 * a * s / h) / t : sbh * (10 + 24 / t + 5 * a * s / (h * t));
        break;
    case MT_PLAN_RC_SELECTIVE: per_layer = sp ? sbh * 34 / t : sbh * (10 + 24 / t); break;
    default: per_layer = 2 * sbh / (sp ? t : 1); break;
    }
    double inflight = p == 1 ? L : L * (v > 1 ? 1 + (double)(p - 1) / (p * v) : 1);
    if (p > 1 && m < p) inflight = inflight * m / p;
    return per_layer * inflight * (double)c->act_bytes / 2.0;
}

/* Rank 0's bytes by category: the model states and the activations of m microbatches per step. */
static void bytes_of(const mt_model_config *cfg, const mt_plan_cluster *c, const mt_plan_layout *y, int m,
                     double out[MT_PLAN_NCAT], held_sizes *hs) {
    state_bytes(cfg, y, out, hs);
    out[MT_PLAN_ACTS] = act_bytes(cfg, c, y, m);
}

void mt_plan_bytes(const mt_model_config *cfg, const mt_plan_cluster *c, const mt_plan_layout *y, int global_batch,
                   double bytes[MT_PLAN_NCAT]) {
    held_sizes hs;
    bytes_of(cfg, c, y, global_batch / (y->dp * y->micro_batch), bytes, &hs);
}

/* The shard group's ranks on one node (tp innermost: a node holds
 * per_node / tp of them), at most the group. */
static int shard_ranks_per_node(const mt_plan_layout *y, int per_node) {
    return per_node / y->tp < y->shard ? per_node / y->tp : y->shard;
}

void mt_plan_set_zeropp(mt_plan_layout *y, int per_node, int qwz, int hpz, int qgz) {
    int on_node = shard_ranks_per_node(y, per_node);
    y->qwz = qwz && y->zero == 3 && replicas_of(y) > 1;
    y->hpz = hpz && y->zero == 3 && on_node >= 2 && y->shard % on_node == 0 ? on_node : 0;
    y->qgz = qgz && y->zero >= 2 && y->shard % on_node == 0 && replicas_of(y) > 1;
}

/* Processor sharing over the executor's schedule (plan.h). */
double mt_plan_pipeline_makespan(int p, int m, int v, double c, double bwd) {
    mt_pp_schedule sch;
    mt_error e = {{0}};
    if ((double)p * m * v > 200000 || mt_pp_schedule_build(v > 1 ? MT_PP_INTERLEAVED : MT_PP_1F1B, p, m, v, &sch, &e))
        return -1;
    int S = p * v;
    size_t cells = (size_t)m * (size_t)S;
    unsigned char *fdone = calloc(2 * cells, 1);
    int *pc = calloc((size_t)p, sizeof *pc);
    double *rem = malloc((size_t)p * sizeof *rem);
    if (!fdone || !pc || !rem) {
        free(fdone), free(pc), free(rem);
        mt_pp_schedule_free(&sch);
        return -1;
    }
    unsigned char *bdone = fdone + cells;
    for (int r = 0; r < p; r++) rem[r] = -1; /* -1: the next action waits for its input */
    double t = 0;
    for (;;) {
        int ready = 0, left = 0;
        double dt = INFINITY;
        for (int r = 0; r < p; r++) {
            while (pc[r] < sch.count[r] && sch.actions[r][pc[r]].op != MT_PP_FORWARD &&
                   sch.actions[r][pc[r]].op != MT_PP_BACKWARD)
                pc[r]++; /* messages: the dependencies below stand for them */
            if (pc[r] >= sch.count[r]) continue;
            left = 1;
            const mt_pp_action *a = &sch.actions[r][pc[r]];
            int st = mt_pp_virtual_stage(&sch, r, a->chunk);
            size_t cell = (size_t)a->microbatch * (size_t)S;
            if (rem[r] < 0) {
                int in = a->op == MT_PP_FORWARD ? st == 0 || fdone[cell + (size_t)st - 1]
                                                : st == S - 1 ? fdone[cell + (size_t)st] : bdone[cell + (size_t)st + 1];
                if (in) rem[r] = (a->op == MT_PP_FORWARD ? 1.0 : bwd) / v;
            }
            if (rem[r] >= 0) ready++;
        }
        if (!left || !ready) break; /* done (a valid schedule never stalls: mt_pp_check proves it) */
        double rate = c / ready < 1 ? c / ready : 1;
        for (int r = 0; r < p; r++)
            if (pc[r] < sch.count[r] && rem[r] >= 0 && rem[r] / rate < dt) dt = rem[r] / rate;
        t += dt;
        for (int r = 0; r < p; r++) {
            if (pc[r] >= sch.count[r] || rem[r] < 0) continue;
            rem[r] -= dt * rate;
            if (rem[r] > 1e-12) continue;
            const mt_pp_action *a = &sch.actions[r][pc[r]];
            size_t at = (size_t)a->microbatch * (size_t)S + (size_t)mt_pp_virtual_stage(&sch, r, a->chunk);
            (a->op == MT_PP_FORWARD ? fdone : bdone)[at] = 1;
            rem[r] = -1;
            pc[r]++;
        }
    }
    int stalled = 0;
    for (int r = 0; r < p; r++) stalled |= pc[r] < sch.count[r];
    free(fdone), free(pc), free(rem);
    mt_pp_schedule_free(&sch);
    return stalled ? -1 : t;
}

void mt_plan_eval(const mt_model_config *cfg, const mt_plan_cluster *c, const mt_plan_layout *y, int global_batch,
                  mt_plan_result *r) {
    memset(r, 0, sizeof *r);
    held_sizes hs;
    int m = global_batch / (y->dp * y->micro_batch);
    bytes_of(cfg, c, y, m, r->bytes, &hs);
    r->params_rank = hs.n;
    r->params_total = mt_plan_param_count(cfg);
    r->microbatches = m;
    for (int k = 0; k < MT_PLAN_NCAT; k++) r->total += r->bytes[k];
    r->fits = r->total <= c->mem_bytes;

    /* FLOPs per step: B s [passes L (24 h^2 + 4 s h) + 6 h V]; passes 3
     * (forward, backward's two GEMMs), 4 with full recompute (Megatron's
     * 96 B s l h^2 (1 + s/6h + V/16lh) exactly); selective recompute adds
     * the attention core's forward (4 s h per layer and token). */
    double B = global_batch, s = cfg->seq_len, h = cfg->n_embd, L = cfg->n_layer, V = cfg->padded_vocab;
    /* forward FLOPs per token of a block's matrices: the family's count
     * (GPT-2: Megatron's 24 h^2), else 2 x the block's parameters */
    const mt_family *fam = mt_family_get(cfg->family);
    double w;
    if (fam->plan_block_matrix_flops) w = fam->plan_block_matrix_flops(cfg);
    else {
        mt_layout l;
        mt_model_layout_build(cfg, 1, 0, &l);
        w = 2.0 * (double)l.units[1].gnumel;
        mt_layout_free(&l);
    }
    double passes = y->recompute == MT_PLAN_RC_FULL ? 4 : 3;
    double attn_extra = y->recompute == MT_PLAN_RC_SELECTIVE ? 4 * s * h : 0;
    double F = B * s * (passes * L * (w + 4 * s * h) + L * attn_extra + 6 * h * V);
    double F_model = B * s * (3 * L * (w + 4 * s * h) + 6 * h * V);
    double ranks = (double)y->dp * y->tp * y->pp * cp_of(y);
    r->flops_step = F / ranks;
    double rate = (y->bf16 ? c->peak_flops : c->peak_flops_fp32) * c->efficiency;
    double p = y->pp, v = y->chunks;
    /* a rank runs m microbatches through 1 / pp of the blocks */
    r->t_compute = r->flops_step / rate + m * (y->bf16 ? c->mb_cost : c->mb_cost_fp32) / p;
    /* Pipeline bubble: (p - 1) / (m v) of the compute time idles, i.e. the
     * fraction (p - 1) / (m v + p - 1) of the step (interleaved: / v). */
    r->t_bubble = r->t_compute * (p - 1) / (m * v);
    r->bubble = (p - 1) / (m * v + p - 1);

    /* Bytes each collective sends, counted as comm/ accounts them (ring:
     * all-reduce 2 (n-1)/n of the payload, reduce-scatter and all-gather
     * (n-1)/n, a send its payload) and called as this engine calls them,
     * per step on rank 0 (first pipeline stage, first tp rank). Ranks are
     * placed tp innermost, then dp, then pp (Megatron's order): a group
     * stays inside a node when its span fits in one. */
    double act_el = c->act_bytes, b = y->micro_batch, t = y->tp, sp = y->sequence_parallel, cp = cp_of(y);
    double msg = b * s / cp * h * act_el; /* one microbatch's activations, a cp rank's rows (the tp and pp messages) */
    double layers = L / p, head = p == 1; /* blocks rank 0 runs; whether it runs the head */
    /* tp, per microbatch: without sequence parallelism 2 all-reduces per
     * block forward and 2 backward (2 more forward again under full
     * recompute), 1 for the vocab-parallel embedding and 1 for the head's
     * input gradient; with it each all-reduce becomes a reduce-scatter, and
     * all-gathers bring the sequence back before each linear pair -- 2
     * forward, 2 backward, 2 re-gathered for the weight gradients (+2 under
     * full recompute) and the head's input forward and again backward. On
     * the critical path, not hidden. */
    double rc_extra = y->recompute == MT_PLAN_RC_FULL ? 2 : 0;
    double tp_ar = 0, tp_rs = 0, tp_ag = 0;
    if (y->tp > 1 && !sp) tp_ar = m * ((4 + rc_extra) * layers + 1 + head);
    if (y->tp > 1 && sp) {
        tp_rs = m * ((4 + rc_extra) * layers + 1 + head);
        tp_ag = m * ((6 + rc_extra) * layers + 2 * head);
    }
    double tp_calls = tp_ar + tp_rs + tp_ag;
    double tp_bytes = tp_ar * 2 * (t - 1) / t * msg + (tp_rs + tp_ag) * (t - 1) * (msg / t);
    double tp_bw = c->bw_intra;
    /* pp: the first stage sends each microbatch's activations on from each
     * of its v chunks and the gradients back from all but the first (the
     * sequence shard under sequence parallelism). */
    double pp_msg = sp ? msg / t : msg;
    double pp_calls = p > 1 ? m * (2 * v - 1) : 0, pp_bytes = pp_calls * pp_msg;
    int pp_inter = y->tp * replicas_of(y) >= c->per_node && p > 1;
    /* cp (ring attention, models/ring_attention.h), per block and microbatch: the K|V of the rank's two
     * chunks (2 b c rows, c = s / 2cp, of this tp rank's kv heads) is sent cp - 1 times in forward and
     * in backward, its dK|dV cp times; recomputation (selective or full) runs the forward's ring again.
     * The cp group spans tp x cp ranks. */
    double kvw = (double)(mt_model_kv_heads(cfg) < y->tp ? 1 : mt_model_kv_heads(cfg) / y->tp) * mt_model_head_dim(cfg);
    double cp_msg = 2 * b * (s / (2 * cp)) * 2 * kvw * act_el; /* K|V of both chunks (dK|dV: 2 messages of half) */
    double cp_kv = cp > 1 ? m * layers * (2 * (cp - 1) + (y->recompute != MT_PLAN_RC_NONE ? cp - 1 : 0)) : 0;
    double cp_calls = cp > 1 ? cp_kv + m * layers * 2 * cp : 0;
    double cp_bytes = cp > 1 ? (cp_kv + m * layers * cp) * cp_msg : 0;
    int cp_inter = y->tp * cp > c->per_node;
    double cp_bw = cp_inter ? c->bw_inter : c->bw_intra;
    double pp_bw = pp_inter ? c->bw_inter : c->bw_intra;
    /* dp / ZeRO over the shard group G, per held unit (S its padded shard):
     * gradients in fp32 (the engine's default {grad-reduce-dtype}), the
     * gathered parameters in the run's precision. Stage 0 all-reduces each
     * unit's gradients once a step; stages 1-2 reduce-scatter them (stage 1
     * once, stage 2 every microbatch, freeing the full gradient) and
     * all-gather the updated parameters after the step; stage 3
     * reduce-scatters every microbatch and gathers unit 0 once and every
     * other unit twice (forward, backward) per microbatch; hybrid sharding
     * (G < dp) all-reduces the owned shards across the dp / G replicas. */
    /* {ep}: every stage reduces over the shard group (the expert-data-parallel ranks), then the dense
     * part of the shards over the ep group (the replicas); ep > 1 has cp 1 (mt_plan_check). fp32 ZeRO 1-3
     * without ZeRO++ (split_dense) reduces and gathers each unit's dense part over all dp and its experts
     * over the shard group instead, with no replica sum (hs.gS counts both parts) */
    double D = replicas_of(y); /* the ranks holding the same parameters: dp x cp */
    double G = y->zero || y->ep > 1 ? y->shard : D, pe = y->bf16 ? 2 : 4, ge = 4, R = D / G;
    double units = layers + 1 + head;
    double grad_b = 0, param_b = 0, dp_calls = 0, qg_intra = 0, qg_inter = 0, hpz_b = 0;
    if (D > 1 && y->zero == 0) {
        grad_b = 2 * (G - 1) / G * hs.n * ge;
        dp_calls = units;
    } else if (D > 1) {
        double rs_times = y->zero == 1 ? 1 : m;
        /* ZeRO++ (zero_qwz.c, zero_hpz.c, zero_qgz.c): qgZ replaces each reduce-scatter by two
         * all-to-alls of int4 records -- to the Hn node peers A records each, then the node sum to
         * the A - 1 other nodes; qwZ sends int8 records in every gather hpZ leaves it; hpZ's
         * backward gathers (every unit but 0) collect the G / H-element parts of the node's H ranks */
        double Hn = shard_ranks_per_node(y, c->per_node), A = G / Hn;
        if (y->qgz && y->zero >= 2) {
            qg_intra = rs_times * (Hn - 1) * A * hs.q4;
            qg_inter = rs_times * (A - 1) * hs.q4;
            dp_calls = 2 * rs_times * units;
        } else {
            grad_b = rs_times * hs.gS * ge;
            dp_calls = rs_times * units;
        }
        if (y->zero == 3) {
            double fwd = y->qwz ? (G - 1) * hs.q8 : pe * hs.gS;
            double bwd = y->qwz ? (G - 1) * (hs.q8 - hs.q8_0) : pe * (hs.gS - hs.gS0);
            if (y->hpz) { /* the backward gathers move inside the node, unquantized */
                hpz_b = m * (y->hpz - 1) * (G / y->hpz) * (hs.S - hs.S0) * pe;
                bwd = 0;
            }
            param_b = m * (fwd + bwd);
            dp_calls += m * (2 * units - 1);
        } else {
            param_b = pe * hs.gS;
            dp_calls += units;
        }
    }
    double rep_b = 0;
    if (D > 1 && (y->zero || y->ep > 1) && R > 1 && !split_dense(y)) { /* split: no replicas to sum over */
        rep_b = 2 * (R - 1) / R * (y->ep > 1 ? hs.Sd : hs.S) * ge;
        dp_calls += units;
    }
    /* {ep}: per block and microbatch the counts (an all-to-all of E / ep integers), then 4 exchanges of token
     * rows (forward: to the experts and back; backward: the output gradients the same two ways; full
     * recompute: the forward's two again), each sending the rows routed to the other ranks' experts --
     * (ep - 1) / ep of the b s K rows of C activations under balanced routing; on the critical path */
    double a2a_b = 0, a2a_calls = 0;
    if (y->ep > 1) {
        double P = y->ep, K = cfg->moe_top_k, x = 4 + rc_extra;
        a2a_b = m * layers * (x * b * s * K * (P - 1) / P * h * act_el + (P - 1) * (cfg->num_experts / P) * 4);
        a2a_calls = m * layers * (1 + x);
    }
    double dp_bytes = grad_b + param_b + rep_b + qg_intra + qg_inter + hpz_b;
    r->comm_ep = a2a_b;
    r->expert_params_rank = hs.ne;
    /* the shard group spans tp x G ranks, the replicas the whole dp group */
    int shard_inter = y->tp * G > c->per_node, dp_inter = y->tp * D > c->per_node;
    double shard_bw = shard_inter ? c->bw_inter : c->bw_intra, dp_bw = dp_inter ? c->bw_inter : c->bw_intra;
    r->comm_intra = tp_bytes + (pp_inter ? 0 : pp_bytes) + (shard_inter ? 0 : grad_b + param_b) + (dp_inter ? 0 : rep_b + a2a_b) +
                    qg_intra + hpz_b + (cp_inter ? 0 : cp_bytes);
    r->comm_inter = (pp_inter ? pp_bytes : 0) + (shard_inter ? grad_b + param_b : 0) + (dp_inter ? rep_b + a2a_b : 0) + qg_inter +
                    (cp_inter ? cp_bytes : 0);
    r->comm_cp = cp_bytes;
    r->comm_tp = tp_bytes;
    r->comm_pp = pp_bytes;
    r->comm_dp = dp_bytes;
    /* Exposed: tp all of it (on the critical path); pp the activation hops
     * of the pipeline's fill and drain; the gradient reduction what the last
     * microbatch's backward (2/passes of its compute) does not hide; stages
     * 1-2's parameter all-gather after the optimizer step all of it;
     * stage 3's gathers what the compute they are prefetched under does not
     * hide. Each call also costs the latency on the critical path (tp, pp
     * and the gradient/parameter collectives alike: a tiny model's many
     * small collectives are latency, not bandwidth). */
    double t_mb_back = r->t_compute / m * 2 / passes;
    double t_grad = grad_b / shard_bw + qg_intra / c->bw_intra + qg_inter / c->bw_inter;
    double t_param = param_b / shard_bw + hpz_b / c->bw_intra, t_rep = rep_b / dp_bw;
    double t_pp = p > 1 ? 2 * (p - 1) * pp_msg / pp_bw : 0;
    r->t_alltoall = a2a_b / dp_bw; /* the ep group spans the dp group's stride */
    double exp_grad = t_grad > t_mb_back ? t_grad - t_mb_back : 0;
    double exp_param = y->zero == 3 ? (t_param > r->t_compute ? t_param - r->t_compute : 0) : t_param;
    r->calls = tp_calls + pp_calls + dp_calls + cp_calls + a2a_calls;
    double t_lat = r->calls * c->latency;
    /* the ring's transfers overlap the attention block compute they feed: exposed is what the attention
       share of the compute (4 s h of each block's w + 4 s h forward FLOPs per token) does not hide */
    double t_cp = cp_bytes / cp_bw, t_attn = r->t_compute * (1 - 6 * h * V / (passes * L * (w + 4 * s * h) + 6 * h * V)) *
                                                 (4 * s * h) / (w + 4 * s * h);
    double exp_cp = t_cp > t_attn ? t_cp - t_attn : 0;
    r->t_comm_exposed = tp_bytes / tp_bw + t_pp + exp_grad + exp_param + t_rep + r->t_alltoall + t_lat + exp_cp; /* replicas: after the last backward */
    r->t_step = r->t_compute + r->t_bubble + r->t_comm_exposed;
    /* This CPU engine ({cpu}) hides no communication: shared-memory
     * transfers are copies done by the ranks' own cores, and MPI progresses
     * only while a rank polls, so every byte sent costs its bandwidth time
     * and every call its latency on top of the compute. With more ranks
     * than cores ({cpu-cores}) the ranks of a node share them, and a rank
     * idle in the bubble or asleep in a wait gives its core to another: the
     * step is the node's CPU work spread over the cores, unless one rank's
     * own path (its compute, bubble and communication) is longer; a
     * pipeline is simulated on its share of the cores (its fill and drain
     * leave cores idle when it is deeper than they are many). */
    if (c->engine_exact) {
        double t_bytes = tp_bytes / tp_bw + pp_bytes / pp_bw + t_grad + t_param + t_rep + r->t_alltoall + t_cp;
        double own = r->t_compute + t_bytes + t_lat;
        double share = c->cores > 0 && c->cores < c->per_node ? (double)c->per_node / c->cores : 1.0;
        double step = share * own > own + r->t_bubble ? share * own : own + r->t_bubble;
        if (p > 1) { /* the pipeline's p stages (each a tp group) get the cores of 1 / dp of the node */
            double cores = c->cores > 0 ? (double)c->cores / (D * y->tp) : p;
            double bwd = y->recompute == MT_PLAN_RC_FULL ? 3 : 2, unit = own / (m * (1 + bwd));
            double span = mt_plan_pipeline_makespan((int)p, m, (int)v, cores < p ? cores : p, bwd);
            if (span > 0) step = span * unit;
        }
        r->t_comm_exposed = fmax(step - r->t_compute - r->t_bubble, 0); /* communication and the wait for a core */
        r->t_step = step;
    }
    r->tflops_per_gpu = F / ranks / r->t_step / 1e12;
    r->mfu = F_model / ranks / r->t_step / (y->bf16 ? c->peak_flops : c->peak_flops_fp32);
}
