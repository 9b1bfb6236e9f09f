/* Tensor-core tiles for the kernels: a warp multiplies 16 x 16 bf16 tiles
 * into a 16 x 16 fp32 accumulator (16-bit operands, fp32 accumulation).
 * Under nvcc these are CUDA's warp matrix functions (<mma.h>, nvcuda::wmma);
 * in the emulation (make gpu-emu) every lane holds the whole tile and
 * computes the product itself, the k terms summed in order in fp32 (the
 * products of two bf16 values are exact in fp32), so a kernel written
 * against these names runs unchanged on both. Like their CUDA forms, each
 * call is made by all 32 lanes of the warp together, and the memory a tile
 * is loaded from or stored to is shared or global memory that the warp's
 * lanes agree on.
 *   mt_tc_a_row / mt_tc_a_col: a 16 x 16 left operand stored row- / column-major
 *   mt_tc_b_row / mt_tc_b_col: a 16 x 16 right operand stored row- / column-major
 *   mt_tc_acc:                 a 16 x 16 fp32 accumulator
 * Loads take bf16 values as uint16_t (core/dtype.h's bits) with a leading
 * dimension ld in elements, a multiple of 8, at a 32-byte aligned address;
 * accumulators load and store fp32 row-major, ld a multiple of 4. */
#ifndef MT_CUDA_TENSOR_CORE_H
#define MT_CUDA_TENSOR_CORE_H
#include "cuda/compat.h"
#include "cuda/device_math.h"
#include <stdint.h>

/* The roundings and exponential of the tile kernels: fp32 -> bf16 round to nearest even (the
 * hardware's conversion under nvcc: bitwise device_math.h's integer form but for NaN payloads, which
 * attention propagates either way) and a fast exp (the hardware's ex2.approx under nvcc, ~2 ulp;
 * expf in the emulation): the tile products round p to bf16, so the CPU's exact exp form buys nothing
 * there, and the forward and backward use the same one. */
#ifndef MT_CUDA_EMU
#include <cuda_bf16.h>
__device__ static inline uint16_t mt_tc_to_bf16(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
__device__ static inline float mt_tc_exp(float x) { return __expf(x); }
#include <mma.h>
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> mt_tc_a_row;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::col_major> mt_tc_a_col;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> mt_tc_b_row;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::col_major> mt_tc_b_col;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> mt_tc_acc;
template <class F> __device__ static inline void mt_tc_load(F &f, const uint16_t *p, int ld) {
    nvcuda::wmma::load_matrix_sync(f, (const __nv_bfloat16 *)p, (unsigned)ld);
}
__device__ static inline void mt_tc_zero(mt_tc_acc &c) { nvcuda::wmma::fill_fragment(c, 0.0f); }
__device__ static inline void mt_tc_load_acc(mt_tc_acc &c, const float *p, int ld) {
    nvcuda::wmma::load_matrix_sync(c, p, (unsigned)ld, nvcuda::wmma::mem_row_major);
}
__device__ static inline void mt_tc_store(float *p, const mt_tc_acc &c, int ld) {
    nvcuda::wmma::store_matrix_sync(p, c, (unsigned)ld, nvcuda::wmma::mem_row_major);
}
template <class A, class B> __device__ static inline void mt_tc_mma(mt_tc_acc &c, const A &a, const B &b) {
    nvcuda::wmma::mma_sync(c, a, b, c);
}
#else
static inline uint16_t mt_tc_to_bf16(float x) { return mt_dev_fp32_to_bf16(x); }
static inline float mt_tc_exp(float x) { return expf(x); }
/* the emulated tiles: element (r, k) of the operand, whatever its storage */
template <int COL> struct mt_tc_tile16 {
    uint16_t v[16][16];
};
typedef mt_tc_tile16<0> mt_tc_a_row;
typedef mt_tc_tile16<1> mt_tc_a_col;
typedef mt_tc_tile16<0> mt_tc_b_row;
typedef mt_tc_tile16<1> mt_tc_b_col;
struct mt_tc_acc {
    float v[16][16];
};
/* A load or store waits for the warp's lanes first (CUDA's *_sync forms do); a store writes only the
 * lane's share of the tile (element r * 16 + c when it is the lane's modulo 32), so a kernel that reads
 * another lane's stored elements without a __syncwarp reads stale memory under some schedule. */
template <int COL> static inline void mt_tc_load(mt_tc_tile16<COL> &f, const uint16_t *p, int ld) {
    ::mt_emu::sync_warp();
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.v[r][c] = COL ? p[(size_t)c * ld + r] : p[(size_t)r * ld + c];
}
static inline void mt_tc_zero(mt_tc_acc &c) {
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 16; k++) c.v[r][k] = 0.0f;
}
static inline void mt_tc_load_acc(mt_tc_acc &c, const float *p, int ld) {
    ::mt_emu::sync_warp();
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 16; k++) c.v[r][k] = p[(size_t)r * ld + k];
}
static inline void mt_tc_store(float *p, const mt_tc_acc &c, int ld) {
    ::mt_emu::sync_warp();
    int lane = ::mt_emu::lane_id() % 32;
    for (int e = lane; e < 256; e += 32) p[(size_t)(e / 16) * ld + e % 16] = c.v[e / 16][e % 16];
}
template <int CA, int CB> static inline void mt_tc_mma(mt_tc_acc &c, const mt_tc_tile16<CA> &a, const mt_tc_tile16<CB> &b) {
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float s = c.v[r][n];
            for (int k = 0; k < 16; k++) s += mt_dev_bf16_to_fp32(a.v[r][k]) * mt_dev_bf16_to_fp32(b.v[k][n]);
            c.v[r][n] = s;
        }
}
#endif

/* Register fragments of the m16n8k16 product (PTX mma.sync.aligned.m16n8k16.row.col with bf16
 * operands and an fp32 accumulator): operands and accumulator live in the lanes' registers in the
 * order the PTX ISA documents, so a kernel works on the accumulator's elements itself (the online
 * softmax in registers) and passes a product's accumulator on as the next product's left operand
 * without shared memory. With g = lane / 4 and t = lane % 4, (row, column) of each register:
 *   A, 16 x 16 (m x k):  a[0] (g, 2t and 2t+1), a[1] (g+8, 2t..), a[2] (g, 2t+8..), a[3] (g+8, 2t+8..)
 *   B, 16 x 8 (k x n):   b[0] (2t and 2t+1, g), b[1] (2t+8 and 2t+9, g)
 *   C, 16 x 8 fp32:      c[0], c[1] (g, 2t and 2t+1), c[2], c[3] (g+8, 2t and 2t+1)
 * each uint32_t holding two bf16 bit patterns, the lower-indexed element in the low half. So the
 * accumulators of two adjacent n-blocks (columns 0-7 and 8-15), packed, are exactly an A fragment:
 * a[0] = c0[0..1], a[1] = c0[2..3], a[2] = c1[0..1], a[3] = c1[2..3]. All 32 lanes call it together. */
MT_HD static inline uint32_t mt_tc_pack2(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }
__device__ static inline uint32_t mt_tc_pack_bf16x2(float lo, float hi) {
    return mt_tc_pack2(mt_tc_to_bf16(lo), mt_tc_to_bf16(hi));
}
#ifndef MT_CUDA_EMU
__device__ static inline void mt_mma_16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#else
/* every lane deposits its registers, then computes its own four sums from the warp's (k in order, in
 * fp32: the products of two bf16 values are exact) */
static inline void mt_mma_16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    struct regs {
        uint32_t a[4], b[2];
    } mine = {{a[0], a[1], a[2], a[3]}, {b[0], b[1]}}, all[32];
    ::mt_emu::warp_gather(&mine, sizeof mine, all);
    const int lane = ::mt_emu::lane_id() % 32, g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
        float s = c[e];
        for (int k = 0; k < 16; k++) {
            const int src = k % 8 / 2, hi = k % 2; // the lane of the quad holding column / row k
            uint32_t ar = all[(row % 8) * 4 + src].a[row / 8 + 2 * (k / 8)];
            uint32_t br = all[col * 4 + src].b[k / 8];
            s += mt_dev_bf16_to_fp32((uint16_t)(hi ? ar >> 16 : ar & 0xffffu)) *
                 mt_dev_bf16_to_fp32((uint16_t)(hi ? br >> 16 : br & 0xffffu));
        }
        c[e] = s;
    }
}
#endif

/* Fragment loads from shared memory (PTX ldmatrix.m8n8.x4.b16): four 8 x 8 bf16 matrices, one register
 * a lane of each; lane l gives the address of row l % 8 of matrix l / 8 (16-byte aligned). Without
 * .trans a lane receives (row g, columns 2t and 2t+1) of each matrix, with .trans (rows 2t and 2t + 1,
 * column g): the A and B layouts above, from row-major tiles, so a right operand whose k index runs
 * along the rows (V in P V) needs no transposed copy. One instruction instead of four 32-bit loads.
 * The three uses, for a tile at row stride ld (a multiple of 8), with lr = l % 8, lh = l / 8 % 2,
 * lq = l / 16 (mt_tc_ldsm_*):
 *   A (rows m0.., columns k0..k0+15):                 row m0 + lr + 8 lh, column k0 + 8 lq
 *   two B n-blocks from [n][k] (n0..n0+15, k0..):      row n0 + lr + 8 lq, column k0 + 8 lh
 *   two B n-blocks from [k][n], .trans (k0.., n0..):   row k0 + lr + 8 lh, column n0 + 8 lq
 * (a B pair: registers 0, 1 the n-block n0, registers 2, 3 the n-block n0 + 8). All 32 lanes together. */
#ifndef MT_CUDA_EMU
template <bool TRANS> __device__ static inline void mt_ldsm4(uint32_t r[4], const uint16_t *row) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a)
                     : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a)
                     : "memory");
}
#else
/* the warp's row addresses gathered, then each lane reads its elements */
template <bool TRANS> static inline void mt_ldsm4(uint32_t r[4], const uint16_t *row) {
    const uint16_t *rows[32];
    ::mt_emu::warp_gather(&row, sizeof row, rows);
    const int lane = ::mt_emu::lane_id() % 32, g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; i++)
        r[i] = TRANS ? mt_tc_pack2(rows[8 * i + 2 * t][g], rows[8 * i + 2 * t + 1][g])
                     : mt_tc_pack2(rows[8 * i + g][2 * t], rows[8 * i + g][2 * t + 1]);
}
#endif
__device__ static inline void mt_tc_ldsm_a(uint32_t a[4], const uint16_t *tile, int ld, int m0, int k0, int lane) {
    mt_ldsm4<false>(a, tile + (m0 + lane % 8 + 8 * (lane / 8 % 2)) * ld + k0 + 8 * (lane / 16));
}
__device__ static inline void mt_tc_ldsm_b_nk(uint32_t b[4], const uint16_t *tile, int ld, int n0, int k0, int lane) {
    mt_ldsm4<false>(b, tile + (n0 + lane % 8 + 8 * (lane / 16)) * ld + k0 + 8 * (lane / 8 % 2));
}
__device__ static inline void mt_tc_ldsm_b_kn(uint32_t b[4], const uint16_t *tile, int ld, int k0, int n0, int lane) {
    mt_ldsm4<true>(b, tile + (k0 + lane % 8 + 8 * (lane / 8 % 2)) * ld + n0 + 8 * (lane / 16));
}
#endif
