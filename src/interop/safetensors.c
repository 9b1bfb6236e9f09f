/* safetensors reader/writer and GPT-2 conversion: see safetensors.h. */
#include "core/fileio.h"
#include "interop/safetensors.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the safetensors code assumes a little-endian host"
#endif

struct mt_st_file {
    char *path;
    int fd;
    uint64_t data_start; /* 8 + header length */
    uint64_t data_bytes;
    mt_json_doc *doc;
    const mt_json *meta;
    int n;
    mt_st_entry *e;
};

static int dtype_size(const char *dt) {
    static const struct { const char *n; int s; } t[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
        {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(dt, t[i].n) == 0) return t[i].s;
    return 0;
}

void mt_st_close(mt_st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    free(f->e);
    mt_json_free(f->doc);
    free(f->path);
    free(f);
}

static int cmp_entry_begin(const void *a, const void *b) {
    const mt_st_entry *x = *(const mt_st_entry *const *)a, *y = *(const mt_st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp((*(const mt_st_entry *const *)a)->name, (*(const mt_st_entry *const *)b)->name);
}

static int validate_entries(mt_st_file *f, mt_error *err) {
    const mt_json *root = mt_json_root(f->doc);
    const char *P = f->path;
    if (root->type != MT_JSON_OBJECT) return mt_errorf(err, "%s: safetensors header is not a JSON object", P);
    f->e = mt_xcalloc(root->count ? root->count : 1, sizeof(mt_st_entry), "safetensors entries");
    for (const mt_json *m = root->child; m; m = m->next) {
        if (strcmp(m->key, "__metadata__") == 0 && m->key_len == 12) {
            if (m->type != MT_JSON_OBJECT) return mt_errorf(err, "%s: __metadata__ is not an object", P);
            for (const mt_json *k = m->child; k; k = k->next)
                if (k->type != MT_JSON_STRING)
                    return mt_errorf(err, "%s: __metadata__ value of '%.60s' is not a string", P, k->key);
            f->meta = m;
            continue;
        }
        mt_st_entry *e = &f->e[f->n++];
        e->name = m->key;
        if (m->key_len == 0 || strlen(m->key) != m->key_len) return mt_errorf(err, "%s: tensor with an empty or NUL-containing name", P);
        if (m->type != MT_JSON_OBJECT) return mt_errorf(err, "%s: tensor '%.80s' header entry is not an object", P, e->name);
        const mt_json *dt = mt_json_get(m, "dtype"), *sh = mt_json_get(m, "shape"), *off = mt_json_get(m, "data_offsets");
        if (!dt || dt->type != MT_JSON_STRING) return mt_errorf(err, "%s: tensor '%.80s' has no dtype string", P, e->name);
        e->dtype = dt->str;
        e->elem_size = dtype_size(dt->str);
        if (!e->elem_size) return mt_errorf(err, "%s: tensor '%.80s' has unknown dtype '%.20s'", P, e->name, dt->str);
        if (!sh || sh->type != MT_JSON_ARRAY || sh->count > MT_ST_MAX_DIM)
            return mt_errorf(err, "%s: tensor '%.80s' shape is missing or not an array of at most %d integers", P, e->name, MT_ST_MAX_DIM);
        e->ndim = (int)sh->count;
        uint64_t numel = 1;
        int d = 0;
        for (const mt_json *s = sh->child; s; s = s->next, d++) {
            int64_t v;
            if (mt_json_int64(s, &v) || v < 0 || (v > 0 && numel > (UINT64_MAX >> 4) / (uint64_t)v))
                return mt_errorf(err, "%s: tensor '%.80s' shape[%d] is not a valid dimension", P, e->name, d);
            e->shape[d] = v;
            numel *= (uint64_t)v;
        }
        e->numel = numel;
        int64_t b, en;
        if (!off || off->type != MT_JSON_ARRAY || off->count != 2 || mt_json_int64(mt_json_at(off, 0), &b) ||
            mt_json_int64(mt_json_at(off, 1), &en) || b < 0 || en < b)
            return mt_errorf(err, "%s: tensor '%.80s' data_offsets is not a pair [begin, end] with 0 <= begin <= end", P, e->name);
        e->begin = (uint64_t)b;
        e->end = (uint64_t)en;
        if (e->end - e->begin != numel * (uint64_t)e->elem_size)
            return mt_errorf(err, "%s: tensor '%.80s' data_offsets span %" PRIu64 " bytes but shape x dtype %s needs %" PRIu64, P,
                             e->name, e->end - e->begin, e->dtype, numel * (uint64_t)e->elem_size);
        if (e->end > f->data_bytes)
            return mt_errorf(err, "%s: tensor '%.80s' data_offsets [%" PRIu64 ", %" PRIu64 ") are out of range: the data section has %" PRIu64
                             " bytes (truncated file?)", P, e->name, e->begin, e->end, f->data_bytes);
    }
    /* The byte ranges must tile the data section: sorted by begin, each
     * starts where the previous ended, the last ends at the file's end. */
    const mt_st_entry **idx = mt_xmalloc((size_t)(f->n ? f->n : 1) * sizeof *idx, "safetensors index");
    for (int i = 0; i < f->n; i++) idx[i] = &f->e[i];
    qsort(idx, (size_t)f->n, sizeof *idx, cmp_entry_begin);
    uint64_t pos = 0;
    int rc = 0;
    for (int i = 0; i < f->n && !rc; i++) {
        if (idx[i]->begin < pos)
            rc = mt_errorf(err, "%s: tensor '%.80s' data_offsets [%" PRIu64 ", %" PRIu64 ") overlap the previous tensor's bytes", P,
                           idx[i]->name, idx[i]->begin, idx[i]->end);
        else if (idx[i]->begin > pos)
            rc = mt_errorf(err, "%s: gap in the data section: bytes [%" PRIu64 ", %" PRIu64 ") belong to no tensor", P, pos,
                           idx[i]->begin);
        pos = idx[i]->end;
    }
    if (!rc && pos != f->data_bytes)
        rc = mt_errorf(err, "%s: the data section has %" PRIu64 " bytes but the tensors cover %" PRIu64 " (trailing bytes)", P,
                       f->data_bytes, pos);
    if (!rc) {
        qsort(idx, (size_t)f->n, sizeof *idx, cmp_entry_name);
        for (int i = 1; i < f->n && !rc; i++)
            if (strcmp(idx[i - 1]->name, idx[i]->name) == 0)
                rc = mt_errorf(err, "%s: tensor '%.80s' appears twice in the header", P, idx[i]->name);
    }
    free((void *)idx);
    return rc;
}

mt_st_file *mt_st_open(const char *path, mt_error *err) {
    mt_st_file *f = mt_xcalloc(1, sizeof *f, "safetensors file");
    size_t pl = strlen(path);
    f->path = mt_xmalloc(pl + 1, "path");
    memcpy(f->path, path, pl + 1);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        mt_errorf(err, "cannot open %s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(f->fd, &st) != 0) { mt_errorf(err, "cannot stat %s: %s", path, strerror(errno)); goto fail; }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) { mt_errorf(err, "%s: file is %" PRIu64 " bytes, too short for a safetensors header length (8 bytes)", path, size); goto fail; }
    unsigned char lenb[8];
    if (mt_pread_all(f->fd, lenb, 8, 0, path, err)) goto fail;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lenb[i];
    if (hlen > size - 8) {
        mt_errorf(err, "%s: header length %" PRIu64 " is larger than the rest of the file (%" PRIu64 " bytes): truncated or not safetensors",
                  path, hlen, size - 8);
        goto fail;
    }
    if (hlen > MT_ST_MAX_HEADER) { mt_errorf(err, "%s: header length %" PRIu64 " exceeds the %" PRIu64 "-byte limit", path, hlen, MT_ST_MAX_HEADER); goto fail; }
    if (hlen < 2) { mt_errorf(err, "%s: header length %" PRIu64 " is too small for a JSON object", path, hlen); goto fail; }
    char *h = mt_xmalloc((size_t)hlen, "safetensors header");
    if (mt_pread_all(f->fd, h, (size_t)hlen, 8, path, err)) { free(h); goto fail; }
    mt_error je;
    f->doc = mt_json_parse(h, (size_t)hlen, 16, &je);
    free(h);
    if (!f->doc) { mt_errorf(err, "%s: safetensors header is not valid JSON: %s", path, je.msg); goto fail; }
    f->data_start = 8 + hlen;
    f->data_bytes = size - 8 - hlen;
    if (validate_entries(f, err)) goto fail;
    return f;
fail:
    mt_st_close(f);
    return NULL;
}

int mt_st_count(const mt_st_file *f) { return f->n; }
const mt_st_entry *mt_st_entry_at(const mt_st_file *f, int i) { return i >= 0 && i < f->n ? &f->e[i] : NULL; }
const mt_json *mt_st_metadata(const mt_st_file *f) { return f->meta; }

const mt_st_entry *mt_st_find(const mt_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->e[i].name, name) == 0) return &f->e[i];
    return NULL;
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal: renormalise */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3FF) << 13);
        }
    } else if (exp == 31) bits = sign | 0x7F800000u | (man << 13);
    else bits = sign | ((exp + 112) << 23) | (man << 13);
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

int mt_st_read_raw(const mt_st_file *f, const mt_st_entry *e, const char *dtype, void *dst, mt_error *err) {
    if (strcmp(e->dtype, dtype))
        return mt_errorf(err, "%s: tensor '%.80s' has dtype %s; expected %s", f->path, e->name, e->dtype, dtype);
    return mt_pread_all(f->fd, dst, (size_t)(e->end - e->begin), f->data_start + e->begin, f->path, err);
}

int mt_st_read_f32(const mt_st_file *f, const mt_st_entry *e, float *dst, mt_error *err) {
    uint64_t off = f->data_start + e->begin;
    if (strcmp(e->dtype, "F32") == 0) return mt_pread_all(f->fd, dst, (size_t)e->numel * 4, off, f->path, err);
    int bf = strcmp(e->dtype, "BF16") == 0;
    if (!bf && strcmp(e->dtype, "F16") != 0)
        return mt_errorf(err, "%s: tensor '%.80s' has dtype %s; expected F32, F16 or BF16", f->path, e->name, e->dtype);
    /* Read 16-bit values into the tail half of dst, convert forward. */
    /* h occupies bytes [2*numel, 4*numel) of dst: converting index i writes
     * bytes [4i, 4i+4), which only reach h[j] for j <= 2i+1-numel <= i,
     * values already consumed. */
    uint16_t *h = (uint16_t *)(void *)((char *)dst + 2 * e->numel);
    if (mt_pread_all(f->fd, h, (size_t)e->numel * 2, off, f->path, err)) return -1;
    for (uint64_t i = 0; i < e->numel; i++) {
        uint16_t v = h[i];
        if (bf) {
            uint32_t bits = (uint32_t)v << 16;
            memcpy(&dst[i], &bits, 4);
        } else dst[i] = half_to_float(v);
    }
    return 0;
}

/* ---- writer ---- */

struct mt_st_writer {
    char *path, *tmp;
    int fd;
    int all_f32; /* mt_st_writer_put (fp32 input) is only meaningful then */
    uint64_t expect, written;
};

/* Header dtype string of a writer spec; NULL for a value outside the enum. */
static const char *st_dtype_name(mt_dtype t) {
    switch (t) {
    case MT_FP32: return "F32";
    case MT_BF16: return "BF16";
    case MT_FP16: return "F16";
    }
    return NULL;
}

mt_st_writer *mt_st_writer_open(const char *path, const mt_st_spec *specs, int n, const char *const *meta, int n_meta,
                                mt_error *err) {
    mt_json_writer jw;
    mt_jw_init(&jw);
    mt_jw_begin_object(&jw);
    if (n_meta > 0) {
        mt_jw_key(&jw, "__metadata__");
        mt_jw_begin_object(&jw);
        for (int i = 0; i < n_meta; i++) {
            mt_jw_key(&jw, meta[2 * i]);
            mt_jw_string(&jw, meta[2 * i + 1]);
        }
        mt_jw_end_object(&jw);
    }
    uint64_t pos = 0;
    int all_f32 = 1;
    for (int i = 0; i < n; i++) {
        if (specs[i].ndim < 0 || specs[i].ndim > MT_ST_MAX_DIM) {
            mt_jw_free(&jw);
            mt_errorf(err, "safetensors writer: tensor '%s' has ndim %d", specs[i].name, specs[i].ndim);
            return NULL;
        }
        const char *dt = specs[i].raw_dtype ? specs[i].raw_dtype : st_dtype_name(specs[i].dtype);
        if (specs[i].raw_dtype && !dtype_size(dt)) dt = NULL;
        if (!dt) {
            mt_jw_free(&jw);
            mt_errorf(err, "safetensors writer: tensor '%s' has dtype value %d; expected MT_FP32, MT_BF16 or MT_FP16", specs[i].name,
                      (int)specs[i].dtype);
            return NULL;
        }
        all_f32 &= specs[i].dtype == MT_FP32 && !specs[i].raw_dtype;
        uint64_t numel = 1, esz = specs[i].raw_dtype ? (uint64_t)dtype_size(dt) : mt_dtype_size(specs[i].dtype);
        for (int d = 0; d < specs[i].ndim; d++) numel *= (uint64_t)specs[i].shape[d];
        mt_jw_key(&jw, specs[i].name);
        mt_jw_begin_object(&jw);
        mt_jw_key(&jw, "dtype"); mt_jw_string(&jw, dt);
        mt_jw_key(&jw, "shape");
        mt_jw_begin_array(&jw);
        for (int d = 0; d < specs[i].ndim; d++) mt_jw_int(&jw, specs[i].shape[d]);
        mt_jw_end_array(&jw);
        mt_jw_key(&jw, "data_offsets");
        mt_jw_begin_array(&jw);
        mt_jw_int(&jw, (int64_t)pos);
        mt_jw_int(&jw, (int64_t)(pos + numel * esz));
        mt_jw_end_array(&jw);
        mt_jw_end_object(&jw);
        pos += numel * esz;
    }
    mt_jw_end_object(&jw);
    /* Pad the header with trailing spaces so the data section starts 8-byte aligned. */
    size_t pad = (8 - (8 + jw.len) % 8) % 8;
    mt_st_writer *w = mt_xcalloc(1, sizeof *w, "safetensors writer");
    size_t pl = strlen(path);
    w->path = mt_xmalloc(pl + 1, "path");
    memcpy(w->path, path, pl + 1);
    w->tmp = mt_xmalloc(pl + 8, "path");
    snprintf(w->tmp, pl + 8, "%s.tmp", path);
    w->expect = pos;
    w->all_f32 = all_f32;
    w->fd = mt_create_temp(w->tmp, err); /* O_EXCL | O_NOFOLLOW: a planted link cannot redirect it */
    if (w->fd < 0) {
        mt_jw_free(&jw);
        free(w->path); free(w->tmp); free(w);
        return NULL;
    }
    unsigned char lenb[8];
    uint64_t hl = jw.len + pad;
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)(hl >> (8 * i));
    if (mt_write_all(w->fd, lenb, 8, w->tmp, err) || mt_write_all(w->fd, jw.buf, jw.len, w->tmp, err) ||
        mt_write_all(w->fd, "        ", pad, w->tmp, err)) {
        mt_jw_free(&jw);
        mt_st_writer_abort(w);
        return NULL;
    }
    mt_jw_free(&jw);
    return w;
}

int mt_st_writer_put(mt_st_writer *w, const float *data, size_t n, mt_error *err) {
    if (!w->all_f32)
        return mt_errorf(err, "safetensors writer %s: fp32 put into a file with BF16/F16 tensors; encode them and use mt_st_writer_put_bytes",
                         w->path);
    if ((uint64_t)n * 4 > w->expect - w->written)
        return mt_errorf(err, "safetensors writer: %zu more floats than the declared tensors hold", n);
    if (mt_write_all(w->fd, data, n * 4, w->tmp, err)) return -1;
    w->written += (uint64_t)n * 4;
    return 0;
}

int mt_st_writer_put_bytes(mt_st_writer *w, const void *bytes, size_t n, mt_error *err) {
    if ((uint64_t)n > w->expect - w->written)
        return mt_errorf(err, "safetensors writer %s: %zu more bytes than the declared tensors hold (%" PRIu64 " left)", w->path, n,
                         w->expect - w->written);
    if (mt_write_all(w->fd, bytes, n, w->tmp, err)) return -1;
    w->written += (uint64_t)n;
    return 0;
}

void mt_st_writer_abort(mt_st_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    unlink(w->tmp);
    free(w->path);
    free(w->tmp);
    free(w);
}

int mt_st_writer_close(mt_st_writer *w, mt_error *err) {
    if (w->written != w->expect) {
        mt_errorf(err, "safetensors writer: %" PRIu64 " of %" PRIu64 " data bytes written", w->written, w->expect);
        mt_st_writer_abort(w);
        return -1;
    }
    if (fsync(w->fd) != 0 || close(w->fd) != 0) {
        w->fd = -1;
        mt_errorf(err, "fsync/close of %s failed: %s", w->tmp, strerror(errno));
        mt_st_writer_abort(w);
        return -1;
    }
    w->fd = -1;
    if (rename(w->tmp, w->path) != 0) {
        mt_errorf(err, "renaming %s to %s failed: %s", w->tmp, w->path, strerror(errno));
        mt_st_writer_abort(w);
        return -1;
    }
    free(w->path);
    free(w->tmp);
    free(w);
    return 0;
}

/* ---- GPT-2 ---- */

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* Whether HF stores tensor t transposed, [in, out] (GPT-2's Conv1D): the family's rule. */
static int hf_transposed(const mt_model_config *cfg, const mt_tensor *t) {
    char hf[160];
    int transpose;
    mt_family_get(cfg->family)->hf_name(cfg, t->name, hf, sizeof hf, &transpose);
    return transpose;
}

/* HF shape of one of our tensors (wte unpadded to V rows). */
static void hf_shape(const mt_model_config *cfg, const mt_tensor *t, int vocab, int *ndim, int64_t shape[2]) {
    *ndim = t->ndim;
    shape[0] = t->shape[0];
    shape[1] = t->ndim == 2 ? t->shape[1] : 1;
    if (strcmp(t->name, "wte.weight") == 0) shape[0] = vocab;
    if (hf_transposed(cfg, t)) {
        shape[0] = t->shape[1];
        shape[1] = t->shape[0];
    }
}

int mt_safetensors_export_gpt2(const char *path, const mt_weights *w, mt_error *err) {
    const mt_layout *L = &w->layout;
    int n = 0;
    for (int u = 0; u < L->n_units; u++) n += L->units[u].n_tensors;
    mt_st_spec *specs = mt_xcalloc((size_t)n, sizeof *specs, "safetensors specs");
    int k = 0;
    size_t maxn = 0;
    for (int u = 0; u < L->n_units; u++)
        for (int i = 0; i < L->units[u].n_tensors; i++, k++) {
            const mt_tensor *t = &L->units[u].t[i];
            specs[k].name = t->name;
            hf_shape(&w->cfg, t, w->cfg.vocab_size, &specs[k].ndim, specs[k].shape);
            if (t->numel > maxn) maxn = t->numel;
        }
    char v[5][24];
    snprintf(v[0], sizeof v[0], "%d", w->cfg.n_head);
    snprintf(v[1], sizeof v[1], "%d", w->cfg.n_layer);
    snprintf(v[2], sizeof v[2], "%d", w->cfg.n_embd);
    snprintf(v[3], sizeof v[3], "%d", w->cfg.vocab_size);
    snprintf(v[4], sizeof v[4], "%d", w->cfg.seq_len);
    const char *meta[] = {"format", "pt", "producer", "meshtrain", "n_head", v[0], "n_layer", v[1],
                          "n_embd", v[2], "vocab_size", v[3], "n_positions", v[4]};
    mt_st_writer *sw = mt_st_writer_open(path, specs, n, meta, 7, err);
    free(specs);
    if (!sw) return -1;
    float *tmp = mt_xmalloc(maxn * sizeof(float), "transpose buffer");
    int rc = 0;
    for (int u = 0; u < L->n_units && !rc; u++)
        for (int i = 0; i < L->units[u].n_tensors && !rc; i++) {
            const mt_tensor *t = &L->units[u].t[i];
            const float *src = w->unit[u] + t->offset;
            if (hf_transposed(&w->cfg, t)) {
                mt_transpose_f32(tmp, src, t->shape[0], t->shape[1]);
                rc = mt_st_writer_put(sw, tmp, t->numel, err);
            } else if (strcmp(t->name, "wte.weight") == 0) {
                rc = mt_st_writer_put(sw, src, (size_t)w->cfg.vocab_size * (size_t)w->cfg.n_embd, err);
            } else {
                rc = mt_st_writer_put(sw, src, t->numel, err);
            }
        }
    free(tmp);
    if (rc) { mt_st_writer_abort(sw); return -1; }
    return mt_st_writer_close(sw, err);
}

/* Canonical (prefix-free) name of a header entry. */
static const char *canon(const char *name) {
    return strncmp(name, "transformer.", 12) == 0 ? name + 12 : name;
}

/* 1 for entries to skip: the tied lm_head and the attention mask buffers. */
static int ignorable(const char *c) {
    if (strcmp(c, "lm_head.weight") == 0) return 1;
    if (strncmp(c, "h.", 2) == 0 && (ends_with(c, ".attn.bias") || ends_with(c, ".attn.masked_bias"))) return 1;
    return 0;
}

static const mt_st_entry *find_canon(const mt_st_file *f, const char *name, mt_error *err, int *dup) {
    const mt_st_entry *hit = NULL;
    *dup = 0;
    for (int i = 0; i < mt_st_count(f); i++) {
        const mt_st_entry *e = mt_st_entry_at(f, i);
        if (strcmp(canon(e->name), name) == 0) {
            if (hit) { *dup = 1; mt_errorf(err, "tensor '%s' appears both as '%s' and '%s'", name, hit->name, e->name); return NULL; }
            hit = e;
        }
    }
    return hit;
}

static char *dir_of(const char *path) {
    const char *s = strrchr(path, '/');
    size_t n = s ? (size_t)(s - path) : 1;
    char *d = mt_xmalloc(n + 1, "path");
    if (s) { memcpy(d, path, n); d[n] = 0; if (n == 0) { d[0] = '/'; d[1] = 0; } }
    else { d[0] = '.'; d[1] = 0; }
    return d;
}

/* n_head from config.json beside the file; 0 if the file is absent. */
static int heads_from_config_json(const char *path, int C, int L, int V, int *heads, mt_error *err) {
    char *d = dir_of(path);
    size_t n = strlen(d) + 16;
    char *cp = mt_xmalloc(n, "path");
    snprintf(cp, n, "%s/config.json", d);
    free(d);
    *heads = 0;
    FILE *fp = fopen(cp, "rb");
    if (!fp) {
        int e = errno;
        if (e == ENOENT) { free(cp); return 0; }
        mt_errorf(err, "cannot open %s: %s", cp, strerror(e));
        free(cp);
        return -1;
    }
    char *buf = mt_xmalloc(1 << 20, "config.json");
    size_t len = fread(buf, 1, 1 << 20, fp);
    int toolong = !feof(fp);
    fclose(fp);
    int rc = 0;
    mt_error je;
    mt_json_doc *doc = toolong ? NULL : mt_json_parse(buf, len, 32, &je);
    free(buf);
    if (toolong) rc = mt_errorf(err, "%s is larger than 1 MiB (not a model config?)", cp);
    else if (!doc) rc = mt_errorf(err, "%s is not valid JSON: %s", cp, je.msg);
    else {
        const mt_json *r = mt_json_root(doc);
        const char *hk = mt_json_get(r, "n_head") ? "n_head" : mt_json_get(r, "num_attention_heads") ? "num_attention_heads" : NULL;
        int64_t h = 0, x;
        const struct { const char *k; int v; } chk[] = {{"n_embd", C}, {"n_layer", L}, {"vocab_size", V}};
        if (r->type != MT_JSON_OBJECT) rc = mt_errorf(err, "%s is not a JSON object", cp);
        else if (!hk) rc = mt_errorf(err, "%s has no n_head: pass {heads}", cp);
        else if (mt_json_get_int64(r, hk, &h, &je)) rc = mt_errorf(err, "%s: %s", cp, je.msg);
        else if (h < 1 || h > 65536) rc = mt_errorf(err, "%s: %s = %" PRId64 " is out of range", cp, hk, h);
        for (int i = 0; i < 3 && !rc; i++)
            if (mt_json_get(r, chk[i].k)) {
                if (mt_json_get_int64(r, chk[i].k, &x, &je)) rc = mt_errorf(err, "%s: %s", cp, je.msg);
                else if (x != chk[i].v)
                    rc = mt_errorf(err, "%s says %s = %" PRId64 " but the tensors imply %d (config of another model?)", cp, chk[i].k, x,
                                   chk[i].v);
            }
        if (!rc) *heads = (int)h;
    }
    mt_json_free(doc);
    free(cp);
    return rc;
}


/* Tensor t of our layout in the file: present once, its Hugging Face shape
 * (vocabulary rows V), a float dtype. */
static int check_entry(const mt_st_file *f, const mt_model_config *cfg, const mt_tensor *t, int64_t V, const char *path, const mt_st_entry **out,
                       int *ndim, int64_t sh[2], mt_error *err) {
    mt_error e2;
    int dup = 0;
    const mt_st_entry *e = find_canon(f, t->name, &e2, &dup);
    if (dup) return mt_errorf(err, "%s: %s", path, e2.msg);
    if (!e) return mt_errorf(err, "%s: missing tensor '%s'", path, t->name);
    int nd;
    hf_shape(cfg, t, (int)V, &nd, sh);
    if (e->ndim != nd || e->shape[0] != sh[0] || (nd == 2 && e->shape[1] != sh[1])) {
        char got[96] = "[";
        for (int d = 0; d < e->ndim; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), d ? ", %" PRId64 : "%" PRId64, e->shape[d]);
        strncat(got, "]", sizeof got - strlen(got) - 1);
        if (nd == 2)
            return mt_errorf(err, "%s: tensor '%s' has wrong shape %s, expected [%" PRId64 ", %" PRId64 "]", path, e->name,
                             got, sh[0], sh[1]);
        return mt_errorf(err, "%s: tensor '%s' has wrong shape %s, expected [%" PRId64 "]", path, e->name, got, sh[0]);
    }
    if (strcmp(e->dtype, "F32") && strcmp(e->dtype, "F16") && strcmp(e->dtype, "BF16"))
        return mt_errorf(err, "%s: tensor '%s' has dtype %s; expected F32, F16 or BF16", path, e->name, e->dtype);
    *out = e;
    *ndim = nd;
    return 0;
}

int mt_safetensors_import_gpt2(const char *path, int n_head, mt_weights *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    mt_st_file *f = mt_st_open(path, err);
    if (!f) return -1;
    int rc = -1, dup;
    float *tmp = NULL;
    mt_error e2;
    /* Every entry must be a known GPT-2 tensor or ignorable. */
    int L = 0;
    for (int i = 0; i < mt_st_count(f); i++) {
        const char *c = canon(mt_st_entry_at(f, i)->name);
        if (ignorable(c)) continue;
        if (strncmp(c, "h.", 2) == 0) {
            char *end;
            long l = strtol(c + 2, &end, 10);
            if (end == c + 2 || *end != '.' || l < 0 || l >= 4095 || (c[2] == '0' && end != c + 3)) {
                mt_errorf(err, "%s: unexpected tensor '%s' (bad layer index)", path, mt_st_entry_at(f, i)->name);
                goto out;
            }
            if (l + 1 > L) L = (int)l + 1;
        }
    }
    int dup2;
    const mt_st_entry *wte = find_canon(f, "wte.weight", &e2, &dup), *wpe = find_canon(f, "wpe.weight", &e2, &dup2);
    if (dup || dup2) { mt_errorf(err, "%s: %s", path, e2.msg); goto out; }
    if (!wte || !wpe) {
        mt_errorf(err, "%s: missing tensor '%s' (not a GPT-2 safetensors file?)", path, !wte ? "wte.weight" : "wpe.weight");
        goto out;
    }
    if (wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1]) {
        mt_errorf(err, "%s: wrong shapes: wte.weight and wpe.weight must be 2-D [V, C] and [T, C] with the same C", path);
        goto out;
    }
    if (L == 0) { mt_errorf(err, "%s: no transformer blocks (missing tensor 'h.0.ln_1.weight')", path); goto out; }
    int64_t V = wte->shape[0], C = wte->shape[1], T = wpe->shape[0];
    if (V < 2 || V > (1 << 24) || C < 1 || C > 65536 || T < 1 || T > 65535) {
        mt_errorf(err, "%s: implausible sizes from wte/wpe: V=%" PRId64 " C=%" PRId64 " T=%" PRId64, path, V, C, T);
        goto out;
    }
    int H = n_head;
    if (H <= 0) {
        if (heads_from_config_json(path, (int)C, L, (int)V, &H, err)) goto out;
    }
    if (H <= 0 && mt_st_metadata(f)) {
        const mt_json *m = mt_json_get(mt_st_metadata(f), "n_head");
        if (m) H = atoi(m->str);
    }
    if (H <= 0) {
        mt_errorf(err, "%s: the number of attention heads is unknown: pass {heads} H or put the model's config.json (with n_head) beside the file", path);
        goto out;
    }
    if (C % H != 0) {
        mt_errorf(err, "%s: n_head %d does not divide n_embd %" PRId64, path, H, C);
        goto out;
    }
    mt_model_config cfg = {.n_layer = L, .n_embd = (int)C, .n_head = H, .vocab_size = (int)V,
                         .padded_vocab = mt_pad_vocab((int)V), .seq_len = (int)T, .dropout = 0.0f};
    if (mt_model_config_validate(&cfg, &e2)) { mt_errorf(err, "%s: %s", path, e2.msg); goto out; }
    /* Every tensor the header's sizes imply must be in the file with its
     * shape before the model is allocated (a small file whose names claim
     * thousands of layers must not allocate them). */
    {
        mt_layout sizing;
        mt_model_layout_build(&cfg, 1, 0, &sizing);
        int bad = 0;
        for (int u = 0; u < sizing.n_units && !bad; u++)
            for (int i = 0; i < sizing.units[u].n_tensors && !bad; i++) {
                const mt_st_entry *e;
                int nd;
                int64_t sh[2];
                bad = check_entry(f, &cfg, &sizing.units[u].t[i], V, path, &e, &nd, sh, err);
            }
        mt_layout_free(&sizing);
        if (bad) goto out;
    }
    mt_weights_alloc(out, &cfg);
    int used = 0;
    size_t maxn = 0;
    for (int u = 0; u < out->layout.n_units; u++)
        for (int i = 0; i < out->layout.units[u].n_tensors; i++)
            if (out->layout.units[u].t[i].numel > maxn) maxn = out->layout.units[u].t[i].numel;
    tmp = mt_xmalloc(maxn * sizeof(float), "import buffer");
    for (int u = 0; u < out->layout.n_units; u++)
        for (int i = 0; i < out->layout.units[u].n_tensors; i++) {
            const mt_tensor *t = &out->layout.units[u].t[i];
            const mt_st_entry *e = NULL;
            int nd;
            int64_t sh[2];
            if (check_entry(f, &cfg, t, V, path, &e, &nd, sh, err)) goto out;
            used++;
            float *dst = out->unit[u] + t->offset;
            if (hf_transposed(&cfg, t)) {
                if (mt_st_read_f32(f, e, tmp, err)) goto out;
                mt_transpose_f32(dst, tmp, sh[0], sh[1]); /* HF [in, out] -> ours [out, in] */
            } else if (mt_st_read_f32(f, e, dst, err)) goto out; /* wte: first V rows; padding rows stay 0 */
        }
    /* Anything left over that is neither used nor ignorable is unexpected. */
    for (int i = 0; i < mt_st_count(f); i++) {
        const char *c = canon(mt_st_entry_at(f, i)->name);
        if (!ignorable(c) && !mt_layout_find_tensor(&out->layout, c, NULL)) {
            mt_errorf(err, "%s: unexpected tensor '%s' (not a GPT-2 parameter)", path, mt_st_entry_at(f, i)->name);
            goto out;
        }
    }
    (void)used;
    rc = 0;
out:
    free(tmp);
    mt_st_close(f);
    if (rc) mt_weights_free(out);
    return rc;
}
