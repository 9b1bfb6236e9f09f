/* The non-finite scan of a float array (host memory): the loss scaler's
 * overflow test, the trainer's checks of gradients and parameters (through
 * ops' op_nonfinite_flag), and the checks of weights read from files. */
#ifndef MT_CORE_NONFINITE_H
#define MT_CORE_NONFINITE_H
#include <stddef.h>

/* 1 if x[0..n) holds an inf or NaN (either sign, any NaN payload), else 0.
 * Works on the bit patterns with integer instructions, so it raises no
 * floating-point exception even on signalling NaNs; AVX-512 when the build
 * has it. One thread reads ~100 GB/s from cache and 20-30 GB/s from memory
 * (2-vCPU Xeon VM), so only arrays of MT_NONFINITE_PARALLEL_MIN floats or
 * more are split over OpenMP threads (in blocks of MT_NONFINITE_BLOCK):
 * below that a parallel region costs more than it saves, and far more when
 * a thread is descheduled on a loaded machine. */
#define MT_NONFINITE_PARALLEL_MIN ((size_t)1 << 21)
#define MT_NONFINITE_BLOCK ((size_t)1 << 16)
int mt_found_nonfinite(const float *x, size_t n);

#endif
