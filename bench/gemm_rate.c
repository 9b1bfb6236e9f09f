/* The GEMM ceiling of a GPT-2 training step: times every sgemm that one
 * step of the model performs (per linear layer: forward out = in . W^T,
 * dinp = dout . W, dW += dout^T . in; the tied head included), with the
 * same BLAS library and thread count as the trainer, and prints the
 * achieved rate. The benchmark's MFU is model FLOP/s over this rate.
 *
 * usage: gemm_rate L C Vp N [reps]     (N = B*T rows; OMP_NUM_THREADS sets
 * the threads)
 * With several threads two ways are timed and the faster one is the
 * ceiling: each call threaded by the library itself (the OpenMP build of
 * OpenBLAS), and the calls split into one slab per thread (rows of the
 * output; of dW for the weight gradient) with the library serial inside.
 * prints: gemm_gflops <rate> (median of reps) and gemm_ms_per_step <ms> */
#include <cblas.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long parse_pos(const char *s, const char *what) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v <= 0) {
        fprintf(stderr, "gemm_rate: %s must be a positive integer, got '%s'\n", what, s);
        exit(2);
    }
    return v;
}

static float *alloc_filled(size_t n, const char *what) {
    float *p = malloc(n * sizeof(float));
    if (!p) {
        fprintf(stderr, "gemm_rate: out of memory allocating %zu floats for %s\n", n, what);
        exit(2);
    }
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: gemm_rate L C Vp N [reps]\n");
        return 2;
    }
    long L = parse_pos(argv[1], "L"), C = parse_pos(argv[2], "C"), Vp = parse_pos(argv[3], "Vp");
    long N = parse_pos(argv[4], "N"), reps = argc == 6 ? parse_pos(argv[5], "reps") : 5;
    /* (out, in) of each linear of a block, and how often it occurs per step */
    const long shapes[5][3] = {{3 * C, C, L}, {C, C, L}, {4 * C, C, L}, {C, 4 * C, L}, {Vp, C, 1}};
    long maxo = Vp > 4 * C ? Vp : 4 * C;
    float *in = alloc_filled((size_t)N * 4 * C, "input"), *w = alloc_filled((size_t)maxo * 4 * C, "weight");
    float *out = alloc_filled((size_t)N * maxo, "output"), *dw = alloc_filled((size_t)maxo * 4 * C, "weight grad");
    float *dinp = alloc_filled((size_t)N * 4 * C, "input grad");
    double flops = 0.0;
    for (int s = 0; s < 5; s++) flops += 3.0 * 2.0 * (double)N * shapes[s][0] * shapes[s][1] * shapes[s][2];
    double *t = malloc((size_t)(reps + 1) * sizeof(double));
    if (!t) {
        fprintf(stderr, "gemm_rate: out of memory for %ld timings\n", reps);
        return 2;
    }
    int nt = omp_get_max_threads();
    double med = 0.0;
    for (int split = 0; split < (nt > 1 ? 2 : 1); split++) {
        for (long r = 0; r <= reps; r++) { /* rep 0 warms caches and thread pools */
            double t0 = now_s();
            for (int s = 0; s < 5; s++) {
                int OC = (int)shapes[s][0], IC = (int)shapes[s][1], n = (int)N;
                for (long k = 0; k < shapes[s][2]; k++) {
                    if (!split) {
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, OC, IC, 1.0f, in, IC, w, IC, 0.0f,
                                    out, OC);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, IC, OC, 1.0f, out, OC, w, IC, 0.0f,
                                    dinp, IC);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, n, 1.0f, out, OC, in, IC, 1.0f,
                                    dw, IC);
                        continue;
                    }
#pragma omp parallel
                    {
                        int t = omp_get_thread_num(), T = omp_get_num_threads();
                        int n0 = (int)((long)n * t / T), n1 = (int)((long)n * (t + 1) / T);
                        int o0 = (int)((long)OC * t / T), o1 = (int)((long)OC * (t + 1) / T);
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n1 - n0, OC, IC, 1.0f, in + (size_t)n0 * IC,
                                    IC, w, IC, 0.0f, out + (size_t)n0 * OC, OC);
#pragma omp barrier
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n1 - n0, IC, OC, 1.0f,
                                    out + (size_t)n0 * OC, OC, w, IC, 0.0f, dinp + (size_t)n0 * IC, IC);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o1 - o0, IC, n, 1.0f, out + o0, OC, in, IC,
                                    1.0f, dw + (size_t)o0 * IC, IC);
                    }
                }
            }
            t[r] = now_s() - t0;
        }
        qsort(t + 1, (size_t)reps, sizeof(double), cmp_double);
        double m = t[1 + reps / 2];
        if (med == 0.0 || m < med) med = m;
    }
    printf("gemm_gflops %.2f\ngemm_ms_per_step %.2f\n", flops / med * 1e-9, med * 1e3);
    free(t); free(in); free(w); free(out); free(dw); free(dinp);
    return 0;
}
