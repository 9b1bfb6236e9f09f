#include "optim/adam8bit.h"
#include <math.h>
#include <string.h>

/* 10^-z for the decades of the code maps. */
static const double pow10_neg[9] = {1e0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8};

static int mag_bits(int is_signed) { return is_signed ? 7 : 8; }

float mt_q8_decode(int is_signed, uint8_t code) {
    unsigned mag = is_signed ? code & 0x7fu : code;
    if (mag == 0) return 0.0f;
    int h = 31 - __builtin_clz(mag); /* the indicator bit; f = h fraction bits below it */
    int z = mag_bits(is_signed) - 1 - h;
    unsigned k = mag - (1u << h);
    double v = pow10_neg[z] * (0.1 + 0.9 * (double)(k + 1) / (double)(1u << h));
    return (float)(is_signed && (code & 0x80u) ? -v : v);
}

/* Nearest-code search: mid[c] (c >= 1) is the midpoint between magnitude
 * codes c-1 and c, so the nearest magnitude code of a is the number of
 * midpoints <= a, found by a branch-free binary search (7 or 8 steps). */
typedef struct {
    float mid[256];
    int bits;
} q8_search;

static void build_search(int is_signed, q8_search *q) {
    q->bits = mag_bits(is_signed);
    q->mid[0] = 0.0f;
    for (int c = 1; c < (1 << q->bits); c++)
        q->mid[c] = 0.5f * (mt_q8_decode(is_signed, (uint8_t)(c - 1)) + mt_q8_decode(is_signed, (uint8_t)c));
}

static inline uint8_t encode_with(const q8_search *q, int is_signed, float x) {
    unsigned sign = 0;
    float a = x;
    if (a < 0.0f) {
        if (!is_signed) return 0;
        sign = 0x80u;
        a = -a;
    }
    unsigned pos = 0;
    for (unsigned step = 1u << (q->bits - 1); step; step >>= 1) pos += a >= q->mid[pos + step] ? step : 0;
    /* v: a positive value keeps the smallest code rather than 0 (m / sqrt(0)
     * would explode) */
    if (!is_signed && pos == 0 && a > 0.0f) pos = 1;
    return (uint8_t)(pos ? sign | pos : 0);
}

uint8_t mt_q8_encode(int is_signed, float x) {
    q8_search q;
    build_search(is_signed, &q);
    return encode_with(&q, is_signed, x);
}

static void fill_table(int is_signed, float tab[256]) {
    for (int c = 0; c < 256; c++) tab[c] = mt_q8_decode(is_signed, (uint8_t)c);
}

static float quantize_with(const q8_search *q, int is_signed, const float *x, size_t n, uint8_t *codes) {
    float absmax = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        absmax = a > absmax ? a : absmax;
    }
    if (!(absmax > 0.0f)) {
        memset(codes, 0, n);
        return 0.0f;
    }
    /* x * (1/absmax) may put the absmax element a rounding below 1; it still
     * takes the top code, which decodes to exactly absmax */
    float inv = 1.0f / absmax;
    for (size_t i = 0; i < n; i++) codes[i] = encode_with(q, is_signed, x[i] * inv);
    return absmax;
}

float mt_q8_quantize(int is_signed, const float *x, size_t n, uint8_t *codes) {
    q8_search q;
    build_search(is_signed, &q);
    return quantize_with(&q, is_signed, x, n, codes);
}

static void dequantize_with(const float tab[256], const uint8_t *codes, float absmax, size_t n, float *x) {
    for (size_t i = 0; i < n; i++) x[i] = tab[codes[i]] * absmax;
}

void mt_q8_dequantize(int is_signed, const uint8_t *codes, float absmax, size_t n, float *x) {
    float tab[256];
    fill_table(is_signed, tab);
    dequantize_with(tab, codes, absmax, n, x);
}

void mt_adam8bit_init(mt_adam8bit *s, size_t begin, size_t end, mt_mem *mem) {
    memset(s, 0, sizeof *s);
    size_t n = end > begin ? end - begin : 0;
    s->begin = begin;
    s->end = begin + n;
    s->n_blocks = (n + MT_Q8_BLOCK - 1) / MT_Q8_BLOCK;
    /* absmax arrays first (float alignment), then the two code arrays */
    s->bytes = 2 * s->n_blocks * sizeof(float) + 2 * n;
    char *b = mt_mem_alloc(mem, MT_MEM_OPTIM, s->bytes, "8-bit AdamW state");
    s->mem_block = b;
    s->m_absmax = (float *)b;
    s->v_absmax = s->m_absmax + s->n_blocks;
    s->m = (uint8_t *)(s->v_absmax + s->n_blocks);
    s->v = s->m + n;
}

void mt_adam8bit_free(mt_adam8bit *s, mt_mem *mem) {
    mt_mem_free(mem, MT_MEM_OPTIM, s->mem_block, s->bytes);
    memset(s, 0, sizeof *s);
}

void mt_adam8bit_update(mt_adam8bit *s, const mt_opt_hparams *h, const mt_unit_layout *unit, float *p,
                        const float *g, float lr, int64_t step, float grad_scale) {
    float tm[256], tv[256];
    q8_search qm, qv;
    fill_table(1, tm);
    fill_table(0, tv);
    build_search(1, &qm);
    build_search(0, &qv);
    mt_opt_hparams a = *h;
    a.kind = MT_OPT_ADAMW;
    size_t n = s->end - s->begin;
    long nb = (long)s->n_blocks;
#pragma omp parallel for schedule(static) if (nb > 1)
    for (long b = 0; b < nb; b++) {
        float mb[MT_Q8_BLOCK], vb[MT_Q8_BLOCK];
        size_t o = (size_t)b * MT_Q8_BLOCK, len = n - o < MT_Q8_BLOCK ? n - o : MT_Q8_BLOCK;
        dequantize_with(tm, s->m + o, s->m_absmax[b], len, mb);
        dequantize_with(tv, s->v + o, s->v_absmax[b], len, vb);
        float *st[2] = {mb, vb};
        mt_opt_update_range(&a, unit, s->begin + o, s->begin + o + len, p + o, g + o, st, lr, step, grad_scale);
        s->m_absmax[b] = quantize_with(&qm, 1, mb, len, s->m + o);
        s->v_absmax[b] = quantize_with(&qv, 0, vb, len, s->v + o);
    }
}

void mt_adam8bit_get_state(const mt_adam8bit *s, int k, float *dst) {
    float tab[256];
    fill_table(k == 0, tab);
    size_t n = s->end - s->begin;
    for (size_t b = 0; b < s->n_blocks; b++) {
        size_t o = b * MT_Q8_BLOCK, len = n - o < MT_Q8_BLOCK ? n - o : MT_Q8_BLOCK;
        dequantize_with(tab, (k == 0 ? s->m : s->v) + o, (k == 0 ? s->m_absmax : s->v_absmax)[b], len, dst + o);
    }
}

void mt_adam8bit_set_state(mt_adam8bit *s, int k, const float *full) {
    q8_search q;
    build_search(k == 0, &q);
    size_t n = s->end - s->begin;
    for (size_t b = 0; b < s->n_blocks; b++) {
        size_t o = b * MT_Q8_BLOCK, len = n - o < MT_Q8_BLOCK ? n - o : MT_Q8_BLOCK;
        float am = quantize_with(&q, k == 0, full + s->begin + o, len, (k == 0 ? s->m : s->v) + o);
        (k == 0 ? s->m_absmax : s->v_absmax)[b] = am;
    }
}
