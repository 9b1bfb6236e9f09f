/* Asynchronous copies from global to shared memory (sm_80's cp.async): a thread issues 16-byte copies
 * that run while it computes, commits them as a group, and waits for all but the N most recent groups
 * before the block barrier after which any thread reads them. The tile kernels load the next tile this
 * way while they multiply the current one (double buffering without holding the tile in registers).
 * The emulation (cuda/emu/emu.h) queues each copy until the wait that covers it, so a read before the
 * wait or before the barrier reads stale memory there too. */
#ifndef MT_CUDA_ASYNC_COPY_H
#define MT_CUDA_ASYNC_COPY_H
#include "cuda/compat.h"
#include <stdint.h>

#ifndef MT_CUDA_EMU
/* 16 bytes, both addresses 16-byte aligned; .cg: through L2 only (a tile is read once per block) */
__device__ static inline void mt_cp_async16(void *shared_dst, const void *global_src) {
    unsigned s = (unsigned)__cvta_generic_to_shared(shared_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(global_src) : "memory");
}
__device__ static inline void mt_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int PENDING> __device__ static inline void mt_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}
#else
static inline void mt_cp_async16(void *shared_dst, const void *global_src) {
    ::mt_emu::async_copy(shared_dst, global_src, 16);
}
static inline void mt_cp_async_commit() { ::mt_emu::async_commit(); }
template <int PENDING> static inline void mt_cp_async_wait() { ::mt_emu::async_wait(PENDING); }
#endif

/* A ROWS x COLS bf16 tile (COLS a multiple of 8) from global rows at stride lds elements (16-byte aligned
 * rows) into shared memory at row stride ldd (a multiple of 8), issued by the block's NT threads together */
template <int ROWS, int COLS, int NT>
__device__ static inline void mt_cp_async_tile(uint16_t *dst, int ldd, const uint16_t *src, size_t lds) {
    constexpr int C8 = COLS / 8, N = ROWS * C8;
    static_assert(COLS % 8 == 0, "16-byte chunks");
    for (int e = (int)threadIdx.x; e < N; e += NT) {
        const int r = e / C8, c = 8 * (e % C8);
        mt_cp_async16(dst + r * ldd + c, src + r * lds + c);
    }
}
#endif
