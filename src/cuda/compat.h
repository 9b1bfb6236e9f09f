/* What a kernel source includes instead of <cuda_runtime.h>: the CUDA
 * runtime under nvcc, the CPU emulation (cuda/emu/emu.h) when built with
 * -DMT_CUDA_EMU by the host compiler (`make gpu-emu`). Three macros have
 * a native form under nvcc and an emulated one:
 *   MT_HD                  __host__ __device__
 *   MT_LAUNCH(k, grid, block, shmem, stream, args...)   k<<<grid, block, shmem, stream>>>(args...)
 *   MT_DYNAMIC_SHARED(T, name)   the block's dynamic shared memory as T *name
 *   MT_UNROLL              #pragma unroll (the host compiler would warn about it) */
#ifndef MT_CUDA_COMPAT_H
#define MT_CUDA_COMPAT_H

#ifdef MT_CUDA_EMU
#include "cuda/emu/emu.h"
#define MT_LAUNCH(kernel, grid, block, shmem, stream, ...) \
    ::mt_emu::launch_kernel((grid), (block), (shmem), (stream), kernel, __VA_ARGS__)
#define MT_DYNAMIC_SHARED(T, name) T *name = (T *)::mt_emu::dynamic_shared()
#define MT_UNROLL
#else
#include <cuda_runtime.h>
#define MT_LAUNCH(kernel, grid, block, shmem, stream, ...) kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
#define MT_DYNAMIC_SHARED(T, name)                                 \
    extern __shared__ __align__(16) unsigned char mt_dyn_smem_[]; \
    T *name = (T *)mt_dyn_smem_
#define MT_UNROLL _Pragma("unroll")
#endif

#define MT_HD __host__ __device__

#endif
