/* Falcon's fused query_key_value output: per row, n_groups groups of
 * (G query heads, one key head, one value head), each head hd wide. The
 * attention kernels read the planar form: all query heads, then the key
 * heads, then the value heads. These two copies convert between them
 * (the backward of one is the other). */
#include "ops/ops.h"
#include <string.h>

#define PAR_MIN 64

static void convert(float *dst, const float *src, int N, int n_groups, int G, int hd, int to_planar) {
    size_t w = (size_t)n_groups * (size_t)(G + 2) * (size_t)hd, gw = (size_t)(G + 2) * (size_t)hd;
    size_t qw = (size_t)n_groups * (size_t)G * (size_t)hd, kvw = (size_t)n_groups * (size_t)hd;
    size_t qbytes = (size_t)G * (size_t)hd * sizeof(float), hbytes = (size_t)hd * sizeof(float);
#pragma omp parallel for schedule(static) if (N >= PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *s = src + (size_t)i * w;
        float *d = dst + (size_t)i * w;
        for (int g = 0; g < n_groups; g++) {
            size_t grouped = (size_t)g * gw, q = (size_t)g * G * hd, k = qw + (size_t)g * hd, v = qw + kvw + (size_t)g * hd;
            if (to_planar) {
                memcpy(d + q, s + grouped, qbytes);
                memcpy(d + k, s + grouped + (size_t)G * hd, hbytes);
                memcpy(d + v, s + grouped + (size_t)(G + 1) * hd, hbytes);
            } else {
                memcpy(d + grouped, s + q, qbytes);
                memcpy(d + grouped + (size_t)G * hd, s + k, hbytes);
                memcpy(d + grouped + (size_t)(G + 1) * hd, s + v, hbytes);
            }
        }
    }
}

void op_qkv_grouped_to_planar(float *planar, const float *grouped, int N, int n_groups, int G, int hd) {
    convert(planar, grouped, N, n_groups, G, hd, 1);
}

void op_qkv_planar_to_grouped(float *grouped, const float *planar, int N, int n_groups, int G, int hd) {
    convert(grouped, planar, N, n_groups, G, hd, 0);
}
