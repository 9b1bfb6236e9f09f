#include "interop/gguf.h"
#include "core/dtype.h"
#include "core/fileio.h"
#include "quant/ggml_blocks.h"
#include "quant/ggml_kquants.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_ALIGN 32
#define QK MT_GGML_QK /* values per Q8_0 / Q4_0 block */

/* GGUF value types (the specification's gguf_type). */
enum { GV_U32 = 4, GV_I32 = 5, GV_F32 = 6, GV_BOOL = 7, GV_STRING = 8, GV_ARRAY = 9 };

typedef struct {
    unsigned char *data;
    size_t len, cap;
} buf;

static void put(buf *b, const void *p, size_t n) {
    if (!n) return; /* p may be NULL then (an empty metadata buffer) */
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        unsigned char *d = realloc(b->data, cap);
        if (!d) mt_die("out of memory growing a GGUF buffer to %zu bytes", cap);
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); } /* x86-64 and aarch64 Linux are little-endian */
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}

typedef struct {
    char *name;
    int ndim;
    int64_t ne[4];
    mt_gguf_type type;
    const float *src; /* the caller's values (borrowed), or owned */
    float *owned;
    size_t n, bytes;
} tensor;

struct mt_gguf_writer {
    buf kv;
    uint64_t n_kv;
    tensor *t;
    size_t n_t, cap_t;
};

int mt_gguf_type_parse(const char *s, mt_gguf_type *t) {
    static const struct { const char *n; mt_gguf_type t; } tab[] = {
        {"f32", MT_GGUF_F32}, {"f16", MT_GGUF_F16}, {"bf16", MT_GGUF_BF16}, {"q8_0", MT_GGUF_Q8_0}, {"q4_0", MT_GGUF_Q4_0},
        {"q4_k", MT_GGUF_Q4_K}, {"q6_k", MT_GGUF_Q6_K}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (s && !strcmp(s, tab[i].n)) {
            *t = tab[i].t;
            return 0;
        }
    return -1;
}

const char *mt_gguf_type_name(mt_gguf_type t) {
    switch (t) {
    case MT_GGUF_F32: return "f32";
    case MT_GGUF_F16: return "f16";
    case MT_GGUF_BF16: return "bf16";
    case MT_GGUF_Q8_0: return "q8_0";
    case MT_GGUF_Q4_0: return "q4_0";
    case MT_GGUF_Q4_K: return "q4_k";
    case MT_GGUF_Q6_K: return "q6_k";
    }
    return "?";
}

int mt_gguf_block_size(mt_gguf_type t) {
    return t == MT_GGUF_Q8_0 || t == MT_GGUF_Q4_0 ? QK : t == MT_GGUF_Q4_K || t == MT_GGUF_Q6_K ? MT_GGML_QK_K : 1;
}

size_t mt_gguf_block_bytes(mt_gguf_type t) {
    switch (t) {
    case MT_GGUF_F32: return 4;
    case MT_GGUF_F16:
    case MT_GGUF_BF16: return 2;
    case MT_GGUF_Q8_0: return 2 + QK;
    case MT_GGUF_Q4_0: return 2 + QK / 2;
    case MT_GGUF_Q4_K: return MT_GGML_Q4_K_BYTES;
    case MT_GGUF_Q6_K: return MT_GGML_Q6_K_BYTES;
    }
    return 0;
}

uint32_t mt_gguf_file_type(mt_gguf_type t) {
    switch (t) {
    case MT_GGUF_F32: return 0;
    case MT_GGUF_F16: return 1;
    case MT_GGUF_Q4_0: return 2;
    case MT_GGUF_Q8_0: return 7;
    case MT_GGUF_BF16: return 32;
    case MT_GGUF_Q4_K: return 14; /* MOSTLY_Q4_K_S: every matrix Q4_K */
    case MT_GGUF_Q6_K: return 18;
    }
    return 0;
}

void mt_gguf_encode(mt_gguf_type t, const float *x, size_t n, void *out) {
    switch (t) {
    case MT_GGUF_F32: memcpy(out, x, n * 4); break;
    case MT_GGUF_F16: mt_convert_fp32_to_fp16(out, x, n); break;
    case MT_GGUF_BF16: mt_convert_fp32_to_bf16(out, x, n); break;
    case MT_GGUF_Q8_0: mt_ggml_q8_0_encode(x, n, out); break;
    case MT_GGUF_Q4_0: mt_ggml_q4_0_encode(x, n, out); break;
    case MT_GGUF_Q4_K: mt_ggml_q4_k_encode(x, n, out); break;
    case MT_GGUF_Q6_K: mt_ggml_q6_k_encode(x, n, out); break;
    }
}

void mt_gguf_decode(mt_gguf_type t, const void *in, size_t n, float *x) {
    switch (t) {
    case MT_GGUF_F32: memcpy(x, in, n * 4); break;
    case MT_GGUF_F16: mt_convert_fp16_to_fp32(x, in, n); break;
    case MT_GGUF_BF16: mt_convert_bf16_to_fp32(x, in, n); break;
    case MT_GGUF_Q8_0: mt_ggml_q8_0_decode(in, n, x); break;
    case MT_GGUF_Q4_0: mt_ggml_q4_0_decode(in, n, x); break;
    case MT_GGUF_Q4_K: mt_ggml_q4_k_decode(in, n, x); break;
    case MT_GGUF_Q6_K: mt_ggml_q6_k_decode(in, n, x); break;
    }
}

mt_gguf_writer *mt_gguf_writer_new(void) { return mt_xcalloc(1, sizeof(mt_gguf_writer), "GGUF writer"); }

void mt_gguf_writer_free(mt_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].owned);
    }
    free(w->t);
    free(w->kv.data);
    free(w);
}

static void kv_key(mt_gguf_writer *w, const char *key, uint32_t type) {
    put_str(&w->kv, key, strlen(key));
    put_u32(&w->kv, type);
    w->n_kv++;
}

void mt_gguf_kv_string(mt_gguf_writer *w, const char *key, const char *value) {
    kv_key(w, key, GV_STRING);
    put_str(&w->kv, value, strlen(value));
}
void mt_gguf_kv_u32(mt_gguf_writer *w, const char *key, uint32_t value) {
    kv_key(w, key, GV_U32);
    put_u32(&w->kv, value);
}
void mt_gguf_kv_i32(mt_gguf_writer *w, const char *key, int32_t value) {
    kv_key(w, key, GV_I32);
    put(&w->kv, &value, 4);
}
void mt_gguf_kv_f32(mt_gguf_writer *w, const char *key, float value) {
    kv_key(w, key, GV_F32);
    put(&w->kv, &value, 4);
}
void mt_gguf_kv_bool(mt_gguf_writer *w, const char *key, int value) {
    kv_key(w, key, GV_BOOL);
    unsigned char v = value ? 1 : 0;
    put(&w->kv, &v, 1);
}
void mt_gguf_kv_string_array(mt_gguf_writer *w, const char *key, size_t n, const char *const *s, const size_t *len) {
    kv_key(w, key, GV_ARRAY);
    put_u32(&w->kv, GV_STRING);
    put_u64(&w->kv, n);
    for (size_t i = 0; i < n; i++) put_str(&w->kv, s[i], len ? len[i] : strlen(s[i]));
}
void mt_gguf_kv_i32_array(mt_gguf_writer *w, const char *key, size_t n, const int32_t *v) {
    kv_key(w, key, GV_ARRAY);
    put_u32(&w->kv, GV_I32);
    put_u64(&w->kv, n);
    put(&w->kv, v, n * 4);
}
void mt_gguf_kv_f32_array(mt_gguf_writer *w, const char *key, size_t n, const float *v) {
    kv_key(w, key, GV_ARRAY);
    put_u32(&w->kv, GV_F32);
    put_u64(&w->kv, n);
    put(&w->kv, v, n * 4);
}

static int add(mt_gguf_writer *w, const char *name, int ndim, const int64_t *ne, mt_gguf_type t, const float *data,
               float *owned, mt_error *err) {
    if (ndim < 1 || ndim > 4) {
        free(owned);
        return mt_errorf(err, "GGUF tensor %s: %d dimensions (1 to 4 are possible)", name, ndim);
    }
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)ne[i];
    int bs = mt_gguf_block_size(t);
    if (ne[0] % bs) {
        free(owned);
        return mt_errorf(err, "tensor %s has rows of %lld values, which %s cannot store (its blocks hold %d values: "
                              "the row length must be a multiple of %d); choose f32, f16 or bf16",
                         name, (long long)ne[0], mt_gguf_type_name(t), bs, bs);
    }
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? 2 * w->cap_t : 64;
        tensor *nt = realloc(w->t, w->cap_t * sizeof *nt);
        if (!nt) mt_die("out of memory for %zu GGUF tensor descriptions", w->cap_t);
        w->t = nt;
    }
    tensor *d = &w->t[w->n_t++];
    memset(d, 0, sizeof *d);
    size_t nl = strlen(name);
    d->name = mt_xmalloc(nl + 1, "GGUF tensor name");
    memcpy(d->name, name, nl + 1);
    d->ndim = ndim;
    for (int i = 0; i < ndim; i++) d->ne[i] = ne[i];
    d->type = t;
    d->n = n;
    d->bytes = n / (size_t)bs * mt_gguf_block_bytes(t);
    d->src = data;
    d->owned = owned;
    return 0;
}

int mt_gguf_add_tensor(mt_gguf_writer *w, const char *name, int ndim, const int64_t *ne, mt_gguf_type t,
                       const float *data, mt_error *err) {
    return add(w, name, ndim, ne, t, data, NULL, err);
}

int mt_gguf_add_tensor_owned(mt_gguf_writer *w, const char *name, int ndim, const int64_t *ne, mt_gguf_type t,
                             float *data, mt_error *err) {
    return add(w, name, ndim, ne, t, data, data, err); /* freed on error too */
}

static size_t align_up(size_t x) { return (x + GGUF_ALIGN - 1) / GGUF_ALIGN * GGUF_ALIGN; }

int mt_gguf_write(const mt_gguf_writer *w, const char *path, mt_error *err) {
    buf h = {0};
    put(&h, "GGUF", 4);
    put_u32(&h, 3);
    put_u64(&h, w->n_t);
    put_u64(&h, w->n_kv);
    put(&h, w->kv.data, w->kv.len);
    size_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const tensor *t = &w->t[i];
        put_str(&h, t->name, strlen(t->name));
        put_u32(&h, (uint32_t)t->ndim);
        for (int k = 0; k < t->ndim; k++) put_u64(&h, (uint64_t)t->ne[k]);
        put_u32(&h, (uint32_t)t->type);
        put_u64(&h, off);
        off = align_up(off + t->bytes);
    }
    static const unsigned char zeros[GGUF_ALIGN] = {0};
    put(&h, zeros, align_up(h.len) - h.len);
    char *tmp = NULL;
    FILE *f = mt_fopen_temp(path, &tmp, err);
    if (!f) {
        free(h.data);
        return -1;
    }
    int failed = fwrite(h.data, 1, h.len, f) != h.len;
    /* tensors are encoded one at a time into one buffer: the file is never whole in memory */
    size_t maxb = 1;
    for (size_t i = 0; i < w->n_t; i++) maxb = w->t[i].bytes > maxb ? w->t[i].bytes : maxb;
    unsigned char *enc = mt_xmalloc(maxb, "GGUF encoding buffer");
    for (size_t i = 0; i < w->n_t && !failed; i++) {
        const tensor *t = &w->t[i];
        mt_gguf_encode(t->type, t->src, t->n, enc);
        failed = fwrite(enc, 1, t->bytes, f) != t->bytes ||
                 fwrite(zeros, 1, align_up(t->bytes) - t->bytes, f) != align_up(t->bytes) - t->bytes;
    }
    free(enc);
    free(h.data);
    return mt_fcommit_temp(f, tmp, path, failed, err);
}
