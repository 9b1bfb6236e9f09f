/* Counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
 * Every random number in meshtrain is a pure function of a key (from the
 * seed) and a counter built from global coordinates, so any layout of the
 * computation draws the same numbers for the same logical element. */
#ifndef MT_CORE_PHILOX_H
#define MT_CORE_PHILOX_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t v[4];
} mt_u32x4;

mt_u32x4 mt_philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1);

/* 32-bit FNV-1a of a tensor name: the name's part of the init counter. */
uint32_t mt_name_hash(const char *name);

/* Uniform in (0, 1] from 32 random bits. */
static inline float mt_u32_to_unit(uint32_t x) { return ((float)(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }

/* Fills dst[i] = std * N(0,1) for the logical elements global_index[i] =
 * first + i of the tensor `name` (row-major over its full, unsharded shape).
 * Element e uses the pair of Box-Muller normals from counter (e/2, name). */
void mt_init_normal(float *dst, size_t n, uint64_t first, uint64_t seed, const char *name, float std);

/* dst[i] = U(-bound, bound) for logical elements first + i of `name`
 * (one Philox draw per element; its own stream, apart from the normals). */
void mt_init_uniform(float *dst, size_t n, uint64_t first, uint64_t seed, const char *name, float bound);

/* Same, for elements whose global indices are given by a 2-D slice: rows
 * [row0, row0+rows) and columns [col0, col0+cols) of a tensor with
 * `full_cols` columns; dst is the rows x cols slice, row-major. */
void mt_init_normal_2d(float *dst, int64_t rows, int64_t cols, int64_t row0, int64_t col0,
                       int64_t full_cols, uint64_t seed, const char *name, float std);

/* Dropout keep decision. Coordinates are global: the sample's index in the
 * whole run's data order, the layer, the dropout site, the position (query
 * position for attention), the group (head for attention, 0 otherwise) and
 * the element (feature, or key position). Returns 1 when kept. Four
 * consecutive elements share one Philox call (block = element / 4). */
typedef struct {
    float p;          /* drop probability; 0 disables */
    uint64_t seed;
    uint32_t step;    /* optimizer step */
    uint32_t layer;   /* layer index (or 0xFFF for the embedding) */
    uint32_t site;    /* MT_DROPOUT_* */
} mt_dropout;

enum { MT_DROPOUT_EMBED = 1, MT_DROPOUT_ATTN_PROBS = 2, MT_DROPOUT_ATTN_RESID = 3, MT_DROPOUT_MLP_RESID = 4 };

/* Threshold such that a 32-bit draw u is kept iff u >= threshold. */
static inline uint32_t mt_dropout_threshold(float p) {
    double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}

/* Writes keep[j] (0/1 as float scaled by 1/(1-p): 0 or 1/(1-p)) for
 * elements [elem0, elem0+n) of the (sample, pos, group) row. */
void mt_dropout_row_scales(float *scale, const mt_dropout *d, uint64_t sample, uint32_t pos,
                           uint32_t group, uint32_t elem0, int n);
/* The same scales for whole blocks of four: elements [4*block0,
 * 4*(block0+nblk)), 4*nblk floats written. Evaluates many Philox blocks per
 * vector instruction (the scalar form costs more than attention's GEMMs). */
void mt_dropout_block_scales(float *scale, const mt_dropout *d, uint64_t sample, uint32_t pos,
                             uint32_t group, uint32_t block0, int nblk);

#endif
