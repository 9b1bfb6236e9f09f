/* Philox4x32-10 and the dropout keep decision of core/philox.c for host
 * and device code (header-only, MT_HD), so a kernel draws the same mask as
 * the CPU for the same global coordinates. tests/gpu/test_kernels.cu checks
 * both bitwise against core/philox.c. */
#ifndef MT_CUDA_PHILOX_DEVICE_H
#define MT_CUDA_PHILOX_DEVICE_H
#include "cuda/compat.h"
#include <stdint.h>

typedef struct {
    uint32_t v[4];
} mt_dev_u32x4;

MT_HD static inline mt_dev_u32x4 mt_dev_philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                                   uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    mt_dev_u32x4 out = {{c0, c1, c2, c3}};
    return out;
}

/* A dropout site's constants (from mt_dropout: p, seed, step, layer, site),
 * made on the host and passed to kernels by value. */
typedef struct {
    uint32_t k0, k1, c3_site, thr;
    float keep_scale;
    int on; /* p > 0 */
} mt_dev_dropout;

MT_HD static inline mt_dev_dropout mt_dev_dropout_make(float p, uint64_t seed, uint32_t step, uint32_t layer,
                                                       uint32_t site) {
    mt_dev_dropout d;
    d.k0 = (uint32_t)seed ^ (step * 0x9E3779B1u);
    d.k1 = (uint32_t)(seed >> 32) + step;
    d.c3_site = (layer << 8) | site;
    double t = (double)p * 4294967296.0;
    d.thr = t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
    d.keep_scale = 1.0f / (1.0f - p);
    d.on = p > 0.0f;
    return d;
}

/* The scale (0 or 1/(1-p)) of element elem of row (sample, pos, group), as
 * mt_dropout_row_scales: four elements share one Philox call. */
MT_HD static inline float mt_dev_dropout_scale(const mt_dev_dropout *d, uint64_t sample, uint32_t pos, uint32_t group,
                                               uint32_t elem) {
    mt_dev_u32x4 r = mt_dev_philox4x32(elem >> 2, pos | (group << 16), (uint32_t)sample,
                                       d->c3_site | ((uint32_t)(sample >> 32) << 20), d->k0, d->k1);
    return r.v[elem & 3] >= d->thr ? d->keep_scale : 0.0f;
}

#endif
