/* Private to src/ops: kernels that call BLAS split the work over OpenMP
 * threads themselves and run OpenBLAS single-threaded meanwhile, so two
 * thread pools never compete for the cores (OpenBLAS's pthreads next to
 * spinning OpenMP workers cost ~35% of GEMM speed on 2 cores). The previous
 * OpenBLAS thread count is restored on leave. */
#ifndef MT_OPS_BLAS_THREADS_H
#define MT_OPS_BLAS_THREADS_H
#include <cblas.h>

static inline int mt_blas_threads_enter(void) {
#ifdef OPENBLAS_VERSION
    int n = openblas_get_num_threads();
    if (n > 1) openblas_set_num_threads(1);
    return n;
#else
    return 1;
#endif
}

static inline void mt_blas_threads_leave(int n) {
#ifdef OPENBLAS_VERSION
    if (n > 1) openblas_set_num_threads(n);
#else
    (void)n;
#endif
}

#endif
