// The CPU emulation itself (src/cuda/emu), built only by `make gpu-emu`:
// its kernels include planted bugs that must be caught.
//   emu_shim            the checks below; exit 0 when every one holds
//   emu_shim oob        a kernel writing one float past its cudaMalloc
//                       buffer (the ASan build must report it)
//   emu_shim divergent  a kernel whose threads wait at two different
//                       __syncthreads (the emulation must stop it)
//   emu_shim deadlock   half a warp at __syncthreads, the other half in a
//                       shuffle: no barrier can complete (must be reported)
//   emu_shim host_touch a kernel and a copy use a device buffer, then the
//                       host writes it directly (MT_EMU_GUARD_HOST=1 must
//                       stop the run there)
// Checks: 2-D blocks and grids, dynamic shared memory, warp shuffles
// (xor, down, up, broadcast), a block reduction right under both
// schedules; two planted missing __syncthreads, each caught (a wrong
// result) under at least one schedule -- the one this run uses
// (MT_EMU_SCHEDULE) is reported, and tests/check_gpu_emu.sh requires each
// bug caught by one of the two; asynchronous streams: a copy read before
// its stream is synchronised is stale, an event orders two streams, the
// legacy stream waits for a blocking stream, event queries and timing;
// error codes and strings of a bad launch and a bad copy.
#include "cuda/compat.h"
#include <chrono>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <thread>

static int failures = 0;
static void check(bool ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

__global__ static void grid2d(int *out, int W) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    out[y * W + x] = y * 1000 + x;
}

// dynamic shared memory reversed through a barrier, then shuffles
__global__ static void shuffles(int *out) {
    MT_DYNAMIC_SHARED(int, sh);
    int t = threadIdx.x;
    sh[t] = t * 3;
    __syncthreads();
    int rev = sh[blockDim.x - 1 - t];
    int x = __shfl_xor_sync(0xffffffffu, t, 5);
    int d = __shfl_down_sync(0xffffffffu, t, 3);
    int u = __shfl_up_sync(0xffffffffu, t, 2);
    int b = __shfl_sync(0xffffffffu, t, 7);
    float s = (float)t; // warp sum by xor butterfly
    for (int k = 16; k > 0; k >>= 1) s += __shfl_xor_sync(0xffffffffu, s, k);
    out[t * 6 + 0] = rev;
    out[t * 6 + 1] = x;
    out[t * 6 + 2] = d;
    out[t * 6 + 3] = u;
    out[t * 6 + 4] = b;
    out[t * 6 + 5] = (int)s;
}

// Tree sum of 256 values; `planted` drops the barrier inside the loop.
__global__ static void tree_sum(float *out, const float *x, int planted) {
    __shared__ float red[256];
    int t = threadIdx.x;
    red[t] = x[t];
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        if (!planted) __syncthreads();
    }
    if (t == 0) *out = red[0];
}

// Thread 0 computes a value the others read; `planted` drops the barrier
// between the write and the reads.
__global__ static void broadcast(float *out, const float *x, int planted) {
    __shared__ float v;
    if (threadIdx.x == 0) v = x[0] * 2.0f;
    if (!planted) __syncthreads();
    out[threadIdx.x] = v;
}

__global__ static void slow_fill(float *out, int n, float value) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = value;
}

__global__ static void add_one(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}

__global__ static void write_past_end(float *x, int n) {
    if (threadIdx.x == 0) x[n] = 1.0f; // one past the allocation: the planted out-of-bounds write
}

// threads 0-31 pass an extra barrier the others skip: the planted divergent __syncthreads
__global__ static void divergent(float *x) {
    if (threadIdx.x < 32) __syncthreads();
    __syncthreads();
    x[threadIdx.x] = 1.0f;
}

// lanes 0-15 wait at the block barrier, lanes 16-31 in a shuffle that needs lanes 0-15: a hang on a GPU
__global__ static void deadlock(float *x) {
    float v = x[threadIdx.x];
    if (threadIdx.x < 16) __syncthreads();
    else v = __shfl_xor_sync(0xffffffffu, v, 1);
    x[threadIdx.x] = v;
}

static void host_sleep(void *) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }

int main(int argc, char **argv) {
    const char *sched = getenv("MT_EMU_SCHEDULE");
    printf("schedule: %s\n", sched && *sched ? sched : "forward");
    if (argc > 1 && !strcmp(argv[1], "oob")) {
        float *x;
        cudaMalloc(&x, 100 * sizeof(float));
        MT_LAUNCH(write_past_end, 1, 32, 0, 0, x, 100);
        cudaDeviceSynchronize();
        cudaFree(x);
        printf("the out-of-bounds write was not reported\n");
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "divergent")) {
        float *x;
        cudaMalloc(&x, 64 * sizeof(float));
        MT_LAUNCH(divergent, 1, 64, 0, 0, x);
        cudaDeviceSynchronize();
        printf("the divergent __syncthreads was not reported\n");
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "host_touch")) {
        float *x, h[64];
        cudaMalloc(&x, 64 * sizeof(float));
        MT_LAUNCH(divergent, 1, 32, 0, 0, x); // 32 threads: every one takes the same barriers
        cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost);
        cudaDeviceSynchronize();
        printf("kernel and copy ran\n");
        fflush(stdout);
        x[3] = 1.0f; // the planted host access
        printf("the host write to device memory was not stopped\n");
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "deadlock")) {
        float *x;
        cudaMalloc(&x, 32 * sizeof(float));
        cudaMemset(x, 0, 32 * sizeof(float));
        MT_LAUNCH(deadlock, 1, 32, 0, 0, x);
        cudaDeviceSynchronize();
        printf("the deadlock was not reported\n");
        return 0;
    }
    // 2-D grid of 2-D blocks
    const int W = 24, H = 10;
    int *g, hg[W * H];
    cudaMalloc(&g, sizeof hg);
    MT_LAUNCH(grid2d, dim3(3, 2), dim3(8, 5), 0, 0, g, W);
    cudaMemcpy(hg, g, sizeof hg, cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) ok = ok && hg[y * W + x] == y * 1000 + x;
    check(ok, "2-D grid and blocks: every (x, y) written once");
    // shuffles and dynamic shared memory, 64 threads = 2 warps
    int *sdev, hs[64 * 6];
    cudaMalloc(&sdev, sizeof hs);
    MT_LAUNCH(shuffles, 1, 64, 64 * sizeof(int), 0, sdev);
    cudaMemcpy(hs, sdev, sizeof hs, cudaMemcpyDeviceToHost);
    ok = true;
    for (int t = 0; t < 64; t++) {
        int lane = t % 32, w0 = t - lane, wsum = 0;
        for (int k = 0; k < 32; k++) wsum += w0 + k;
        ok = ok && hs[t * 6] == (63 - t) * 3 && hs[t * 6 + 1] == w0 + (lane ^ 5) &&
             hs[t * 6 + 2] == (lane + 3 < 32 ? t + 3 : t) && hs[t * 6 + 3] == (lane >= 2 ? t - 2 : t) &&
             hs[t * 6 + 4] == w0 + 7 && hs[t * 6 + 5] == wsum;
    }
    check(ok, "dynamic shared memory, __shfl_xor/down/up/sync and a warp butterfly sum");
    // the planted missing barriers
    float hx[256], *dx, *dout, res[256];
    for (int i = 0; i < 256; i++) hx[i] = (float)(i + 1);
    cudaMalloc(&dx, sizeof hx);
    cudaMalloc(&dout, sizeof res);
    cudaMemcpy(dx, hx, sizeof hx, cudaMemcpyHostToDevice);
    MT_LAUNCH(tree_sum, 1, 256, 0, 0, dout, dx, 0);
    cudaMemcpy(res, dout, 4, cudaMemcpyDeviceToHost);
    check(res[0] == 32896.0f, "tree sum with its barriers: right");
    MT_LAUNCH(tree_sum, 1, 256, 0, 0, dout, dx, 1);
    cudaMemcpy(res, dout, 4, cudaMemcpyDeviceToHost);
    printf("planted tree-sum-without-barrier: %s (%g, right 32896)\n", res[0] == 32896.0f ? "missed" : "caught",
           (double)res[0]);
    MT_LAUNCH(broadcast, 1, 64, 0, 0, dout, dx, 0);
    cudaMemcpy(res, dout, 64 * 4, cudaMemcpyDeviceToHost);
    ok = true;
    for (int i = 0; i < 64; i++) ok = ok && res[i] == 2.0f;
    check(ok, "broadcast with its barrier: right");
    hx[0] = 21.0f; // a new value: a read before thread 0's write sees the old one
    cudaMemcpy(dx, hx, 4, cudaMemcpyHostToDevice);
    MT_LAUNCH(broadcast, 1, 64, 0, 0, dout, dx, 1);
    cudaMemcpy(res, dout, 64 * 4, cudaMemcpyDeviceToHost);
    ok = true;
    for (int i = 0; i < 64; i++) ok = ok && res[i] == 42.0f;
    printf("planted broadcast-without-barrier: %s\n", ok ? "missed" : "caught");
    // asynchronous streams: a copy read before the stream is synchronised is stale
    const int n = 1000;
    cudaStream_t s1, s2;
    cudaStreamCreate(&s1);
    cudaStreamCreate(&s2);
    float *a, *h;
    cudaMalloc(&a, n * sizeof(float));
    cudaMallocHost((void **)&h, n * sizeof(float));
    for (int i = 0; i < n; i++) h[i] = -1.0f;
    cudaLaunchHostFunc(s1, host_sleep, NULL); // the stream is busy for a while
    MT_LAUNCH(slow_fill, (n + 127) / 128, 128, 0, s1, a, n, 7.0f);
    cudaMemcpyAsync(h, a, n * sizeof(float), cudaMemcpyDeviceToHost, s1);
    bool stale = h[n - 1] == -1.0f; // read without cudaStreamSynchronize: the missing sync shows
    cudaStreamSynchronize(s1);
    check(stale && h[n - 1] == 7.0f, "a copy read before cudaStreamSynchronize is stale; after it, right");
    // an event orders work across streams: s2 adds 1 after s1's fill
    cudaEvent_t ev;
    cudaEventCreate(&ev);
    cudaLaunchHostFunc(s1, host_sleep, NULL);
    MT_LAUNCH(slow_fill, (n + 127) / 128, 128, 0, s1, a, n, 3.0f);
    cudaEventRecord(ev, s1);
    cudaStreamWaitEvent(s2, ev, 0);
    MT_LAUNCH(add_one, (n + 127) / 128, 128, 0, s2, a, n);
    cudaMemcpyAsync(h, a, n * sizeof(float), cudaMemcpyDeviceToHost, s2);
    cudaStreamSynchronize(s2);
    check(h[0] == 4.0f && h[n - 1] == 4.0f, "cudaStreamWaitEvent orders a second stream after the first");
    // the legacy default stream waits for a blocking stream's earlier work
    cudaLaunchHostFunc(s1, host_sleep, NULL);
    MT_LAUNCH(slow_fill, (n + 127) / 128, 128, 0, s1, a, n, 5.0f);
    cudaMemcpy(h, a, n * sizeof(float), cudaMemcpyDeviceToHost);
    check(h[0] == 5.0f && h[n - 1] == 5.0f, "cudaMemcpy (legacy stream) waits for a blocking stream's kernel");
    // events: timing, and a query before the work is done
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    cudaEventRecord(t0, s1);
    cudaLaunchHostFunc(s1, host_sleep, NULL);
    cudaMemsetAsync(a, 0, n * sizeof(float), s1);
    cudaEventRecord(t1, s1);
    bool pending = cudaEventQuery(t1) == cudaErrorNotReady;
    cudaEventSynchronize(t1);
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    cudaMemcpyAsync(h, a, n * sizeof(float), cudaMemcpyDeviceToHost, s1);
    cudaStreamSynchronize(s1);
    check(pending && cudaEventQuery(t1) == cudaSuccess && ms >= 190.0f && h[n - 1] == 0.0f,
          "cudaEventQuery not ready, then ready; elapsed time covers a 200 ms task; cudaMemsetAsync ordered");
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    // errors
    MT_LAUNCH(add_one, 1, 2048, 0, 0, a, n);
    cudaError_t e = cudaGetLastError();
    check(e == cudaErrorInvalidConfiguration && !strcmp(cudaGetErrorString(e), "invalid configuration argument") &&
              cudaGetLastError() == cudaSuccess,
          "a 2048-thread block: cudaErrorInvalidConfiguration, then cleared");
    e = cudaMemcpy(h, h + 1, 4, cudaMemcpyDeviceToHost);
    check(e == cudaErrorInvalidValue, "a device-to-host copy from host memory: cudaErrorInvalidValue");
    check(cudaFree(h) == cudaErrorInvalidDevicePointer, "cudaFree of a host pointer: cudaErrorInvalidDevicePointer");
    cudaGetLastError();
    cudaEventDestroy(ev);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    cudaFreeHost(h);
    cudaFree(a);
    cudaFree(dx);
    cudaFree(dout);
    cudaFree(g);
    cudaFree(sdev);
    printf("%d emulation checks failed\n", failures);
    return failures ? 1 : 0;
}
