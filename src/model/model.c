#include "model/model.h"
#include "ops/ops.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static float *acts_alloc(mt_model *m, mt_acts *a, size_t n, const char *what) {
    a->bytes += n * sizeof(float);
    return mt_mem_alloc(m->mem, MT_MEM_ACTS, n * sizeof(float), what);
}

static int holds_layer(const mt_model_part *p, int l) { return !p->own_layer || p->own_layer[l]; }

static void alloc_slot(mt_model *m, mt_acts *a, const mt_model_part *part, int B, int T, float *logits) {
    const mt_gpt_config *cfg = &m->layout.cfg;
    size_t C = (size_t)cfg->n_embd, N = (size_t)B * (size_t)T, L = (size_t)cfg->n_layer;
    size_t NH = (size_t)cfg->n_head;
    mt_mem *mem = m->mem;
    a->B = B;
    a->T = T;
    a->tokens = mt_mem_alloc(mem, MT_MEM_ACTS, N * sizeof(int32_t), "tokens");
    a->targets = mt_mem_alloc(mem, MT_MEM_ACTS, N * sizeof(int32_t), "targets");
    a->sample_ids = mt_mem_alloc(mem, MT_MEM_ACTS, (size_t)B * sizeof(uint64_t), "sample ids");
    a->bytes += N * 2 * sizeof(int32_t) + (size_t)B * sizeof(uint64_t);
    if (part->own_embed) a->encoded = acts_alloc(m, a, N * C, "embedding output");
    a->blocks = mt_xcalloc(L, sizeof(mt_block_acts), "block activations");
    for (size_t i = 0; i < L; i++) {
        if (!holds_layer(part, (int)i)) continue;
        mt_block_acts *b = &a->blocks[i];
        if (m->recompute == MT_RECOMPUTE_FULL) { /* only the output is the block's own */
            *b = m->shared;
            b->res3 = acts_alloc(m, a, N * C, "residual 3");
            continue;
        }
        b->ln1 = acts_alloc(m, a, N * C, "ln1");
        b->ln1_mean = acts_alloc(m, a, N, "ln1 mean");
        b->ln1_rstd = acts_alloc(m, a, N, "ln1 rstd");
        b->qkv = acts_alloc(m, a, N * 3 * C, "qkv");
        if (m->recompute == MT_RECOMPUTE_SELECTIVE) {
            b->atty = m->shared.atty;
            b->att_lse = m->shared.att_lse;
        } else {
            b->atty = acts_alloc(m, a, N * C, "attention output");
            b->att_lse = acts_alloc(m, a, N * NH, "attention lse");
        }
        b->res2 = acts_alloc(m, a, N * C, "residual 2");
        b->ln2 = acts_alloc(m, a, N * C, "ln2");
        b->ln2_mean = acts_alloc(m, a, N, "ln2 mean");
        b->ln2_rstd = acts_alloc(m, a, N, "ln2 rstd");
        b->fch = acts_alloc(m, a, N * 4 * C, "fc");
        b->fch_gelu = acts_alloc(m, a, N * 4 * C, "gelu");
        b->res3 = acts_alloc(m, a, N * C, "residual 3");
    }
    for (size_t i = 1; i < L; i++) /* inputs received from the previous stage */
        if (holds_layer(part, (int)i) && !holds_layer(part, (int)i - 1))
            a->blocks[i - 1].res3 = acts_alloc(m, a, N * C, "stage input");
    if (part->own_head) {
        a->lnf = acts_alloc(m, a, N * C, "lnf");
        a->lnf_mean = acts_alloc(m, a, N, "lnf mean");
        a->lnf_rstd = acts_alloc(m, a, N, "lnf rstd");
        a->losses = acts_alloc(m, a, N, "losses");
        a->logits = logits;
    }
}

/* The buffer set shared by all blocks and slots under recomputation. It is
 * the working set of the one block being computed, not activations kept for
 * backward, so it is accounted as scratch (the total still shows it). */
static void alloc_shared(mt_model *m, size_t N, size_t C, size_t NH) {
    mt_block_acts *b = &m->shared;
    mt_mem *mem = m->mem;
    if (m->recompute == MT_RECOMPUTE_NONE) return;
    b->atty = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * C * sizeof(float), "attention output (shared)");
    b->att_lse = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * NH * sizeof(float), "attention lse (shared)");
    if (m->recompute != MT_RECOMPUTE_FULL) return;
    b->ln1 = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * C * sizeof(float), "ln1 (shared)");
    b->ln1_mean = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * sizeof(float), "ln1 mean (shared)");
    b->ln1_rstd = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * sizeof(float), "ln1 rstd (shared)");
    b->qkv = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * 3 * C * sizeof(float), "qkv (shared)");
    b->res2 = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * C * sizeof(float), "residual 2 (shared)");
    b->ln2 = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * C * sizeof(float), "ln2 (shared)");
    b->ln2_mean = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * sizeof(float), "ln2 mean (shared)");
    b->ln2_rstd = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * sizeof(float), "ln2 rstd (shared)");
    b->fch = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * 4 * C * sizeof(float), "fc (shared)");
    b->fch_gelu = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * 4 * C * sizeof(float), "gelu (shared)");
}

/* The block buffers of an activation set, as a list. */
#define BLOCK_BUFS(b) {(b)->ln1, (b)->ln1_mean, (b)->ln1_rstd, (b)->qkv, (b)->atty, (b)->att_lse, (b)->res2, \
                       (b)->ln2, (b)->ln2_mean, (b)->ln2_rstd, (b)->fch, (b)->fch_gelu, (b)->res3}

void mt_model_create(mt_model *m, const mt_gpt_config *cfg, int B, int T, uint64_t seed, mt_mem *mem) {
    mt_model_part whole = {NULL, 1, 1, 1, MT_RECOMPUTE_NONE};
    mt_model_create_part(m, cfg, B, T, seed, mem, &whole);
}

void mt_model_create_part(mt_model *m, const mt_gpt_config *cfg, int B, int T, uint64_t seed, mt_mem *mem,
                          const mt_model_part *part) {
    memset(m, 0, sizeof *m);
    m->mem = mem;
    m->seed = seed;
    mt_gpt_layout_build(cfg, &m->layout);
    const mt_gpt_layout *l = &m->layout;
    int L = cfg->n_layer;
    m->params = mt_xcalloc((size_t)l->n_units, sizeof(float *), "unit parameter table");
    m->grads = mt_xcalloc((size_t)l->n_units, sizeof(float *), "unit gradient table");
    for (int u = 0; u < l->n_units; u++) {
        int held = u == 0 ? (part->own_embed || part->own_head) : u == L + 1 ? part->own_head : holds_layer(part, u - 1);
        if (!held) continue;
        m->params[u] = mt_mem_alloc(mem, MT_MEM_PARAMS, l->units[u].numel * sizeof(float), "parameters");
        m->grads[u] = mt_mem_alloc(mem, MT_MEM_GRADS, l->units[u].numel * sizeof(float), "gradients");
        mt_gpt_init_unit(l, u, m->params[u], seed);
    }
    size_t C = (size_t)cfg->n_embd, N = (size_t)B * (size_t)T, NH = (size_t)cfg->n_head;
    m->recompute = part->recompute;
    alloc_shared(m, N, C, NH);
    m->n_slots = part->act_slots > 0 ? part->act_slots : 1;
    m->slots = mt_xcalloc((size_t)m->n_slots, sizeof(mt_acts), "activation slots");
    float *logits = NULL;
    if (part->own_head) {
        logits = mt_mem_alloc(mem, MT_MEM_ACTS, N * (size_t)cfg->padded_vocab * sizeof(float), "logits");
        m->slots[0].bytes += N * (size_t)cfg->padded_vocab * sizeof(float);
    }
    for (int k = 0; k < m->n_slots; k++) alloc_slot(m, &m->slots[k], part, B, T, logits);
    m->acts = m->slots[0];

    mt_grad_scratch *g = &m->gs;
    g->dresid = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * C * sizeof(float), "dresid");
    g->dtmp = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * C * sizeof(float), "dtmp");
    g->dln = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * C * sizeof(float), "dln");
    g->datty = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * C * sizeof(float), "datty");
    g->dqkv = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * 3 * C * sizeof(float), "dqkv");
    g->dfch = mt_mem_alloc(mem, MT_MEM_SCRATCH, N * 4 * C * sizeof(float), "dfch");
    size_t row = C > (size_t)T ? C : (size_t)T;
    g->drop_row = mt_mem_alloc(mem, MT_MEM_SCRATCH, row * sizeof(float), "dropout row");
    g->attn_scratch_floats = op_attention_scratch_floats(B, T, (int)NH, (int)(C / NH), omp_get_max_threads());
    g->attn_scratch = mt_mem_alloc(mem, MT_MEM_SCRATCH, g->attn_scratch_floats * sizeof(float), "attention scratch");
}

void mt_model_use_slot(mt_model *m, int k) {
    if (k < 0 || k >= m->n_slots) mt_die("model: activation slot %d out of range (%d slots)", k, m->n_slots);
    m->acts = m->slots[k];
}

static void free_slot(mt_acts *a, int L, const mt_block_acts *shared) {
    free(a->tokens); free(a->targets); free(a->sample_ids); free(a->encoded);
    float *common[] = BLOCK_BUFS(shared);
    for (int i = 0; i < L; i++) {
        float *bufs[] = BLOCK_BUFS(&a->blocks[i]);
        for (size_t j = 0; j < sizeof bufs / sizeof bufs[0]; j++)
            if (bufs[j] != common[j]) free(bufs[j]);
    }
    free(a->blocks);
    free(a->lnf); free(a->lnf_mean); free(a->lnf_rstd); free(a->losses);
}

void mt_model_free(mt_model *m) {
    const mt_gpt_layout *l = &m->layout;
    for (int u = 0; u < l->n_units; u++) {
        mt_mem_free(m->mem, MT_MEM_PARAMS, m->params[u], l->units[u].numel * sizeof(float));
        mt_mem_free(m->mem, MT_MEM_GRADS, m->grads[u], l->units[u].numel * sizeof(float));
    }
    free(m->params);
    free(m->grads);
    /* Activations and scratch: freed wholesale; accounting reset. */
    if (m->slots) free(m->slots[0].logits); /* shared by the slots */
    for (int k = 0; k < m->n_slots; k++) free_slot(&m->slots[k], l->cfg.n_layer, &m->shared);
    float *common[] = BLOCK_BUFS(&m->shared);
    for (size_t j = 0; j < sizeof common / sizeof common[0]; j++) free(common[j]);
    free(m->slots);
    mt_grad_scratch *g = &m->gs;
    free(g->dresid); free(g->dtmp); free(g->dln); free(g->datty); free(g->dqkv); free(g->dfch);
    free(g->drop_row); free(g->attn_scratch);
    if (m->mem) {
        m->mem->cur[MT_MEM_ACTS] = 0;
        m->mem->cur[MT_MEM_SCRATCH] = 0;
    }
    mt_gpt_layout_free(&m->layout);
}

void mt_model_zero_grads(mt_model *m) {
    for (int u = 0; u < m->layout.n_units; u++)
        if (m->grads[u]) memset(m->grads[u], 0, m->layout.units[u].numel * sizeof(float));
}

double mt_model_flops_per_token(const mt_gpt_layout *l, int T) {
    double n = (double)l->total_params - (double)l->units[0].t[MT_T_WPE].numel;
    return 6.0 * n + 12.0 * l->cfg.n_layer * (double)l->cfg.n_embd * (double)T;
}
