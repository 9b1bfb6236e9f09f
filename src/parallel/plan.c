#include "parallel/plan.h"
#include "models/family.h"
#include <math.h>
#include <string.h>

/* Device tables. Peak: dense bf16 tensor-core FLOP/s. Bandwidths are one
 * way per device: NVLink's aggregate (A100 600 GB/s, H100/H200 900 GB/s
 * both ways) halved; InfiniBand per node (A100 8 x 200 Gb/s, H100/H200
 * 8 x 400 Gb/s) divided over the node's 8 devices. Efficiency 0.5: the
 * fraction of peak large transformer GEMMs reach in practice (Megatron-LM
 * reports 44-52% end to end on A100 with small communication overheads);
 * one constant, not fitted per model. */
int mt_plan_cluster_gpu(const char *name, mt_plan_cluster *c) {
    static const struct {
        const char *name;
        double peak, mem, intra, inter;
    } gpus[] = {
        {"a100", 312e12, 80e9, 300e9, 8 * 200e9 / 8 / 8},
        {"h100", 989e12, 80e9, 450e9, 8 * 400e9 / 8 / 8},
        {"h200", 989e12, 141e9, 450e9, 8 * 400e9 / 8 / 8},
    };
    for (size_t i = 0; i < sizeof gpus / sizeof gpus[0]; i++) {
        if (strcmp(name, gpus[i].name)) continue;
        c->name = gpus[i].name;
        c->peak_flops = gpus[i].peak;
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

int mt_plan_check(const mt_model_config *cfg, const mt_plan_cluster *c, const mt_plan_layout *y, int global_batch,
                  mt_error *err) {
    if (y->dp < 1 || y->tp < 1 || y->pp < 1 || y->micro_batch < 1 || y->chunks < 1)
        return mt_errorf(err, "dp, tp, pp, micro-batch and chunks must be >= 1");
    if (y->dp * y->tp * y->pp != c->gpus)
        return mt_errorf(err, "dp %d x tp %d x pp %d = %d, not the %d devices", y->dp, y->tp, y->pp,
                         y->dp * y->tp * y->pp, c->gpus);
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
    if (y->shard < 1 || y->dp % y->shard) return mt_errorf(err, "shard group %d does not divide dp %d", y->shard, y->dp);
    if (c->engine_exact && y->zero >= 2 && y->pp > 1)
        return mt_errorf(err, "ZeRO %d with pp %d: this engine pipelines with ZeRO 0-1 only", y->zero, y->pp);
    if (y->sequence_parallel && y->tp == 1) return mt_errorf(err, "sequence parallelism needs tp > 1");
    if (y->sequence_parallel && ((size_t)y->micro_batch * (size_t)cfg->seq_len) % (size_t)y->tp)
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
 * per 256 blocks and the offset), int8 a byte a weight and an fp32 scale per row. */
static double quant_bytes(int kind, int dq, double rows, double cols) {
    double n = rows * cols, nb = ceil(n / 64);
    if (kind == 2) return n + 4 * rows;
    return ceil(n / 2) + (dq ? nb + 4 * ceil(nb / 256) + 4 : 4 * nb);
}

static void state_bytes(const mt_model_config *cfg, const mt_plan_layout *y, double out[MT_PLAN_NCAT], double *held_params) {
    mt_layout l;
    mt_model_layout_build(cfg, y->tp, 0, &l);
    int z = y->zero;
    size_t G = z == 0 ? 1 : (size_t)y->shard;
    double p = 0, g = 0, o = 0, hp = 0, fz = 0;
    for (int u = 0; u < l.n_units; u++) {
        /* the frozen store (PEFT, --freeze): replicated over dp, fp32 (plus its 16-bit copy under
         * bf16); a quantized matrix whole on every tp rank */
        if (held(cfg, y, u)) {
            fz += (y->bf16 ? 6.0 : 4.0) * (double)l.units[u].frozen_numel;
            for (int i = 0; i < l.units[u].n_frozen; i++)
                if (l.units[u].ft[i].quant)
                    fz += quant_bytes(l.units[u].ft[i].quant, cfg->adapters.double_quant,
                                      (double)l.units[u].ft[i].gshape[0], (double)l.units[u].ft[i].gshape[1]);
        }
        if (!held(cfg, y, u) || !l.units[u].numel) continue;
        size_t n = l.units[u].numel, S = (n + G - 1) / G, P = G * S;
        hp += (double)n;
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
    *held_params = hp;
}

/* Activation bytes rank 0 keeps. Engine-exact (this CPU engine, fp32, the
 * GPT-2 family's buffer table in models/gpt2): per block and microbatch of
 * N = b s rows (n = N / t under sequence parallelism, else N; C = h,
 * a heads) it keeps floats
 *   none       4n + 4nC + (12 N C + N a) / t
 *   selective  4n + 4nC + 11 N C / t           (attention output and softmax statistics recomputed)
 *   full       n C                              (the block's output)
 * plus per microbatch the tokens, targets (int32) and sample ids (u64),
 * the embedding output n C, and with the output unit its norm n (C + 2)
 * and row losses N, and once the logits N Vp / t. A 1F1B pipeline's first
 * stage holds min(pp, m) microbatches. At stage 1 (check_act_formula.sh
 * asserts the same forms against measurement): 4 s b (16h + a + 4) etc.
 * Megatron (Korthikanti et al. 2022), 16-bit, per layer per microbatch:
 * none s b h (34 + 5 a s / h) / t with sequence parallelism (else
 * s b h (10 + 24 / t + 5 a s / (h t))), selective s b h 34 / t (10 + 24 / t),
 * full 2 s b h (/ t); the first stage holds L layers' worth (pp
 * microbatches of L / pp layers), x (1 + (p - 1) / (p v)) interleaved. */
static double act_bytes(const mt_model_config *cfg, const mt_plan_cluster *c, const mt_plan_layout *y, int m) {
    double t = y->tp, b = y->micro_batch, s = cfg->seq_len, h = cfg->n_embd, a = cfg->n_head, L = cfg->n_layer;
    double N = b * s, n = y->sequence_parallel ? N / t : N;
    int p = y->pp, v = y->chunks;
    if (c->engine_exact && cfg->family == MT_FAMILY_GPT2) {
        double per_layer;
        switch (y->recompute) {
        case MT_PLAN_RC_NONE: per_layer = 4 * n + 4 * n * h + (12 * N * h + N * a) / t; break;
        case MT_PLAN_RC_SELECTIVE: per_layer = 4 * n + 4 * n * h + 11 * N * h / t; break;
        default: per_layer = n * h; break;
        }
        double layers = L / (p * v) * v;
        double slot = 8 * N + 8 * b + 4 * (n * h + layers * per_layer);
        if (p == 1) slot += 4 * (n * (h + 2) + N);
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

void mt_plan_eval(const mt_model_config *cfg, const mt_plan_cluster *c, const mt_plan_layout *y, int global_batch,
                  mt_plan_result *r) {
    memset(r, 0, sizeof *r);
    double hp;
    state_bytes(cfg, y, r->bytes, &hp);
    r->params_rank = hp;
    r->params_total = mt_plan_param_count(cfg);
    int m = global_batch / (y->dp * y->micro_batch);
    r->microbatches = m;
    r->bytes[MT_PLAN_ACTS] = act_bytes(cfg, c, y, m);
    for (int k = 0; k < MT_PLAN_NCAT; k++) r->total += r->bytes[k];
    r->fits = r->total <= c->mem_bytes;

    /* FLOPs per step: B s [passes L (24 h^2 + 4 s h) + 6 h V]; passes 3
     * (forward, backward's two GEMMs), 4 with full recompute (Megatron's
     * 96 B s l h^2 (1 + s/6h + V/16lh) exactly); selective recompute adds
     * the attention core's forward (4 s h per layer and token). */
    double B = global_batch, s = cfg->seq_len, h = cfg->n_embd, L = cfg->n_layer, V = cfg->padded_vocab;
    /* forward FLOPs per token of a block's matrices: GPT-2 24 h^2 as
     * Megatron counts; other families 2 x the block's parameters */
    double w = 24 * h * h;
    if (cfg->family != MT_FAMILY_GPT2) {
        mt_layout l;
        mt_model_layout_build(cfg, 1, 0, &l);
        w = 2.0 * (double)l.units[1].gnumel;
        mt_layout_free(&l);
    }
    double passes = y->recompute == MT_PLAN_RC_FULL ? 4 : 3;
    double attn_extra = y->recompute == MT_PLAN_RC_SELECTIVE ? 4 * s * h : 0;
    double F = B * s * (passes * L * (w + 4 * s * h) + L * attn_extra + 6 * h * V);
    double F_model = B * s * (3 * L * (w + 4 * s * h) + 6 * h * V);
    double ranks = (double)y->dp * y->tp * y->pp;
    r->flops_step = F / ranks;
    double rate = c->peak_flops * c->efficiency;
    /* oversubscribed CPU ranks share the cores: each gets cores / ranks of one's rate */
    if (c->cores > 0 && c->cores < c->per_node) rate *= (double)c->cores / c->per_node;
    r->t_compute = r->flops_step / rate;
    /* Pipeline bubble: (p - 1) / (m v) of the compute time idles, i.e. the
     * fraction (p - 1) / (m v + p - 1) of the step (interleaved: / v). */
    double p = y->pp, v = y->chunks;
    r->t_bubble = r->t_compute * (p - 1) / (m * v);
    r->bubble = (p - 1) / (m * v + p - 1);

    /* Ranks are placed tp innermost, then dp, then pp (Megatron's order):
     * a group stays inside a node when its span fits in one. */
    double act_el = c->act_bytes, gb = y->bf16 ? 2 : 4;
    double b = y->micro_batch, msg = b * s * h * act_el;
    /* tp: 2 all-reduces per layer forward, 2 backward, 2 more recomputed
     * (all-gather + reduce-scatter under sequence parallelism: the same
     * bytes); on the critical path, not hidden. */
    double tp_ar = y->recompute == MT_PLAN_RC_FULL ? 6 : 4;
    double tp_bytes = y->tp > 1 ? tp_ar * (L / p) * m * 2 * (y->tp - 1) / y->tp * msg : 0;
    double tp_bw = c->bw_intra;
    /* pp: each microbatch's activation to the next stage and its gradient
     * back, once per chunk boundary. */
    double pp_bytes = p > 1 ? 2 * m * v * msg : 0;
    int pp_inter = (double)y->tp * y->dp * (p > 1) > 0 && y->tp * y->dp >= c->per_node && p > 1;
    /* dp / ZeRO over the shard group G (ring: (G-1)/G of the payload per
     * rank): stage 0 all-reduces the gradients (2x), stages 1-2
     * reduce-scatter them and all-gather the updated parameters, stage 3
     * gathers each unit's parameters in every microbatch's forward and
     * backward and reduce-scatters the gradients once; hybrid sharding adds
     * an all-reduce of the owned shard across the dp / G replicas. */
    double G = y->zero ? y->shard : y->dp, psi = hp, ring = (G - 1) / G;
    double grad_b = y->dp > 1 ? (y->zero == 0 ? 2 : 1) * ring * psi * gb : 0;
    double param_b = y->dp > 1 && y->zero ? (y->zero == 3 ? 2.0 * m : 1.0) * ring * psi * gb : 0;
    if (y->zero && y->shard < y->dp) grad_b += 2.0 * (y->dp / y->shard - 1) / (y->dp / y->shard) * psi / G * gb;
    double dp_bytes = grad_b + param_b;
    int dp_inter = y->tp * y->dp > c->per_node;
    double dp_bw = dp_inter ? c->bw_inter : c->bw_intra;
    r->comm_intra = tp_bytes + (pp_inter ? 0 : pp_bytes) + (dp_inter ? 0 : dp_bytes);
    r->comm_inter = (pp_inter ? pp_bytes : 0) + (dp_inter ? dp_bytes : 0);
    /* Exposed: tp all of it (on the critical path); pp the activation hops
     * of the pipeline's fill and drain; the gradient reduction what the last
     * microbatch's backward (2/passes of its compute) does not hide; stages
     * 1-2's parameter all-gather after the optimizer step all of it;
     * stage 3's gathers what the compute they are prefetched under does not
     * hide. */
    double t_mb_back = r->t_compute / m * 2 / passes;
    double t_grad = grad_b / dp_bw, t_param = param_b / dp_bw;
    double t_pp = p > 1 ? 2 * (p - 1) * msg / (pp_inter ? c->bw_inter : c->bw_intra) : 0;
    double exp_grad = t_grad > t_mb_back ? t_grad - t_mb_back : 0;
    double exp_param = y->zero == 3 ? (t_param > r->t_compute ? t_param - r->t_compute : 0) : t_param;
    r->t_comm_exposed = tp_bytes / tp_bw + t_pp + exp_grad + exp_param;
    r->t_step = r->t_compute + r->t_bubble + r->t_comm_exposed;
    r->tflops_per_gpu = F / ranks / r->t_step / 1e12;
    r->mfu = F_model / ranks / r->t_step / c->peak_flops;
}
