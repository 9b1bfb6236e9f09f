/* comm/nccl.c's hooks on a communicator of one rank (issue 29): the unique
 * id, ncclCommInitRank, then all-reduce (fp32 and bf16), reduce-scatter,
 * all-gather, broadcast and a send/recv to itself (one NCCL group), all
 * enqueued on one stream after a device-side fill and before a device-side
 * copy back, so each must come out in stream order: with one rank every
 * collective is the identity, and each result must equal its input bit for
 * bit. Built by `make gpu-mpi` (build-gpu/tests/test_nccl), run by
 * tests/gpu/run.sh's nccl part. Exit 0 all passed, 1 a mismatch or error,
 * 77 no GPU. */
#include "comm/device.h"
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 4099 /* odd: no operation gets a round size */

static int failures;

static void die(const char *what, const char *why) {
    printf("FAIL %s: %s\n", what, why ? why : "(no message)");
    exit(1);
}
static void rt(cudaError_t e, const char *what) {
    if (e != cudaSuccess) die(what, cudaGetErrorString(e));
}
static void hook(const char *e, const char *what) {
    if (e) die(what, e);
}
/* src and dst (device, bytes) equal bit for bit after the stream's work */
static void same(const char *what, const void *want_dev, const void *got_dev, size_t bytes, cudaStream_t s) {
    unsigned char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) die(what, "out of host memory");
    rt(cudaMemcpyAsync(a, want_dev, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
    rt(cudaMemcpyAsync(b, got_dev, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
    rt(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    int ok = !memcmp(a, b, bytes);
    printf("%s %-34s %s (%zu bytes)\n", ok ? "ok  " : "FAIL", what, ok ? "bitwise equal" : "differs", bytes);
    failures += !ok;
    free(a);
    free(b);
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    const mt_comm_nccl *h = mt_comm_nccl_hooks();
    if (!h) die("hooks", "this build has no NCCL hooks (link comm/nccl.c)");
    int version = 0;
    ncclGetVersion(&version);
    printf("NCCL %d, one rank on GPU 0\n", version);
    unsigned char id[256];
    if (h->id_bytes > sizeof id) die("unique id", "larger than 256 bytes");
    hook(h->get_id(id), "ncclGetUniqueId");
    void *comm = NULL;
    hook(h->create(&comm, id, 1, 0), "ncclCommInitRank (1 rank)");
    cudaStream_t s;
    rt(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    float *x, *y;
    rt(cudaMalloc((void **)&x, N * sizeof(float)), "cudaMalloc");
    rt(cudaMalloc((void **)&y, N * sizeof(float)), "cudaMalloc");
    float *host = malloc(N * sizeof(float));
    if (!host) die("setup", "out of host memory");
    for (int i = 0; i < N; i++) host[i] = (float)i * 0.37f - 700.0f;
    /* the input is written on the stream, so each operation must follow it in stream order */
    rt(cudaMemcpyAsync(x, host, N * sizeof(float), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    rt(cudaMemsetAsync(y, 0xff, N * sizeof(float), s), "cudaMemsetAsync");
    hook(h->allreduce(comm, x, y, N, 0, (mt_comm_stream *)s), "all-reduce fp32");
    same("all-reduce fp32 (1 rank: identity)", x, y, N * sizeof(float), s);
    rt(cudaMemsetAsync(y, 0xff, N * sizeof(float), s), "cudaMemsetAsync");
    hook(h->allreduce(comm, x, y, N, 1, (mt_comm_stream *)s), "all-reduce bf16");
    same("all-reduce bf16 (N bf16 elements)", x, y, N * 2, s);
    rt(cudaMemsetAsync(y, 0xff, N * sizeof(float), s), "cudaMemsetAsync");
    hook(h->reduce_scatter(comm, x, y, N, 0, (mt_comm_stream *)s), "reduce-scatter fp32");
    same("reduce-scatter fp32", x, y, N * sizeof(float), s);
    rt(cudaMemsetAsync(y, 0xff, N * sizeof(float), s), "cudaMemsetAsync");
    hook(h->allgather(comm, x, y, N * sizeof(float), (mt_comm_stream *)s), "all-gather");
    same("all-gather", x, y, N * sizeof(float), s);
    rt(cudaMemcpyAsync(y, x, N * sizeof(float), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
    hook(h->broadcast(comm, y, N * sizeof(float), 0, (mt_comm_stream *)s), "broadcast");
    same("broadcast (root 0)", x, y, N * sizeof(float), s);
    rt(cudaMemsetAsync(y, 0xff, N * sizeof(float), s), "cudaMemsetAsync");
    /* to itself: the send and the receive in one group, or each waits for the other */
    if (ncclGroupStart() != ncclSuccess) die("ncclGroupStart", NULL);
    hook(h->send(comm, x, N * sizeof(float), 0, (mt_comm_stream *)s), "send to self");
    hook(h->recv(comm, y, N * sizeof(float), 0, (mt_comm_stream *)s), "recv from self");
    if (ncclGroupEnd() != ncclSuccess) die("ncclGroupEnd", NULL);
    same("send/recv to itself", x, y, N * sizeof(float), s);
    hook(h->async_error(comm), "the communicator's asynchronous error");
    h->destroy(comm);
    cudaFree(x);
    cudaFree(y);
    cudaStreamDestroy(s);
    free(host);
    printf("%d of 6 NCCL checks failed\n", failures);
    return failures ? 1 : 0;
}
