#include "optim/optimizer.h"
#include "ops/ops.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int mt_opt_kind_parse(const char *s, mt_opt_kind *out, mt_error *err) {
    if (!strcmp(s, "adamw")) *out = MT_OPT_ADAMW;
    else if (!strcmp(s, "adam")) *out = MT_OPT_ADAM;
    else if (!strcmp(s, "sgd")) *out = MT_OPT_SGD;
    else if (!strcmp(s, "adafactor")) *out = MT_OPT_ADAFACTOR;
    else if (!strcmp(s, "adamw8bit")) *out = MT_OPT_ADAMW8BIT;
    else if (!strcmp(s, "adagrad")) *out = MT_OPT_ADAGRAD;
    else return mt_errorf(err, "unknown {optimizer} '%s' (expected adamw, adam, sgd, adafactor, adamw8bit or adagrad)", s);
    return 0;
}

const char *mt_opt_kind_name(mt_opt_kind k) {
    switch (k) {
    case MT_OPT_ADAMW: return "adamw";
    case MT_OPT_ADAM: return "adam";
    case MT_OPT_SGD: return "sgd";
    case MT_OPT_ADAFACTOR: return "adafactor";
    case MT_OPT_ADAMW8BIT: return "adamw8bit";
    case MT_OPT_ADAGRAD: return "adagrad";
    }
    return "?";
}

int mt_opt_is_lean(mt_opt_kind k) { return !mt_optimizer_get(k)->elementwise; }

int mt_opt_has_update_16(mt_opt_kind k) { return k == MT_OPT_ADAMW || k == MT_OPT_ADAM; }

int mt_opt_state_count(mt_opt_kind k) { return mt_optimizer_get(k)->n_streams; }

const char *mt_opt_state_name(mt_opt_kind k, int i) { return mt_optimizer_get(k)->streams[i].name; }

/* The per-tensor ranges of [begin, end) with their weight decay: the update
 * of mt_opt_update_range (g16 NULL) or mt_opt_update_range_16. */
static void update_tensors(mt_backend *be, const mt_opt_hparams *h, const mt_unit_layout *unit, size_t begin,
                           size_t end, float *p, const float *g, const uint16_t *g16, uint16_t *p16, mt_dtype dt,
                           float *const *state, float lr, int64_t step, float grad_scale) {
    for (int i = 0; i < unit->n_tensors; i++) {
        const mt_tensor *t = &unit->t[i];
        size_t a = t->offset > begin ? t->offset : begin;
        size_t b = t->offset + t->numel < end ? t->offset + t->numel : end;
        if (a >= b) continue;
        /* the tensors right after it with the same weight decay join its range: the updates are
         * elementwise, so one call gives the same bits with fewer launches on a device */
        while (i + 1 < unit->n_tensors && unit->t[i + 1].weight_decay == t->weight_decay &&
               unit->t[i + 1].offset == b && b < end) {
            const mt_tensor *u = &unit->t[++i];
            b = u->offset + u->numel < end ? u->offset + u->numel : end;
        }
        size_t o = a - begin, n = b - a;
        float wd = t->weight_decay ? h->weight_decay : 0.0f;
        switch (h->kind) {
        case MT_OPT_ADAMW:
        case MT_OPT_ADAM: { /* decoupled weight decay, or L2 */
            int decoupled = h->kind == MT_OPT_ADAMW;
            if (g16)
                (decoupled ? op_adamw_update_16 : op_adam_update_16)(be, p + o, g16 + o, p16 + o, dt, state[0] + o,
                                                                     state[1] + o, n, lr, h->beta1, h->beta2, h->eps,
                                                                     wd, step, grad_scale);
            else
                (decoupled ? op_adamw_update : op_adam_update)(be, p + o, g + o, state[0] + o, state[1] + o, n, lr,
                                                               h->beta1, h->beta2, h->eps, wd, step, grad_scale);
            break;
        }
        case MT_OPT_SGD:
            if (g16) mt_die("mt_opt_update_range_16: SGD has no 16-bit update (mt_opt_has_update_16)");
            op_sgd_update(be, p + o, g + o, state[0] + o, n, lr, h->momentum, wd, step, grad_scale);
            break;
        case MT_OPT_ADAGRAD:
            if (g16) mt_die("mt_opt_update_range_16: AdaGrad has no 16-bit update (mt_opt_has_update_16)");
            op_adagrad_update(be, p + o, g + o, state[0] + o, n, lr, h->lr_decay, h->initial_accumulator, h->eps, wd,
                              step, grad_scale);
            break;
        case MT_OPT_ADAFACTOR:
        case MT_OPT_ADAMW8BIT:
            mt_die("mt_opt_update_range cannot update optimizer %s: its state lives in optim/%s.h; call "
                   "its own update function", mt_opt_kind_name(h->kind),
                   h->kind == MT_OPT_ADAFACTOR ? "adafactor" : "adam8bit");
        }
    }
}

void mt_opt_update_range(mt_backend *be, const mt_opt_hparams *h, const mt_unit_layout *unit, size_t begin, size_t end,
                         float *p, const float *g, float *const *state, float lr, int64_t step, float grad_scale) {
    update_tensors(be, h, unit, begin, end, p, g, NULL, NULL, MT_FP32, state, lr, step, grad_scale);
}

void mt_opt_update_range_16(mt_backend *be, const mt_opt_hparams *h, const mt_unit_layout *unit, size_t begin,
                            size_t end, float *p, const uint16_t *g16, uint16_t *p16, mt_dtype dt, float *const *state,
                            float lr, int64_t step, float grad_scale) {
    update_tensors(be, h, unit, begin, end, p, NULL, g16, p16, dt, state, lr, step, grad_scale);
}

/* ---- The elementwise entries: AdamW, Adam, SGD, AdaGrad ----
 * Their state is n_streams fp32 buffers of len floats (the caller's padded
 * stream length; the update touches the first end - begin). */
struct mt_opt_state {
    size_t begin, end, len;
    int n;
    float *st[MT_OPT_MAX_STREAMS];
};

static mt_opt_state *elementwise_init(const mt_opt_kind kind, size_t begin, size_t end, size_t len, mt_mem *mem) {
    mt_opt_state *s = mt_xcalloc(1, sizeof *s, "optimizer state");
    s->begin = begin;
    s->end = end;
    s->len = len;
    s->n = mt_opt_state_count(kind);
    for (int k = 0; k < s->n; k++)
        s->st[k] = mt_mem_alloc_at(mem, MT_PLACE_DEVICE, MT_MEM_OPTIM, len * sizeof(float), "optimizer state");
    return s;
}

#define ELEMENTWISE_INIT(fn, kind)                                                                                   \
    static mt_opt_state *fn(const mt_opt_config *c, const mt_unit_layout *unit, size_t begin, size_t end, size_t len, \
                            mt_mem *mem) {                                                                           \
        (void)c;                                                                                                     \
        (void)unit;                                                                                                  \
        return elementwise_init(kind, begin, end, len, mem);                                                         \
    }
ELEMENTWISE_INIT(adamw_init, MT_OPT_ADAMW)
ELEMENTWISE_INIT(adam_init, MT_OPT_ADAM)
ELEMENTWISE_INIT(sgd_init, MT_OPT_SGD)
ELEMENTWISE_INIT(adagrad_init, MT_OPT_ADAGRAD)

static void elementwise_free(mt_opt_state *s, mt_mem *mem) {
    if (!s) return;
    for (int k = 0; k < s->n; k++) mt_mem_free_at(mem, MT_PLACE_DEVICE, MT_MEM_OPTIM, s->st[k], s->len * sizeof(float));
    free(s);
}

/* Under mixed precision Adam(W) reads the 16-bit gradient and writes the
 * master and its 16-bit rounding in one pass; the others widen the gradient
 * and round the master around the update (a no-op under fp32). */
static void elementwise_step_streams(const mt_opt_config *c, const mt_unit_layout *unit, size_t begin, size_t off,
                                     size_t n, const mt_opt_target *tg, float *p, float *const *st, float lr,
                                     int64_t t, float grad_scale) {
    size_t b = begin + off;
    if (tg->dt != MT_FP32 && mt_opt_has_update_16(c->h.kind)) {
        mt_opt_update_range_16(tg->be, &c->h, unit, b, b + n, p, tg->g16 + off, tg->p16 + off, tg->dt, st, lr, t,
                               grad_scale);
        return;
    }
    mt_opt_update_range(tg->be, &c->h, unit, b, b + n, p, tg->grad(tg->ctx, off, n), st, lr, t, grad_scale);
    tg->round(tg->ctx, off, n, p);
}

/* Elements per chunk of a mixed-precision update that widens the gradient
 * (with m, v, master and the gradient, 1 MiB: the chunk stays in L2). */
#define OPT_CHUNK ((size_t)1 << 16)

static void elementwise_step(mt_opt_state *s, const mt_opt_config *c, const mt_unit_layout *unit,
                             const mt_opt_target *tg, float lr, int64_t t, float grad_scale) {
    size_t n = s->end - s->begin;
    size_t chunk = tg->dt != MT_FP32 && !mt_opt_has_update_16(c->h.kind) ? OPT_CHUNK : n;
    for (size_t off = 0; off < n; off += chunk) {
        size_t m = n - off < chunk ? n - off : chunk;
        float *st[MT_OPT_MAX_STREAMS] = {s->st[0] + off, s->n > 1 ? s->st[1] + off : NULL};
        elementwise_step_streams(c, unit, s->begin, off, m, tg, tg->p + off, st, lr, t, grad_scale);
    }
}

static void elementwise_get(const mt_opt_state *s, const mt_unit_layout *unit, int k, float *dst) {
    (void)unit;
    memcpy(dst, s->st[k], (s->end - s->begin) * sizeof(float));
}

/* The owned part of the full stream; the padding stays zero. */
static void elementwise_set(mt_opt_state *s, const mt_unit_layout *unit, int k, const float *full) {
    (void)unit;
    memset(s->st[k], 0, s->len * sizeof(float));
    if (s->end > s->begin) memcpy(s->st[k], full + s->begin, (s->end - s->begin) * sizeof(float));
}

static float *elementwise_fp32(mt_opt_state *s, int k) { return s->st[k]; }

#define ELEMENTWISE_FNS                                                                                           \
    .elementwise = 1, .whole_tensors = 0, .free = elementwise_free, .step = elementwise_step,                     \
    .step_streams = elementwise_step_streams, .get_stream = elementwise_get, .set_stream = elementwise_set,       \
    .fp32_stream = elementwise_fp32

static const mt_optimizer optimizer_adamw = {
    .kind = MT_OPT_ADAMW, .name = "adamw", .n_streams = 2,
    .streams = {{"m", MT_OPT_ENC_FP32}, {"v", MT_OPT_ENC_FP32}}, .init = adamw_init, ELEMENTWISE_FNS};
static const mt_optimizer optimizer_adam = {
    .kind = MT_OPT_ADAM, .name = "adam", .n_streams = 2,
    .streams = {{"m", MT_OPT_ENC_FP32}, {"v", MT_OPT_ENC_FP32}}, .init = adam_init, ELEMENTWISE_FNS};
static const mt_optimizer optimizer_sgd = {
    .kind = MT_OPT_SGD, .name = "sgd", .n_streams = 1,
    .streams = {{"momentum", MT_OPT_ENC_FP32}}, .init = sgd_init, ELEMENTWISE_FNS};
/* "sum": the sum of squared gradients including the initial accumulator
 * (PyTorch's state_sum); zeros before the first step, which writes it whole. */
static const mt_optimizer optimizer_adagrad = {
    .kind = MT_OPT_ADAGRAD, .name = "adagrad", .n_streams = 1,
    .streams = {{"sum", MT_OPT_ENC_FP32}}, .init = adagrad_init, ELEMENTWISE_FNS};

int mt_opt_config_check(const mt_opt_config *c, mt_error *err) {
    int af = c->h.kind == MT_OPT_ADAFACTOR;
    if (!(c->h.beta1 >= 0.0f && c->h.beta1 < 1.0f)) return mt_errorf(err, "{beta1} must be in [0, 1), got %g", (double)c->h.beta1);
    if (!(c->h.beta2 >= 0.0f && c->h.beta2 < 1.0f)) return mt_errorf(err, "{beta2} must be in [0, 1), got %g", (double)c->h.beta2);
    if (!(c->h.eps > 0.0f && isfinite(c->h.eps))) return mt_errorf(err, "{eps} must be a finite number > 0, got %g", (double)c->h.eps);
    if (!(c->h.weight_decay >= 0.0f && isfinite(c->h.weight_decay)))
        return mt_errorf(err, "{weight-decay} must be a finite number >= 0, got %g", (double)c->h.weight_decay);
    if (!(c->h.momentum >= 0.0f && c->h.momentum < 1.0f))
        return mt_errorf(err, "{momentum} must be in [0, 1), got %g", (double)c->h.momentum);
    if (!(c->h.lr_decay >= 0.0f && isfinite(c->h.lr_decay)))
        return mt_errorf(err, "{adagrad-lr-decay} must be a finite number >= 0, got %g", (double)c->h.lr_decay);
    if (!(c->h.initial_accumulator >= 0.0f && isfinite(c->h.initial_accumulator)))
        return mt_errorf(err, "{adagrad-initial-accumulator} must be a finite number >= 0, got %g",
                         (double)c->h.initial_accumulator);
    if ((c->h.lr_decay != 0.0f || c->h.initial_accumulator != 0.0f) && c->h.kind != MT_OPT_ADAGRAD)
        return mt_errorf(err, "{adagrad-lr-decay} and {adagrad-initial-accumulator} apply to {optimizer} adagrad");
    if (!(c->adafactor_beta1 >= 0.0f && c->adafactor_beta1 < 1.0f))
        return mt_errorf(err, "{adafactor-beta1} must be in [0, 1), got %g", (double)c->adafactor_beta1);
    if (c->adafactor_beta1 > 0.0f && !af)
        return mt_errorf(err, "{adafactor-beta1} applies to {optimizer} adafactor (use {beta1} for Adam)");
    if (!(c->adafactor_clip > 0.0f && isfinite(c->adafactor_clip)))
        return mt_errorf(err, "{adafactor-clip} must be a positive number, got %g", (double)c->adafactor_clip);
    if ((c->adafactor_scale_parameter || c->adafactor_clip != 1.0f) && !af)
        return mt_errorf(err, "{adafactor-scale-parameter} and {adafactor-clip} apply to {optimizer} adafactor");
    return 0;
}

const mt_optimizer *mt_optimizer_get(mt_opt_kind k) {
    switch (k) {
    case MT_OPT_ADAMW: return &optimizer_adamw;
    case MT_OPT_ADAM: return &optimizer_adam;
    case MT_OPT_SGD: return &optimizer_sgd;
    case MT_OPT_ADAFACTOR: return &mt_optimizer_adafactor;
    case MT_OPT_ADAMW8BIT: return &mt_optimizer_adamw8bit;
    case MT_OPT_ADAGRAD: return &optimizer_adagrad;
    }
    mt_die("mt_optimizer_get: no optimizer of kind %d", (int)k);
}

int mt_lr_kind_parse(const char *s, mt_lr_kind *out, mt_error *err) {
    if (!strcmp(s, "constant")) *out = MT_LR_CONSTANT;
    else if (!strcmp(s, "cosine")) *out = MT_LR_COSINE;
    else return mt_errorf(err, "unknown {lr-schedule} '%s' (expected constant or cosine)", s);
    return 0;
}

float mt_lr_at(const mt_lr_schedule *s, int64_t step) {
    if (s->warmup > 0 && step < s->warmup) return s->lr * (float)(step + 1) / (float)s->warmup;
    if (s->kind == MT_LR_CONSTANT) return s->lr;
    int64_t span = s->total_steps - s->warmup;
    if (span <= 0 || step >= s->total_steps) return s->min_lr;
    double ratio = (double)(step - s->warmup) / (double)span;
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return (float)(s->min_lr + coeff * (s->lr - s->min_lr));
}

float mt_clip_coef(double norm, float max_norm) {
    if (max_norm <= 0.0f) return 1.0f;
    double c = (double)max_norm / (norm + 1e-6);
    return c < 1.0 ? (float)c : 1.0f;
}
