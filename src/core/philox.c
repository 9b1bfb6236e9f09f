#include "core/philox.h"
#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

mt_u32x4 mt_philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    mt_u32x4 out = {{c0, c1, c2, c3}};
    return out;
}

uint32_t mt_name_hash(const char *name) {
    uint32_t h = 2166136261u;
    for (const unsigned char *s = (const unsigned char *)name; *s; s++) {
        h ^= *s;
        h *= 16777619u;
    }
    return h;
}

/* Domain tags keep init and dropout streams apart. */
#define MT_TAG_INIT 0x494E4954u

static inline float normal_of(uint64_t e, uint32_t name_h, uint64_t seed) {
    uint64_t pair = e >> 1;
    mt_u32x4 r = mt_philox4x32((uint32_t)pair, (uint32_t)(pair >> 32), name_h, MT_TAG_INIT,
                               (uint32_t)seed, (uint32_t)(seed >> 32));
    float u1 = mt_u32_to_unit(r.v[0]), u2 = mt_u32_to_unit(r.v[1]);
    float rad = sqrtf(-2.0f * logf(u1));
    float ang = 6.28318530717958647692f * u2;
    return (e & 1) ? rad * sinf(ang) : rad * cosf(ang);
}

void mt_init_normal(float *dst, size_t n, uint64_t first, uint64_t seed, const char *name, float std) {
    uint32_t h = mt_name_hash(name);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] = std * normal_of(first + i, h, seed);
}

void mt_init_uniform(float *dst, size_t n, uint64_t first, uint64_t seed, const char *name, float bound) {
    uint32_t h = mt_name_hash(name);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint64_t e = first + i;
        mt_u32x4 r = mt_philox4x32((uint32_t)e, (uint32_t)(e >> 32), h, MT_TAG_INIT ^ 0x55u, (uint32_t)seed,
                                   (uint32_t)(seed >> 32));
        dst[i] = bound * (2.0f * mt_u32_to_unit(r.v[0]) - 1.0f);
    }
}

void mt_init_normal_2d(float *dst, int64_t rows, int64_t cols, int64_t row0, int64_t col0,
                       int64_t full_cols, uint64_t seed, const char *name, float std) {
    uint32_t h = mt_name_hash(name);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[r * cols + c] = std * normal_of((uint64_t)(row0 + r) * (uint64_t)full_cols + (uint64_t)(col0 + c), h, seed);
}

/* Key and counter words of a dropout row: key = seed mixed with the step;
 * counter = (element block, pos | group<<16, sample low 32 bits,
 * layer<<8 | site | sample high bits<<20). Shared by both forms below. */
typedef struct {
    uint32_t k0, k1, c1, c2, c3, thr;
    float keep_scale;
} dropout_stream;

static dropout_stream dropout_stream_of(const mt_dropout *d, uint64_t sample, uint32_t pos, uint32_t group) {
    dropout_stream s;
    s.k0 = (uint32_t)d->seed ^ (d->step * 0x9E3779B1u);
    s.k1 = (uint32_t)(d->seed >> 32) + d->step;
    s.c1 = pos | (group << 16);
    s.c2 = (uint32_t)sample;
    s.c3 = (d->layer << 8) | d->site | ((uint32_t)(sample >> 32) << 20);
    s.thr = mt_dropout_threshold(d->p);
    s.keep_scale = 1.0f / (1.0f - d->p);
    return s;
}

void mt_dropout_row_scales(float *scale, const mt_dropout *d, uint64_t sample, uint32_t pos,
                           uint32_t group, uint32_t elem0, int n) {
    dropout_stream st = dropout_stream_of(d, sample, pos, group);
    int j = 0;
    while (j < n) {
        uint32_t e = elem0 + (uint32_t)j;
        mt_u32x4 r = mt_philox4x32(e >> 2, st.c1, st.c2, st.c3, st.k0, st.k1);
        for (uint32_t q = e & 3; q < 4 && j < n; q++, j++) scale[j] = r.v[q] >= st.thr ? st.keep_scale : 0.0f;
    }
}

/* One Philox4x32 round written on scalars so that `omp simd` vectorises a
 * loop over blocks (mt_philox4x32 above is the reference form). */
#define PH_ROUND(x0, x1, x2, x3, y0, y1)                                                      \
    do {                                                                                      \
        uint64_t p0_ = (uint64_t)PHILOX_M0 * x0, p1_ = (uint64_t)PHILOX_M1 * x2;              \
        uint32_t n0_ = (uint32_t)(p1_ >> 32) ^ x1 ^ y0, n2_ = (uint32_t)(p0_ >> 32) ^ x3 ^ y1; \
        x1 = (uint32_t)p1_;                                                                   \
        x3 = (uint32_t)p0_;                                                                   \
        x0 = n0_;                                                                             \
        x2 = n2_;                                                                             \
        y0 += PHILOX_W0;                                                                      \
        y1 += PHILOX_W1;                                                                      \
    } while (0)

void mt_dropout_block_scales(float *restrict scale, const mt_dropout *d, uint64_t sample, uint32_t pos,
                             uint32_t group, uint32_t block0, int nblk) {
    const dropout_stream st = dropout_stream_of(d, sample, pos, group);
#pragma omp simd
    for (int k = 0; k < nblk; k++) {
        uint32_t x0 = block0 + (uint32_t)k, x1 = st.c1, x2 = st.c2, x3 = st.c3, y0 = st.k0, y1 = st.k1;
#pragma GCC unroll 10
        for (int r = 0; r < 10; r++) PH_ROUND(x0, x1, x2, x3, y0, y1);
        scale[4 * k + 0] = x0 >= st.thr ? st.keep_scale : 0.0f;
        scale[4 * k + 1] = x1 >= st.thr ? st.keep_scale : 0.0f;
        scale[4 * k + 2] = x2 >= st.thr ? st.keep_scale : 0.0f;
        scale[4 * k + 3] = x3 >= st.thr ? st.keep_scale : 0.0f;
    }
}
