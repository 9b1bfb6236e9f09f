#include "optim/adafactor.h"
#include "core/error.h"
#include <stdlib.h>
#include "ops/ops.h"
#include <math.h>
#include <string.h>

void mt_adafactor_hparams_default(mt_adafactor_hparams *h) {
    *h = (mt_adafactor_hparams){.beta1 = 0.0f, .decay_rate = -0.8f, .eps1 = 1e-30f, .clip_threshold = 1.0f,
                                .weight_decay = 0.0f, .scale_parameter = 0, .eps2 = 1e-3f};
}

static size_t tensor_rows(const mt_tensor *t) { return (size_t)t->shape[0]; }
static size_t tensor_cols(const mt_tensor *t) { return t->ndim == 2 ? (size_t)t->shape[1] : 1; }

/* The part [*a, *b) of tensor t inside [begin, end); 0 if empty. */
static int overlap(const mt_tensor *t, size_t begin, size_t end, size_t *a, size_t *b) {
    *a = t->offset > begin ? t->offset : begin;
    *b = t->offset + t->numel < end ? t->offset + t->numel : end;
    return *a < *b;
}

/* own_storage 0: R, C, V and M are left for the caller to attach (scratch is allocated). */
static void setup(mt_adafactor *s, const mt_adafactor_hparams *h, const mt_unit_layout *unit, size_t begin,
                  size_t end, mt_mem *mem, int own_storage) {
    memset(s, 0, sizeof *s);
    s->owns_storage = own_storage;
    s->begin = begin;
    s->end = end > begin ? end : begin;
    s->numel = unit->numel;
    s->n_tensors = unit->n_tensors;
    size_t nt = (size_t)(unit->n_tensors > 0 ? unit->n_tensors : 1);
    s->factored = mt_xcalloc(nt, sizeof *s->factored, "Adafactor tensor table");
    s->rc_off = mt_xcalloc(nt, sizeof *s->rc_off, "Adafactor tensor table");
    s->v_off = mt_xcalloc(nt, sizeof *s->v_off, "Adafactor tensor table");
    s->r_mean = mt_xcalloc(nt, sizeof *s->r_mean, "Adafactor tensor table");
    for (int i = 0; i < unit->n_tensors; i++) {
        const mt_tensor *t = &unit->t[i];
        size_t rows = tensor_rows(t), cols = tensor_cols(t), a, b;
        s->factored[i] = t->ndim == 2 && rows >= 2 && cols >= 2;
        if (s->factored[i]) {
            s->rc_off[i] = s->n_rc;
            s->n_rc += rows + cols;
            if (cols > s->cf_len) s->cf_len = cols;
        } else {
            s->v_off[i] = s->n_v;
            if (overlap(t, s->begin, s->end, &a, &b)) s->n_v += b - a;
        }
    }
    size_t n = s->end - s->begin, nm = h->beta1 > 0.0f ? n : 0;
    s->n_m = nm;
    s->state_bytes = (s->n_rc + s->n_v + nm) * sizeof(float);
    if (own_storage) {
        s->rc = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_OPTIM, s->n_rc * sizeof(float),
                                "Adafactor row/column moments");
        s->v = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_OPTIM, s->n_v * sizeof(float), "Adafactor second moment");
        s->m =
            nm ? mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_OPTIM, nm * sizeof(float), "Adafactor momentum") : NULL;
    }
    s->col_factor =
        mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, s->cf_len * sizeof(float), "Adafactor column factors");
    s->red_len = s->n_rc + 2 * (size_t)s->n_tensors;
    s->red = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, s->red_len * sizeof(double),
                             "Adafactor reduction buffer");
}

void mt_adafactor_init(mt_adafactor *s, const mt_adafactor_hparams *h, const mt_unit_layout *unit, size_t begin,
                       size_t end, mt_mem *mem) {
    setup(s, h, unit, begin, end, mem, 1);
}

void mt_adafactor_free(mt_adafactor *s, mt_mem *mem) {
    if (s->owns_storage) {
        mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_OPTIM, s->rc, s->n_rc * sizeof(float));
        mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_OPTIM, s->v, s->n_v * sizeof(float));
        mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_OPTIM, s->m, s->n_m * sizeof(float));
    }
    mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, s->col_factor, s->cf_len * sizeof(float));
    mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_SCRATCH, s->red, s->red_len * sizeof(double));
    free(s->factored);
    free(s->rc_off);
    free(s->v_off);
    free(s->r_mean);
    memset(s, 0, sizeof *s);
}

size_t mt_adafactor_state_bytes(const mt_adafactor *s) { return s->state_bytes; }
size_t mt_adafactor_sums_len(const mt_adafactor *s) { return s->n_rc; }
size_t mt_adafactor_sq_len(const mt_adafactor *s) { return 2 * (size_t)s->n_tensors; }

static void check_unit(const mt_adafactor *s, const mt_unit_layout *unit) {
    if (unit->numel != s->numel || unit->n_tensors != s->n_tensors)
        mt_die("Adafactor state was built for a unit of %zu elements in %d tensors, called with %zu in %d",
               s->numel, s->n_tensors, unit->numel, unit->n_tensors);
}

/* The owned part [a, b) of tensor t as its elements [e0, e1) and the
 * offset of element e0 from the range's begin. */
static size_t owned_elements(const mt_tensor *t, size_t a, size_t b, size_t begin, size_t *e0, size_t *e1) {
    *e0 = a - t->offset;
    *e1 = b - t->offset;
    return a - begin;
}

void mt_adafactor_row_col_sums(mt_backend *be, const mt_adafactor *s, const mt_adafactor_hparams *h,
                               const mt_unit_layout *unit, const float *g, float grad_scale, double *sums) {
    check_unit(s, unit);
    for (int i = 0; i < unit->n_tensors; i++) {
        const mt_tensor *t = &unit->t[i];
        size_t a, b, e0 = 0, e1 = 0, off = 0, rows = tensor_rows(t);
        if (!s->factored[i]) continue;
        if (overlap(t, s->begin, s->end, &a, &b)) off = owned_elements(t, a, b, s->begin, &e0, &e1);
        /* an unowned matrix's sums are zeros, for the all-reduce */
        double *rs = sums + s->rc_off[i];
        op_adafactor_row_col_sums(be, rs, rs + rows, g + off, e0, e1, rows, tensor_cols(t), grad_scale, h->eps1);
    }
}

void mt_adafactor_second_moment(mt_backend *be, mt_adafactor *s, const mt_adafactor_hparams *h,
                                const mt_unit_layout *unit, const float *p, const float *g, float grad_scale,
                                int64_t step, const double *sums, double *sq) {
    check_unit(s, unit);
    double beta2 = 1.0 - pow((double)step, (double)h->decay_rate);
    for (int i = 0; i < unit->n_tensors; i++) {
        const mt_tensor *t = &unit->t[i];
        size_t a, b, rows = tensor_rows(t);
        int mine = overlap(t, s->begin, s->end, &a, &b);
        /* the owned part of the tensor's sum of squares, for RMS(X) */
        sq[s->n_tensors + i] = mine && h->scale_parameter ? op_sumsq(be, p + (a - s->begin), b - a) : 0.0;
        if (s->factored[i]) {
            /* every rank updates its replica of R and C from the summed sums */
            size_t e0 = 0, e1 = 0, off = mine ? owned_elements(t, a, b, s->begin, &e0, &e1) : 0;
            float *R = s->rc + s->rc_off[i];
            const double *rs = sums + s->rc_off[i];
            sq[i] = op_adafactor_factored_moment(be, R, R + rows, &s->r_mean[i], rs, rs + rows, rows, tensor_cols(t),
                                                 beta2, g + off, e0, e1, grad_scale, s->col_factor);
        } else {
            sq[i] = mine ? op_adafactor_moment(be, s->v + s->v_off[i], g + (a - s->begin), b - a, grad_scale, beta2,
                                               h->eps1)
                         : 0.0;
        }
    }
}

void mt_adafactor_apply(mt_backend *be, mt_adafactor *s, const mt_adafactor_hparams *h, const mt_unit_layout *unit,
                        float *p, const float *g, float grad_scale, float lr, const double *sq) {
    check_unit(s, unit);
    for (int i = 0; i < unit->n_tensors; i++) {
        const mt_tensor *t = &unit->t[i];
        size_t a, b, rows = tensor_rows(t);
        if (!overlap(t, s->begin, s->end, &a, &b)) continue;
        double rms = sqrt(sq[i] / (double)t->numel);
        double den = rms / (double)h->clip_threshold;
        float clip = (float)(1.0 / (den > 1.0 ? den : 1.0));
        float lr_t = lr;
        if (h->scale_parameter) { /* a step relative to the tensor's scale, RMS(X) floored at eps2 */
            double prms = sqrt(sq[s->n_tensors + i] / (double)t->numel);
            lr_t = (float)((double)lr * (prms > (double)h->eps2 ? prms : (double)h->eps2));
        }
        float pdecay = t->weight_decay ? (float)(1.0 - (double)lr_t * (double)h->weight_decay) : 1.0f;
        size_t o = a - s->begin;
        float *m = s->m ? s->m + o : NULL;
        if (s->factored[i]) {
            size_t e0, e1;
            owned_elements(t, a, b, s->begin, &e0, &e1);
            const float *R = s->rc + s->rc_off[i];
            op_adafactor_apply_factored(be, p + o, m, g + o, R, R + rows, s->r_mean[i], e0, e1, tensor_cols(t),
                                        grad_scale, clip, h->beta1, lr_t, pdecay, s->col_factor);
        } else {
            op_adafactor_apply(be, p + o, m, g + o, s->v + s->v_off[i], b - a, grad_scale, clip, h->beta1, lr_t,
                               pdecay);
        }
    }
}

void mt_adafactor_update(mt_backend *be, mt_adafactor *s, const mt_adafactor_hparams *h, const mt_unit_layout *unit,
                         float *p, const float *g, float lr, int64_t step, float grad_scale,
                         mt_allreduce_sum_fn allreduce_sum, void *ctx) {
    double *sums = s->red, *sq = s->red + s->n_rc;
    mt_adafactor_row_col_sums(be, s, h, unit, g, grad_scale, sums);
    if (allreduce_sum) allreduce_sum(ctx, sums, s->n_rc);
    mt_adafactor_second_moment(be, s, h, unit, p, g, grad_scale, step, sums, sq);
    if (allreduce_sum) allreduce_sum(ctx, sq, mt_adafactor_sq_len(s));
    mt_adafactor_apply(be, s, h, unit, p, g, grad_scale, lr, sq);
}

void mt_adafactor_get_state(mt_backend *be, const mt_adafactor *s, const mt_unit_layout *unit, int k, float *dst) {
    check_unit(s, unit);
    size_t n = s->end - s->begin;
    if (k == 0) {
        if (s->m) op_copy(be, dst, s->m, n);
        else op_zero(be, dst, n);
        return;
    }
    op_zero(be, dst, n);
    for (int i = 0; i < unit->n_tensors; i++) {
        const mt_tensor *t = &unit->t[i];
        size_t a, b;
        if (!overlap(t, s->begin, s->end, &a, &b)) continue;
        if (!s->factored[i]) {
            op_copy(be, dst + (a - s->begin), s->v + s->v_off[i], b - a);
            continue;
        }
        /* R then C packed at the start of the tensor's slot: the owned part of it */
        size_t packed_end = t->offset + tensor_rows(t) + tensor_cols(t);
        if (b > packed_end) b = packed_end;
        if (a < b) op_copy(be, dst + (a - s->begin), s->rc + s->rc_off[i] + (a - t->offset), b - a);
    }
}

void mt_adafactor_set_state(mt_backend *be, mt_adafactor *s, const mt_unit_layout *unit, int k, const float *full) {
    check_unit(s, unit);
    if (k == 0) {
        if (s->m) op_copy(be, s->m, full + s->begin, s->end - s->begin);
        return;
    }
    for (int i = 0; i < unit->n_tensors; i++) {
        const mt_tensor *t = &unit->t[i];
        size_t a, b;
        if (s->factored[i]) {
            op_copy(be, s->rc + s->rc_off[i], full + t->offset, tensor_rows(t) + tensor_cols(t));
        } else if (overlap(t, s->begin, s->end, &a, &b)) {
            op_copy(be, s->v + s->v_off[i], full + a, b - a);
        }
    }
}

/* ---- The table entry (optim/optimizer.h) ---- */
typedef struct {
    mt_adafactor s;
    mt_adafactor_hparams h;
} adafactor_state;

static mt_opt_state *entry_init(const mt_opt_config *c, const mt_unit_layout *unit, size_t begin, size_t end,
                                size_t len, mt_mem *mem) {
    (void)len; /* the state is smaller than the stream: no padding to hold */
    adafactor_state *a = mt_xcalloc(1, sizeof *a, "Adafactor state");
    mt_adafactor_hparams_default(&a->h);
    a->h.weight_decay = c->h.weight_decay;
    a->h.beta1 = c->adafactor_beta1;
    a->h.scale_parameter = c->adafactor_scale_parameter;
    a->h.clip_threshold = c->adafactor_clip;
    if (mem) mt_adafactor_init(&a->s, &a->h, unit, begin, end, mem); /* mem NULL: entry_init_detached sets it up */
    return (mt_opt_state *)a;
}

static mt_opt_state *entry_init_detached(const mt_opt_config *c, const mt_unit_layout *unit, size_t begin, size_t end,
                                         mt_mem *mem) {
    adafactor_state *a = (adafactor_state *)entry_init(c, unit, begin, end, 0, NULL);
    setup(&a->s, &a->h, unit, begin, end, mem, 0);
    return (mt_opt_state *)a;
}

static size_t entry_storage_bytes(const mt_opt_state *s) { return ((const adafactor_state *)s)->s.state_bytes; }

/* R and C, V, M one after the other in the caller's storage. */
static void entry_attach(mt_opt_state *st, void *storage) {
    mt_adafactor *s = &((adafactor_state *)st)->s;
    s->rc = storage;
    s->v = s->rc + s->n_rc;
    s->m = s->n_m ? s->v + s->n_v : NULL;
}

static void entry_free(mt_opt_state *s, mt_mem *mem) {
    if (!s) return;
    mt_adafactor_free(&((adafactor_state *)s)->s, mem);
    free(s);
}

/* The whole owned range at once (the phases need every owned element);
 * every rank of the shard group joins the sums, even with nothing owned. */
static void entry_step(mt_opt_state *s, const mt_opt_config *c, const mt_unit_layout *unit, const mt_opt_target *tg,
                       float lr, int64_t t, float grad_scale) {
    (void)c;
    adafactor_state *a = (adafactor_state *)s;
    size_t n = a->s.end - a->s.begin;
    const float *g = tg->grad(tg->ctx, 0, n);
    mt_adafactor_update(tg->be, &a->s, &a->h, unit, tg->p, g, lr, t, grad_scale, tg->sum, tg->sum_ctx);
    tg->round(tg->ctx, 0, n, tg->p);
}

/* get/set_stream have no backend yet (optim/optimizer.c's pending entry in
 * tests/seam_allow.txt): the state's copies run on the CPU's, as the state
 * lives in host memory ({device} cuda refuses Adafactor). */
static void entry_get(const mt_opt_state *s, const mt_unit_layout *unit, int k, float *dst) {
    mt_backend cpu = mt_backend_cpu(MT_GEMM_DEFAULT);
    mt_adafactor_get_state(&cpu, &((const adafactor_state *)s)->s, unit, k, dst);
}

static void entry_set(mt_opt_state *s, const mt_unit_layout *unit, int k, const float *full) {
    mt_backend cpu = mt_backend_cpu(MT_GEMM_DEFAULT);
    mt_adafactor_set_state(&cpu, &((adafactor_state *)s)->s, unit, k, full);
}

static float *entry_fp32(mt_opt_state *s, int k) {
    (void)s;
    (void)k;
    return NULL;
}

/* Stream "m": the momentum per element (zeros without beta1); "v": the
 * second moment, a factored matrix's R and C packed at its slot's start. */
const mt_optimizer mt_optimizer_adafactor = {
    .kind = MT_OPT_ADAFACTOR, .name = "adafactor", .n_streams = 2,
    .streams = {{"m", MT_OPT_ENC_FP32}, {"v", MT_OPT_ENC_FACTORED}},
    .elementwise = 0, .whole_tensors = 1,
    .init = entry_init, .free = entry_free, .step = entry_step, .step_streams = NULL,
    .get_stream = entry_get, .set_stream = entry_set, .fp32_stream = entry_fp32,
    .init_detached = entry_init_detached, .storage_bytes = entry_storage_bytes, .attach = entry_attach,
};
