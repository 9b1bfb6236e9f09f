/* meshtrain's CUDA-on-CPU emulation: the part of the CUDA runtime and
 * language our kernels use, for the host C++ compiler, so that the same
 * .cu sources run in CI without a GPU (`make gpu-emu`). Written for this
 * project; not a general CUDA implementation.
 *
 * Execution model:
 *  - a launch is a task on its stream's queue; every stream (the legacy
 *    default stream included) has its own worker thread, so launches,
 *    copies and memsets run ASYNCHRONOUSLY to the host and to each other,
 *    and a missing cudaStreamSynchronize / event wait reads stale data;
 *  - a block's threads run as fibers (ucontext) on the worker; a fiber
 *    runs until it reaches a barrier (__syncthreads, __syncwarp, a warp
 *    shuffle) or returns; the barrier releases when every thread of the
 *    block (of the warp) that has not returned arrived; threads waiting at
 *    different __syncthreads lines stop the run ("divergent __syncthreads");
 *  - the order in which runnable fibers are resumed is the schedule,
 *    chosen at run time by MT_EMU_SCHEDULE: "forward" (default: thread 0
 *    first) or "reverse" (the last thread of the block first). A missing
 *    barrier between a write and another thread's read gives a wrong
 *    result under at least one of them (tests/gpu/test_emu.cu plants two);
 *  - device memory is host memory (cudaMalloc fills it with 0xFF bytes,
 *    NaN as floats, so a kernel that reads what no one wrote shows), of
 *    MT_EMU_GPU_BYTES in all (default 64 GiB; cudaMalloc fails beyond);
 *    copies check that the device side lies in an allocation.
 * Like the CUDA runtime it emulates, it keeps process-wide state (the
 * allocation table, the streams, the last error per host thread).
 *
 * Kernel sources use three macros of cuda/compat.h that have a native
 * form under nvcc: MT_LAUNCH (a <<<>>> launch), MT_DYNAMIC_SHARED (extern
 * __shared__) and MT_HD (__host__ __device__). Tensor cores: the warp tile
 * operations of cuda/tensor_core.h (their emulated form is there);
 * asynchronous copies to shared memory: cuda/async_copy.h. Not emulated:
 * other inline PTX, atomics, textures, cooperative groups. */
#ifndef MT_CUDA_EMU_EMU_H
#define MT_CUDA_EMU_EMU_H
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
/* all fibers of a block share one OS thread, so a thread-local static is
 * one copy per block in flight */
#define __shared__ static thread_local

struct uint3 {
    unsigned x, y, z;
};
/* CUDA's vector types the kernels load and store with (sizes and alignments as CUDA's) */
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) ushort4 {
    unsigned short x, y, z, w;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorLaunchFailure = 719
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef void (*cudaHostFn_t)(void *userData);
#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0
#define cudaEventDisableTiming 0x2

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int warpSize, maxThreadsPerBlock, multiProcessorCount, major, minor;
};

cudaError_t cudaMalloc(void **ptr, size_t bytes);
template <typename T> static inline cudaError_t cudaMalloc(T **ptr, size_t bytes) {
    return cudaMalloc((void **)ptr, bytes);
}
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMallocHost(void **ptr, size_t bytes);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = 0);
cudaError_t cudaMemset(void *dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s = 0);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *userData);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
/* A kernel may launch with more than 48 KiB of dynamic shared memory only after this raised its
 * limit (as on a GPU); the emulation keeps the limit per kernel. */
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value);
template <class... P> static inline cudaError_t cudaFuncSetAttribute(void (*func)(P...), cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void *)func, attr, value);
}

namespace mt_emu {
/* The launch: checks the configuration (cudaGetLastError reports a bad
 * one), then queues the grid on the stream. body is the kernel call with
 * its arguments captured by value. */
void launch(dim3 grid, dim3 block, size_t shmem, cudaStream_t s, const void *kernel, std::function<void()> body);
/* A kernel launch as `kernel<<<>>>(args...)`: the arguments are evaluated
 * and copied now, at the launch (a pointer argument's target may be gone
 * when the queued kernel runs, as on a GPU), and passed to every thread. */
template <class... P, class... A>
void launch_kernel(dim3 grid, dim3 block, size_t shmem, cudaStream_t s, void (*kernel)(P...), A... args) {
    launch(grid, block, shmem, s, (const void *)kernel, [=]() { kernel(args...); });
}
/* Queues host work on a stream (the emulated cuBLAS computes there). */
cudaError_t enqueue_host(cudaStream_t s, std::function<void()> fn);
/* Whether [p, p + bytes) lies inside one device allocation. */
bool is_device_range(const void *p, size_t bytes);

const uint3 &thread_idx();
const uint3 &block_idx();
const dim3 &block_dim();
const dim3 &grid_dim();
void *dynamic_shared();
/* A block barrier at the kernel's source line (a __syncthreads): all threads
 * that have not returned must wait at the same line, or the emulation stops
 * with a "divergent __syncthreads" message (undefined behaviour in CUDA). */
void sync_block(const char *file, int line);
/* Warp exchange: deposits v for this lane, waits for the warp, returns the
 * value lane src deposited (this lane's own v when src is not a lane of
 * the block). */
uint64_t warp_exchange(uint64_t v, int src);
void sync_warp();
int lane_id();
/* Warp gather (the emulated register-fragment tensor-core operations): deposits this lane's `bytes`
 * (at most 32) at `mine`, waits for the warp, and copies every lane's deposit into `all`, lane by lane
 * (32 * bytes); a lane of the warp that did not take part (returned or diverged) stops the run. */
void warp_gather(const void *mine, size_t bytes, void *all);

/* cp.async (cuda/async_copy.h): the copy is queued, not made, until an async_wait covers its group
 * (cp.async.wait_group: all but the `pending` most recent committed groups), so a kernel that reads the
 * destination before it waits, or before the barrier after another thread's wait, reads stale memory;
 * a thread that returns with copies outstanding stops the run. dst: the block's dynamic shared memory;
 * src: a device allocation; both aligned to bytes. */
void async_copy(void *dst, const void *src, size_t bytes);
void async_commit();
void async_wait(int pending);

template <typename T> static inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp shuffles of at most 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof v);
    return b;
}
template <typename T> static inline T from_bits(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof v);
    return v;
}
} // namespace mt_emu

#define threadIdx (::mt_emu::thread_idx())
#define blockIdx (::mt_emu::block_idx())
#define blockDim (::mt_emu::block_dim())
#define gridDim (::mt_emu::grid_dim())
static const int warpSize = 32;

#define __syncthreads() ::mt_emu::sync_block(__FILE__, __LINE__)
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    (void)mask;
    ::mt_emu::sync_warp();
}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    (void)mask;
    int lane = ::mt_emu::lane_id(), base = lane & ~(width - 1);
    return ::mt_emu::from_bits<T>(::mt_emu::warp_exchange(::mt_emu::to_bits(v), base + (src & (width - 1))));
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    (void)mask;
    int lane = ::mt_emu::lane_id(), base = lane & ~(width - 1);
    return ::mt_emu::from_bits<T>(
        ::mt_emu::warp_exchange(::mt_emu::to_bits(v), base + ((lane ^ lane_mask) & (width - 1))));
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    (void)mask;
    int lane = ::mt_emu::lane_id(), in = lane & (width - 1);
    int src = in + (int)delta < width ? lane + (int)delta : lane;
    return ::mt_emu::from_bits<T>(::mt_emu::warp_exchange(::mt_emu::to_bits(v), src));
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    (void)mask;
    int lane = ::mt_emu::lane_id(), in = lane & (width - 1);
    int src = in >= (int)delta ? lane - (int)delta : lane;
    return ::mt_emu::from_bits<T>(::mt_emu::warp_exchange(::mt_emu::to_bits(v), src));
}

static inline float __uint_as_float(unsigned u) { return ::mt_emu::from_bits<float>(u); }
static inline unsigned __float_as_uint(float f) { return (unsigned)::mt_emu::to_bits(f); }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

#endif
