#include "interop/weights.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mt_weights_alloc(mt_weights *w, const mt_model_config *cfg) {
    memset(w, 0, sizeof *w);
    w->cfg = *cfg;
    /* the weights of a quantized base are held in fp32 here (merge and export quantize what they need) */
    mt_model_config fp32 = *cfg;
    fp32.adapters.quant = fp32.adapters.double_quant = 0;
    mt_model_layout_build(&fp32, 1, 0, &w->layout);
    w->unit = mt_xcalloc((size_t)w->layout.n_units, sizeof(float *), "model unit table");
    w->frozen = mt_xcalloc((size_t)w->layout.n_units, sizeof(float *), "model unit table");
    for (int u = 0; u < w->layout.n_units; u++) {
        w->unit[u] = mt_xcalloc(w->layout.units[u].numel, sizeof(float), "model unit parameters");
        if (w->layout.units[u].frozen_numel)
            w->frozen[u] = mt_xcalloc(w->layout.units[u].frozen_numel, sizeof(float), "model frozen parameters");
    }
}

int mt_weights_load_frozen(mt_weights *w, mt_error *err) {
    if (!w->layout.gtotal_frozen) return 0;
    if (!w->base[0]) return mt_errorf(err, "this checkpoint's frozen tensors came from the seed, not a base checkpoint: nothing to read them from");
    mt_ckpt *ck = mt_ckpt_open(w->base, err);
    if (!ck) return -1;
    char key[MT_TENSOR_NAME_LEN + 16];
    int rc = 0;
    for (int u = 0; u < w->layout.n_units && !rc; u++)
        for (int i = 0; i < w->layout.units[u].n_frozen && !rc; i++) {
            const mt_tensor *t = &w->layout.units[u].ft[i];
            int64_t sh[MT_CKPT_MAX_DIM];
            snprintf(key, sizeof key, "model/%s", t->name);
            int nd = mt_ckpt_shape(ck, key, sh);
            if (nd != t->ndim || sh[0] != t->shape[0] || (nd == 2 && sh[1] != t->shape[1]))
                rc = mt_errorf(err, "base checkpoint %s: tensor %s is missing or of another shape", w->base, key);
            else rc = mt_ckpt_read(ck, key, 0, t->numel, w->frozen[u] + t->offset, err);
        }
    mt_ckpt_close(ck);
    return rc;
}

void mt_weights_free(mt_weights *w) {
    if (w->unit)
        for (int u = 0; u < w->layout.n_units; u++) free(w->unit[u]);
    if (w->frozen)
        for (int u = 0; u < w->layout.n_units; u++) free(w->frozen[u]);
    free(w->unit);
    free(w->frozen);
    mt_layout_free(&w->layout);
    memset(w, 0, sizeof *w);
}

float *mt_weights_tensor(const mt_weights *w, const char *name, const mt_tensor **t) {
    int u;
    const mt_tensor *x = mt_layout_find_tensor(&w->layout, name, &u);
    if (!x) return NULL;
    if (t) *t = x;
    return w->unit[u] + x->offset;
}

static void shape_str(char *buf, size_t n, int nd, const int64_t *sh) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < nd && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %" PRId64 : "%" PRId64, sh[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* Every tensor of the config's layout is in the checkpoint with its shape
 * (checked on a layout without buffers, before anything is allocated: a
 * manifest's config may claim any size; the pieces' sizes were checked
 * against the files when the checkpoint was opened). */
static int check_shapes(const mt_ckpt *ck, const mt_model_config *cfg, mt_error *err) {
    mt_layout l;
    mt_model_layout_build(cfg, 1, 0, &l);
    char key[MT_TENSOR_NAME_LEN + 16];
    int rc = 0;
    for (int u = 0; u < l.n_units && !rc; u++)
        for (int i = 0; i < l.units[u].n_tensors && !rc; i++) {
            const mt_tensor *t = &l.units[u].t[i];
            snprintf(key, sizeof key, "model/%s", t->name);
            int64_t sh[MT_CKPT_MAX_DIM];
            int nd = mt_ckpt_shape(ck, key, sh);
            int64_t want1 = t->ndim == 2 ? t->shape[1] : 1;
            if (nd < 0) {
                rc = mt_errorf(err, "checkpoint has no tensor '%s'", key);
            } else if (nd != t->ndim || sh[0] != t->shape[0] || (nd == 2 && sh[1] != want1)) {
                char a[64], b[64];
                shape_str(a, sizeof a, nd, sh);
                shape_str(b, sizeof b, t->ndim, t->shape);
                rc = mt_errorf(err, "checkpoint tensor '%s' has shape %s but the checkpoint's config implies %s", key, a, b);
            }
        }
    mt_layout_free(&l); /* after the message is formatted: t points into it */
    return rc;
}

int mt_weights_from_ckpt(const mt_ckpt *ck, mt_weights *w, mt_error *err) {
    mt_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    mt_error e;
    const mt_json *c = mt_json_get(mt_ckpt_state(ck), "config");
    if (!c) return mt_errorf(err, "checkpoint state has no \"config\" (not a meshtrain model checkpoint?)");
    if (mt_model_config_read_json(c, &cfg, &e)) return mt_errorf(err, "checkpoint config: %s", e.msg);
    if (check_shapes(ck, &cfg, err)) return -1;
    mt_weights_alloc(w, &cfg);
    const char *base = NULL;
    if (mt_json_get(mt_ckpt_state(ck), "base") && mt_json_get_string(mt_ckpt_state(ck), "base", &base, NULL) == 0)
        snprintf(w->base, sizeof w->base, "%s", base);
    char key[MT_TENSOR_NAME_LEN + 16];
    for (int u = 0; u < w->layout.n_units; u++)
        for (int i = 0; i < w->layout.units[u].n_tensors; i++) {
            const mt_tensor *t = &w->layout.units[u].t[i];
            snprintf(key, sizeof key, "model/%s", t->name);
            if (mt_ckpt_read(ck, key, 0, t->numel, w->unit[u] + t->offset, err)) {
                mt_weights_free(w);
                return -1;
            }
        }
    return 0;
}

int mt_weights_to_ckpt(const char *dir, const mt_weights *w, int64_t step, mt_error *err) {
    int n = 0;
    for (int u = 0; u < w->layout.n_units; u++) n += w->layout.units[u].n_tensors;
    mt_ckpt_tensor *ts = mt_xcalloc((size_t)n, sizeof *ts, "checkpoint tensor list");
    char (*names)[MT_TENSOR_NAME_LEN + 16] = mt_xcalloc((size_t)n, sizeof *names, "checkpoint tensor names");
    int k = 0;
    for (int u = 0; u < w->layout.n_units; u++)
        for (int i = 0; i < w->layout.units[u].n_tensors; i++, k++) {
            const mt_tensor *t = &w->layout.units[u].t[i];
            snprintf(names[k], sizeof names[k], "model/%s", t->name);
            ts[k].name = names[k];
            ts[k].data = w->unit[u] + t->offset;
            ts[k].numel = t->numel;
            ts[k].ndim = t->ndim;
            ts[k].shape[0] = t->shape[0];
            ts[k].shape[1] = t->ndim == 2 ? t->shape[1] : 1;
        }
    mt_json_writer jw;
    mt_jw_init(&jw);
    mt_jw_begin_object(&jw);
    mt_jw_key(&jw, "config");
    mt_model_config_write_json(&jw, &w->cfg);
    mt_jw_key(&jw, "step");
    mt_jw_int(&jw, step);
    if (w->base[0]) {
        mt_jw_key(&jw, "base");
        mt_jw_string(&jw, w->base);
    }
    if (w->gptq_dir[0]) {
        mt_jw_key(&jw, "gptq");
        mt_jw_begin_object(&jw);
        mt_jw_key(&jw, "dir"); mt_jw_string(&jw, w->gptq_dir);
        mt_jw_key(&jw, "bits"); mt_jw_int(&jw, w->gptq_bits);
        mt_jw_key(&jw, "group_size"); mt_jw_int(&jw, w->gptq_group_size);
        mt_jw_key(&jw, "desc_act"); mt_jw_bool(&jw, w->gptq_desc_act);
        mt_jw_key(&jw, "sym"); mt_jw_bool(&jw, w->gptq_sym);
        mt_jw_end_object(&jw);
    }
    mt_jw_end_object(&jw);
    int rc = mt_ckpt_save(dir, step, jw.buf, ts, n, err);
    mt_jw_free(&jw);
    free(names);
    free(ts);
    return rc;
}
