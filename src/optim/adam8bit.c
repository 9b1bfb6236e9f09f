#include "optim/adam8bit.h"
#include "core/error.h"
#include "ops/ops.h"
#include <string.h>
#include <stdlib.h>

/* The state's sizes over [begin, end), without storage. */
static void layout_of(mt_adam8bit *s, const mt_unit_layout *unit, size_t begin, size_t end) {
    memset(s, 0, sizeof *s);
    /* the tensors' runs, for the kernel's weight decay by tensor (host metadata) */
    s->n_spans = unit->n_tensors;
    s->spans = mt_xcalloc((size_t)(s->n_spans > 0 ? s->n_spans : 1), sizeof *s->spans, "8-bit AdamW tensor table");
    for (int i = 0; i < s->n_spans; i++)
        s->spans[i] = (mt_tensor_span){unit->t[i].offset, unit->t[i].numel, unit->t[i].weight_decay};
    size_t n = end > begin ? end - begin : 0;
    s->begin = begin;
    s->end = begin + n;
    s->n_blocks = (n + MT_Q8_BLOCK - 1) / MT_Q8_BLOCK;
    /* absmax arrays first (float alignment), then the two code arrays */
    s->bytes = 2 * s->n_blocks * sizeof(float) + 2 * n;
}

/* Points the state at its storage (s->bytes at b, float-aligned). */
static void attach(mt_adam8bit *s, void *block) {
    char *b = block;
    s->m_absmax = (float *)b;
    s->v_absmax = s->m_absmax + s->n_blocks;
    s->m = (uint8_t *)(s->v_absmax + s->n_blocks);
    s->v = s->m + (s->end - s->begin);
}

void mt_adam8bit_init(mt_adam8bit *s, const mt_unit_layout *unit, size_t begin, size_t end, mt_mem *mem) {
    layout_of(s, unit, begin, end);
    s->mem_block = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_OPTIM, s->bytes, "8-bit AdamW state");
    attach(s, s->mem_block);
}

void mt_adam8bit_free(mt_adam8bit *s, mt_mem *mem) {
    mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_OPTIM, s->mem_block, s->bytes);
    free(s->spans);
    memset(s, 0, sizeof *s);
}

void mt_adam8bit_update(mt_backend *be, mt_adam8bit *s, const mt_opt_hparams *h, const mt_unit_layout *unit,
                        float *p, const float *g, float lr, int64_t step, float grad_scale) {
    if (unit->n_tensors != s->n_spans)
        mt_die("8-bit AdamW state was built for a unit of %d tensors, called with %d", s->n_spans, unit->n_tensors);
    op_adamw8bit_update(be, p, g, s->m, s->v, s->m_absmax, s->v_absmax, s->begin, s->end - s->begin, s->spans,
                        s->n_spans, lr, h->beta1, h->beta2, h->eps, h->weight_decay, step, grad_scale);
}

void mt_adam8bit_get_state(mt_backend *be, const mt_adam8bit *s, int k, float *dst) {
    op_q8_dequantize_blocks(be, k == 0, k == 0 ? s->m : s->v, k == 0 ? s->m_absmax : s->v_absmax, s->end - s->begin,
                            dst);
}

void mt_adam8bit_set_state(mt_backend *be, mt_adam8bit *s, int k, const float *full) {
    op_q8_quantize_blocks(be, k == 0, full + s->begin, s->end - s->begin, k == 0 ? s->m : s->v,
                          k == 0 ? s->m_absmax : s->v_absmax);
}

/* ---- The table entry (optim/optimizer.h) ---- */
static mt_opt_state *entry_init(const mt_opt_config *c, const mt_unit_layout *unit, size_t begin, size_t end,
                                size_t len, mt_mem *mem) {
    (void)c;
    (void)len; /* the codes are smaller than the stream: no padding to hold */
    mt_adam8bit *s = mt_xcalloc(1, sizeof *s, "8-bit AdamW state");
    mt_adam8bit_init(s, unit, begin, end, mem);
    return (mt_opt_state *)s;
}

static mt_opt_state *entry_init_detached(const mt_opt_config *c, const mt_unit_layout *unit, size_t begin, size_t end,
                                         mt_mem *mem) {
    (void)c;
    (void)mem; /* no scratch */
    mt_adam8bit *s = mt_xcalloc(1, sizeof *s, "8-bit AdamW state");
    layout_of(s, unit, begin, end);
    return (mt_opt_state *)s;
}

static size_t entry_storage_bytes(const mt_opt_state *s) { return ((const mt_adam8bit *)s)->bytes; }
static void entry_attach(mt_opt_state *s, void *storage) { attach((mt_adam8bit *)s, storage); }

static void entry_free(mt_opt_state *s, mt_mem *mem) {
    if (!s) return;
    mt_adam8bit_free((mt_adam8bit *)s, mem);
    free(s);
}

static void entry_step(mt_opt_state *st, const mt_opt_config *c, const mt_unit_layout *unit, const mt_opt_target *tg,
                       float lr, int64_t t, float grad_scale) {
    mt_adam8bit *s = (mt_adam8bit *)st;
    size_t n = s->end - s->begin;
    if (!n) return;
    mt_adam8bit_update(tg->be, s, &c->h, unit, tg->p, tg->grad(tg->ctx, 0, n), lr, t, grad_scale);
    tg->round(tg->ctx, 0, n, tg->p);
}

/* get/set_stream have no backend yet (optim/optimizer.c's pending entry in
 * tests/seam_allow.txt): the codec runs on the CPU's, as the state lives in
 * host memory ({device} cuda refuses 8-bit AdamW). */
static void entry_get(const mt_opt_state *s, const mt_unit_layout *unit, int k, float *dst) {
    (void)unit;
    mt_backend cpu = mt_backend_cpu(MT_GEMM_DEFAULT);
    mt_adam8bit_get_state(&cpu, (const mt_adam8bit *)s, k, dst);
}

static void entry_set(mt_opt_state *s, const mt_unit_layout *unit, int k, const float *full) {
    (void)unit;
    mt_backend cpu = mt_backend_cpu(MT_GEMM_DEFAULT);
    mt_adam8bit_set_state(&cpu, (mt_adam8bit *)s, k, full);
}

static float *entry_fp32(mt_opt_state *s, int k) {
    (void)s;
    (void)k;
    return NULL;
}

/* AdamW's m and v as blockwise 8-bit codes; their checkpoint form is the
 * dequantised fp32 (re-quantised to the same codes on load). */
const mt_optimizer mt_optimizer_adamw8bit = {
    .kind = MT_OPT_ADAMW8BIT, .name = "adamw8bit", .n_streams = 2,
    .streams = {{"m", MT_OPT_ENC_Q8}, {"v", MT_OPT_ENC_Q8}},
    .elementwise = 0, .whole_tensors = 0,
    .init = entry_init, .free = entry_free, .step = entry_step, .step_streams = NULL,
    .get_stream = entry_get, .set_stream = entry_set, .fp32_stream = entry_fp32,
    .init_detached = entry_init_detached, .storage_bytes = entry_storage_bytes, .attach = entry_attach,
};
