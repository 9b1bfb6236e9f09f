/* Array conversions between fp32 and bf16 / fp16 (semantics in dtype.h).
 *
 * Each kernel converts 16 elements per step with AVX-512, the last partial
 * step through masked loads and stores, so there is no scalar tail. Without
 * the instructions (another -march) the scalar reference functions run.
 * Large arrays are split over the threads in one parallel region: the
 * conversion is memory-bound, and one core does not saturate the memory
 * bandwidth. */
#include "core/dtype.h"
#include "core/error.h"
#include <omp.h>
#include <string.h>
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define MT_DTYPE_AVX512 1
#endif

const char *mt_dtype_name(mt_dtype t) {
    switch (t) {
    case MT_FP32: return "fp32";
    case MT_BF16: return "bf16";
    case MT_FP16: return "fp16";
    }
    return "?";
}

int mt_dtype_parse(const char *s, mt_dtype *t) {
    static const mt_dtype all[] = {MT_FP32, MT_BF16, MT_FP16};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (s && strcmp(s, mt_dtype_name(all[i])) == 0) {
            *t = all[i];
            return 0;
        }
    return -1;
}

size_t mt_dtype_size(mt_dtype t) {
    switch (t) {
    case MT_FP32: return 4;
    case MT_BF16: return 2;
    case MT_FP16: return 2;
    }
    return 0;
}

#ifdef MT_DTYPE_AVX512
/* Each kernel is one 16-lane step under a lane mask, run unmasked (the
 * all-ones mask folds away) over the whole vectors and once masked for the
 * tail: a mask computed in every iteration halved the L1 rate (measured). */
static inline __mmask16 tail_mask(size_t left) { return (__mmask16)((1u << left) - 1u); } /* left < 16 */
#define MT_DTYPE_LOOP(step, dst, src, n)                                                  \
    do {                                                                              \
        size_t i_ = 0;                                                                \
        for (; i_ + 16 <= (n); i_ += 16) step((dst) + i_, (src) + i_, (__mmask16)0xffff); \
        if (i_ < (n)) step((dst) + i_, (src) + i_, tail_mask((n) - i_));              \
    } while (0)
#endif

#if defined(MT_DTYPE_AVX512) && defined(MT_BF16_X16)
static inline void fp32_to_bf16_step(mt_bf16 *dst, const float *src, __mmask16 k) {
    _mm256_mask_storeu_epi16(dst, k, mt_fp32_to_bf16_x16(_mm512_maskz_loadu_ps(k, src)));
}
#endif

static void fp32_to_bf16(void *dstv, const void *srcv, size_t n) {
    mt_bf16 *dst = dstv;
    const float *src = srcv;
#if defined(MT_DTYPE_AVX512) && defined(MT_BF16_X16)
    MT_DTYPE_LOOP(fp32_to_bf16_step, dst, src, n);
#else
    for (size_t i = 0; i < n; i++) dst[i] = mt_fp32_to_bf16(src[i]);
#endif
}

#ifdef MT_DTYPE_AVX512
static inline void bf16_to_fp32_step(float *dst, const mt_bf16 *src, __mmask16 k) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, src));
    _mm512_mask_storeu_ps(dst, k, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
}

static inline void fp32_to_fp16_step(mt_fp16 *dst, const float *src, __mmask16 k) {
    __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, src), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(dst, k, h);
}

static inline void fp16_to_fp32_step(float *dst, const mt_fp16 *src, __mmask16 k) {
    _mm512_mask_storeu_ps(dst, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, src)));
}
#endif

static void bf16_to_fp32(void *dstv, const void *srcv, size_t n) {
    float *dst = dstv;
    const mt_bf16 *src = srcv;
#ifdef MT_DTYPE_AVX512
    MT_DTYPE_LOOP(bf16_to_fp32_step, dst, src, n);
#else
    for (size_t i = 0; i < n; i++) dst[i] = mt_bf16_to_fp32(src[i]);
#endif
}

static void fp32_to_fp16(void *dstv, const void *srcv, size_t n) {
    mt_fp16 *dst = dstv;
    const float *src = srcv;
#ifdef MT_DTYPE_AVX512
    MT_DTYPE_LOOP(fp32_to_fp16_step, dst, src, n);
#else
    for (size_t i = 0; i < n; i++) dst[i] = mt_fp32_to_fp16(src[i]);
#endif
}

static void fp16_to_fp32(void *dstv, const void *srcv, size_t n) {
    float *dst = dstv;
    const mt_fp16 *src = srcv;
#ifdef MT_DTYPE_AVX512
    MT_DTYPE_LOOP(fp16_to_fp32_step, dst, src, n);
#else
    for (size_t i = 0; i < n; i++) dst[i] = mt_fp16_to_fp32(src[i]);
#endif
}

/* Below this many elements one thread converts (the parallel region's
 * start costs about as much as converting a few thousand elements). */
#define PAR_MIN ((size_t)1 << 16)
/* Thread ranges start at multiples of this many elements (a 64-byte line
 * of the 32-bit side), so no two threads write one cache line. */
#define PAR_GRAIN ((size_t)64)

/* dst[i] = convert(src[i]) for i < n; dsz and ssz are the element sizes
 * in bytes. The kernels take untyped pointers so one splitter serves all. */
typedef void (*convert_fn)(void *dst, const void *src, size_t n);

static void convert_parallel(convert_fn f, void *dst, size_t dsz, const void *src, size_t ssz, size_t n) {
    if (n < PAR_MIN) { /* directly: even a parallel region with if (0) costs ~1 us */
        f(dst, src, n);
        return;
    }
    size_t nb = (n + PAR_GRAIN - 1) / PAR_GRAIN;
#pragma omp parallel
    {
        size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        size_t lo = nb * t / nt * PAR_GRAIN, hi = nb * (t + 1) / nt * PAR_GRAIN;
        if (hi > n) hi = n;
        if (hi > lo) f((char *)dst + lo * dsz, (const char *)src + lo * ssz, hi - lo);
    }
}

void mt_convert_fp32_to_bf16(mt_bf16 *dst, const float *src, size_t n) { convert_parallel(fp32_to_bf16, dst, 2, src, 4, n); }
void mt_convert_bf16_to_fp32(float *dst, const mt_bf16 *src, size_t n) { convert_parallel(bf16_to_fp32, dst, 4, src, 2, n); }
void mt_convert_fp32_to_fp16(mt_fp16 *dst, const float *src, size_t n) { convert_parallel(fp32_to_fp16, dst, 2, src, 4, n); }
void mt_convert_fp16_to_fp32(float *dst, const mt_fp16 *src, size_t n) { convert_parallel(fp16_to_fp32, dst, 4, src, 2, n); }

/* ---- mixed-precision storage: 16-bit arrays that accumulate fp32 values ----
 * Chunks of ACC_CHUNK go through an fp32 buffer on the stack, so the same
 * vectorised conversions serve (the add itself vectorises). */
#define ACC_CHUNK ((size_t)512)

#define MT_DEFINE_ACC(name, widen, narrow)                                           \
    static void name(void *accv, const void *xv, size_t n) {                        \
        uint16_t *acc = accv;                                                        \
        const float *x = xv;                                                         \
        float buf[ACC_CHUNK];                                                        \
        for (size_t b = 0; b < n; b += ACC_CHUNK) {                                  \
            size_t k = n - b < ACC_CHUNK ? n - b : ACC_CHUNK;                        \
            widen(buf, acc + b, k);                                                  \
            for (size_t i = 0; i < k; i++) buf[i] += x[b + i];                       \
            narrow(acc + b, buf, k);                                                 \
        }                                                                            \
    }
#define MT_DEFINE_WIDEN_ADD(name, widen)                                             \
    static void name(void *dstv, const void *srcv, size_t n) {                      \
        float *dst = dstv;                                                           \
        const uint16_t *src = srcv;                                                  \
        float buf[ACC_CHUNK];                                                        \
        for (size_t b = 0; b < n; b += ACC_CHUNK) {                                  \
            size_t k = n - b < ACC_CHUNK ? n - b : ACC_CHUNK;                        \
            widen(buf, src + b, k);                                                  \
            for (size_t i = 0; i < k; i++) dst[b + i] += buf[i];                     \
        }                                                                            \
    }
MT_DEFINE_ACC(acc_bf16, bf16_to_fp32, fp32_to_bf16)
MT_DEFINE_ACC(acc_fp16, fp16_to_fp32, fp32_to_fp16)
MT_DEFINE_WIDEN_ADD(add_bf16, bf16_to_fp32)
MT_DEFINE_WIDEN_ADD(add_fp16, fp16_to_fp32)

/* One of the bf16 / fp16 kernels by t, split over the threads. */
static void run16(const char *fn, mt_dtype t, convert_fn bf16, convert_fn fp16, void *dst, size_t dsz,
                  const void *src, size_t ssz, size_t n) {
    if (t != MT_BF16 && t != MT_FP16) mt_die("%s: %s is not a 16-bit type", fn, mt_dtype_name(t));
    convert_parallel(t == MT_BF16 ? bf16 : fp16, dst, dsz, src, ssz, n);
}

void mt_convert_to_16(mt_dtype t, uint16_t *dst, const float *src, size_t n) {
    run16(__func__, t, fp32_to_bf16, fp32_to_fp16, dst, 2, src, 4, n);
}

void mt_convert_from_16(mt_dtype t, float *dst, const uint16_t *src, size_t n) {
    run16(__func__, t, bf16_to_fp32, fp16_to_fp32, dst, 4, src, 2, n);
}

void mt_accumulate_16(mt_dtype t, uint16_t *acc, const float *x, size_t n) {
    run16(__func__, t, acc_bf16, acc_fp16, acc, 2, x, 4, n);
}

void mt_add_from_16(mt_dtype t, float *dst, const uint16_t *src, size_t n) {
    run16(__func__, t, add_bf16, add_fp16, dst, 4, src, 2, n);
}

void mt_transpose_f32(float *dst, const float *src, int64_t rows, int64_t cols) {
    const int64_t B = 32;
    for (int64_t r0 = 0; r0 < rows; r0 += B)
        for (int64_t c0 = 0; c0 < cols; c0 += B) {
            int64_t r1 = r0 + B < rows ? r0 + B : rows, c1 = c0 + B < cols ? c0 + B : cols;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) dst[c * rows + r] = src[r * cols + c];
        }
}
