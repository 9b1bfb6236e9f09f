/* 8-bit AdamW's kernels (optim/adam8bit.h describes the method and the
 * code maps): the blockwise dequantise - AdamW - requantise update of the
 * moments, and the codec of the checkpoint's fp32 streams. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include "ops/q8.h"
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

/* A code map's tables, built per call (no global state; 3.5 KB, a few
 * microseconds). dec[c] is the value of code c. mid[c] (1 <= c <= top) is
 * the midpoint between magnitude codes c-1 and c, so the nearest magnitude
 * code of a is the number of midpoints <= a: encode_with finds it by a
 * branch-free binary search (7 or 8 steps). The rest serves the vector
 * path: byte planes of dec for decode64, and encode16's position estimate. */
typedef struct {
    int is_signed, bits;
    float dec[256];
    float mid[256];
    uint8_t plane[4][256]; /* plane[b][c]: byte b of dec[c] */
    float ca[16], cb[16];  /* per decade z: code position ~= a * ca[z] + cb[z] */
    int32_t bz[32];        /* per binade [2^(i-31), 2^(i-30)): the decade of its top */
    float bthr[32];        /* ... and the decade boundary inside it (-1: none) */
} q8_map;

static void build_map(int is_signed, q8_map *q) {
    memset(q, 0, sizeof *q);
    q->is_signed = is_signed;
    q->bits = mag_bits(is_signed);
    int top = (1 << q->bits) - 1, zmax = q->bits - 1;
    for (int c = 0; c < 256; c++) {
        q->dec[c] = mt_q8_decode(is_signed, (uint8_t)c);
        uint32_t u;
        memcpy(&u, &q->dec[c], 4);
        for (int b = 0; b < 4; b++) q->plane[b][c] = (uint8_t)(u >> (8 * b));
    }
    for (int c = 1; c < 256; c++) q->mid[c] = c <= top ? 0.5f * (q->dec[c - 1] + q->dec[c]) : INFINITY;
    float thr[8]; /* a <= thr[j] = 10^-j: decade >= j */
    for (int z = 0; z <= zmax; z++) {
        thr[z] = (float)pow10_neg[z];
        /* decade z holds codes 2^h .. 2^(h+1)-1 (h = zmax - z), and with the
         * lower decade's top code 2^h - 1 (value 10^-(z+1)) their values are
         * linear in c: c = 2^h - 1 + (a 10^z - 0.1) 2^h / 0.9. The smallest
         * decade (h = 0) holds codes 0 (value 0) and 1 (10^-zmax): c = a 10^zmax
         * puts their midpoint at 1/2 */
        double h2 = (double)(1 << (zmax - z));
        q->ca[z] = (float)(z < zmax ? h2 / 0.9 / pow10_neg[z] : 1.0 / pow10_neg[z]);
        q->cb[z] = (float)(z < zmax ? h2 - 1.0 - h2 / 9.0 : 0.0);
    }
    for (int i = 0; i < 32; i++) {
        float lo = ldexpf(1.0f, i - 31), hi = ldexpf(1.0f, i - 30);
        q->bthr[i] = -1.0f;
        for (int j = 1; j <= zmax; j++) {
            if (thr[j] >= hi) q->bz[i]++;
            else if (thr[j] >= lo) q->bthr[i] = thr[j];
        }
    }
}

static inline uint8_t encode_with(const q8_map *q, float x) {
    unsigned sign = 0;
    float a = x;
    if (a < 0.0f) {
        if (!q->is_signed) return 0;
        sign = 0x80u;
        a = -a;
    }
    unsigned pos = 0;
    for (unsigned step = 1u << (q->bits - 1); step; step >>= 1) pos += a >= q->mid[pos + step] ? step : 0;
    /* v: a positive value keeps the smallest code rather than 0 (m / sqrt(0)
     * would explode) */
    if (!q->is_signed && pos == 0 && a > 0.0f) pos = 1;
    return (uint8_t)(pos ? sign | pos : 0);
}

uint8_t mt_q8_encode(int is_signed, float x) {
    q8_map q;
    build_map(is_signed, &q);
    return encode_with(&q, x);
}

/* One step's arguments. c: AdamW's per-step constants computed as
 * op_adamw_update computes them (src/ops/optim_update.c), so that the vector
 * update gives bitwise its parameters and moments (test_lean_optim checks
 * it); the portable path calls op_adamw_update per tensor run with lr, ... */
typedef struct {
    mt_backend *be;
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    int64_t step;
    const mt_tensor_span *spans; /* the unit's tensors: their runs set the weight decay */
    int n_spans;
    struct {
        float beta1, beta2, eps, grad_scale, step_size, bc2_sqrt, omb1, omb2;
        float pdecay[2]; /* [tensor decays]: 1 - lr * weight_decay */
    } c;
} step_args;

static step_args step_args_of(mt_backend *be, const mt_tensor_span *spans, int n_spans, float lr, float beta1,
                              float beta2, float eps, float weight_decay, int64_t step, float grad_scale) {
    step_args s;
    s.be = be;
    s.spans = spans;
    s.n_spans = n_spans;
    s.lr = lr;
    s.beta1 = beta1;
    s.beta2 = beta2;
    s.eps = eps;
    s.weight_decay = weight_decay;
    s.grad_scale = grad_scale;
    s.step = step;
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    s.c.beta1 = beta1;
    s.c.beta2 = beta2;
    s.c.eps = eps;
    s.c.grad_scale = grad_scale;
    s.c.step_size = (float)((double)lr / bc1);
    s.c.bc2_sqrt = (float)sqrt(bc2);
    s.c.omb1 = (float)(1.0 - (double)beta1);
    s.c.omb2 = (float)(1.0 - (double)beta2);
    s.c.pdecay[0] = (float)(1.0 - (double)lr * 0.0);
    s.c.pdecay[1] = (float)(1.0 - (double)lr * (double)weight_decay);
    return s;
}

/* The next run [pos, *end) of a block's elements (unit elements u0 + [0,
 * len)) that lies in one tensor (*t its index) or in none (*t = -1: padding,
 * whose parameters and state stay as they are, as with mt_opt_update_range). */
static void next_run(const step_args *s, size_t u0, size_t len, size_t pos, size_t *end, int *t) {
    size_t x = u0 + pos, stop = u0 + len;
    *t = -1;
    for (int i = 0; i < s->n_spans; i++) {
        const mt_tensor_span *ti = &s->spans[i];
        if (ti->offset <= x && x < ti->offset + ti->numel) {
            *t = i;
            stop = ti->offset + ti->numel < u0 + len ? ti->offset + ti->numel : u0 + len;
            break;
        }
        if (ti->offset > x && ti->offset < stop) stop = ti->offset;
    }
    *end = stop - u0;
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && \
    defined(__AVX512VBMI__)
#include <immintrin.h>
#define Q8_VECTOR 1

static inline __mmask16 mask16(size_t left) { return left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1); }
static inline __mmask64 mask64(size_t left) { return left >= 64 ? ~0ull : (1ull << left) - 1; }

/* dec[codes[i]] * absmax for 64 codes (n <= 64 of them valid). A table
 * lookup per byte plane (two 128-entry byte permutes, chosen by the code's
 * top bit) serves 64 codes at once, where float lookups (gathers, or
 * two-register permutes) serve 16: 3-4x fewer instructions on Zen 4. The
 * planes are interleaved back into floats within 128-bit lanes, so the codes
 * are first permuted such that lane L of float vector r holds elements
 * 16r + 4L .. 16r + 4L + 3. */
static inline void decode64(const q8_map *q, const uint8_t *codes, size_t n, __m512 absmax, float *x) {
    const __m512i order = _mm512_set_epi8(63, 62, 61, 60, 47, 46, 45, 44, 31, 30, 29, 28, 15, 14, 13, 12, /* lane 3 */
                                          59, 58, 57, 56, 43, 42, 41, 40, 27, 26, 25, 24, 11, 10, 9, 8,
                                          55, 54, 53, 52, 39, 38, 37, 36, 23, 22, 21, 20, 7, 6, 5, 4,
                                          51, 50, 49, 48, 35, 34, 33, 32, 19, 18, 17, 16, 3, 2, 1, 0);
    __mmask64 k = mask64(n);
    __m512i c = _mm512_permutexvar_epi8(order, _mm512_maskz_loadu_epi8(k, codes));
    __mmask64 high = _mm512_movepi8_mask(c);
#define PLANE(t)                                                                                                  \
    _mm512_mask_blend_epi8(high, _mm512_permutex2var_epi8(_mm512_loadu_si512(t), c, _mm512_loadu_si512((t) + 64)), \
                           _mm512_permutex2var_epi8(_mm512_loadu_si512((t) + 128), c, _mm512_loadu_si512((t) + 192)))
    __m512i b0 = PLANE(q->plane[0]), b1 = PLANE(q->plane[1]), b2 = PLANE(q->plane[2]), b3 = PLANE(q->plane[3]);
#undef PLANE
    __m512i lo01 = _mm512_unpacklo_epi8(b0, b1), hi01 = _mm512_unpackhi_epi8(b0, b1);
    __m512i lo23 = _mm512_unpacklo_epi8(b2, b3), hi23 = _mm512_unpackhi_epi8(b2, b3);
    __m512i f[4] = {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
                    _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
    for (int r = 0; r < 4; r++)
        _mm512_mask_storeu_ps(x + 16 * r, (__mmask16)(k >> (16 * r)), _mm512_mul_ps(_mm512_castsi512_ps(f[r]), absmax));
}

static void dequantize_with(const q8_map *q, const uint8_t *codes, float absmax, size_t n, float *x) {
    __m512 s = _mm512_set1_ps(absmax);
    for (size_t i = 0; i < n; i += 64) decode64(q, codes + i, n - i, s, x + i);
}

/* Codes of 16 values x * inv, equal to encode_with's (is_signed a constant
 * after inlining), except in the lanes of *amb, which the caller recomputes
 * with encode_with. e = a * ca[z] + cb[z] is the code position on the linear
 * scale of a's decade z (from the binary exponent: a binade holds at most
 * one decade boundary, bthr); its rounding is the nearest code unless e
 * lies within Q8_AMBIGUOUS of a half: e is accurate to ~1e-5 codes (float
 * rounding of a position <= 255), and the float midpoints sit within ~2e-5
 * of the halves. Checked against the binary search on all 2^32 float inputs
 * (tests: every code's neighbourhood; about 0.2% of inputs are ambiguous). */
#define Q8_AMBIGUOUS (1.0f / 1024)
static inline __m128i encode16(const q8_map *q, __m512 x, __m512 inv, int is_signed, __mmask16 *amb) {
    const int top = (1 << (is_signed ? 7 : 8)) - 1;
    const __m512 zero = _mm512_setzero_ps();
    __m512 a = _mm512_mul_ps(x, inv);
    __mmask16 neg = _mm512_cmp_ps_mask(a, zero, _CMP_LT_OQ), pos = _mm512_cmp_ps_mask(a, zero, _CMP_GT_OQ);
    a = _mm512_abs_ps(a);
    /* binade index: biased exponent - 96, saturated at 0 (below 2^-31, zero
     * and denormals: binade 0); permutes use its low 5 bits, which wrap for
     * a >= 2, +inf and NaN, harmlessly: every decade puts a >= 2 (and +inf)
     * beyond top, and NaN's e is NaN, clamped to 0 below */
    __m512i bi = _mm512_srli_epi32(_mm512_subs_epu16(_mm512_castps_si512(a), _mm512_set1_epi32(96 << 23)), 23);
    __m512i z = _mm512_permutex2var_epi32(_mm512_loadu_si512(q->bz), bi, _mm512_loadu_si512(q->bz + 16));
    __m512 bt = _mm512_permutex2var_ps(_mm512_loadu_ps(q->bthr), bi, _mm512_loadu_ps(q->bthr + 16));
    z = _mm512_mask_add_epi32(z, _mm512_cmp_ps_mask(a, bt, _CMP_LE_OQ), z, _mm512_set1_epi32(1));
    __m512 e = _mm512_fmadd_ps(a, _mm512_permutexvar_ps(z, _mm512_loadu_ps(q->ca)),
                               _mm512_permutexvar_ps(z, _mm512_loadu_ps(q->cb)));
    /* max_ps returns its second operand for NaN: NaN -> position 0 */
    e = _mm512_min_ps(_mm512_max_ps(e, zero), _mm512_set1_ps((float)top));
    __m512i c = _mm512_cvtps_epi32(e); /* nearest */
    *amb = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_reduce_ps(e, _MM_FROUND_TO_NEAREST_INT)), /* e - round(e) */
                              _mm512_set1_ps(0.5f - Q8_AMBIGUOUS), _CMP_GT_OQ);
    if (is_signed) /* the sign bit on nonzero codes of negatives */
        c = _mm512_mask_or_epi32(c, neg & _mm512_test_epi32_mask(c, c), c, _mm512_set1_epi32(0x80));
    else /* positives take at least code 1, negatives (and NaN) 0 */
        c = _mm512_maskz_max_epi32(pos, c, _mm512_set1_epi32(1));
    return _mm512_cvtepi32_epi8(c);
}

/* max_ps returns its second operand when the first is NaN: NaNs are
 * skipped, as by the scalar `a > absmax` */
static float absmax_of(const float *x, size_t n) {
    __m512 mx = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 16)
        mx = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(mask16(n - i), x + i)), mx);
    return _mm512_reduce_max_ps(mx);
}

/* Codes of x[0, 16) (lanes k) into codes; inv = 1 / absmax, or 0 for a
 * zero block (every code 0, as the scalar path's memset). */
static inline void encode_chunk(const q8_map *q, int is_signed, const float *x, __mmask16 k, float inv,
                                uint8_t *codes) {
    __mmask16 amb;
    __m128i c = encode16(q, _mm512_maskz_loadu_ps(k, x), _mm512_set1_ps(inv), is_signed, &amb);
    _mm_mask_storeu_epi8(codes, k, c);
    for (amb &= k; amb; amb &= (__mmask16)(amb - 1)) {
        int l = __builtin_ctz(amb);
        codes[l] = encode_with(q, x[l] * inv);
    }
}

static void encode_block(const q8_map *q, const float *x, float absmax, size_t n, uint8_t *codes) {
    float inv = absmax > 0.0f ? 1.0f / absmax : 0.0f;
    for (size_t i = 0; i < n; i += 16) {
        if (q->is_signed) encode_chunk(q, 1, x + i, mask16(n - i), inv, codes + i);
        else encode_chunk(q, 0, x + i, mask16(n - i), inv, codes + i);
    }
}

/* AdamW on a block whose m, v are dequantised in mb, vb, and its new codes:
 * op_adamw_update's expression operation for operation (no FMA, same order,
 * its 0 * p L2 term kept for its signed zeros). Pass 1 updates m, v and
 * finds their absmax; pass 2 updates p and encodes m, v, so that the
 * division and square root of p's update overlap the encoding's integer
 * and permute work. Tensor runs (next_run) set the weight decay. */
static void adamw_block(const q8_map *qm, const q8_map *qv, const step_args *s, size_t u0,
                        size_t len, size_t next, float *p, const float *g, float *mb, float *vb, uint8_t *mc,
                        uint8_t *vc, float *m_absmax, float *v_absmax) {
    const __m512 zero = _mm512_setzero_ps(), b1 = _mm512_set1_ps(s->c.beta1), b2 = _mm512_set1_ps(s->c.beta2),
                 omb1 = _mm512_set1_ps(s->c.omb1), omb2 = _mm512_set1_ps(s->c.omb2), eps = _mm512_set1_ps(s->c.eps),
                 gs = _mm512_set1_ps(s->c.grad_scale), ss = _mm512_set1_ps(s->c.step_size),
                 bc2s = _mm512_set1_ps(s->c.bc2_sqrt);
    __m512 mxm = zero, mxv = zero;
    for (size_t a = 0, b; a < len; a = b) {
        int t;
        next_run(s, u0, len, a, &b, &t);
        for (size_t i = a; i < b; i += 16) {
            __mmask16 k = mask16(b - i);
            __m512 mi = _mm512_maskz_loadu_ps(k, mb + i), vi = _mm512_maskz_loadu_ps(k, vb + i);
            if (t >= 0) {
                __m512 pi = _mm512_maskz_loadu_ps(k, p + i);
                __m512 gi = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, g + i), gs), _mm512_mul_ps(zero, pi));
                mi = _mm512_add_ps(_mm512_mul_ps(mi, b1), _mm512_mul_ps(omb1, gi));
                vi = _mm512_add_ps(_mm512_mul_ps(vi, b2), _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
                _mm512_mask_storeu_ps(mb + i, k, mi);
                _mm512_mask_storeu_ps(vb + i, k, vi);
            }
            mxm = _mm512_max_ps(_mm512_abs_ps(mi), mxm); /* NaN skipped, as in absmax_of */
            mxv = _mm512_max_ps(_mm512_abs_ps(vi), mxv);
        }
    }
    *m_absmax = _mm512_reduce_max_ps(mxm);
    *v_absmax = _mm512_reduce_max_ps(mxv);
    float inv_m = *m_absmax > 0.0f ? 1.0f / *m_absmax : 0.0f, inv_v = *v_absmax > 0.0f ? 1.0f / *v_absmax : 0.0f;
    for (size_t a = 0, b; a < len; a = b) {
        int t;
        next_run(s, u0, len, a, &b, &t);
        const __m512 pdecay = _mm512_set1_ps(s->c.pdecay[t >= 0 && s->spans[t].weight_decay]);
        for (size_t i = a; i < b; i += 16) {
            __mmask16 k = mask16(b - i);
            if (i + MT_Q8_BLOCK < len + next) { /* the next block's stream, while this pass computes */
                _mm_prefetch((const char *)(p + i + MT_Q8_BLOCK), _MM_HINT_T0);
                _mm_prefetch((const char *)(g + i + MT_Q8_BLOCK), _MM_HINT_T0);
                if ((i & 63) == 0) {
                    _mm_prefetch((const char *)(mc + i + MT_Q8_BLOCK), _MM_HINT_T0);
                    _mm_prefetch((const char *)(vc + i + MT_Q8_BLOCK), _MM_HINT_T0);
                }
            }
            if (t >= 0) {
                __m512 mi = _mm512_maskz_loadu_ps(k, mb + i), vi = _mm512_maskz_loadu_ps(k, vb + i);
                __m512 pi = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + i), pdecay);
                __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2s), eps);
                _mm512_mask_storeu_ps(p + i, k, _mm512_sub_ps(pi, _mm512_mul_ps(ss, _mm512_div_ps(mi, denom))));
            }
            encode_chunk(qm, 1, mb + i, k, inv_m, mc + i);
            encode_chunk(qv, 0, vb + i, k, inv_v, vc + i);
        }
    }
}
#else
static float absmax_of(const float *x, size_t n) {
    float absmax = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        absmax = a > absmax ? a : absmax;
    }
    return absmax;
}

static void encode_block(const q8_map *q, const float *x, float absmax, size_t n, uint8_t *codes) {
    if (!(absmax > 0.0f)) {
        memset(codes, 0, n);
        return;
    }
    float inv = 1.0f / absmax;
    for (size_t i = 0; i < n; i++) codes[i] = encode_with(q, x[i] * inv);
}

static void dequantize_with(const q8_map *q, const uint8_t *codes, float absmax, size_t n, float *x) {
    for (size_t i = 0; i < n; i++) x[i] = q->dec[codes[i]] * absmax;
}
#endif

/* Returns the absmax (>= 0; NaNs skipped). x * (1/absmax) may put the
 * absmax element a rounding below 1; it still takes the top code, which
 * decodes to exactly absmax. */
static float quantize_with(const q8_map *q, const float *x, size_t n, uint8_t *codes) {
    float absmax = absmax_of(x, n);
    encode_block(q, x, absmax, n, codes);
    return absmax;
}

/* One block: p, g, mc, vc point at its first element, u0 is that element's
 * index in the unit, and `next` elements of the range follow the block (the
 * vector path prefetches them). Dequantised moments in 16 KB that stay in L1
 * between the passes. */
static void update_block(const q8_map *qm, const q8_map *qv, const step_args *s, size_t u0, size_t len, size_t next, float *p, const float *g, uint8_t *mc, uint8_t *vc,
                         float *m_absmax, float *v_absmax) {
    float mb[MT_Q8_BLOCK], vb[MT_Q8_BLOCK];
    dequantize_with(qm, mc, *m_absmax, len, mb);
    dequantize_with(qv, vc, *v_absmax, len, vb);
#ifdef Q8_VECTOR
    adamw_block(qm, qv, s, u0, len, next, p, g, mb, vb, mc, vc, m_absmax, v_absmax);
#else
    (void)next_run;
    /* as mt_opt_update_range: each tensor's part of the block, its weight decay */
    for (int i = 0; i < s->n_spans; i++) {
        const mt_tensor_span *t = &s->spans[i];
        size_t a = t->offset > u0 ? t->offset : u0;
        size_t b = t->offset + t->numel < u0 + len ? t->offset + t->numel : u0 + len;
        if (a >= b) continue;
        size_t o = a - u0;
        op_adamw_update(s->be, p + o, g + o, mb + o, vb + o, b - a, s->lr, s->beta1, s->beta2, s->eps,
                        t->weight_decay ? s->weight_decay : 0.0f, s->step, s->grad_scale);
    }
    *m_absmax = quantize_with(qm, mb, len, mc);
    *v_absmax = quantize_with(qv, vb, len, vc);
#endif
}

float mt_q8_quantize(int is_signed, const float *x, size_t n, uint8_t *codes) {
    q8_map q;
    build_map(is_signed, &q);
    return quantize_with(&q, x, n, codes);
}

void mt_q8_dequantize(int is_signed, const uint8_t *codes, float absmax, size_t n, float *x) {
    q8_map q;
    build_map(is_signed, &q);
    dequantize_with(&q, codes, absmax, n, x);
}

void op_adamw8bit_update(mt_backend *be, float *p, const float *g, uint8_t *m, uint8_t *v, float *m_absmax,
                         float *v_absmax, size_t u0, size_t n, const mt_tensor_span *spans, int n_spans, float lr,
                         float beta1, float beta2, float eps, float weight_decay, int64_t step, float grad_scale) {
    MT_DISPATCH(be, adamw8bit_update, be, p, g, m, v, m_absmax, v_absmax, u0, n, spans, n_spans, lr, beta1, beta2,
                eps, weight_decay, step, grad_scale);
    q8_map qm, qv;
    build_map(1, &qm);
    build_map(0, &qv);
    step_args a = step_args_of(be, spans, n_spans, lr, beta1, beta2, eps, weight_decay, step, grad_scale);
    long nb = (long)((n + MT_Q8_BLOCK - 1) / MT_Q8_BLOCK);
    /* blocks are independent (each has its own absmax) */
#pragma omp parallel for schedule(static) if (nb > 1)
    for (long b = 0; b < nb; b++) {
        size_t o = (size_t)b * MT_Q8_BLOCK, len = n - o < MT_Q8_BLOCK ? n - o : MT_Q8_BLOCK;
        update_block(&qm, &qv, &a, u0 + o, len, n - o - len, p + o, g + o, m + o, v + o, &m_absmax[b],
                     &v_absmax[b]);
    }
}

void op_q8_quantize_blocks(mt_backend *be, int is_signed, const float *x, size_t n, uint8_t *codes, float *absmax) {
    MT_DISPATCH(be, q8_quantize_blocks, be, is_signed, x, n, codes, absmax);
    q8_map q;
    build_map(is_signed, &q);
    for (size_t b = 0, o = 0; o < n; b++, o += MT_Q8_BLOCK)
        absmax[b] = quantize_with(&q, x + o, n - o < MT_Q8_BLOCK ? n - o : MT_Q8_BLOCK, codes + o);
}

void op_q8_dequantize_blocks(mt_backend *be, int is_signed, const uint8_t *codes, const float *absmax, size_t n,
                             float *x) {
    MT_DISPATCH(be, q8_dequantize_blocks, be, is_signed, codes, absmax, n, x);
    q8_map q;
    build_map(is_signed, &q);
    for (size_t b = 0, o = 0; o < n; b++, o += MT_Q8_BLOCK)
        dequantize_with(&q, codes + o, absmax[b], n - o < MT_Q8_BLOCK ? n - o : MT_Q8_BLOCK, x + o);
}
