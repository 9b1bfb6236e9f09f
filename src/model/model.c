#include "model/model.h"
#include "ops/ops.h"
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static float *acts_alloc(mt_model *m, mt_acts *a, size_t n, const char *what) {
    a->bytes += n * sizeof(float);
    return mt_mem_alloc(m->mem, MT_MEM_ACTS, n * sizeof(float), what);
}

static int holds_layer(const mt_model_part *p, int l) { return !p->own_layer || p->own_layer[l]; }

/* The buffers of a block's activations: where in mt_block_acts, their row
 * width (the residual stream's C or 1 on its rows; the tensor-parallel
 * slice C/tp, 3C/tp, 4C/tp or heads/tp on all N rows), and the recomputation
 * modes under which every block keeps its own (bit 1 << mt_recompute);
 * under the others all blocks and slots use one shared copy (m->shared). */
enum { W_C, W_1, W_CL, W_3CL, W_4CL, W_NHL };
#define OWN(none, selective, full) ((none) | (selective) << 1 | (full) << 2)
static const struct {
    size_t offset;
    int width;
    const char *name;
    int own;
} block_bufs[] = {
    {offsetof(mt_block_acts, ln1), W_C, "ln1", OWN(1, 1, 0)},
    {offsetof(mt_block_acts, ln1_mean), W_1, "ln1 mean", OWN(1, 1, 0)},
    {offsetof(mt_block_acts, ln1_rstd), W_1, "ln1 rstd", OWN(1, 1, 0)},
    {offsetof(mt_block_acts, qkv), W_3CL, "qkv", OWN(1, 1, 0)},
    {offsetof(mt_block_acts, atty), W_CL, "attention output", OWN(1, 0, 0)},
    {offsetof(mt_block_acts, att_lse), W_NHL, "attention lse", OWN(1, 0, 0)},
    {offsetof(mt_block_acts, res2), W_C, "residual 2", OWN(1, 1, 0)},
    {offsetof(mt_block_acts, ln2), W_C, "ln2", OWN(1, 1, 0)},
    {offsetof(mt_block_acts, ln2_mean), W_1, "ln2 mean", OWN(1, 1, 0)},
    {offsetof(mt_block_acts, ln2_rstd), W_1, "ln2 rstd", OWN(1, 1, 0)},
    {offsetof(mt_block_acts, fch), W_4CL, "fc", OWN(1, 1, 0)},
    {offsetof(mt_block_acts, fch_gelu), W_4CL, "gelu", OWN(1, 1, 0)},
    {offsetof(mt_block_acts, res3), W_C, "residual 3", OWN(1, 1, 1)},
};
#define N_BLOCK_BUFS (sizeof block_bufs / sizeof block_bufs[0])

static float **block_buf(mt_block_acts *b, size_t i) { return (float **)((char *)b + block_bufs[i].offset); }

static int block_owns(const mt_model *m, size_t i) { return block_bufs[i].own >> m->recompute & 1; }

/* Rows of the residual stream held here (sequence parallelism splits them). */
static size_t resid_rows(const mt_model *m, size_t N) { return mt_tp_sp(m->tp) ? N / (size_t)m->tp->size : N; }

static size_t block_buf_floats(const mt_model *m, size_t i, size_t N) {
    size_t C = (size_t)m->layout.cfg.n_embd, NH = (size_t)m->layout.cfg.n_head, tp = (size_t)m->layout.tp;
    switch (block_bufs[i].width) {
    case W_C: return resid_rows(m, N) * C;
    case W_1: return resid_rows(m, N);
    case W_CL: return N * C / tp;
    case W_3CL: return N * 3 * C / tp;
    case W_4CL: return N * 4 * C / tp;
    default: return N * NH / tp;
    }
}

size_t mt_model_resid_floats(const mt_model *m) {
    return resid_rows(m, (size_t)m->acts.B * (size_t)m->acts.T) * (size_t)m->layout.cfg.n_embd;
}

static void alloc_slot(mt_model *m, mt_acts *a, const mt_model_part *part, int B, int T, float *logits) {
    const mt_gpt_config *cfg = &m->layout.cfg;
    size_t C = (size_t)cfg->n_embd, N = (size_t)B * (size_t)T, L = (size_t)cfg->n_layer;
    mt_mem *mem = m->mem;
    a->B = B;
    a->T = T;
    a->tokens = mt_mem_alloc(mem, MT_MEM_ACTS, N * sizeof(int32_t), "tokens");
    a->targets = mt_mem_alloc(mem, MT_MEM_ACTS, N * sizeof(int32_t), "targets");
    a->sample_ids = mt_mem_alloc(mem, MT_MEM_ACTS, (size_t)B * sizeof(uint64_t), "sample ids");
    a->bytes += N * 2 * sizeof(int32_t) + (size_t)B * sizeof(uint64_t);
    size_t n = resid_rows(m, N);
    if (part->own_embed) a->encoded = acts_alloc(m, a, n * C, "embedding output");
    a->blocks = mt_xcalloc(L, sizeof(mt_block_acts), "block activations");
    for (size_t i = 0; i < L; i++) {
        if (!holds_layer(part, (int)i)) continue;
        for (size_t k = 0; k < N_BLOCK_BUFS; k++)
            *block_buf(&a->blocks[i], k) = block_owns(m, k)
                                               ? acts_alloc(m, a, block_buf_floats(m, k, N), block_bufs[k].name)
                                               : *block_buf(&m->shared, k);
    }
    for (size_t i = 1; i < L; i++) /* inputs received from the previous stage */
        if (holds_layer(part, (int)i) && !holds_layer(part, (int)i - 1))
            a->blocks[i - 1].res3 = acts_alloc(m, a, n * C, "stage input");
    if (part->own_head) {
        a->lnf = acts_alloc(m, a, n * C, "lnf");
        a->lnf_mean = acts_alloc(m, a, n, "lnf mean");
        a->lnf_rstd = acts_alloc(m, a, n, "lnf rstd");
        a->losses = acts_alloc(m, a, N, "losses");
        a->logits = logits;
    }
}

/* The buffer set shared by all blocks and slots under recomputation. It is
 * the working set of the one block being computed, not activations kept for
 * backward, so it is accounted as scratch (the total still shows it). */
static void alloc_shared(mt_model *m, size_t N) {
    for (size_t k = 0; k < N_BLOCK_BUFS; k++)
        if (!block_owns(m, k))
            *block_buf(&m->shared, k) =
                mt_mem_alloc(m->mem, MT_MEM_SCRATCH, block_buf_floats(m, k, N) * sizeof(float), block_bufs[k].name);
}

/* --precision bf16/fp16: the 16-bit parameter copies (accounted as
 * parameters) and the operand scratch, sized for the widest GEMM operand
 * (the head's vocabulary columns when this rank holds the head). */
static void alloc_lowp(mt_model *m, const mt_model_part *part, size_t N) {
    m->precision = part->precision;
    m->gemm = part->gemm;
    m->param_version = 1;
    const mt_gpt_layout *l = &m->layout;
    m->w16 = mt_xcalloc((size_t)l->n_units, sizeof(uint16_t *), "16-bit parameter table");
    m->w16_version = mt_xcalloc((size_t)l->n_units, sizeof(uint64_t), "16-bit parameter table");
    if (m->precision == MT_FP32) return;
    size_t C = (size_t)l->cfg.n_embd, tp = (size_t)l->tp, wmax = 4 * C / tp > C ? 4 * C / tp : C, wnum = 4 * C * C / tp;
    if (part->own_head) {
        size_t vl = (size_t)l->cfg.padded_vocab / tp;
        wmax = vl > wmax ? vl : wmax;
        wnum = vl * C > wnum ? vl * C : wnum;
    }
    for (int u = 0; u < l->n_units; u++)
        if (m->params[u])
            m->w16[u] = mt_mem_alloc(m->mem, MT_MEM_PARAMS, l->units[u].numel * sizeof(uint16_t), "16-bit parameters");
    for (int k = 0; k < 2; k++) m->op16[k] = mt_mem_alloc(m->mem, MT_MEM_SCRATCH, N * wmax * sizeof(uint16_t), "16-bit operands");
    if (m->precision == MT_FP16) {
        for (int k = 0; k < 2; k++) m->opf[k] = mt_mem_alloc(m->mem, MT_MEM_SCRATCH, N * wmax * sizeof(float), "fp16-rounded operands");
        m->wbuf = mt_mem_alloc(m->mem, MT_MEM_SCRATCH, wnum * sizeof(float), "fp16-rounded weight");
    }
}

void mt_model_create(mt_model *m, const mt_gpt_config *cfg, int B, int T, uint64_t seed, mt_mem *mem) {
    mt_model_part whole = {NULL, 1, 1, 1, MT_RECOMPUTE_NONE, NULL, MT_FP32, MT_GEMM_DEFAULT, 0};
    mt_model_create_part(m, cfg, B, T, seed, mem, &whole);
}

void mt_model_create_part(mt_model *m, const mt_gpt_config *cfg, int B, int T, uint64_t seed, mt_mem *mem,
                          const mt_model_part *part) {
    memset(m, 0, sizeof *m);
    m->mem = mem;
    m->seed = seed;
    m->tp = part->tp;
    int tp = mt_tp_size(part->tp);
    mt_gpt_layout_build_tp(cfg, tp, tp > 1 ? part->tp->rank : 0, &m->layout);
    const mt_gpt_layout *l = &m->layout;
    int L = cfg->n_layer;
    m->params = mt_xcalloc((size_t)l->n_units, sizeof(float *), "unit parameter table");
    m->grads = mt_xcalloc((size_t)l->n_units, sizeof(float *), "unit gradient table");
    m->grad_fresh = mt_xcalloc((size_t)l->n_units, 1, "unit gradient table");
    m->held = mt_xcalloc((size_t)l->n_units, 1, "unit table");
    for (int u = 0; u < l->n_units; u++) {
        m->held[u] = u == 0 ? (part->own_embed || part->own_head) : u == L + 1 ? part->own_head : holds_layer(part, u - 1);
        if (m->held[u] && !part->defer_params) mt_model_materialize_unit(m, u, 1);
    }
    size_t C = (size_t)cfg->n_embd, N = (size_t)B * (size_t)T, NH = (size_t)cfg->n_head;
    m->recompute = part->recompute;
    alloc_shared(m, N);
    m->n_slots = part->act_slots > 0 ? part->act_slots : 1;
    m->slots = mt_xcalloc((size_t)m->n_slots, sizeof(mt_acts), "activation slots");
    float *logits = NULL;
    if (part->own_head) {
        size_t vl = (size_t)(cfg->padded_vocab / tp); /* this rank's vocabulary columns */
        logits = mt_mem_alloc(mem, MT_MEM_ACTS, N * vl * sizeof(float), "logits");
        m->slots[0].bytes += N * vl * sizeof(float);
    }
    for (int k = 0; k < m->n_slots; k++) alloc_slot(m, &m->slots[k], part, B, T, logits);
    m->acts = m->slots[0];

    mt_grad_scratch *g = &m->gs;
    g->dresid = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * C * sizeof(float), "dresid");
    g->dtmp = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * C * sizeof(float), "dtmp");
    g->dln = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * C * sizeof(float), "dln");
    g->datty = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * C / (size_t)tp * sizeof(float), "datty");
    g->dqkv = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * 3 * C / (size_t)tp * sizeof(float), "dqkv");
    g->dfch = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * 4 * C / (size_t)tp * sizeof(float), "dfch");
    size_t row = C > (size_t)T ? C : (size_t)T;
    g->drop_row = mt_mem_alloc(mem, MT_MEM_SCRATCH, row * sizeof(float), "dropout row");
    if (mt_tp_sp(part->tp)) g->gathered = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * C * sizeof(float), "gathered rows");
    if (tp > 1 && part->own_head) {
        g->xent_stats = mt_mem_alloc(mem, MT_MEM_SCRATCH, (size_t)tp * 3 * N * sizeof(float), "cross-entropy stats");
        g->xent_lse = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * sizeof(float), "cross-entropy lse");
    }
    g->attn_scratch_floats =
        op_attention_scratch_floats(B, T, (int)NH / tp, (int)(C / NH), omp_get_max_threads());
    alloc_lowp(m, part, N);
    g->attn_scratch = mt_mem_alloc(mem, MT_MEM_SCRATCH, g->attn_scratch_floats * sizeof(float), "attention scratch");
}

void mt_model_use_slot(mt_model *m, int k) {
    if (k < 0 || k >= m->n_slots) mt_die("model: activation slot %d out of range (%d slots)", k, m->n_slots);
    m->acts = m->slots[k];
}

static void free_slot(mt_acts *a, int L, mt_block_acts *shared) {
    free(a->tokens); free(a->targets); free(a->sample_ids); free(a->encoded);
    for (int i = 0; i < L; i++)
        for (size_t k = 0; k < N_BLOCK_BUFS; k++)
            if (*block_buf(&a->blocks[i], k) != *block_buf(shared, k)) free(*block_buf(&a->blocks[i], k));
    free(a->blocks);
    free(a->lnf); free(a->lnf_mean); free(a->lnf_rstd); free(a->losses);
}

float *mt_model_materialize_unit(mt_model *m, int u, int with_grads) {
    if (!m->held[u]) return NULL;
    size_t n = m->layout.units[u].numel;
    if (!m->params[u]) {
        m->params[u] = mt_mem_alloc(m->mem, MT_MEM_PARAMS, n * sizeof(float), "parameters");
        mt_gpt_init_unit(&m->layout, u, m->params[u], m->seed);
    }
    if (with_grads && !m->grads[u]) m->grads[u] = mt_mem_alloc(m->mem, MT_MEM_GRADS, n * sizeof(float), "gradients");
    return m->params[u];
}

void mt_model_free(mt_model *m) {
    const mt_gpt_layout *l = &m->layout;
    for (int u = 0; u < l->n_units; u++) {
        mt_mem_free(m->mem, MT_MEM_PARAMS, m->params[u], l->units[u].numel * sizeof(float));
        mt_mem_free(m->mem, MT_MEM_GRADS, m->grads[u], l->units[u].numel * sizeof(float));
    }
    if (m->w16) {
        for (int u = 0; u < l->n_units; u++)
            if (m->w16[u]) mt_mem_free(m->mem, MT_MEM_PARAMS, m->w16[u], l->units[u].numel * sizeof(uint16_t));
        free(m->w16);
    }
    free(m->w16_version);
    free(m->op16[0]); free(m->op16[1]); free(m->opf[0]); free(m->opf[1]); free(m->wbuf);
    free(m->params);
    free(m->grads);
    free(m->grad_fresh);
    free(m->held);
    /* Activations and scratch: freed wholesale; accounting reset. */
    if (m->slots) free(m->slots[0].logits); /* shared by the slots */
    for (int k = 0; k < m->n_slots; k++) free_slot(&m->slots[k], l->cfg.n_layer, &m->shared);
    for (size_t k = 0; k < N_BLOCK_BUFS; k++) free(*block_buf(&m->shared, k));
    free(m->slots);
    mt_grad_scratch *g = &m->gs;
    free(g->dresid); free(g->dtmp); free(g->dln); free(g->datty); free(g->dqkv); free(g->dfch);
    free(g->drop_row); free(g->attn_scratch); free(g->gathered); free(g->xent_stats); free(g->xent_lse);
    if (m->mem) {
        m->mem->cur[MT_MEM_ACTS] = 0;
        m->mem->cur[MT_MEM_SCRATCH] = 0;
    }
    mt_gpt_layout_free(&m->layout);
}

void mt_model_tp_reduce_grads(mt_model *m, int u) {
    if (!mt_tp_sp(m->tp) || !m->grads[u]) return;
    const mt_unit_layout *ul = &m->layout.units[u];
    if (ul->kind == MT_UNIT_EMBED) return; /* wpe's gradient comes from the gathered rows: complete */
    /* One all-reduce per run of adjacent replicated tensors (a block has three). */
    for (int i = 0; i < ul->n_tensors;) {
        if (ul->t[i].split != MT_TP_REPLICATED) {
            i++;
            continue;
        }
        int j = i;
        size_t n = 0;
        while (j < ul->n_tensors && ul->t[j].split == MT_TP_REPLICATED) n += ul->t[j++].numel;
        mt_tp_allreduce(m->tp, m->grads[u] + ul->t[i].offset, n);
        i = j;
    }
}

void mt_model_zero_grads(mt_model *m) {
    for (int u = 0; u < m->layout.n_units; u++)
        if (m->grads[u]) memset(m->grads[u], 0, m->layout.units[u].numel * sizeof(float));
}

double mt_model_flops_per_token(const mt_gpt_layout *l, int T) {
    double n = (double)l->gtotal_params - (double)l->units[0].t[MT_T_WPE].gnumel; /* the whole model under tp */
    return 6.0 * n + 12.0 * l->cfg.n_layer * (double)l->cfg.n_embd * (double)T;
}
