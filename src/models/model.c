#include "models/model.h"
#include "models/alltoall_attention.h"
#include "ops/matmul_int8.h"
#include "quant/qweight.h"
#include "ops/ops.h"
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Every activation buffer is carved from the model's arena (m->act_arena):
 * the slots are laid out twice, first to measure, then to carve. */
static void *acts_take(mt_model *m, mt_acts *a, size_t bytes, const char *what) {
    a->bytes += bytes;
    return mt_mem_arena_take(&m->act_arena, bytes, what);
}

static float *acts_alloc(mt_model *m, mt_acts *a, size_t n, const char *what) {
    return acts_take(m, a, n * sizeof(float), what);
}

static int holds_layer(const mt_model_part *p, int l) { return !p->own_layer || p->own_layer[l]; }

/* A batch's five inputs in one block: tokens, targets, document starts, positions (N int32 each), then
 * the sample ids (B uint64, 8-byte aligned after 4N int32) -- the same layout on the device (the
 * activation arena) and on the host (mt_acts.h_*), so a batch goes over in one copy; base NULL (the
 * arena's measuring pass): every pointer NULL */
static size_t batch_input_bytes(size_t N, int B) { return 4 * N * sizeof(int32_t) + (size_t)B * sizeof(uint64_t); }
static void batch_inputs_at(void *base, size_t N, int32_t **tokens, int32_t **targets, int32_t **doc_start,
                            int32_t **pos, uint64_t **sample_ids) {
    int32_t *p = base;
    *tokens = p, *targets = p ? p + N : NULL, *doc_start = p ? p + 2 * N : NULL, *pos = p ? p + 3 * N : NULL;
    *sample_ids = p ? (uint64_t *)(p + 4 * N) : NULL;
}

/* A slot's host-written inputs: its buffers on the CPU; on a device a host block of the same layout */
static void host_views(const mt_model *m, mt_acts *a) {
    size_t N = (size_t)a->B * (size_t)a->T;
    if (m->be->kind == MT_DEVICE_CPU) {
        a->h_tokens = a->tokens, a->h_targets = a->targets, a->h_sample_ids = a->sample_ids;
        a->h_doc_start = a->doc_start, a->h_pos = a->pos;
        return;
    }
    batch_inputs_at(mt_xcalloc(batch_input_bytes(N, a->B), 1, "batch inputs (host copy)"), N, &a->h_tokens,
                    &a->h_targets, &a->h_doc_start, &a->h_pos, &a->h_sample_ids);
}

/* The buffers of a block's activations are the family's table
 * (mt_family.block_bufs): each kept per block under the recomputation modes
 * its `own` mask names, else one copy shared by every block and slot
 * (m->shared). */
static int block_owns(const mt_model *m, int i) { return m->fam->block_bufs[i].own >> m->recompute & 1; }

/* Rows of the residual stream held here (sequence parallelism splits them). */
static size_t resid_rows(const mt_model *m, size_t N) { return mt_tp_sp(m->tp) ? N / (size_t)m->tp->size : N; }

size_t mt_model_resid_floats(const mt_model *m) {
    return resid_rows(m, (size_t)m->acts.B * (size_t)m->acts.T) * (size_t)m->cfg.n_embd;
}

/* Partitioned activations: where block i writes its output -- the working
 * buffer the next block reads, or, at the end of a pipeline chunk that is
 * not the model's last, a buffer of the slot (it is sent to the next stage
 * and must outlive the send). */
static float *partition_out(mt_model *m, mt_acts *a, const mt_model_part *part, size_t i, size_t floats) {
    if (i + 1 < (size_t)m->cfg.n_layer && !holds_layer(part, (int)i + 1)) return acts_alloc(m, a, floats, "stage output");
    return m->pwork[(i + 1) % 2];
}

static void alloc_slot(mt_model *m, mt_acts *a, const mt_model_part *part, int B, int T, float *logits) {
    const mt_model_config *cfg = &m->cfg;
    const mt_family *f = m->fam;
    size_t C = (size_t)cfg->n_embd, N = (size_t)B * (size_t)T, L = (size_t)cfg->n_layer;
    a->B = B;
    a->T = T;
    batch_inputs_at(acts_take(m, a, batch_input_bytes(N, B), "batch inputs"), N, &a->tokens, &a->targets,
                    &a->doc_start, &a->pos, &a->sample_ids);
    size_t n = resid_rows(m, N);
    /* partition: the residual stream alternates between the two working buffers; each block's input is kept
       as this rank's rows (mt_acts.kept) */
    if (part->own_input) a->encoded = m->partition ? m->pwork[0] : acts_alloc(m, a, n * C, "embedding output");
    a->blocks = mt_xcalloc(L, sizeof(mt_block_acts), "block activations");
    for (size_t i = 0; i < L; i++) {
        if (!holds_layer(part, (int)i)) continue;
        for (int k = 0; k < f->n_block_bufs; k++) {
            if (m->partition && k == f->block_out) { /* (never compressed: the families keep it whole) */
                a->blocks[i].b[k] = partition_out(m, a, part, i, n * C);
                continue;
            }
            if (m->zenc[k]) { /* kept compressed; computed in the shared fp32 working buffer */
                size_t fl = f->block_buf_floats(m, k, N), g = m->zenc[k] == MT_ZENC_INT8 ? f->block_buf_group(m, k) : 0;
                a->blocks[i].b[k] = m->shared.b[k];
                size_t codes = mt_act_compress_bytes((mt_zenc)m->zenc[k], fl, 0); /* scales apart: aligned */
                a->blocks[i].z[k] = acts_take(m, a, codes, f->block_bufs[k].name);
                if (g) a->blocks[i].zscale[k] = acts_take(m, a, fl / g * sizeof(float), f->block_bufs[k].name);
                continue;
            }
            a->blocks[i].b[k] = block_owns(m, k) ? acts_alloc(m, a, f->block_buf_floats(m, k, N), f->block_bufs[k].name)
                                                 : m->shared.b[k];
        }
    }
    if (m->partition) { /* a block's input that comes from a stage input buffer stays there, whole */
        a->kept = mt_xcalloc(L, sizeof(float *), "partitioned block inputs");
        for (size_t i = 0; i < L; i++)
            if (holds_layer(part, (int)i) && (i == 0 ? part->own_input : holds_layer(part, (int)i - 1)))
                a->kept[i] = acts_alloc(m, a, N / (size_t)m->tp->size * C, "partitioned block input");
    }
    for (size_t i = 1; i < L; i++) /* inputs received from the previous stage */
        if (holds_layer(part, (int)i) && !holds_layer(part, (int)i - 1))
            a->blocks[i - 1].b[f->block_out] = acts_alloc(m, a, n * C, "stage input");
    if (part->own_output) {
        for (int k = 0; k < f->n_head_bufs; k++)
            a->head[k] = acts_alloc(m, a, f->head_buf_floats(m, k, N), f->head_bufs[k].name);
        a->losses = acts_alloc(m, a, N, "losses");
        a->logits = logits;
    }
}

/* The buffer set shared by all blocks and slots under recomputation. It is
 * the working set of the one block being computed, not activations kept for
 * backward, so it is accounted as scratch (the total still shows it). */
static void alloc_shared(mt_model *m, size_t N) {
    for (int k = 0; k < m->fam->n_block_bufs; k++)
        if (!block_owns(m, k) || m->zenc[k])
            m->shared.b[k] =
                mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH,
                                m->fam->block_buf_floats(m, k, N) * sizeof(float), m->fam->block_bufs[k].name);
}

/* {precision} bf16/fp16: the 16-bit parameter copies (accounted as
 * parameters) and the operand scratch, sized for the widest GEMM operand
 * (the family's count: the head's vocabulary columns when this rank holds
 * the head). */
static void alloc_frozen(mt_model *m);

static void alloc_lowp(mt_model *m, const mt_model_part *part, size_t N) {
    m->precision = part->precision;
    m->param_version = 1;
    const mt_layout *l = &m->layout;
    m->w16 = mt_xcalloc((size_t)l->n_units, sizeof(uint16_t *), "16-bit parameter table");
    m->w16_version = mt_xcalloc((size_t)l->n_units, sizeof(uint64_t), "16-bit parameter table");
    if (m->precision == MT_FP32) return;
    if (m->precision == MT_BF16 && m->qtile) /* quantized weights dequantize straight into bf16 operands */
        m->qtile16 = mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, m->qtile_floats * sizeof(uint16_t),
                                     "dequantized bf16 tile");
    size_t wmax, wnum;
    m->fam->gemm_extents(m, part->own_output, &wmax, &wnum);
    for (int u = 0; u < l->n_units; u++)
        if (m->params[u])
            m->w16[u] = mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, l->units[u].numel * sizeof(uint16_t),
                                        "16-bit parameters");
    for (int u = 0; u < l->n_units; u++)
        if (m->frozen[u])
            m->frozen16[u] = mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_FROZEN,
                                             l->units[u].frozen_numel * sizeof(uint16_t), "16-bit frozen parameters");
    for (int k = 0; k < 2; k++)
        m->op16[k] =
            mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, N * wmax * sizeof(uint16_t), "16-bit operands");
    if (m->precision == MT_FP16) {
        for (int k = 0; k < 2; k++)
            m->opf[k] = mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, N * wmax * sizeof(float),
                                        "fp16-rounded operands");
        m->wbuf = mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, wnum * sizeof(float), "fp16-rounded weight");
    }
}

/* LoRA's working set for one linear at a time: the dropped-out input
 * [N, in] and h and dh [N, r] each; sized for the widest adapter held here
 * (its output goes straight into the layer's, models/lora.c); and IA3's three buffers. */
static void alloc_lora(mt_model *m, size_t N) {
    const mt_layout *l = &m->layout;
    size_t in = 0, r = 0;
    int ia3 = 0, expert = 0, ia3_expert = 0;
    for (int u = 0; u < l->n_units; u++) {
        const mt_unit_layout *ul = &l->units[u];
        if (!m->held[u]) continue;
        for (int k = 0; k < ul->n_decl; k++) {
            const mt_tensor *t = mt_unit_tensor(ul, k);
            ia3 |= t->ia3 != 0;
            ia3_expert |= t->ia3 && t->expert;
            if (!t->lora_a) continue;
            const mt_tensor *a = mt_unit_tensor(ul, t->lora_a - 1);
            in = (size_t)a->shape[1] > in ? (size_t)a->shape[1] : in;
            r = (size_t)a->shape[0] > r ? (size_t)a->shape[0] : r;
            expert |= a->expert != 0;
        }
    }
    /* under expert parallelism an expert runs on the rows of every ep rank: at most one per token of each
       (a token's choices are distinct experts) */
    size_t ep = m->ep ? (size_t)mt_comm_size(m->ep) : 1;
    if (ia3) { /* the widest GEMM operand row bounds every IA3 buffer */
        size_t wmax, wnum, Ni = ia3_expert ? N * ep : N;
        m->fam->gemm_extents(m, 0, &wmax, &wnum);
        for (int k = 0; k < 3; k++) {
            float **b = k == 0 ? &m->ia3_x : k == 1 ? &m->ia3_d : &m->ia3_y;
            *b = mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, Ni * wmax * sizeof(float), "IA3 scratch");
        }
    }
    if (expert) N *= ep;
    if (!r) return;
    m->lora_scratch_floats[0] = N * in;
    m->lora_scratch_floats[1] = N * r;
    m->lora_scratch =
        mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, N * (in + 2 * r) * sizeof(float), "LoRA scratch");
}

void mt_model_create(mt_model *m, mt_backend *be, const mt_model_config *cfg, int B, int T, uint64_t seed,
                     mt_mem *mem) {
    mt_model_part whole = {NULL, 1, 1, 1, MT_RECOMPUTE_NONE, NULL, MT_FP32, be, NULL, 0, MT_ACT_COMPRESS_OFF, NULL, 0, 0};
    mt_model_create_part(m, cfg, B, T, seed, mem, &whole);
}

void mt_model_create_part(mt_model *m, const mt_model_config *cfg, int B, int T, uint64_t seed, mt_mem *mem,
                          const mt_model_part *part) {
    memset(m, 0, sizeof *m);
    if (!part->be) mt_die("mt_model_create_part: the part names no backend (mt_model_part.be)");
    m->be = part->be;
    m->mem = mem;
    m->seed = seed;
    m->tp = part->tp;
    m->cp = mt_cp_size(part->cp) > 1 ? part->cp : NULL;
    m->cfg = *cfg;
    m->fam = mt_family_get(cfg->family);
    int tp = mt_tp_size(part->tp);
    mt_model_layout_build(cfg, tp, tp > 1 ? part->tp->rank : 0, &m->layout);
    if (part->ep && mt_comm_size(part->ep) > 1) {
        m->ep = part->ep;
        mt_layout_shard_experts(&m->layout, cfg->num_experts, mt_comm_size(part->ep), mt_comm_rank(part->ep),
                                part->dense_align);
    }
    const mt_layout *l = &m->layout;
    int L = cfg->n_layer;
    m->params = mt_xcalloc((size_t)l->n_units, sizeof(float *), "unit parameter table");
    m->grads = mt_xcalloc((size_t)l->n_units, sizeof(float *), "unit gradient table");
    m->grad_fresh = mt_xcalloc((size_t)l->n_units, 1, "unit gradient table");
    m->held = mt_xcalloc((size_t)l->n_units, 1, "unit table");
    for (int u = 0; u < l->n_units; u++)
        m->held[u] = u == 0 ? part->own_input : u == L + 1 ? part->own_output : holds_layer(part, u - 1);
    for (int u = 0; u < l->n_units; u++) /* what a held unit's shared tensors live in */
        if (m->held[u] && l->units[u].shared_unit >= 0) m->held[l->units[u].shared_unit] = 1;
    for (int u = 0; u < l->n_units; u++)
        if (m->held[u] && !part->defer_params) mt_model_materialize_unit(m, u, 1);
    alloc_frozen(m);
    size_t C = (size_t)cfg->n_embd, N = (size_t)B * (size_t)T;
    /* (not under {ep}: the trainer refuses it there) */
    if (m->qcols && cfg->adapters.int8_threshold > 0.0f) /* LLM.int8()'s decomposition (ops/matmul_int8.h) */
        m->i8scratch = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, op_int8_outlier_scratch_bytes(m->be, (int)N, m->qcols),
                                    "int8 activations and outlier columns");
    m->recompute = part->recompute;
    m->compress = part->compress;
    m->precision = part->precision; /* (alloc_lowp sets it again) the lossless encoding follows it */
    mt_act_compress_choose(m);
    m->partition = part->partition_acts && tp > 1 && !mt_tp_sp(part->tp) && part->recompute == MT_RECOMPUTE_FULL &&
                   N % (size_t)tp == 0;
    alloc_shared(m, N);
    for (int k = 0; m->partition && k < 2; k++)
        m->pwork[k] = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, N * C * sizeof(float),
                                      "residual stream (partitioned activations)");
    m->n_slots = part->act_slots > 0 ? part->act_slots : 1;
    m->slots = mt_xcalloc((size_t)m->n_slots, sizeof(mt_acts), "activation slots");
    /* The activations of every slot, one arena: measured by a first pass, carved by the second. */
    for (int pass = 0; pass < 2; pass++) {
        if (pass) mt_mem_arena_open(mem, &m->act_arena, MT_PLACE_DEVICE, MT_MEM_ACTS, "activations");
        float *logits = NULL;
        if (part->own_output) {
            size_t vl = (size_t)(mt_model_vocab_rows(cfg, tp) / tp); /* this rank's vocabulary columns */
            logits = acts_alloc(m, &m->slots[0], N * vl, "logits");
        }
        for (int k = 0; k < m->n_slots; k++) alloc_slot(m, &m->slots[k], part, B, T, logits);
        for (int k = 0; !pass && k < m->n_slots; k++) {
            free(m->slots[k].blocks);
            free(m->slots[k].kept);
            m->slots[k] = (mt_acts){0};
        }
    }
    for (int k = 0; k < m->n_slots; k++) host_views(m, &m->slots[k]);
    m->acts = m->slots[0];

    mt_grad_scratch *g = &m->gs;
    g->dresid = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, N * C * sizeof(float), "dresid");
    g->dtmp = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, N * C * sizeof(float), "dtmp");
    g->dln = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, N * C * sizeof(float), "dln");
    size_t fs[MT_FAMILY_SCRATCH] = {0};
    m->fam->scratch_floats(m, N, fs);
    for (int k = 0; k < MT_FAMILY_SCRATCH; k++)
        if (fs[k])
            g->f[k] = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, fs[k] * sizeof(float), "backward scratch");
    size_t row = C > (size_t)T ? C : (size_t)T;
    g->drop_row = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, row * sizeof(float), "dropout row");
    if (mt_tp_sp(part->tp))
        g->gathered = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, N * C * sizeof(float), "gathered rows");
    if (tp > 1 && part->own_output) {
        g->xent_stats = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, (size_t)tp * 3 * N * sizeof(float),
                                        "cross-entropy stats");
        g->xent_lse = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, N * sizeof(float), "cross-entropy lse");
    }
    g->attn_scratch_floats = m->fam->attention_scratch_floats
                                 ? m->fam->attention_scratch_floats(m, B, T)
                                 : op_attention_scratch_floats(m->be, B, T, cfg->n_head / tp, mt_model_head_dim(cfg));
    if (m->cp) { /* context parallelism's buffers instead (its heads: this tp rank's, as the families pass them) */
        int kv = mt_model_kv_heads(cfg);
        g->attn_scratch_floats = mt_cp_attention_scratch_floats(m->be, m->cp, B, T / 2, cfg->n_head / tp,
                                                                tp > kv ? 1 : kv / tp, mt_model_head_dim(cfg));
    }
    alloc_lowp(m, part, N);
    alloc_lora(m, N);
    g->attn_scratch = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, g->attn_scratch_floats * sizeof(float),
                                      "attention scratch");
    if (m->fam->init_model) m->fam->init_model(m);
}

void mt_model_use_slot(mt_model *m, int k) {
    if (k < 0 || k >= m->n_slots) mt_die("model: activation slot %d out of range (%d slots)", k, m->n_slots);
    m->acts = m->slots[k];
}

/* Activations and scratch are device memory, released wholesale (their
 * accounting is reset) through the allocator that made them. */
#define DROP(p) mt_mem_drop_at(mem, MT_PLACE_DEVICE, (p))

static void free_slot(mt_acts *a) { /* its buffers lie in the arena */
    free(a->blocks);
    free(a->kept);
    if (a->h_tokens != a->tokens) free(a->h_tokens); /* the host copies: one block (host_views) */
}

void mt_model_upload_batch(mt_model *m, const mt_acts *a) {
    if (a->h_tokens == a->tokens) return;
    op_copy_from_host(m->be, a->tokens, a->h_tokens, batch_input_bytes((size_t)a->B * (size_t)a->T, a->B));
}

float *mt_model_tensor_data(const mt_model *m, int u, int k) {
    const mt_unit_layout *ul = &m->layout.units[u];
    const mt_tensor *t = mt_unit_tensor(ul, k);
    float *base = t->trainable ? m->params[u] : m->frozen[u];
    return base ? base + t->offset : NULL;
}

float *mt_model_tensor_grad(const mt_model *m, int u, int k) {
    const mt_tensor *t = mt_unit_tensor(&m->layout.units[u], k);
    return t->trainable && m->grads[u] ? m->grads[u] + t->offset : NULL;
}

float *mt_model_tensor_grad_or_sink(const mt_model *m, int u, int k) {
    const mt_tensor *t = mt_unit_tensor(&m->layout.units[u], k);
    if (t->trainable) return m->grads[u] ? m->grads[u] + t->offset : NULL;
    if (!m->gsink) mt_die("frozen tensor %s: no gradient sink (a 2-D frozen tensor outside a linear layer?)", t->name);
    return m->gsink;
}

void mt_model_frozen_changed(mt_model *m) { m->frozen_version++; }

/* A quantized weight's store given back: its device copy, or the host arrays noted as held. */
static void release_qweight(mt_model *m, mt_qweight *q) {
    if (q->dev) mt_mem_free_at(m->mem, MT_PLACE_DEVICE, MT_MEM_FROZEN, q->dev, q->dev_bytes);
    else mt_mem_note(m->mem, MT_MEM_FROZEN, mt_qweight_bytes(q), 0);
    mt_qweight_free(q);
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* Places `bytes` of host data at offset *at of q's device buffer (NULL data: nothing); returns the
 * device address. */
static void *upload_piece(mt_model *m, mt_qweight *q, size_t *at, const void *host, size_t bytes) {
    if (!host) return NULL;
    void *d = (char *)q->dev + *at;
    op_copy_from_host(m->be, d, host, bytes);
    *at += align256(bytes);
    return d;
}

/* On a device backend the GEMM tiles dequantize on the device (op_nf4_dequant_rows,
 * op_int8_dequant_rows): the codes, absmaxes and NF4's two maps move into one device buffer
 * (accounted as frozen device memory) and the host arrays are freed. Quantizing itself stays on
 * the host, once per weight. */
static void upload_qweight(mt_model *m, mt_qweight *q) {
    if (m->be->kind == MT_DEVICE_CPU || (q->kind != MT_QUANT_NF4 && q->kind != MT_QUANT_INT8)) return;
    size_t at = 0, bytes = 0;
    if (q->kind == MT_QUANT_NF4) {
        const mt_nf4 *h = &q->nf4;
        size_t nb = (size_t)h->nblocks;
        bytes = align256(16 * sizeof(float)) + align256((size_t)(h->n + 1) / 2);
        if (h->double_quant)
            bytes += align256(256 * sizeof(float)) + align256(nb) + align256((size_t)h->nnested * sizeof(float));
        else bytes += align256(nb * sizeof(float));
    } else {
        bytes = align256((size_t)(q->i8.rows * q->i8.cols)) + align256((size_t)q->i8.rows * sizeof(float));
    }
    mt_mem_note(m->mem, MT_MEM_FROZEN, mt_qweight_bytes(q), 0); /* the host store's bytes, freed below */
    q->dev = mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_FROZEN, bytes, "quantized base (codes on the device)");
    q->dev_bytes = bytes;
    if (q->kind == MT_QUANT_NF4) {
        const mt_nf4 *h = &q->nf4;
        mt_nf4 *d = &q->nf4_dev;
        *d = *h;
        d->quant_map = upload_piece(m, q, &at, h->quant_map, 16 * sizeof(float));
        d->packed = upload_piece(m, q, &at, h->packed, (size_t)(h->n + 1) / 2);
        d->absmax = upload_piece(m, q, &at, h->absmax, (size_t)h->nblocks * sizeof(float));
        d->nested_quant_map = h->double_quant ? upload_piece(m, q, &at, h->nested_quant_map, 256 * sizeof(float)) : NULL;
        d->absmax_code = upload_piece(m, q, &at, h->absmax_code, (size_t)h->nblocks);
        d->nested_absmax = upload_piece(m, q, &at, h->nested_absmax, (size_t)h->nnested * sizeof(float));
        mt_nf4_free(&q->nf4);
    } else {
        mt_int8w *d = &q->i8_dev;
        *d = q->i8;
        d->q = upload_piece(m, q, &at, q->i8.q, (size_t)(q->i8.rows * q->i8.cols));
        d->scb = upload_piece(m, q, &at, q->i8.scb, (size_t)q->i8.rows * sizeof(float));
        mt_int8w_free(&q->i8);
    }
}

int mt_model_set_quantized(mt_model *m, int u, int i, const float *w, mt_error *err) {
    const mt_tensor *t = &m->layout.units[u].ft[i];
    mt_qweight *q = &m->qw[u][i];
    if (q->kind) release_qweight(m, q);
    if (mt_qweight_init(q, (mt_quant_kind)t->quant, m->cfg.adapters.double_quant, w, t->gshape[0], t->gshape[1], err)) {
        char msg[MT_ERROR_LEN];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        return mt_errorf(err, "quantizing %s: %s", t->name, msg);
    }
    mt_mem_note(m->mem, MT_MEM_FROZEN, mt_qweight_bytes(q), 1);
    upload_qweight(m, q);
    return 0;
}

int mt_model_set_gptq(mt_model *m, int u, int i, mt_gptqw *g, mt_error *err) {
    const mt_tensor *t = &m->layout.units[u].ft[i];
    if (t->quant != MT_QUANT_GPTQ || g->rows != t->gshape[0] || g->cols != t->gshape[1]) {
        int rc = mt_errorf(err, "%s: a GPTQ layer of [%lld, %lld] for a tensor of [%lld, %lld]%s", t->name,
                           (long long)g->rows, (long long)g->cols, (long long)t->gshape[0], (long long)t->gshape[1],
                           t->quant != MT_QUANT_GPTQ ? " that is not a GPTQ base's" : "");
        mt_gptqw_free(g);
        return rc;
    }
    mt_qweight *q = &m->qw[u][i];
    if (q->kind) release_qweight(m, q);
    mt_qweight_set_gptq(q, g);
    mt_mem_note(m->mem, MT_MEM_FROZEN, mt_qweight_bytes(q), 1);
    return 0;
}
/* A unit's initial values (frozen ones: frozen != 0) into dst of n floats: on a device they are drawn
 * on the host and copied in (device memory is not the host's to write). */
static void unit_init(mt_model *m, int u, float *dst, size_t n, int frozen) {
    float *h = m->be->kind == MT_DEVICE_CPU ? dst : mt_xcalloc(n ? n : 1, sizeof(float), "initial values (host staging)");
    if (frozen) mt_unit_init_frozen(&m->layout, u, h, m->seed);
    else mt_unit_init_params(&m->layout, u, h, m->seed);
    if (h != dst) {
        op_copy_from_host(m->be, dst, h, n * sizeof(float));
        free(h);
    }
}

/* Frozen stores of the held units (initialised from the seed, as trainable
 * tensors are; a load replaces them) and the sink for the gradients of
 * frozen norms and biases. */
static void alloc_frozen(mt_model *m) {
    const mt_layout *l = &m->layout;
    m->frozen = mt_xcalloc((size_t)l->n_units, sizeof(float *), "frozen store table");
    m->frozen16 = mt_xcalloc((size_t)l->n_units, sizeof(uint16_t *), "frozen store table");
    m->frozen16_version = mt_xcalloc((size_t)l->n_units, sizeof(uint64_t), "frozen store table");
    m->frozen_version = 1;
    size_t sink = 0, qmax = 0;
    m->qw = mt_xcalloc((size_t)l->n_units, sizeof(mt_qweight *), "quantized store table");
    for (int u = 0; u < l->n_units; u++) {
        const mt_unit_layout *ul = &l->units[u];
        if (!m->held[u]) continue;
        for (int i = 0; i < ul->n_frozen; i++) { /* quantized weights: drawn from the seed, then quantized */
            const mt_tensor *t = &ul->ft[i];
            if (!t->quant || mt_tensor_elsewhere(t)) continue; /* (another ep rank's expert: quantized there) */
            if (!m->qw[u]) m->qw[u] = mt_xcalloc((size_t)ul->n_frozen, sizeof(mt_qweight), "quantized store");
            /* the whole tensor, as one process holds it (each tp rank dequantizes its slice of it) */
            mt_tensor whole = *t;
            whole.split = MT_TP_REPLICATED, whole.tp_replicas = 1;
            whole.shape[0] = t->gshape[0], whole.shape[1] = t->gshape[1], whole.numel = t->gnumel;
            if (t->quant != MT_QUANT_GPTQ) { /* a GPTQ base has no seed form: its codes are loaded */
                float *w = mt_xmalloc(t->gnumel * sizeof(float), "weight to quantize");
                mt_tensor_init_values(l, &whole, w, m->seed);
                mt_error err;
                if (mt_model_set_quantized(m, u, i, w, &err)) mt_die("%s", err.msg);
                free(w);
            }
            qmax = (size_t)t->shape[1] > qmax ? (size_t)t->shape[1] : qmax;
            m->qcols = (int)qmax;
            if (t->split == MT_TP_COLS && (size_t)t->gshape[1] > m->qrow_floats) m->qrow_floats = (size_t)t->gshape[1];
        }
        if (!ul->frozen_numel) continue;
        m->frozen[u] = mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_FROZEN, ul->frozen_numel * sizeof(float),
                                       "frozen parameters");
        unit_init(m, u, m->frozen[u], ul->frozen_numel, 1);
        for (int i = 0; i < ul->n_frozen; i++) /* norms and biases; an embedding beside a trained one */
            if ((ul->ft[i].ndim == 1 || (ul->role == MT_UNIT_INPUT && ul->numel)) && ul->ft[i].numel > sink)
                sink = ul->ft[i].numel;
    }
    if (sink)
        m->gsink =
            mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, sink * sizeof(float), "frozen gradient sink");
    if (qmax) { /* tiles of whole rows, about 256 KB */
        m->qtile_floats = qmax > MT_QTILE_FLOATS ? qmax : MT_QTILE_FLOATS;
        m->qtile = mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, m->qtile_floats * sizeof(float),
                                   "dequantized weight tile");
    }
    if (m->qrow_floats)
        m->qrow = mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, m->qrow_floats * sizeof(float),
                                  "dequantized weight row");
}

float *mt_model_materialize_unit(mt_model *m, int u, int with_grads) {
    if (!m->held[u]) return NULL;
    size_t n = m->layout.units[u].numel;
    if (!m->params[u]) {
        m->params[u] = mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, n * sizeof(float), "parameters");
        unit_init(m, u, m->params[u], n, 0);
    }
    if (with_grads && !m->grads[u])
        m->grads[u] = mt_mem_alloc_at(m->mem, MT_PLACE_DEVICE, MT_MEM_GRADS, n * sizeof(float), "gradients");
    return m->params[u];
}

void mt_model_free(mt_model *m) {
    const mt_layout *l = &m->layout;
    free(m->moe_load);
    m->moe_load = NULL;
    free(m->moe_ep_rows);
    m->moe_ep_rows = NULL;
    mt_mem *mem = m->mem;
    for (int u = 0; u < l->n_units; u++) {
        mt_mem_free_at(m->mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, m->params[u], l->units[u].numel * sizeof(float));
        mt_mem_free_at(m->mem, MT_PLACE_DEVICE, MT_MEM_GRADS, m->grads[u], l->units[u].numel * sizeof(float));
    }
    if (m->w16) {
        for (int u = 0; u < l->n_units; u++)
            if (m->w16[u])
                mt_mem_free_at(m->mem, MT_PLACE_DEVICE, MT_MEM_PARAMS, m->w16[u], l->units[u].numel * sizeof(uint16_t));
        free(m->w16);
    }
    free(m->w16_version);
    for (int u = 0; u < l->n_units; u++) {
        if (m->frozen && m->frozen[u])
            mt_mem_free_at(m->mem, MT_PLACE_DEVICE, MT_MEM_FROZEN, m->frozen[u],
                           l->units[u].frozen_numel * sizeof(float));
        if (m->frozen16 && m->frozen16[u])
            mt_mem_free_at(m->mem, MT_PLACE_DEVICE, MT_MEM_FROZEN, m->frozen16[u],
                           l->units[u].frozen_numel * sizeof(uint16_t));
    }
    for (int u = 0; m->qw && u < l->n_units; u++) {
        for (int i = 0; m->qw[u] && i < l->units[u].n_frozen; i++)
            if (m->qw[u][i].kind) release_qweight(m, &m->qw[u][i]);
        free(m->qw[u]);
    }
    free(m->qw); DROP(m->qtile); DROP(m->qtile16); DROP(m->qrow); DROP(m->i8scratch);
    free(m->frozen); free(m->frozen16); free(m->frozen16_version); DROP(m->gsink); DROP(m->lora_scratch);
    DROP(m->ia3_x); DROP(m->ia3_d); DROP(m->ia3_y);
    DROP(m->op16[0]); DROP(m->op16[1]); DROP(m->opf[0]); DROP(m->opf[1]); DROP(m->wbuf);
    free(m->params);
    free(m->grads);
    free(m->grad_fresh);
    free(m->held);
    /* Activations and scratch: freed wholesale; accounting reset. */
    for (int k = 0; k < m->n_slots; k++) free_slot(&m->slots[k]);
    mt_mem_arena_drop(&m->act_arena);
    for (int k = 0; k < MT_MAX_BLOCK_BUFS; k++) DROP(m->shared.b[k]);
    DROP(m->pwork[0]); DROP(m->pwork[1]);
    free(m->slots);
    mt_grad_scratch *g = &m->gs;
    DROP(g->dresid); DROP(g->dtmp); DROP(g->dln);
    for (int k = 0; k < MT_FAMILY_SCRATCH; k++) DROP(g->f[k]);
    DROP(g->drop_row); DROP(g->attn_scratch); DROP(g->gathered); DROP(g->xent_stats); DROP(g->xent_lse);
    if (m->mem) {
        m->mem->cur[MT_MEM_ACTS] = 0;
        m->mem->cur[MT_MEM_SCRATCH] = 0;
    }
    mt_layout_free(&m->layout);
}

void mt_model_tp_reduce_grads(mt_model *m, int u) {
    if (mt_tp_size(m->tp) == 1 || !m->grads[u]) return;
    const mt_unit_layout *ul = &m->layout.units[u];
    /* pieces held by a group of tp ranks (kv heads when tp > kv heads):
     * each rank computed its query heads' part of their gradient */
    for (int i = 0; i < ul->n_tensors; i++)
        if (ul->t[i].tp_replicas > 1 && ul->t[i].split != MT_TP_REPLICATED)
            mt_tp_pieces_allreduce(m->tp, m->grads[u] + ul->t[i].offset, ul->t[i].numel);
    if (!mt_tp_sp(m->tp)) return;
    if (!ul->sp_partial) return; /* e.g. a position table's gradient comes from the gathered rows: complete */
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
        if (m->grads[u]) op_zero_bytes(m->be, m->grads[u], m->layout.units[u].numel * sizeof(float));
}

double mt_model_flops_per_token(const mt_model *m, int T) { return m->fam->flops_per_token(&m->cfg, &m->layout, T); }

/* {compress-activations}: a block's kept buffers are encoded once its forward is done (a forward without
 * training has no backward to keep them for) and decoded before its recomputation, or before its backward
 * when no recomputation decoded them.
 * Partitioned activations: the residual stream s (the embedding's output
 * for s = 0, block s-1's output after) is block s's input, kept as this
 * rank's rows; before block l's recomputation the ranks' rows are gathered
 * back into the working buffer it reads. */
static size_t kept_floats(const mt_model *m) { return mt_model_resid_floats(m) / (size_t)m->tp->size; }

static void partition_keep(mt_model *m, int s) {
    /* not kept: the last block's output (read by the head at once) and a chunk's output (the next stage's) */
    if (!m->partition || s >= m->cfg.n_layer || !m->acts.kept[s]) return;
    size_t k = kept_floats(m);
    MT_TIMED(m->prof, MT_PROF_ELEMENTWISE,
             op_copy(m->be, m->acts.kept[s], m->pwork[s % 2] + (size_t)m->tp->rank * k, k));
}

static void partition_gather(mt_model *m, int l) {
    if (!m->acts.kept[l]) return; /* the chunk's first block: its input is the stage input buffer, whole */
    double t0 = mt_prof_begin(m->prof);
    mt_tp_allgather(m->tp, m->acts.kept[l], m->pwork[l % 2], kept_floats(m));
    mt_prof_end(m->prof, MT_PROF_ALLGATHER, t0);
}

void mt_unit_forward(mt_model *m, int u, const mt_fwd_ctx *fc) {
    if (u == 0) m->fam->input_forward(m, fc);
    else if (u <= m->cfg.n_layer) {
        if (m->compress && fc->training) mt_act_compress_forward_begins(m, u - 1);
        m->fam->block_forward(m, u - 1, fc);
        if (m->compress && fc->training) mt_act_compress_encode(m, u - 1);
    } else mt_die("mt_unit_forward: the output unit's forward is mt_model_loss_forward");
    partition_keep(m, u);
}

double mt_model_loss_forward(mt_model *m, const mt_fwd_ctx *fc, float dlogits_scale) {
    return m->fam->output_forward(m, fc, dlogits_scale);
}

void mt_unit_recompute(mt_model *m, int u, const mt_fwd_ctx *fc) {
    if (u < 1 || u > m->cfg.n_layer) return;
    if (m->partition) partition_gather(m, u - 1);
    if (m->compress) mt_act_compress_decode(m, u - 1);
    m->fam->block_recompute(m, u - 1, fc);
}

void mt_unit_backward(mt_model *m, int u, const mt_fwd_ctx *fc) {
    if (u == 0) m->fam->input_backward(m, fc);
    else if (u <= m->cfg.n_layer) {
        if (m->compress && m->zdecoded != u - 1) mt_act_compress_decode(m, u - 1);
        m->fam->block_backward(m, u - 1, fc);
        m->zdecoded = -1;
    } else m->fam->output_backward(m, fc);
}

double mt_model_forward(mt_model *m, const mt_fwd_ctx *fc, float dlogits_scale) {
    for (int u = 0; u <= m->cfg.n_layer; u++) mt_unit_forward(m, u, fc);
    return mt_model_loss_forward(m, fc, dlogits_scale);
}

void mt_model_backward(mt_model *m, const mt_fwd_ctx *fc) {
    for (int u = m->layout.n_units - 1; u >= 0; u--) mt_unit_backward(m, u, fc);
}
