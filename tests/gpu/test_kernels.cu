// Every CUDA kernel against its CPU reference (the ops of libmeshtrain) on
// random inputs: AdamW bitwise (10 steps), GELU forward/backward and
// LayerNorm within a few ulp-scale relative error. Exit 77 (skipped) when no
// CUDA device is present, 1 on a mismatch or a CUDA error.
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern "C" {
#include "ops/ops.h"
}
#include "cuda/kernels.h"

static int failures = 0;

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static float *rnd(size_t n, unsigned seed, float scale) {
    float *x = (float *)malloc(n * sizeof(float));
    unsigned s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = scale * ((float)(s >> 8) / 16777216.0f * 2.0f - 1.0f);
    }
    return x;
}

static float *to_dev(const float *h, size_t n) {
    float *d;
    CK(cudaMalloc(&d, n * sizeof(float)));
    CK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static void from_dev(float *h, const float *d, size_t n) { CK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost)); }

static void compare(const char *what, const float *cpu, const float *gpu, size_t n, double tol) {
    double worst = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)cpu[i] - gpu[i]));
        mx = fmax(mx, fabs((double)cpu[i]));
    }
    double rel = worst / (mx > 0 ? mx : 1);
    int ok = rel <= tol;
    printf("%s %-28s max|diff|/max|cpu| %.2e (bound %.0e)\n", ok ? "ok  " : "FAIL", what, rel, tol);
    failures += !ok;
}

int main(void) {
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device (%s): the kernels were built, not run\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s\n", prop.name);
    const size_t n = 1 << 20;
    // GELU
    float *x = rnd(n, 1, 4.0f), *dy = rnd(n, 2, 1.0f), *y = (float *)malloc(n * 4), *yg = (float *)malloc(n * 4);
    float *dx, *dxg = (float *)malloc(n * 4);
    float *d_x = to_dev(x, n), *d_dy = to_dev(dy, n), *d_y;
    CK(cudaMalloc(&d_y, n * 4));
    op_gelu_forward(y, x, n);
    if (mt_cuda_gelu_forward(d_y, d_x, n, 0)) failures++;
    from_dev(yg, d_y, n);
    compare("gelu forward", y, yg, n, 1e-6);
    dx = (float *)malloc(n * 4);
    op_gelu_backward(dx, x, dy, n);
    if (mt_cuda_gelu_backward(d_y, d_x, d_dy, n, 0)) failures++;
    from_dev(dxg, d_y, n);
    compare("gelu backward", dx, dxg, n, 1e-6);
    // LayerNorm
    int N = 512, C = 768;
    float *w = rnd(C, 3, 1.0f), *b = rnd(C, 4, 0.1f), *o = (float *)malloc((size_t)N * C * 4), *og = (float *)malloc((size_t)N * C * 4);
    float mean[512], rstd[512], meang[512], rstdg[512];
    op_layernorm_forward(o, mean, rstd, x, w, b, N, C);
    float *d_w = to_dev(w, C), *d_b = to_dev(b, C), *d_m, *d_r;
    CK(cudaMalloc(&d_m, N * 4));
    CK(cudaMalloc(&d_r, N * 4));
    if (mt_cuda_layernorm_forward(d_y, d_m, d_r, d_x, d_w, d_b, N, C, 0)) failures++;
    from_dev(og, d_y, (size_t)N * C);
    from_dev(meang, d_m, N);
    from_dev(rstdg, d_r, N);
    compare("layernorm forward", o, og, (size_t)N * C, 1e-5);
    compare("layernorm mean", mean, meang, N, 1e-5);
    compare("layernorm rstd", rstd, rstdg, N, 1e-5);
    // AdamW, 10 steps: bitwise
    float *p = rnd(n, 5, 0.5f), *g = rnd(n, 6, 0.01f), *m = (float *)calloc(n, 4), *v = (float *)calloc(n, 4);
    float *d_p = to_dev(p, n), *d_g = to_dev(g, n), *d_mm = to_dev(m, n), *d_v = to_dev(v, n);
    for (int step = 1; step <= 10; step++) {
        op_adamw_update(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f);
        if (mt_cuda_adamw_update(d_p, d_g, d_mm, d_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f, 0)) failures++;
    }
    float *pg = (float *)malloc(n * 4);
    from_dev(pg, d_p, n);
    int same = memcmp(p, pg, n * 4) == 0;
    printf("%s adamw 10 steps               %s\n", same ? "ok  " : "FAIL", same ? "bitwise equal" : "differs");
    failures += !same;
    CK(cudaDeviceSynchronize());
    printf("%d kernel checks failed\n", failures);
    return failures ? 1 : 0;
}
