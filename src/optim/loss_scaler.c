#include "optim/loss_scaler.h"
#include <float.h>
#include <limits.h>
#include <math.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

int mt_loss_scaler_init(mt_loss_scaler *s, float initial, int64_t window, float min_scale, float max_scale,
                        mt_error *err) {
    if (!(isfinite(min_scale) && min_scale >= FLT_MIN))
        return mt_errorf(err, "loss scaler: minimum scale %g must be a positive normal float", (double)min_scale);
    if (!(isfinite(max_scale) && max_scale >= min_scale))
        return mt_errorf(err, "loss scaler: maximum scale %g must be finite and >= the minimum %g", (double)max_scale,
                         (double)min_scale);
    if (!(initial >= min_scale && initial <= max_scale))
        return mt_errorf(err, "loss scaler: initial scale %g must lie in [%g, %g]", (double)initial,
                         (double)min_scale, (double)max_scale);
    if (window < 1)
        return mt_errorf(err, "loss scaler: window %lld must be >= 1 clean step", (long long)window);
    s->min_scale = min_scale;
    s->max_scale = max_scale;
    s->window = window;
    s->st.scale = initial;
    s->st.clean_steps = 0;
    s->st.skipped = 0;
    return 0;
}

mt_loss_scale_action mt_loss_scaler_update(mt_loss_scaler *s, int overflow) {
    mt_loss_scaler_state *st = &s->st;
    if (overflow) {
        /* compare before multiplying: min_scale is normal, so scale * 0.5 never underflows */
        st->scale = st->scale * 0.5f < s->min_scale ? s->min_scale : st->scale * 0.5f;
        st->clean_steps = 0;
        st->skipped++;
        return MT_LOSS_SCALE_SKIP;
    }
    if (++st->clean_steps >= s->window) {
        /* compare against max/2 so that doubling can never overflow to inf */
        st->scale = st->scale > s->max_scale * 0.5f ? s->max_scale : st->scale * 2.0f;
        st->clean_steps = 0;
    }
    return MT_LOSS_SCALE_APPLY;
}

int mt_loss_scaler_agree(mt_comm *c, int local_found, int *first_rank) {
    /* One MAX over two ints: the flag, and (size - 1 - rank) of a rank that
     * found one, so the maximum names the lowest such rank. */
    int n = mt_comm_size(c), me = mt_comm_rank(c);
    int32_t v[2] = {local_found != 0, local_found ? n - 1 - me : -1};
    mt_comm_allreduce_ctl(c, v, v, 2, MT_COMM_I32, MT_COMM_MAX);
    if (first_rank) *first_rank = v[0] ? n - 1 - v[1] : -1;
    return v[0];
}

mt_loss_scale_action mt_loss_scaler_decide(mt_loss_scaler *s, mt_comm *c, int local_found, int64_t step,
                                           FILE *log) {
    int first = -1;
    int overflow = mt_loss_scaler_agree(c, local_found, &first);
    float before = s->st.scale;
    mt_loss_scale_action a = mt_loss_scaler_update(s, overflow);
    if (a == MT_LOSS_SCALE_SKIP && log) {
        fprintf(log, "step %lld: inf/NaN gradient (found first on rank %d of '%s'): update skipped, loss scale %g -> %g "
                     "(%lld steps skipped so far)%s\n",
                (long long)step, first, mt_comm_name(c), (double)before, (double)s->st.scale,
                (long long)s->st.skipped,
                before == s->min_scale ? "; the scale was already at its minimum, so the gradients overflow "
                                         "without it: the run is diverging (lower the learning rate)"
                                       : "");
        fflush(log);
    }
    return a;
}

/* ---- checkpoint state ---- */
void mt_loss_scaler_get_state(const mt_loss_scaler *s, mt_loss_scaler_state *out) { *out = s->st; }

int mt_loss_scaler_set_state(mt_loss_scaler *s, const mt_loss_scaler_state *in, mt_error *err) {
    if (!(isfinite(in->scale) && in->scale > 0))
        return mt_errorf(err, "loss scaler state: scale %g is not a positive finite number (corrupt checkpoint?)",
                         (double)in->scale);
    if (in->clean_steps < 0 || in->skipped < 0)
        return mt_errorf(err, "loss scaler state: negative count (clean steps %lld, skipped %lld; corrupt checkpoint?)",
                         (long long)in->clean_steps, (long long)in->skipped);
    s->st = *in;
    if (s->st.scale < s->min_scale) s->st.scale = s->min_scale;
    if (s->st.scale > s->max_scale) s->st.scale = s->max_scale;
    return 0;
}

void mt_loss_scaler_write_json(mt_json_writer *w, const mt_loss_scaler *s) {
    mt_jw_begin_object(w);
    mt_jw_key(w, "scale"); mt_jw_double(w, (double)s->st.scale);
    mt_jw_key(w, "clean_steps"); mt_jw_int(w, s->st.clean_steps);
    mt_jw_key(w, "skipped"); mt_jw_int(w, s->st.skipped);
    mt_jw_end_object(w);
}

int mt_loss_scaler_read_json(const mt_json *obj, mt_loss_scaler *s, mt_error *err) {
    if (!obj || obj->type != MT_JSON_OBJECT) return mt_errorf(err, "loss scaler state is not a JSON object");
    double scale;
    mt_loss_scaler_state st;
    if (mt_json_get_double(obj, "scale", &scale, err) || mt_json_get_int64(obj, "clean_steps", &st.clean_steps, err) ||
        mt_json_get_int64(obj, "skipped", &st.skipped, err))
        return -1;
    if (!(scale > 0 && scale <= FLT_MAX))
        return mt_errorf(err, "loss scaler state: scale %g is not a positive finite float (corrupt checkpoint?)", scale);
    st.scale = (float)scale;
    return mt_loss_scaler_set_state(s, &st, err);
}
