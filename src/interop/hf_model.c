#include "interop/hf_model.h"
#include "core/fileio.h"
#include "core/strlist.h"
#include "interop/hf_dir.h"
#include "interop/gptq.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The HF form of tensor t: name, shape (padding rows stripped: the rows
 * drawn at init are the real ones), and whether it is transposed. */
static void hf_form(const mt_family *f, const mt_model_config *cfg, const mt_tensor *t, char *name, size_t cap,
                    int *ndim, int64_t shape[2], int *tr) {
    f->hf_name(cfg, t->name, name, cap, tr);
    *ndim = t->ndim;
    int64_t rows = t->init_rows < t->gshape[0] && t->init_std > 0 ? t->init_rows : t->gshape[0];
    shape[0] = *tr ? t->gshape[1] : rows;
    shape[1] = *tr ? rows : t->gshape[1];
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *shape) {
    if (ndim == 1) snprintf(buf, cap, "[%lld]", (long long)shape[0]);
    else if (ndim == 2) snprintf(buf, cap, "[%lld, %lld]", (long long)shape[0], (long long)shape[1]);
    else snprintf(buf, cap, "of %d dimensions", ndim);
}

static const char *dtype_torch_name(mt_dtype d) {
    return d == MT_BF16 ? "bfloat16" : d == MT_FP16 ? "float16" : "float32";
}

int mt_hf_export_check(const mt_model_config *cfg, mt_error *err) {
    const mt_family *f = mt_family_get(cfg->family);
    return f->hf_export_check ? f->hf_export_check(cfg, err) : 0;
}

int mt_hf_export(const char *dir, const mt_weights *w, mt_dtype dtype, size_t shard_bytes, mt_error *err) {
    const mt_family *f = mt_family_get(w->cfg.family);
    const mt_layout *L = &w->layout;
    if (mt_hf_export_check(&w->cfg, err)) return -1;
    size_t maxn = 1;
    for (int u = 0; u < L->n_units; u++)
        for (int i = 0; i < L->units[u].n_tensors; i++) maxn = L->units[u].t[i].gnumel > maxn ? L->units[u].t[i].gnumel : maxn;
    mt_hf_writer *hw = NULL;
    if (mt_hf_writer_open(dir, dtype, shard_bytes, &hw, err)) return -1;
    float *tmp = mt_xmalloc(maxn * sizeof(float), "transpose buffer");
    int rc = 0;
    for (int u = 0; u < L->n_units && !rc; u++)
        for (int i = 0; i < L->units[u].n_tensors && !rc; i++) {
            const mt_tensor *t = &L->units[u].t[i];
            char name[128];
            int ndim, tr;
            int64_t shape[2];
            hf_form(f, &w->cfg, t, name, sizeof name, &ndim, shape, &tr);
            const float *src = w->unit[u] + t->offset;
            if (tr) {
                mt_transpose_f32(tmp, src, t->gshape[0], t->gshape[1]);
                src = tmp;
            }
            rc = mt_hf_writer_add(hw, name, ndim, shape, src, err);
        }
    free(tmp);
    mt_json_writer jw;
    mt_jw_init(&jw);
    f->hf_config_write(&w->cfg, dtype_torch_name(dtype), &jw);
    if (!rc) rc = mt_hf_writer_finish(hw, jw.buf, err);
    else mt_hf_writer_abort(hw);
    mt_jw_free(&jw);
    return rc;
}

/* Known non-parameter entries of HF files (GPT-2's attention mask buffers;
 * a tied head written out anyway). */
static int ignorable(const mt_model_config *cfg, const char *name) {
    size_t n = strlen(name);
    const char *cur = mt_family_get(cfg->family)->hf_ignored, *item;
    size_t len;
    while (cur && mt_strlist_next(&cur, &item, &len)) {
        if (!len) continue;
        if (item[0] == '.' ? n > len && !strncmp(name + n - len, item, len) : n == len && !strncmp(name, item, len))
            return 1;
    }
    return !strcmp(name, "lm_head.weight") && cfg->tie_embeddings;
}

/* The family of a config.json by its model_type, with its defaults. */
static int family_of(const mt_json *o, mt_model_config *cfg, mt_error *err) {
    const char *type = NULL;
    mt_family_id f;
    if (mt_json_get_string(o, "model_type", &type, err) || mt_family_of_hf_model_type(type, &f, err)) return -1;
    mt_model_config_defaults(cfg, f);
    return 0;
}

/* A GPTQ directory (gptq_bits > 0) holds HF weight `name` as a quantized layer. */
static int gptq_layer(const mt_hf_dir *hd, int gptq_bits, const char *name) {
    char q[160];
    size_t n = strlen(name);
    if (!gptq_bits || n < 8 || strcmp(name + n - 7, ".weight") || n + 2 > sizeof q) return 0;
    snprintf(q, sizeof q, "%.*s.qweight", (int)(n - 7), name);
    return mt_hf_dir_find(hd, q, NULL, NULL, NULL) >= 0;
}

/* Tensor t of the model is in the directory with the shape config.json
 * implies (a GPTQ layer's four tensors are checked when it is read). */
static int check_tensor(const mt_hf_dir *hd, const mt_family *f, const mt_model_config *cfg, const mt_tensor *t,
                        const char *dir, int gptq_bits, mt_error *err) {
    char name[128];
    int ndim, tr, fnd = 0;
    int64_t shape[2], fshape[8] = {0};
    hf_form(f, cfg, t, name, sizeof name, &ndim, shape, &tr);
    if (gptq_layer(hd, gptq_bits, name)) return 0;
    if (mt_hf_dir_find(hd, name, &fnd, fshape, err) < 0)
        return mt_errorf(err, "%s: tensor '%s' is missing (a %s model of this config.json needs it)", dir, name, f->name);
    int64_t want1 = ndim == 2 ? shape[1] : 1, got1 = fnd == 2 ? fshape[1] : 1;
    if (fnd != ndim || fshape[0] != shape[0] || got1 != want1) {
        char got[64], want[64];
        shape_text(got, sizeof got, fnd, fshape);
        shape_text(want, sizeof want, ndim, shape);
        return mt_errorf(err, "%s: tensor '%s' has shape %s, config.json implies %s", dir, name, got, want);
    }
    return 0;
}

int mt_hf_config_read(const mt_json *o, mt_model_config *cfg, mt_error *err) {
    memset(cfg, 0, sizeof *cfg);
    if (family_of(o, cfg, err) || mt_family_get(cfg->family)->hf_config_read(o, cfg, err)) return -1;
    /* the context is the config's (transformers' LlamaConfig default 2048 where it names none); a run from
     * the import may train a shorter one ({seq-len} with {init-from}) */
    if (cfg->seq_len <= 0) cfg->seq_len = cfg->max_pos > 0 ? cfg->max_pos : 2048;
    if (cfg->max_pos < cfg->seq_len) cfg->max_pos = cfg->seq_len;
    cfg->padded_vocab = mt_pad_vocab(cfg->vocab_size);
    return 0;
}

int mt_hf_import(const char *dir, mt_weights *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    mt_hf_dir *hd = NULL;
    if (mt_hf_dir_open(dir, &hd, err)) return -1;
    const mt_json *cj = mt_hf_dir_config(hd);
    mt_model_config cfg;
    mt_error e2 = {{0}};
    mt_gptq_config gq = {0};
    int rc = mt_hf_config_read(cj, &cfg, &e2);
    if (!rc) rc = mt_model_config_validate(&cfg, &e2);
    if (!rc) rc = mt_gptq_config_read(cj, &gq, &e2);
    int gbits = gq.bits;
    if (rc) mt_errorf(err, "%s/config.json: %s", dir, e2.msg);
    const mt_family *f = rc ? NULL : mt_family_get(cfg.family);
    /* every tensor present with its shape before the model is allocated: a
     * config.json may claim any size */
    if (!rc) {
        mt_layout full;
        mt_model_layout_build(&cfg, 1, 0, &full);
        for (int u = 0; u < full.n_units && !rc; u++)
            for (int i = 0; i < full.units[u].n_tensors && !rc; i++)
                rc = check_tensor(hd, f, &cfg, &full.units[u].t[i], dir, gbits, err);
        mt_layout_free(&full);
    }
    if (rc) {
        mt_hf_dir_close(hd);
        return -1;
    }
    mt_weights_alloc(out, &cfg);
    if (gbits) { /* where the codes are, for {quantize-base} gptq */
        char *abs = realpath(dir, NULL);
        if (!abs || strlen(abs) >= sizeof out->gptq_dir) {
            rc = mt_errorf(err, "%s: cannot resolve the GPTQ directory's absolute path%s", dir,
                           abs ? " (longer than 4095 bytes)" : "");
        } else {
            snprintf(out->gptq_dir, sizeof out->gptq_dir, "%s", abs);
            out->gptq_bits = gq.bits, out->gptq_group_size = gq.group_size;
            out->gptq_desc_act = gq.desc_act, out->gptq_sym = gq.sym;
        }
        free(abs);
    }
    const mt_layout *L = &out->layout;
    size_t maxn = 1;
    for (int u = 0; u < L->n_units; u++)
        for (int i = 0; i < L->units[u].n_tensors; i++) maxn = L->units[u].t[i].gnumel > maxn ? L->units[u].t[i].gnumel : maxn;
    float *tmp = mt_xmalloc(maxn * sizeof(float), "transpose buffer");
    for (int u = 0; u < L->n_units && !rc; u++)
        for (int i = 0; i < L->units[u].n_tensors && !rc; i++) {
            const mt_tensor *t = &L->units[u].t[i];
            char name[128];
            int ndim, tr;
            int64_t shape[2];
            hf_form(f, &cfg, t, name, sizeof name, &ndim, shape, &tr); /* present with this shape: checked above */
            size_t n = (size_t)shape[0] * (size_t)(ndim == 2 ? shape[1] : 1);
            float *dst = out->unit[u] + t->offset; /* padding rows stay zero */
            if (gptq_layer(hd, gbits, name)) { /* dequantized, in our [out, in] layout already */
                rc = mt_gptq_read_layer(hd, name, gbits, t->gshape[0], t->gshape[1], dst, err) < 0 ? -1 : 0;
                continue;
            }
            rc = mt_hf_dir_read_f32(hd, name, tr ? tmp : dst, n, err);
            if (!rc && tr) mt_transpose_f32(dst, tmp, shape[0], shape[1]);
            for (size_t k = 0; k < n && !rc; k++)
                if (!isfinite(dst[k]))
                    rc = mt_errorf(err, "%s: tensor '%s' holds a non-finite value (%g at element %zu); refusing to "
                                        "import it", dir, name, (double)dst[k], k);
        }
    for (size_t k = 0; k < mt_hf_dir_count(hd) && !rc; k++) { /* nothing unexpected */
        const char *nm = mt_hf_dir_name(hd, k);
        int known = ignorable(&cfg, nm);
        for (int u = 0; u < L->n_units && !known; u++)
            for (int i = 0; i < L->units[u].n_tensors && !known; i++) {
                char name[128];
                int tr;
                f->hf_name(&cfg, L->units[u].t[i].name, name, sizeof name, &tr);
                known = !strcmp(name, nm) || (gbits && mt_gptq_is_layer_tensor(name, nm));
            }
        if (!known) rc = mt_errorf(err, "%s: unexpected tensor '%s' (not a parameter of this %s config)", dir, nm, f->name);
    }
    free(tmp);
    mt_hf_dir_close(hd);
    if (rc) mt_weights_free(out);
    return rc;
}

int mt_hf_config_write_quantized(const char *dir, const mt_model_config *cfg, const char *quantization_json,
                                 mt_error *err) {
    mt_json_writer jw;
    mt_jw_init(&jw);
    mt_family_get(cfg->family)->hf_config_write(cfg, "float32", &jw);
    char *end = strrchr(jw.buf, '}'); /* the object stays open for one more member */
    if (end) *end = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *tmp = NULL;
    FILE *fp = mt_fopen_temp(path, &tmp, err);
    int rc = -1;
    if (fp) {
        fprintf(fp, "%s,\"quantization_config\":%s}\n", jw.buf, quantization_json);
        rc = mt_fcommit_temp(fp, tmp, path, 0, err);
    }
    mt_jw_free(&jw);
    return rc;
}
