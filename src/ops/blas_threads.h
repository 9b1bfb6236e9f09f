/* Private to src/ops: kernels that call BLAS inside their own OpenMP
 * parallel region need BLAS to run single-threaded there, so two thread
 * pools never compete for the cores (OpenBLAS's pthreads next to spinning
 * OpenMP workers cost ~35% of GEMM speed on 2 cores).
 *
 * The OpenMP build of OpenBLAS (what the Makefile links) does that by
 * itself: called inside a parallel region it runs serially, and outside one
 * it threads over the same libgomp pool. Its openblas_set_num_threads also
 * sets OpenMP's thread count, so it must not be touched here. With the
 * pthreads build (if the system's libopenblas is swapped in at run time) the
 * thread count is set to 1 for the duration and restored on leave. */
#ifndef MT_OPS_BLAS_THREADS_H
#define MT_OPS_BLAS_THREADS_H
#include <cblas.h>

#define MT_OPENBLAS_OPENMP 2 /* openblas_get_parallel(): 0 serial, 1 pthreads, 2 OpenMP */

static inline int mt_blas_threads_enter(void) {
#ifdef OPENBLAS_VERSION
    if (openblas_get_parallel() == MT_OPENBLAS_OPENMP) return 0;
    int n = openblas_get_num_threads();
    if (n > 1) openblas_set_num_threads(1);
    return n;
#else
    return 0;
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
