/* bitsandbytes-layout Hugging Face directories (see interop/bnb.h). */
#include "interop/hf_model.h"
#include "interop/bnb.h"
#include "interop/safetensors.h"
#include "core/fileio.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A double as Python's repr writes it: the shortest text that reads back to
 * the same double, with ".0" on integral values. */
static void py_repr(double v, char *buf, size_t cap) {
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eni")) strncat(buf, ".0", cap - strlen(buf) - 1);
}

typedef struct {
    int quantized;
    mt_qweight q;
    char state[512]; /* NF4's quant_state JSON */
    float *data;     /* fp32 tensors: HF layout */
} entry;

/* The tensors a bnb model quantizes: the linear weights of the blocks. */
static int quantizes(const mt_layout *l, int u, const mt_tensor *t) {
    return l->units[u].role == MT_UNIT_BLOCK && t->ndim == 2;
}

int mt_bnb_export(const char *dir, const mt_weights *w, mt_quant_kind kind, int dq, mt_error *err) {
    if (mt_adapter_spec_active(&w->cfg.adapters))
        return mt_errorf(err, "this checkpoint holds only what a {peft} / {freeze} run trained: fold it into its base "
                              "first (`meshtrain merge`)");
    if (mt_hf_export_check(&w->cfg, err)) return -1;
    const mt_family *f = mt_family_get(w->cfg.family);
    const mt_layout *L = &w->layout;
    int nt = 0;
    for (int u = 0; u < L->n_units; u++) nt += L->units[u].n_tensors;
    entry *e = mt_xcalloc((size_t)nt, sizeof *e, "export entries");
    mt_st_spec *sp = mt_xcalloc((size_t)nt * 6, sizeof *sp, "safetensors specs");
    char (*names)[256] = mt_xcalloc((size_t)nt * 6, sizeof *names, "safetensors names");
    int ns = 0, k = 0, rc = 0;
    for (int u = 0; u < L->n_units && !rc; u++)
        for (int i = 0; i < L->units[u].n_tensors && !rc; i++, k++) {
            const mt_tensor *t = &L->units[u].t[i];
            const float *src = w->unit[u] + t->offset;
            char hf[160];
            int tr;
            f->hf_name(&w->cfg, t->name, hf, sizeof hf, &tr);
            int64_t rows = t->init_rows < t->gshape[0] && t->init_std > 0 ? t->init_rows : t->gshape[0];
            if (!quantizes(L, u, t)) { /* fp32 in HF layout */
                e[k].data = mt_xmalloc((size_t)rows * (size_t)t->gshape[1] * sizeof(float), "tensor");
                if (tr) mt_transpose_f32(e[k].data, src, rows, t->gshape[1]);
                else memcpy(e[k].data, src, (size_t)rows * (size_t)t->gshape[1] * sizeof(float));
                snprintf(names[ns], sizeof names[ns], "%s", hf);
                sp[ns] = (mt_st_spec){names[ns], t->ndim, {tr ? t->gshape[1] : rows, tr ? rows : t->gshape[1]}, MT_FP32, NULL};
                ns++;
                continue;
            }
            e[k].quantized = 1;
            rc = mt_qweight_init(&e[k].q, kind, dq, src, t->gshape[0], t->gshape[1], err);
            if (rc) break;
            size_t nl = strlen(hf);
            if (nl > 7 && !strcmp(hf + nl - 7, ".weight")) hf[nl - 7] = 0; /* the module */
#define ADD(suffix, raw, nd, s0, s1)                                                             \
    do {                                                                                         \
        snprintf(names[ns], sizeof names[ns], "%s%s", hf, suffix);                               \
        sp[ns] = (mt_st_spec){names[ns], nd, {s0, s1}, MT_FP32, raw};                            \
        ns++;                                                                                    \
    } while (0)
            if (kind == MT_QUANT_NF4) {
                const mt_nf4 *q = &e[k].q.nf4;
                char off[40] = "";
                py_repr((double)q->offset, off, sizeof off);
                int n = snprintf(e[k].state, sizeof e[k].state,
                                 "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"float32\", \"shape\": [%lld, %lld]%s%s%s}",
                                 (long long)t->gshape[0], (long long)t->gshape[1],
                                 dq ? ", \"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": " : "",
                                 dq ? off : "", "");
                ADD(".weight", "U8", 2, (q->n + 1) / 2, 1);
                ADD(".weight.absmax", dq ? "U8" : NULL, 1, q->nblocks, 0);
                ADD(".weight.quant_map", NULL, 1, 16, 0);
                if (dq) {
                    ADD(".weight.nested_absmax", NULL, 1, q->nnested, 0);
                    ADD(".weight.nested_quant_map", NULL, 1, 256, 0);
                }
                ADD(".weight.quant_state.bitsandbytes__nf4", "U8", 1, n, 0);
            } else {
                ADD(".weight", "I8", 2, t->gshape[0], t->gshape[1]);
                ADD(".SCB", NULL, 1, t->gshape[0], 0);
                ADD(".weight_format", "U8", 0, 0, 0);
            }
#undef ADD
        }
    char path[4200];
    if (!rc) rc = mt_make_dirs(dir, "quantized model directory", err);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *meta[2] = {"format", "pt"};
    mt_st_writer *sw = rc ? NULL : mt_st_writer_open(path, sp, ns, meta, 1, err);
    if (!rc && !sw) rc = -1;
    k = 0;
    for (int u = 0; u < L->n_units && !rc; u++)
        for (int i = 0; i < L->units[u].n_tensors && !rc; i++, k++) {
            const mt_tensor *t = &L->units[u].t[i];
            if (!e[k].quantized) {
                int64_t rows = t->init_rows < t->gshape[0] && t->init_std > 0 ? t->init_rows : t->gshape[0];
                rc = mt_st_writer_put_bytes(sw, e[k].data, (size_t)rows * (size_t)t->gshape[1] * 4, err);
            } else if (kind == MT_QUANT_NF4) {
                const mt_nf4 *q = &e[k].q.nf4;
                rc = mt_st_writer_put_bytes(sw, q->packed, (size_t)(q->n + 1) / 2, err);
                if (!rc) rc = dq ? mt_st_writer_put_bytes(sw, q->absmax_code, (size_t)q->nblocks, err)
                                 : mt_st_writer_put_bytes(sw, q->absmax, (size_t)q->nblocks * 4, err);
                if (!rc) rc = mt_st_writer_put_bytes(sw, q->quant_map, 16 * 4, err);
                if (!rc && dq) rc = mt_st_writer_put_bytes(sw, q->nested_absmax, (size_t)q->nnested * 4, err);
                if (!rc && dq) rc = mt_st_writer_put_bytes(sw, q->nested_quant_map, 256 * 4, err);
                if (!rc) rc = mt_st_writer_put_bytes(sw, e[k].state, strlen(e[k].state), err);
            } else {
                const mt_int8w *q = &e[k].q.i8;
                unsigned char zero = 0;
                rc = mt_st_writer_put_bytes(sw, q->q, (size_t)(q->rows * q->cols), err);
                if (!rc) rc = mt_st_writer_put_bytes(sw, q->scb, (size_t)q->rows * 4, err);
                if (!rc) rc = mt_st_writer_put_bytes(sw, &zero, 1, err);
            }
        }
    if (sw) {
        if (rc) mt_st_writer_abort(sw);
        else rc = mt_st_writer_close(sw, err);
    }
    if (!rc) { /* the family's config.json with transformers' quantization_config */
        char q[512];
        if (kind == MT_QUANT_NF4)
            snprintf(q, sizeof q,
                     "{\"quant_method\":\"bitsandbytes\",\"load_in_4bit\":true,\"load_in_8bit\":false,"
                     "\"bnb_4bit_quant_type\":\"nf4\",\"bnb_4bit_use_double_quant\":%s,"
                     "\"bnb_4bit_compute_dtype\":\"float32\",\"bnb_4bit_quant_storage\":\"uint8\"}",
                     dq ? "true" : "false");
        else
            snprintf(q, sizeof q, "{\"quant_method\":\"bitsandbytes\",\"load_in_4bit\":false,\"load_in_8bit\":true,"
                                  "\"llm_int8_threshold\":6.0}");
        rc = mt_hf_config_write_quantized(dir, &w->cfg, q, err);
    }
    for (int j = 0; j < nt; j++) {
        if (e[j].quantized) mt_qweight_free(&e[j].q);
        free(e[j].data);
    }
    free(e);
    free(sp);
    free(names);
    return rc;
}
