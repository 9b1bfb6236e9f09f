/* Falcon's fused query_key_value output: per row, n_groups groups of
 * (G query heads, one key head, one value head), each head hd wide. The
 * attention kernels read the planar form: the query heads, then the key
 * heads, then the value heads. These copies convert between them, taking
 * query heads [q0, q0 + nq) of each group (a tensor-parallel rank that
 * holds a replicated kv group uses its share of the group's query heads);
 * the backward's copy writes zeros for the group's other query heads. */
#include "ops/kernel_table.h"
#include "ops/ops.h"
#include <string.h>

#define PAR_MIN 64

/* dst from src: to_planar, dst planar and src grouped; else the reverse. */
static void convert(float *dst, const float *src, int N, int n_groups, int G, int q0, int nq, int hd, int to_planar) {
    size_t gw = (size_t)(G + 2) * (size_t)hd, w = (size_t)n_groups * gw;
    size_t pw = (size_t)n_groups * (size_t)(nq + 2) * (size_t)hd;
    size_t qw = (size_t)n_groups * (size_t)nq * (size_t)hd, kvw = (size_t)n_groups * (size_t)hd;
    size_t qbytes = (size_t)nq * (size_t)hd * sizeof(float), hbytes = (size_t)hd * sizeof(float);
    size_t dw = to_planar ? pw : w, sw = to_planar ? w : pw;
#pragma omp parallel for schedule(static) if (N >= PAR_MIN)
    for (int i = 0; i < N; i++) {
        float *d = dst + (size_t)i * dw;
        const float *s = src + (size_t)i * sw;
        if (!to_planar && nq < G) memset(d, 0, w * sizeof(float));
        for (int g = 0; g < n_groups; g++) {
            size_t gq = (size_t)g * gw + (size_t)q0 * hd, gk = (size_t)g * gw + (size_t)G * hd, gv = gk + (size_t)hd;
            size_t pq = (size_t)g * nq * hd, pk = qw + (size_t)g * hd, pv = qw + kvw + (size_t)g * hd;
            memcpy(d + (to_planar ? pq : gq), s + (to_planar ? gq : pq), qbytes);
            memcpy(d + (to_planar ? pk : gk), s + (to_planar ? gk : pk), hbytes);
            memcpy(d + (to_planar ? pv : gv), s + (to_planar ? gv : pv), hbytes);
        }
    }
}

void op_qkv_grouped_to_planar(mt_backend *be, float *planar, const float *grouped, int N, int n_groups, int G, int q0,
                              int nq, int hd) {
    MT_DISPATCH(be, qkv_grouped_to_planar, be, planar, grouped, N, n_groups, G, q0, nq, hd);
    convert(planar, grouped, N, n_groups, G, q0, nq, hd, 1);
}

void op_qkv_planar_to_grouped(mt_backend *be, float *grouped, const float *planar, int N, int n_groups, int G, int q0,
                              int nq, int hd) {
    MT_DISPATCH(be, qkv_planar_to_grouped, be, grouped, planar, N, n_groups, G, q0, nq, hd);
    convert(grouped, planar, N, n_groups, G, q0, nq, hd, 0);
}
