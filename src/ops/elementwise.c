/* Element-wise helpers on flat fp32 arrays. One static-schedule parallel
 * region per call; the inner loops vectorise. op_sumsq reduces per-thread
 * double partials in thread order, so it is deterministic for a fixed
 * thread count. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <omp.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#define PAR_MIN 32768 /* below this, threads cost more than they save */

void op_add(mt_backend *be, float *out, const float *a, const float *b, size_t n) {
    MT_DISPATCH(be, add, be, out, a, b, n);
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void op_residual_add(mt_backend *be, float *res, const float *x, const float *branch, const float *bias, int N, int C) {
    MT_DISPATCH(be, residual_add, be, res, x, branch, bias, N, C);
    if (!bias) {
        op_add(be, res, x, branch, (size_t)N * C);
        return;
    }
#pragma omp parallel for schedule(static) if ((size_t)N * C >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *xi = x + (size_t)n * C, *br = branch + (size_t)n * C;
        float *r = res + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) r[c] = xi[c] + (br[c] + bias[c]);
    }
}

void op_accumulate(mt_backend *be, float *acc, const float *x, size_t n) {
    MT_DISPATCH(be, accumulate, be, acc, x, n);
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) acc[i] += x[i];
}

void op_zero(mt_backend *be, float *x, size_t n) {
    MT_DISPATCH(be, zero, be, x, n);
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] = 0.0f;
}

void op_scale(mt_backend *be, float *x, float s, size_t n) {
    MT_DISPATCH(be, scale, be, x, s, n);
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

#ifdef __AVX512F__
/* Squares of 32 floats (w0 = elements 0-15, w1 = 16-31) added in double into
 * four accumulators, one per 8 elements: independent chains, so the
 * additions pipeline (one chain ran at the add latency, about half the rate
 * the memory delivers, measured on the mixed-precision drain). Both sums
 * below go through this and sq_total, so they add in the same order. */
static inline void sq_add32(__m512d a[4], __m512 w0, __m512 w1) {
    const __m512 w[2] = {w0, w1};
    for (int h = 0; h < 2; h++) {
        __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(w[h]));
        __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(w[h]), 1)));
        a[2 * h] = _mm512_fmadd_pd(lo, lo, a[2 * h]);
        a[2 * h + 1] = _mm512_fmadd_pd(hi, hi, a[2 * h + 1]);
    }
}

static inline double sq_total(const __m512d a[4]) {
    return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a[0], a[1]), _mm512_add_pd(a[2], a[3])));
}
#endif

/* Sum of squares of f[0, k) in double, in a fixed order: 32 elements at a
 * time into sq_add32's accumulators, then their total and the tail. */
static double sumsq_f32(const float *f, size_t k) {
    size_t i = 0;
    double s = 0.0;
#ifdef __AVX512F__
    __m512d a[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
    for (; i + 32 <= k; i += 32) sq_add32(a, _mm512_loadu_ps(f + i), _mm512_loadu_ps(f + i + 16));
    s = sq_total(a);
#endif
    for (; i < k; i++) s += (double)f[i] * (double)f[i];
    return s;
}

#ifdef MT_BF16_X16
/* dst[0, k) = src[0, k) rounded to bf16; returns the sum of squares of the
 * rounded values in sumsq_f32's order -- the same double as rounding,
 * widening and summing in passes -- taken from registers. dst is written
 * with streaming stores where it is 32-byte aligned: the drain's 16-bit
 * gradient is next read by the optimizer, long after, and skipping the
 * read-for-ownership of its lines made the memory-bound pass about 20%
 * faster (measured, 124M elements). */
static double round_bf16_sumsq(uint16_t *dst, const float *src, size_t k) {
    size_t i = 0;
    int stream = ((uintptr_t)dst & 31) == 0; /* dst + i keeps the alignment: i steps by 32 elements */
    __m512d a[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
    for (; i + 32 <= k; i += 32) {
        __m256i h0 = mt_fp32_to_bf16_x16(_mm512_loadu_ps(src + i));
        __m256i h1 = mt_fp32_to_bf16_x16(_mm512_loadu_ps(src + i + 16));
        if (stream) {
            _mm256_stream_si256((__m256i *)(dst + i), h0);
            _mm256_stream_si256((__m256i *)(dst + i + 16), h1);
        } else {
            _mm256_storeu_si256((__m256i *)(dst + i), h0);
            _mm256_storeu_si256((__m256i *)(dst + i + 16), h1);
        }
        sq_add32(a, mt_bf16_to_fp32_x16(h0), mt_bf16_to_fp32_x16(h1));
    }
    if (stream) _mm_sfence(); /* streaming stores are weakly ordered: visible before anyone reads dst */
    double s = sq_total(a);
    for (; i < k; i++) {
        dst[i] = mt_fp32_to_bf16(src[i]);
        double w = (double)mt_bf16_to_fp32(dst[i]);
        s += w * w;
    }
    return s;
}
#endif

/* Sum of squares of x[lo, hi) in double; dt says what x holds (fp32, or
 * 16-bit values, widened 1024 elements at a time through a stack buffer);
 * with round_from, x[lo, hi) is first set to round_from's values rounded to
 * dt, chunk by chunk, so the sum reads the rounded chunk from L1. */
static double sumsq_range(const void *x, mt_dtype dt, const float *round_from, size_t lo, size_t hi) {
    if (dt == MT_FP32) return sumsq_f32((const float *)x + lo, hi - lo);
    enum { CH = 1024 };
    float buf[CH];
    double s = 0.0;
    for (size_t b = lo; b < hi; b += CH) {
        size_t k = hi - b < CH ? hi - b : CH;
#ifdef MT_BF16_X16
        if (round_from && dt == MT_BF16) {
            s += round_bf16_sumsq((uint16_t *)x + b, round_from + b, k);
            continue;
        }
#endif
        if (round_from) mt_convert_to_16(dt, (uint16_t *)x + b, round_from + b, k);
        mt_convert_from_16(dt, buf, (const uint16_t *)x + b, k);
        s += sumsq_f32(buf, k);
    }
    return s;
}

static double sumsq(const void *x, mt_dtype dt, const float *round_from, size_t n) {
    enum { MAXT = 256 };
    double part[MAXT];
    int nt = omp_get_max_threads();
    if (nt > MAXT) nt = MAXT;
    if (n < PAR_MIN) nt = 1;
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        size_t lo = n * (size_t)t / (size_t)T, hi = n * (size_t)(t + 1) / (size_t)T;
        part[t] = sumsq_range(x, dt, round_from, lo, hi);
#pragma omp barrier
#pragma omp single
        {
            double tot = 0.0;
            for (int i = 0; i < T; i++) tot += part[i];
            part[0] = tot;
        }
    }
    return part[0];
}

double op_sumsq(mt_backend *be, const float *x, size_t n) {
    MT_DISPATCH_RET(be, sumsq, be, x, n);
    return sumsq(x, MT_FP32, NULL, n);
}

double op_sumsq_16(mt_backend *be, mt_dtype dt, const uint16_t *x, size_t n) {
    MT_DISPATCH_RET(be, sumsq_16, be, dt, x, n);
    return sumsq(x, dt, NULL, n);
}

/* The same split and order as op_sumsq_16, so the same double. */
double op_round_to_16_sumsq(mt_backend *be, mt_dtype dt, uint16_t *dst, const float *src, size_t n) {
    MT_DISPATCH_RET(be, round_to_16_sumsq, be, dt, dst, src, n);
    return sumsq(dst, dt, src, n);
}
