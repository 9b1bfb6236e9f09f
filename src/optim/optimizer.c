#include "optim/optimizer.h"
#include "ops/ops.h"
#include <math.h>
#include <string.h>

int mt_opt_kind_parse(const char *s, mt_opt_kind *out, mt_error *err) {
    if (!strcmp(s, "adamw")) *out = MT_OPT_ADAMW;
    else if (!strcmp(s, "adam")) *out = MT_OPT_ADAM;
    else if (!strcmp(s, "sgd")) *out = MT_OPT_SGD;
    else if (!strcmp(s, "adafactor")) *out = MT_OPT_ADAFACTOR;
    else if (!strcmp(s, "adamw8bit")) *out = MT_OPT_ADAMW8BIT;
    else return mt_errorf(err, "unknown --optimizer '%s' (expected adamw, adam, sgd, adafactor or adamw8bit)", s);
    return 0;
}

const char *mt_opt_kind_name(mt_opt_kind k) {
    switch (k) {
    case MT_OPT_ADAMW: return "adamw";
    case MT_OPT_ADAM: return "adam";
    case MT_OPT_SGD: return "sgd";
    case MT_OPT_ADAFACTOR: return "adafactor";
    case MT_OPT_ADAMW8BIT: return "adamw8bit";
    }
    return "?";
}

int mt_opt_is_lean(mt_opt_kind k) { return k == MT_OPT_ADAFACTOR || k == MT_OPT_ADAMW8BIT; }

int mt_opt_has_update_16(mt_opt_kind k) { return k == MT_OPT_ADAMW || k == MT_OPT_ADAM; }

int mt_opt_state_count(mt_opt_kind k) { return k == MT_OPT_SGD ? 1 : 2; }

const char *mt_opt_state_name(mt_opt_kind k, int i) {
    if (k == MT_OPT_SGD) return "momentum";
    return i == 0 ? "m" : "v";
}

/* The per-tensor ranges of [begin, end) with their weight decay: the update
 * of mt_opt_update_range (g16 NULL) or mt_opt_update_range_16. */
static void update_tensors(const mt_opt_hparams *h, const mt_unit_layout *unit, size_t begin, size_t end, float *p,
                           const float *g, const uint16_t *g16, uint16_t *p16, mt_dtype dt, float *const *state,
                           float lr, int64_t step, float grad_scale) {
    for (int i = 0; i < unit->n_tensors; i++) {
        const mt_tensor *t = &unit->t[i];
        size_t a = t->offset > begin ? t->offset : begin;
        size_t b = t->offset + t->numel < end ? t->offset + t->numel : end;
        if (a >= b) continue;
        size_t o = a - begin, n = b - a;
        float wd = t->weight_decay ? h->weight_decay : 0.0f;
        switch (h->kind) {
        case MT_OPT_ADAMW:
        case MT_OPT_ADAM: { /* decoupled weight decay, or L2 */
            int decoupled = h->kind == MT_OPT_ADAMW;
            if (g16)
                (decoupled ? op_adamw_update_16 : op_adam_update_16)(p + o, g16 + o, p16 + o, dt, state[0] + o,
                                                                     state[1] + o, n, lr, h->beta1, h->beta2, h->eps,
                                                                     wd, step, grad_scale);
            else
                (decoupled ? op_adamw_update : op_adam_update)(p + o, g + o, state[0] + o, state[1] + o, n, lr,
                                                               h->beta1, h->beta2, h->eps, wd, step, grad_scale);
            break;
        }
        case MT_OPT_SGD:
            if (g16) mt_die("mt_opt_update_range_16: SGD has no 16-bit update (mt_opt_has_update_16)");
            op_sgd_update(p + o, g + o, state[0] + o, n, lr, h->momentum, wd, step, grad_scale);
            break;
        case MT_OPT_ADAFACTOR:
        case MT_OPT_ADAMW8BIT:
            mt_die("mt_opt_update_range cannot update optimizer %s: its state lives in optim/%s.h; call "
                   "its own update function", mt_opt_kind_name(h->kind),
                   h->kind == MT_OPT_ADAFACTOR ? "adafactor" : "adam8bit");
        }
    }
}

void mt_opt_update_range(const mt_opt_hparams *h, const mt_unit_layout *unit, size_t begin, size_t end,
                         float *p, const float *g, float *const *state, float lr, int64_t step,
                         float grad_scale) {
    update_tensors(h, unit, begin, end, p, g, NULL, NULL, MT_FP32, state, lr, step, grad_scale);
}

void mt_opt_update_range_16(const mt_opt_hparams *h, const mt_unit_layout *unit, size_t begin, size_t end, float *p,
                            const uint16_t *g16, uint16_t *p16, mt_dtype dt, float *const *state, float lr,
                            int64_t step, float grad_scale) {
    update_tensors(h, unit, begin, end, p, NULL, g16, p16, dt, state, lr, step, grad_scale);
}

int mt_lr_kind_parse(const char *s, mt_lr_kind *out, mt_error *err) {
    if (!strcmp(s, "constant")) *out = MT_LR_CONSTANT;
    else if (!strcmp(s, "cosine")) *out = MT_LR_COSINE;
    else return mt_errorf(err, "unknown --lr-schedule '%s' (expected constant or cosine)", s);
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
