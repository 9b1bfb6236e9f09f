/* The GEMM ceiling of a GPT-2 training step, in fp32 and in bf16: times
 * every GEMM that one step of the model performs (per linear layer:
 * forward out = in . W^T, dinp = dout . W, dW += dout^T . in; the tied
 * head included), with the same libraries and thread count as the trainer,
 * and prints the achieved rates. The benchmark's MFU is model FLOP/s over
 * the fp32 rate of the trainer's default fp32 GEMM (oneDNN's sgemm).
 *
 * usage: gemm_rate L C Vp N [reps]          (N = B*T rows)
 *        gemm_rate --llama KW F L C Vp N [reps]  (a Llama step: q|k|v of C + 2 KW
 *                                         rows, o, gate|up of 2F, down; untied head)
 *        gemm_rate --shapes C Vp N [reps]   (one table row per GEMM)
 * OMP_NUM_THREADS sets the threads. reps (default 5) timed repetitions
 * after one warm-up; each figure is the median.
 *
 * fp32 is oneDNN's sgemm (the trainer's default, --gemm onednn), with
 * OpenBLAS's (--gemm openblas) timed beside it. bf16 is op_gemm_bf16 (oneDNN's bf16 GEMM, fp32
 * accumulation) on bf16 copies of the inputs. With several threads two ways
 * are timed and the faster one is the ceiling: each call threaded by the
 * library itself, and one slab per thread with the library serial inside
 * (for fp32 rows of the output, or of dW for the weight gradient; for bf16
 * the ops of src/ops/matmul_lowp.c, the trainer's path).
 *
 * The step mode prints "key value" lines: gemm_gflops and gemm_ms_per_step
 * (fp32, oneDNN sgemm); gemm_openblas_gflops and gemm_onednn_over_openblas
 * (OpenBLAS's sgemm rate, and oneDNN's speed-up over it); gemm_bf16_gflops (inputs already bf16), gemm_bf16_conv_gflops
 * (plus converting each layer's fp32 input before its forward and its fp32
 * output gradient before its backward: what a step pays when activations
 * stay fp32), gemm_bf16_ms_per_step, gemm_bf16_ratio and
 * gemm_bf16_conv_ratio (over the fp32 rate), bf16_cast_gelem_s (the fp32 ->
 * bf16 conversion rate on a large array) and gemm_bf16_wcast_ms_per_step
 * (casting every weight once at that rate: the per-step copy of the
 * parameters a bf16 step needs). The libraries alternate within each
 * repetition so that a shared CPU slows all of them alike.
 *
 * --shapes prints, for each distinct linear shape and each of its three
 * GEMMs, the rate of OpenBLAS sgemm, oneDNN sgemm, OpenBLAS sbgemm (when
 * the loaded libopenblas has it; Debian's 0.3.21 does not), oneDNN bf16
 * without and with the conversion of that GEMM's fp32 input (forward: the
 * layer input; dinp: the output gradient; dW: none, it reuses both), and
 * bf16 over OpenBLAS's sgemm. */
#include "core/dtype.h"
#include "ops/matmul_lowp.h"
#include <cblas.h>
#include <dlfcn.h>
#include <dnnl.h>
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

static void *xmalloc(size_t bytes, const char *what) {
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "gemm_rate: out of memory allocating %zu bytes for %s\n", bytes, what);
        exit(2);
    }
    return p;
}

/* Filled, so every page is touched before timing. */
static float *alloc_filled(size_t n, const char *what) {
    float *p = xmalloc(n * sizeof(float), what);
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

static mt_bf16 *alloc_bf16(const float *src, size_t n, const char *what) {
    mt_bf16 *p = xmalloc(n * sizeof(mt_bf16), what);
    mt_convert_fp32_to_bf16(p, src, n);
    return p;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, long n) {
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    return t[n / 2];
}

/* OpenBLAS's cblas_sbgemm, looked up at run time: its header declares it
 * but Debian's build leaves it out, so a direct call would not link. */
typedef void (*sbgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint,
                          float, const mt_bf16 *, blasint, const mt_bf16 *, blasint, float, float *, blasint);

typedef enum { LIB_SGEMM, LIB_DNNL_SGEMM, LIB_SBGEMM, LIB_BF16, NLIB } lib_t;
typedef enum { G_FWD, G_DINP, G_DW, NGEMM } gemm_t;
static const char *const gemm_names[NGEMM] = {"fwd", "dinp", "dW"};

typedef struct {
    float *in, *w, *out, *dinp, *dw;     /* fp32; out doubles as the output gradient */
    mt_bf16 *inb, *wb, *doutb;           /* bf16 copies */
    sbgemm_fn sbgemm;                    /* NULL when the library lacks it */
} bufs;

/* One row-major GEMM C[M,Nc] = op(A) op(B) + beta C with library `lib`;
 * A and B are fp32 or bf16 per the library. */
static void gemm(lib_t lib, char ta, char tb, int M, int Nc, int K, const void *A, int lda, const void *B, int ldb,
                 float beta, float *C, int ldc, const bufs *b) {
    enum CBLAS_TRANSPOSE cta = ta == 'T' ? CblasTrans : CblasNoTrans, ctb = tb == 'T' ? CblasTrans : CblasNoTrans;
    switch (lib) {
    case LIB_SGEMM: cblas_sgemm(CblasRowMajor, cta, ctb, M, Nc, K, 1.0f, A, lda, B, ldb, beta, C, ldc); break;
    case LIB_DNNL_SGEMM:
        if (dnnl_sgemm(ta, tb, M, Nc, K, 1.0f, A, lda, B, ldb, beta, C, ldc) != dnnl_success) {
            fprintf(stderr, "gemm_rate: dnnl_sgemm failed\n");
            exit(2);
        }
        break;
    case LIB_SBGEMM: b->sbgemm(CblasRowMajor, cta, ctb, M, Nc, K, 1.0f, A, lda, B, ldb, beta, C, ldc); break;
    case LIB_BF16: op_gemm_bf16(ta, tb, M, Nc, K, A, lda, B, ldb, beta, C, ldc); break;
    case NLIB: break;
    }
}

/* GEMM g of the linear layer in[N,IC] -> out[N,OC], whole (split = 0: the
 * library threads it) or one slab per thread. */
static void run_gemm(lib_t lib, gemm_t g, int split, const bufs *b, int N, int IC, int OC) {
    int bf = lib == LIB_SBGEMM || lib == LIB_BF16;
    size_t es = bf ? sizeof(mt_bf16) : sizeof(float);
    const char *in = bf ? (const char *)b->inb : (const char *)b->in;
    const char *w = bf ? (const char *)b->wb : (const char *)b->w;
    const char *dout = bf ? (const char *)b->doutb : (const char *)b->out;
    if (split && lib == LIB_BF16) { /* the trainer's ops */
        if (g == G_FWD) op_matmul_forward_bf16(b->out, b->inb, b->wb, NULL, N, IC, OC);
        else if (g == G_DINP) op_matmul_backward_bf16(b->dinp, NULL, NULL, b->doutb, b->inb, b->wb, N, IC, OC, 0);
        else op_matmul_backward_bf16(NULL, b->dw, NULL, b->doutb, b->inb, b->wb, N, IC, OC, 0);
        return;
    }
    if (!split) {
        if (g == G_FWD) gemm(lib, 'N', 'T', N, OC, IC, in, IC, w, IC, 0.0f, b->out, OC, b);
        else if (g == G_DINP) gemm(lib, 'N', 'N', N, IC, OC, dout, OC, w, IC, 0.0f, b->dinp, IC, b);
        else gemm(lib, 'T', 'N', OC, IC, N, dout, OC, in, IC, 1.0f, b->dw, IC, b);
        return;
    }
#pragma omp parallel
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int n0 = (int)((long)N * t / T), n1 = (int)((long)N * (t + 1) / T);
        int o0 = (int)((long)OC * t / T), o1 = (int)((long)OC * (t + 1) / T);
        if (g == G_FWD)
            gemm(lib, 'N', 'T', n1 - n0, OC, IC, in + (size_t)n0 * IC * es, IC, w, IC, 0.0f, b->out + (size_t)n0 * OC,
                 OC, b);
        else if (g == G_DINP)
            gemm(lib, 'N', 'N', n1 - n0, IC, OC, dout + (size_t)n0 * OC * es, OC, w, IC, 0.0f,
                 b->dinp + (size_t)n0 * IC, IC, b);
        else
            gemm(lib, 'T', 'N', o1 - o0, IC, N, dout + (size_t)o0 * es, OC, in, IC, 1.0f, b->dw + (size_t)o0 * IC, IC,
                 b);
    }
}

/* Seconds to convert the fp32 input GEMM g reads (forward: in[N,IC];
 * dinp: dout[N,OC]; dW: nothing, both were converted for the others). */
static double convert_for(gemm_t g, const bufs *b, int N, int IC, int OC) {
    double t0 = now_s();
    if (g == G_FWD) mt_convert_fp32_to_bf16(b->inb, b->in, (size_t)N * IC);
    else if (g == G_DINP) mt_convert_fp32_to_bf16(b->doutb, b->out, (size_t)N * OC);
    return now_s() - t0;
}

static double time_gemm(lib_t lib, gemm_t g, int split, const bufs *b, int N, int IC, int OC) {
    double t0 = now_s();
    run_gemm(lib, g, split, b, N, IC, OC);
    return now_s() - t0;
}

/* ---- step mode: every GEMM of a step, fp32 and bf16 ---- */
static int step_mode(long L, long C, long Vp, long N, long reps, bufs *b, size_t wmax, long KW, long F) {
    /* (out, in) of each linear of a block, and how often it occurs per step
     * (GPT-2; Llama when KW > 0: q|k|v, o, gate|up, down) */
    const long gpt2[5][3] = {{3 * C, C, L}, {C, C, L}, {4 * C, C, L}, {C, 4 * C, L}, {Vp, C, 1}};
    const long llama[5][3] = {{C + 2 * KW, C, L}, {C, C, L}, {2 * F, C, L}, {C, F, L}, {Vp, C, 1}};
    const long(*shapes)[3] = KW > 0 ? llama : gpt2;
    double flops = 0.0, welems = 0.0;
    for (int s = 0; s < 5; s++) {
        flops += 3.0 * 2.0 * (double)N * shapes[s][0] * shapes[s][1] * shapes[s][2];
        welems += (double)shapes[s][0] * shapes[s][1] * shapes[s][2];
    }
    /* seconds per step of each series: oneDNN sgemm (the trainer's fp32
     * default), OpenBLAS sgemm, oneDNN bf16, bf16 plus its conversions */
    enum { S_DNNL, S_OPENBLAS, S_BF16, S_CONV, NSERIES };
    double *t = xmalloc((size_t)(reps + 1) * (NSERIES + 1) * sizeof(double), "timings");
    double *tcast = t + (size_t)NSERIES * (reps + 1);
    int nt = omp_get_max_threads();
    double best[NSERIES] = {0};
    for (int split = 0; split < (nt > 1 ? 2 : 1); split++) {
        for (long r = 0; r <= reps; r++) { /* rep 0 warms caches and thread pools */
            double sum[NSERIES] = {0}, sconv = 0.0;
            for (int s = 0; s < 5; s++) {
                int OC = (int)shapes[s][0], IC = (int)shapes[s][1];
                for (long k = 0; k < shapes[s][2]; k++) /* the libraries alternate layer by layer */
                    for (int g = 0; g < NGEMM; g++) {
                        sum[S_DNNL] += time_gemm(LIB_DNNL_SGEMM, g, split, b, (int)N, IC, OC);
                        sum[S_OPENBLAS] += time_gemm(LIB_SGEMM, g, split, b, (int)N, IC, OC);
                        sconv += convert_for(g, b, (int)N, IC, OC);
                        sum[S_BF16] += time_gemm(LIB_BF16, g, split, b, (int)N, IC, OC);
                    }
            }
            sum[S_CONV] = sum[S_BF16] + sconv;
            for (int k = 0; k < NSERIES; k++) t[(size_t)k * (reps + 1) + r] = sum[k];
            double c0 = now_s();
            mt_convert_fp32_to_bf16(b->wb, b->w, wmax);
            tcast[r] = now_s() - c0;
        }
        for (int k = 0; k < NSERIES; k++) {
            double m = median(t + (size_t)k * (reps + 1) + 1, reps);
            if (best[k] == 0.0 || m < best[k]) best[k] = m;
        }
    }
    double best32 = best[S_DNNL], bestbf = best[S_BF16], bestconv = best[S_CONV];
    double cast_rate = (double)wmax / median(tcast + 1, reps);
    printf("gemm_gflops %.2f\ngemm_ms_per_step %.2f\n", flops / best32 * 1e-9, best32 * 1e3);
    printf("gemm_openblas_gflops %.2f\ngemm_onednn_over_openblas %.3f\n", flops / best[S_OPENBLAS] * 1e-9,
           best[S_OPENBLAS] / best32);
    printf("gemm_bf16_gflops %.2f\ngemm_bf16_conv_gflops %.2f\ngemm_bf16_ms_per_step %.2f\n", flops / bestbf * 1e-9,
           flops / bestconv * 1e-9, bestbf * 1e3);
    printf("gemm_bf16_ratio %.3f\ngemm_bf16_conv_ratio %.3f\n", best32 / bestbf, best32 / bestconv);
    printf("bf16_cast_gelem_s %.3f\ngemm_bf16_wcast_ms_per_step %.2f\n", cast_rate * 1e-9, welems / cast_rate * 1e3);
    free(t);
    return 0;
}

/* ---- --shapes mode: one row per GEMM ---- */
static int shapes_mode(long C, long Vp, long N, long reps, bufs *b) {
    const long shapes[5][2] = {{3 * C, C}, {C, C}, {4 * C, C}, {C, 4 * C}, {Vp, C}};
    const char *names[5] = {"qkv", "attn_proj", "fc", "mlp_proj", "head"};
    int nt = omp_get_max_threads(), nsplit = nt > 1 ? 2 : 1;
    printf("# GFLOP/s per GEMM, N=%ld, %d thread(s), median of %ld; OpenBLAS %s core %s; oneDNN %d.%d.%d; "
           "sbgemm %s\n",
           N, nt, reps, openblas_get_config(), openblas_get_corename(), dnnl_version()->major, dnnl_version()->minor,
           dnnl_version()->patch, b->sbgemm ? "present" : "absent from this libopenblas");
    printf("# with 2+ threads each library's figure is the faster of its own threading and one slab per thread\n");
    printf("%-10s %5s %5s %5s %4s %8s %10s %8s %8s %9s %6s %9s\n", "linear", "OC", "IC", "N", "gemm", "sgemm",
           "dnnl_sgemm", "sbgemm", "bf16", "bf16+cvt", "ratio", "ratio_cvt");
    double *t = xmalloc((size_t)(reps + 1) * sizeof(double) * NLIB * 2 * 2, "timings");
    for (int s = 0; s < 5; s++) {
        int OC = (int)shapes[s][0], IC = (int)shapes[s][1];
        double fl = 2.0 * (double)N * OC * IC;
        for (int g = 0; g < NGEMM; g++) {
            /* t[((lib * 2 + split) * 2 + conv) * (reps + 1) + r] */
            for (long r = 0; r <= reps; r++)
                for (int split = 0; split < nsplit; split++)
                    for (int lib = 0; lib < NLIB; lib++) {
                        if (lib == LIB_SBGEMM && !b->sbgemm) continue;
                        double tc = lib == LIB_BF16 ? convert_for(g, b, (int)N, IC, OC) : 0.0;
                        double tg = time_gemm(lib, g, split, b, (int)N, IC, OC);
                        t[((lib * 2 + split) * 2 + 0) * (reps + 1) + r] = tg;
                        t[((lib * 2 + split) * 2 + 1) * (reps + 1) + r] = tg + tc;
                    }
            double rate[NLIB][2] = {{0}};
            for (int lib = 0; lib < NLIB; lib++)
                for (int conv = 0; conv < 2; conv++)
                    for (int split = 0; split < nsplit; split++) {
                        if (lib == LIB_SBGEMM && !b->sbgemm) continue;
                        double m = median(t + ((lib * 2 + split) * 2 + conv) * (reps + 1) + 1, reps);
                        if (fl / m * 1e-9 > rate[lib][conv]) rate[lib][conv] = fl / m * 1e-9;
                    }
            char sb[16] = "n/a";
            if (b->sbgemm) snprintf(sb, sizeof sb, "%.1f", rate[LIB_SBGEMM][0]);
            printf("%-10s %5d %5d %5ld %4s %8.1f %10.1f %8s %8.1f %9.1f %6.2f %9.2f\n", names[s], OC, IC, N,
                   gemm_names[g], rate[LIB_SGEMM][0], rate[LIB_DNNL_SGEMM][0], sb, rate[LIB_BF16][0],
                   rate[LIB_BF16][1], rate[LIB_BF16][0] / rate[LIB_SGEMM][0],
                   rate[LIB_BF16][1] / rate[LIB_SGEMM][0]);
            fflush(stdout);
        }
    }
    free(t);
    return 0;
}

int main(int argc, char **argv) {
    long KW = 0, F = 0;
    if (argc > 3 && strcmp(argv[1], "--llama") == 0) {
        KW = parse_pos(argv[2], "KW");
        F = parse_pos(argv[3], "F");
        argv += 3;
        argc -= 3;
    }
    int shapes = argc > 1 && strcmp(argv[1], "--shapes") == 0;
    int nargs = argc - 1 - shapes, need = shapes ? 3 : 4;
    if (nargs != need && nargs != need + 1) {
        fprintf(stderr, "usage: gemm_rate L C Vp N [reps]\n       gemm_rate --llama KW F L C Vp N [reps]\n"
                        "       gemm_rate --shapes C Vp N [reps]\n");
        return 2;
    }
    char **a = argv + 1 + shapes;
    long L = shapes ? 1 : parse_pos(*a++, "L");
    long C = parse_pos(a[0], "C"), Vp = parse_pos(a[1], "Vp"), N = parse_pos(a[2], "N");
    long reps = nargs == need + 1 ? parse_pos(a[3], "reps") : 5;
    /* the largest of each buffer over the shapes (out, in): (Vp or 4C, C), (C, 4C) */
    long maxo = Vp > 4 * C ? Vp : 4 * C, maxi = 4 * C;
    if (2 * F > maxo) maxo = 2 * F;
    if (F > maxi) maxi = F;
    size_t wmax = (size_t)maxo * C; /* >= every (out, in) product: 4C x C, 2F x C >= C x F */
    bufs b;
    b.in = alloc_filled((size_t)N * maxi, "input");
    b.w = alloc_filled(wmax, "weight");
    b.out = alloc_filled((size_t)N * maxo, "output");
    b.dw = alloc_filled(wmax, "weight grad");
    b.dinp = alloc_filled((size_t)N * maxi, "input grad");
    b.inb = alloc_bf16(b.in, (size_t)N * maxi, "bf16 input");
    b.wb = alloc_bf16(b.w, wmax, "bf16 weight");
    b.doutb = alloc_bf16(b.out, (size_t)N * maxo, "bf16 output grad");
    b.sbgemm = (sbgemm_fn)(void (*)(void))dlsym(RTLD_DEFAULT, "cblas_sbgemm");
    int rc = shapes ? shapes_mode(C, Vp, N, reps, &b) : step_mode(L, C, Vp, N, reps, &b, wmax, KW, F);
    free(b.in); free(b.w); free(b.out); free(b.dw); free(b.dinp); free(b.inb); free(b.wb); free(b.doutb);
    return rc;
}
