/* Hugging Face GPTQ directories (see interop/gptq.h). */
#include "interop/hf_model.h"
#include "interop/gptq.h"
#include "interop/safetensors.h"
#include "core/fileio.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "<m>.weight" -> "<m>" in buf; 0 when the name does not end in .weight. */
static int module_of(const char *weight, char *buf, size_t cap) {
    size_t n = strlen(weight);
    if (n < 8 || strcmp(weight + n - 7, ".weight") || n - 7 >= cap) return 0;
    memcpy(buf, weight, n - 7);
    buf[n - 7] = 0;
    return 1;
}

typedef struct {
    int32_t *qweight, *qzeros, *g_idx;
    uint16_t *scales;
    float *data; /* fp32 tensors: HF layout */
} entry;

int mt_gptq_export(const char *dir, const mt_weights *w, mt_gptq_result *const *res, const mt_gptq_opts *o,
                   mt_error *err) {
    if (mt_hf_export_check(&w->cfg, err)) return -1;
    const mt_family *f = mt_family_get(w->cfg.family);
    const mt_layout *L = &w->layout;
    int nt = 0;
    for (int u = 0; u < L->n_units; u++) nt += L->units[u].n_tensors;
    entry *e = mt_xcalloc((size_t)nt, sizeof *e, "export entries");
    mt_st_spec *sp = mt_xcalloc((size_t)nt * 4, sizeof *sp, "safetensors specs");
    char (*names)[256] = mt_xcalloc((size_t)nt * 4, sizeof *names, "safetensors names");
    int ns = 0, k = 0, rc = 0, pack = 32 / o->bits;
    for (int u = 0; u < L->n_units; u++)
        for (int i = 0; i < L->units[u].n_tensors; i++, k++) {
            const mt_tensor *t = &L->units[u].t[i];
            const mt_gptq_result *r = &res[u][i];
            char hf[200], mod[200];
            int tr;
            f->hf_name(&w->cfg, t->name, hf, sizeof hf, &tr);
            int64_t rows = t->init_rows < t->gshape[0] && t->init_std > 0 ? t->init_rows : t->gshape[0];
            if (!r->rows || !module_of(hf, mod, sizeof mod)) { /* fp32 in HF layout */
                const float *src = w->unit[u] + t->offset;
                e[k].data = mt_xmalloc((size_t)rows * (size_t)t->gshape[1] * sizeof(float), "tensor");
                if (tr) mt_transpose_f32(e[k].data, src, rows, t->gshape[1]);
                else memcpy(e[k].data, src, (size_t)rows * (size_t)t->gshape[1] * sizeof(float));
                snprintf(names[ns], sizeof names[ns], "%s", hf);
                sp[ns] = (mt_st_spec){names[ns], t->ndim, {tr ? t->gshape[1] : rows, tr ? rows : t->gshape[1]},
                                      MT_FP32, NULL};
                ns++;
                continue;
            }
            int64_t out = r->rows, in = r->cols, groups = r->n_groups;
            e[k].qweight = mt_xmalloc((size_t)(in / pack * out) * 4, "qweight");
            e[k].qzeros = mt_xmalloc((size_t)(groups * out / pack) * 4, "qzeros");
            e[k].scales = mt_xmalloc((size_t)(groups * out) * 2, "scales");
            mt_gptq_pack(r, e[k].qweight, e[k].qzeros, e[k].scales);
#define ADD(suffix, dt, nd, s0, s1)                                                \
    do {                                                                           \
        snprintf(names[ns], sizeof names[ns], "%s%s", mod, suffix);                \
        sp[ns] = (mt_st_spec){names[ns], nd, {s0, s1}, MT_FP32, dt};               \
        ns++;                                                                      \
    } while (0)
            ADD(".qweight", "I32", 2, in / pack, out);
            ADD(".qzeros", "I32", 2, groups, out / pack);
            ADD(".scales", "F16", 2, groups, out);
            ADD(".g_idx", "I32", 1, in, 0);
#undef ADD
        }
    char path[4200];
    rc = mt_make_dirs(dir, "quantized model directory", err);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *meta[2] = {"format", "pt"};
    mt_st_writer *sw = rc ? NULL : mt_st_writer_open(path, sp, ns, meta, 1, err);
    if (!rc && !sw) rc = -1;
    k = 0;
    for (int u = 0; u < L->n_units && !rc; u++)
        for (int i = 0; i < L->units[u].n_tensors && !rc; i++, k++) {
            const mt_tensor *t = &L->units[u].t[i];
            const mt_gptq_result *r = &res[u][i];
            if (e[k].data) {
                int64_t rows = t->init_rows < t->gshape[0] && t->init_std > 0 ? t->init_rows : t->gshape[0];
                rc = mt_st_writer_put_bytes(sw, e[k].data, (size_t)rows * (size_t)t->gshape[1] * 4, err);
                continue;
            }
            size_t out = (size_t)r->rows, in = (size_t)r->cols, groups = (size_t)r->n_groups;
            rc = mt_st_writer_put_bytes(sw, e[k].qweight, in / (size_t)pack * out * 4, err);
            if (!rc) rc = mt_st_writer_put_bytes(sw, e[k].qzeros, groups * out / (size_t)pack * 4, err);
            if (!rc) rc = mt_st_writer_put_bytes(sw, e[k].scales, groups * out * 2, err);
            if (!rc) rc = mt_st_writer_put_bytes(sw, r->g_idx, in * 4, err);
        }
    if (sw) {
        if (rc) mt_st_writer_abort(sw);
        else rc = mt_st_writer_close(sw, err);
    }
    if (!rc) { /* the family's config.json with the quantization_config */
        char q[512];
        snprintf(q, sizeof q,
                 "{\"quant_method\":\"gptq\",\"bits\":%d,\"group_size\":%d,\"desc_act\":%s,\"sym\":%s,"
                 "\"damp_percent\":%g,\"true_sequential\":false,\"static_groups\":false,"
                 "\"checkpoint_format\":\"gptq\",\"model_seqlen\":%d}",
                 o->bits, o->group_size, o->act_order ? "true" : "false", o->sym ? "true" : "false", o->damp,
                 w->cfg.seq_len);
        rc = mt_hf_config_write_quantized(dir, &w->cfg, q, err);
    }
    for (int j = 0; j < nt; j++) {
        free(e[j].qweight);
        free(e[j].qzeros);
        free(e[j].scales);
        free(e[j].data);
    }
    free(e);
    free(sp);
    free(names);
    return rc;
}

int mt_gptq_config_read(const mt_json *config, mt_gptq_config *c, mt_error *err) {
    memset(c, 0, sizeof *c);
    const mt_json *q = mt_json_get(config, "quantization_config");
    const char *method = NULL, *format = NULL;
    mt_error ignored;
    if (!q || mt_json_get_string(q, "quant_method", &method, &ignored) || strcmp(method, "gptq")) return 0;
    int64_t b = 0, g = -1;
    if (mt_json_get_int64(q, "bits", &b, err)) return -1;
    if (b != 4 && b != 8)
        return mt_errorf(err, "config.json: GPTQ with %lld bits; meshtrain reads 4 and 8", (long long)b);
    if (mt_json_get(q, "checkpoint_format") && mt_json_get_string(q, "checkpoint_format", &format, err)) return -1;
    if (format && strcmp(format, "gptq"))
        return mt_errorf(err, "config.json: GPTQ checkpoint_format '%s'; meshtrain reads 'gptq' (zero points stored "
                              "minus one, AutoGPTQ's and transformers' layout), not gptq_v2's: convert it to the "
                              "gptq format first",
                         format);
    if (mt_json_get(q, "group_size") && mt_json_get_int64(q, "group_size", &g, err)) return -1;
    if (g == 0 || g < -1) return mt_errorf(err, "config.json: GPTQ group_size %lld (a size >= 1, or -1)", (long long)g);
    const mt_json *da = mt_json_get(q, "desc_act"), *sy = mt_json_get(q, "sym");
    c->bits = (int)b;
    c->group_size = (int)g;
    c->desc_act = da && da->type == MT_JSON_BOOL && da->boolean;
    c->sym = !sy || (sy->type == MT_JSON_BOOL && sy->boolean);
    return 0;
}

int mt_gptq_config_bits(const mt_json *config, int *bits, mt_error *err) {
    mt_gptq_config c;
    int rc = mt_gptq_config_read(config, &c, err);
    *bits = c.bits;
    return rc;
}

static const char *const layer_suffixes[] = {".qweight", ".qzeros", ".scales", ".g_idx"};

int mt_gptq_is_layer_tensor(const char *weight, const char *name) {
    char mod[200];
    if (!module_of(weight, mod, sizeof mod)) return 0;
    size_t n = strlen(mod);
    if (strncmp(name, mod, n)) return 0;
    for (int i = 0; i < 4; i++)
        if (!strcmp(name + n, layer_suffixes[i])) return 1;
    return 0;
}

int mt_gptq_read_packed(mt_hf_dir *hd, const char *weight, int bits, int64_t rows, int64_t cols, mt_gptqw *g,
                        mt_error *err) {
    char mod[200], nm[4][256];
    memset(g, 0, sizeof *g);
    if (!module_of(weight, mod, sizeof mod)) return 0;
    for (int i = 0; i < 4; i++) snprintf(nm[i], sizeof nm[i], "%s%s", mod, layer_suffixes[i]);
    int64_t sh[4][MT_ST_MAX_DIM];
    int nd[4];
    if (mt_hf_dir_find(hd, nm[0], &nd[0], sh[0], NULL) < 0) return 0;
    for (int i = 1; i < 4; i++)
        if (mt_hf_dir_find(hd, nm[i], &nd[i], sh[i], NULL) < 0)
            return mt_errorf(err, "GPTQ layer %s: '%s' is there but '%s' is missing", mod, nm[0], nm[i]);
    int pack = 32 / bits;
    if (cols % pack || rows % pack)
        return mt_errorf(err, "GPTQ layer %s: [%lld, %lld] does not pack %d codes per int32", mod, (long long)rows,
                         (long long)cols, pack);
    int64_t groups = nd[2] == 2 ? sh[2][0] : -1;
    int64_t want[4][2] = {{cols / pack, rows}, {groups, rows / pack}, {groups, rows}, {cols, 1}};
    for (int i = 0; i < 4; i++) {
        int ok = nd[i] == (i == 3 ? 1 : 2) && sh[i][0] == want[i][0] && (i == 3 || sh[i][1] == want[i][1]);
        if (!ok || groups < 1)
            return mt_errorf(err, "GPTQ layer %s: '%s' has the wrong shape for a [%lld, %lld] layer at %d bits "
                                  "(qweight [in/%d, out], qzeros [groups, out/%d], scales [groups, out], g_idx [in])",
                             mod, nm[i], (long long)rows, (long long)cols, bits, pack, pack);
    }
    g->rows = rows, g->cols = cols, g->groups = groups, g->bits = bits;
    g->qweight = mt_xmalloc((size_t)(cols / pack * rows) * 4, "qweight");
    g->qzeros = mt_xmalloc((size_t)(groups * rows / pack) * 4, "qzeros");
    g->scales = mt_xmalloc((size_t)(groups * rows) * 2, "scales");
    g->g_idx = mt_xmalloc((size_t)cols * 4, "g_idx");
    int rc = mt_hf_dir_read_raw(hd, nm[0], "I32", g->qweight, (size_t)(cols / pack * rows), err);
    if (!rc) rc = mt_hf_dir_read_raw(hd, nm[1], "I32", g->qzeros, (size_t)(groups * rows / pack), err);
    if (!rc) rc = mt_hf_dir_read_raw(hd, nm[2], "F16", g->scales, (size_t)(groups * rows), err);
    if (!rc) rc = mt_hf_dir_read_raw(hd, nm[3], "I32", g->g_idx, (size_t)cols, err);
    for (int64_t c = 0; c < cols && !rc; c++)
        if (g->g_idx[c] < 0 || g->g_idx[c] >= groups)
            rc = mt_errorf(err, "%s: g_idx[%lld] = %d is outside [0, %lld)", mod, (long long)c, g->g_idx[c],
                           (long long)groups);
    if (rc) mt_gptqw_free(g);
    return rc ? -1 : 1;
}

int mt_gptq_read_layer(mt_hf_dir *hd, const char *weight, int bits, int64_t rows, int64_t cols, float *dst,
                       mt_error *err) {
    mt_gptqw g;
    int rc = mt_gptq_read_packed(hd, weight, bits, rows, cols, &g, err);
    if (rc <= 0) return rc;
    char mod[200];
    module_of(weight, mod, sizeof mod);
    rc = mt_gptq_unpack_dequant(bits, rows, cols, g.groups, g.qweight, g.qzeros, g.scales, g.g_idx, dst, mod, err);
    mt_gptqw_free(&g);
    return rc ? -1 : 1;
}
