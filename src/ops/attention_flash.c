/* Causal attention core, flash-attention style, AVX-512, for head sizes
 * 16, 32, 48, 64 (the accumulators of a block of rows stay in registers;
 * other sizes take the BLAS path in attention.c). No score matrix reaches
 * memory: scores live in registers, probabilities in a 4 x 64 buffer.
 * Multi-head or grouped-query: qkv rows [Q: NH*HS | K: NKV*HS | V: NKV*HS],
 * query head h reads kv head h / (NH/NKV) in place (attention.c).
 *
 * Work is parallel over (batch, query head) pairs (one task per pair, each
 * writing its own outputs; the grouped-query dK/dV go through the slots of
 * attention_impl.h, so any thread count gives the same bits). Q, V, dO are
 * read in place; each task gathers
 * K (and in backward V) transposed into the thread's scratch, KT [HS,Tp]
 * (Tp = T rounded up to 64, zero padded), so 16 keys' scores are one
 * vector: s[j..j+16) = sum_d q[d] KT[d][j..j+16). Queries go in blocks of
 * R = 4 rows that share every K and V load.
 *
 * forward, per query row i, keys in blocks of 64 up to i (online softmax):
 *   m' = max(m, max_block s); a = exp(m - m'); l = a l + sum exp(s - m');
 *   acc = a acc + sum_j pd_j V_j  with pd = exp(s - m') * dropout scale;
 *   at the end O_i = acc / l and lse_i = m + log l (of the undropped scores).
 * backward, per query row block and 16-key strip (also KT, V^T as VT, dO):
 *   p = exp(s - lse_i); dpd = dO_i . V_j; pd = p*keep; dp = dpd*keep;
 *   ds = scale p (dp - D_i), D_i = dO_i . O_i;
 *   dQ_i += sum_j ds_j K_j; dV_j += sum_i pd_ij dO_i; dK_j += sum_i ds_ij Q_i.
 * Dropout scales of a strip come from the same Philox blocks as the BLAS
 * path's (key j's block is j / 4), so both draw the same mask.
 * Packed documents (mt_attn_dropout.doc_start): row i's keys start at its
 * document's first row lo_i; blocks and strips wholly before the lowest
 * lo of a row block are skipped, the others masked per lane like the
 * causal edge: variable-length blocks on the diagonal, no T x T mask. */
#include "ops/attention_impl.h"
#include "ops/vmath.h"
#include <float.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#ifdef __AVX512F__
#define R 4       /* query rows per block: they share every K, V load */
#define KS 16     /* keys per strip (one vector) */
#define KB 64     /* keys per online-softmax block (4 strips) */
#define MAX_NV 4  /* head size up to 64: a block's accumulators stay in registers */
#define INL static inline __attribute__((always_inline))

static int round_up(int n, int q) { return (n + q - 1) / q * q; }

int op_attention_flash_supported(mt_backend *be, int T, int HS) { return HS % 16 == 0 && HS / 16 <= MAX_NV && T >= 1; }

static size_t per_thread(int T, int HS) {
    size_t th = (size_t)round_up(T, KB) * HS;
    return 4 * th + (size_t)2 * R * KB + KB + 64;
}

size_t op_attention_flash_scratch_floats(mt_backend *be, int B, int T, int NH, int NKV, int HS) {
    size_t nthreads = be->nthreads > 1 ? (size_t)be->nthreads : 1;
    return op_attention_gqa_partial_floats(B, T, NH, NKV, HS) + per_thread(T, HS) * (size_t)nthreads;
}

/* Row copies of HS (a multiple of 16) floats: vector moves, no memcpy call
 * per 64..256-byte row. */
static void copy_rows(float *dst, size_t ldd, const float *src, size_t lds, int T, int HS) {
    for (int t = 0; t < T; t++)
        for (int v = 0; v < HS; v += 16)
            _mm512_storeu_ps(dst + (size_t)t * ldd + v, _mm512_loadu_ps(src + (size_t)t * lds + v));
}

/* dst[d][t] = src[t][d] for t < T, 0 for T <= t < Tp, by 16 x 16 tiles in
 * registers: four rounds of the perfect shuffle (row i of a round is the
 * interleave of rows i/2 and i/2 + 8 of the previous one, low or high
 * halves) turn the tile's rows into its columns. */
static void gather_transposed(float *dst, const float *src, int T, int Tp, int HS, size_t ld) {
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    for (int t0 = 0; t0 < Tp; t0 += 16) {
        const int nt = T - t0 < 16 ? (T - t0 > 0 ? T - t0 : 0) : 16;
        for (int d0 = 0; d0 < HS; d0 += 16) {
            __m512 a[16], b[16];
            for (int t = 0; t < 16; t++)
                a[t] = t < nt ? _mm512_loadu_ps(src + (size_t)(t0 + t) * ld + d0) : _mm512_setzero_ps();
            for (int round = 0; round < 4; round++) {
                for (int i = 0; i < 8; i++) {
                    b[2 * i] = _mm512_permutex2var_ps(a[i], lo, a[i + 8]);
                    b[2 * i + 1] = _mm512_permutex2var_ps(a[i], hi, a[i + 8]);
                }
                memcpy(a, b, sizeof a);
            }
            for (int d = 0; d < 16; d++) _mm512_storeu_ps(dst + (size_t)(d0 + d) * Tp + t0, a[d]);
        }
    }
}

static __mmask16 lanes(int n) { return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

/* s[r][q] = A_{i0+r} . BT[:, j0+16q .. +16) for r < R, q < NS (A's rows
 * lda apart, read in place in the caller's tensor; rows past
 * the end of A read row 0 again: harmless, their results are never used). */
INL void strips(__m512 s[R][4], const float *A, size_t lda, const float *BT, int Tp, int HS, int i0, int nr,
                int j0, const int NS) {
    const float *a[R];
    for (int r = 0; r < R; r++) a[r] = A + (size_t)(i0 + (r < nr ? r : 0)) * lda;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int q = 0; q < NS; q++) s[r][q] = _mm512_setzero_ps();
    for (int d = 0; d < HS; d++) {
        __m512 k[4];
#pragma GCC unroll 4
        for (int q = 0; q < NS; q++) {
            k[q] = _mm512_loadu_ps(BT + (size_t)d * Tp + j0 + 16 * q);
            __asm__("" : "+v"(k[q])); /* keep it in a register: GCC would reload it for every row */
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 ar = _mm512_set1_ps(a[r][d]);
#pragma GCC unroll 4
            for (int q = 0; q < NS; q++) s[r][q] = _mm512_fmadd_ps(ar, k[q], s[r][q]);
        }
    }
}

/* One KB-key block of the forward for rows i0..i0+nr: online-softmax update
 * of m, l (per row) and the output accumulators o[r][v]. */
INL void fwd_block(const float *Q, const float *KT, const float *V, size_t ld, int Tp, int HS, int i0, int nr, int j0,
                   float scale, float m[R], __m512 l[R], __m512 o[R][MAX_NV], float *pbuf, float *rs,
                   const mt_attn_dropout *drop, int b, int h, const int lo[R], const int NV, const int NS) {
    __m512 s[R][4];
    strips(s, Q, ld, KT, Tp, HS, i0, nr, j0, NS);
    const __m512 sc = _mm512_set1_ps(scale), neg = _mm512_set1_ps(-FLT_MAX);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        if (r >= nr || i0 + r < j0 || lo[r] >= j0 + KS * NS) { /* past the end, or no key here is its */
#pragma GCC unroll 4
            for (int q = 0; q < NS; q++) _mm512_storeu_ps(pbuf + r * KB + 16 * q, _mm512_setzero_ps());
            continue;
        }
        const int i = i0 + r;
        __mmask16 k[4];
        __m512 bm = neg;
#pragma GCC unroll 4
        for (int q = 0; q < NS; q++) {
            k[q] = lanes(i - (j0 + 16 * q) + 1) & (__mmask16)~lanes(lo[r] - (j0 + 16 * q)); /* its document's keys */
            s[r][q] = _mm512_mask_blend_ps(k[q], neg, _mm512_mul_ps(s[r][q], sc));
            bm = _mm512_max_ps(bm, s[r][q]);
        }
        const float mb = _mm512_reduce_max_ps(bm), mn = mb > m[r] ? mb : m[r];
        const float a = mt_vexpf(m[r] - mn);
        m[r] = mn;
        const __m512 av = _mm512_set1_ps(a), mv = _mm512_set1_ps(mn);
        l[r] = _mm512_mul_ps(l[r], av);
        if (drop)
            mt_dropout_block_scales(rs, &drop->d, drop->sample_ids[b], (uint32_t)i, (uint32_t)(drop->head0 + h),
                                    (uint32_t)j0 / 4, KB / 4);
#pragma GCC unroll 4
        for (int q = 0; q < NS; q++) {
            __m512 p = _mm512_maskz_mov_ps(k[q], mt_vexp16(_mm512_sub_ps(s[r][q], mv)));
            l[r] = _mm512_add_ps(l[r], p);
            if (drop) p = _mm512_mul_ps(p, _mm512_loadu_ps(rs + 16 * q));
            _mm512_storeu_ps(pbuf + r * KB + 16 * q, p);
        }
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) o[r][v] = _mm512_mul_ps(o[r][v], av);
    }
    /* o[r] += sum_j p[r][j] V_j: each V row loaded once for the R rows */
    const int nj = i0 + nr - j0 < NS * KS ? i0 + nr - j0 : NS * KS;
    for (int jj = 0; jj < nj; jj++) {
        __m512 vr[MAX_NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            vr[v] = _mm512_loadu_ps(V + (size_t)(j0 + jj) * ld + 16 * v);
            __asm__("" : "+v"(vr[v])); /* one load for the R rows (see strips) */
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 p = _mm512_set1_ps(pbuf[r * KB + jj]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) o[r][v] = _mm512_fmadd_ps(p, vr[v], o[r][v]);
        }
    }
}

INL void fwd_head(float *out, float *lse, const float *qkv, int b, int h, int T, int NH, int NKV, int HS,
                  const mt_attn_dropout *drop, const int32_t *doc, float *ws, const int NV) {
    const int32_t *ds = doc ? doc + (size_t)b * T : NULL;
    const int C = NH * HS, Tp = round_up(T, KB), kv = h / (NH / NKV);
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t th = (size_t)Tp * HS;
    float *KT = ws, *pbuf = KT + th, *rs = pbuf + (size_t)R * KB;
    /* Q and V are read in place (rows ld apart); only K is gathered, transposed */
    const size_t ld = (size_t)(NH + 2 * NKV) * HS;
    const float *row0 = qkv + (size_t)b * T * ld;
    const float *Q = row0 + (size_t)h * HS, *K = row0 + (size_t)(NH + kv) * HS, *V = K + (size_t)NKV * HS;
    gather_transposed(KT, K, T, Tp, HS, ld);
    float *lrow = lse + ((size_t)b * NH + h) * T;
    for (int i0 = 0; i0 < T; i0 += R) {
        const int nr = T - i0 < R ? T - i0 : R;
        float m[R];
        __m512 l[R], o[R][MAX_NV];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            m[r] = -FLT_MAX;
            l[r] = _mm512_setzero_ps();
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) o[r][v] = _mm512_setzero_ps();
        }
        int lo[R], lo_min = T;
        for (int r = 0; r < R; r++) {
            lo[r] = ds && r < nr ? ds[i0 + r] : 0;
            if (r < nr && lo[r] < lo_min) lo_min = lo[r];
        }
        for (int j0 = lo_min / KB * KB; j0 < i0 + nr; j0 += KB) {
            const int ns = (i0 + nr - j0 + KS - 1) / KS;
            if (ns >= 4) fwd_block(Q, KT, V, ld, Tp, HS, i0, nr, j0, scale, m, l, o, pbuf, rs, drop, b, h, lo, NV, 4);
            else if (ns == 3) fwd_block(Q, KT, V, ld, Tp, HS, i0, nr, j0, scale, m, l, o, pbuf, rs, drop, b, h, lo, NV, 3);
            else if (ns == 2) fwd_block(Q, KT, V, ld, Tp, HS, i0, nr, j0, scale, m, l, o, pbuf, rs, drop, b, h, lo, NV, 2);
            else fwd_block(Q, KT, V, ld, Tp, HS, i0, nr, j0, scale, m, l, o, pbuf, rs, drop, b, h, lo, NV, 1);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            if (r >= nr) break;
            const float sum = _mm512_reduce_add_ps(l[r]);
            lrow[i0 + r] = m[r] + logf(sum);
            const __m512 inv = _mm512_set1_ps(1.0f / sum);
            float *dst = out + ((size_t)b * T + i0 + r) * C + (size_t)h * HS;
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) _mm512_storeu_ps(dst + 16 * v, _mm512_mul_ps(o[r][v], inv));
        }
    }
}

static void flash_forward_head(float *out, float *lse, const float *qkv, int b, int h, int T, int NH, int NKV,
                               int HS, const mt_attn_dropout *drop, const int32_t *doc, float *ws) {
    switch (HS / 16) {
    case 1: fwd_head(out, lse, qkv, b, h, T, NH, NKV, HS, drop, doc, ws, 1); break;
    case 2: fwd_head(out, lse, qkv, b, h, T, NH, NKV, HS, drop, doc, ws, 2); break;
    case 3: fwd_head(out, lse, qkv, b, h, T, NH, NKV, HS, drop, doc, ws, 3); break;
    default: fwd_head(out, lse, qkv, b, h, T, NH, NKV, HS, drop, doc, ws, 4); break;
    }
}

/* Backward's two strips at once, s = Q . KT and dp = dO . VT for 16 keys:
 * eight independent FMA chains per d instead of four (the FMA latency, not
 * its throughput, bounds four). */
INL void strips_sdp(__m512 s[R], __m512 dp[R], const float *Q, size_t ld, const float *dO, size_t ldo,
                    const float *KT, const float *VT, int Tp, int HS, int i0, int nr, int j0) {
    const float *q[R], *g[R];
    for (int r = 0; r < R; r++) {
        q[r] = Q + (size_t)(i0 + (r < nr ? r : 0)) * ld;
        g[r] = dO + (size_t)(i0 + (r < nr ? r : 0)) * ldo;
        s[r] = dp[r] = _mm512_setzero_ps();
    }
    for (int d = 0; d < HS; d++) {
        __m512 k = _mm512_loadu_ps(KT + (size_t)d * Tp + j0), v = _mm512_loadu_ps(VT + (size_t)d * Tp + j0);
        __asm__("" : "+v"(k), "+v"(v));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            s[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][d]), k, s[r]);
            dp[r] = _mm512_fmadd_ps(_mm512_set1_ps(g[r][d]), v, dp[r]);
        }
    }
}

/* One 16-key strip of the backward for rows i0..i0+nr. */
INL void bwd_strip(const float *Q, const float *K, size_t ld, const float *KT, const float *VT, const float *dO,
                   size_t ldo, float *dQ, float *dK, float *dV, const float *lrow, const float *D, int Tp, int HS,
                   int i0, int nr, int j0, float scale, float *pbuf, float *dsbuf, float *rs,
                   const mt_attn_dropout *drop, int b, int h, const int lo[R], const int NV) {
    __m512 s[R], dp[R];
    strips_sdp(s, dp, Q, ld, dO, ldo, KT, VT, Tp, HS, i0, nr, j0);
    const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const int i = i0 + r;
        if (r >= nr || i < j0 || lo[r] >= j0 + KS) {
            _mm512_storeu_ps(pbuf + r * KS, _mm512_setzero_ps());
            _mm512_storeu_ps(dsbuf + r * KS, _mm512_setzero_ps());
            continue;
        }
        const __mmask16 k = lanes(i - j0 + 1) & (__mmask16)~lanes(lo[r] - j0); /* its document's keys */
        const __m512 sv = _mm512_mul_ps(s[r], sc);
        __m512 p = _mm512_maskz_mov_ps(k, mt_vexp16(_mm512_sub_ps(sv, _mm512_set1_ps(lrow[i]))));
        __m512 pd = p, dpv = dp[r];
        if (drop) {
            mt_dropout_block_scales(rs, &drop->d, drop->sample_ids[b], (uint32_t)i, (uint32_t)(drop->head0 + h),
                                    (uint32_t)j0 / 4, KS / 4);
            const __m512 keep = _mm512_loadu_ps(rs);
            pd = _mm512_mul_ps(p, keep);
            dpv = _mm512_mul_ps(dpv, keep);
        }
        const __m512 ds = _mm512_mul_ps(_mm512_mul_ps(p, _mm512_sub_ps(dpv, _mm512_set1_ps(D[r]))), sc);
        _mm512_storeu_ps(pbuf + r * KS, pd);
        _mm512_storeu_ps(dsbuf + r * KS, _mm512_maskz_mov_ps(k, ds));
    }
    const int nj = i0 + nr - j0 < KS ? i0 + nr - j0 : KS;
    /* dQ_r += sum_j ds[r][j] K_j: each K row loaded once for the R rows */
    __m512 q[R][MAX_NV];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) q[r][v] = _mm512_loadu_ps(dQ + (size_t)(i0 + (r < nr ? r : 0)) * ld + 16 * v);
    for (int jj = 0; jj < nj; jj++) {
        __m512 kr[MAX_NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            kr[v] = _mm512_loadu_ps(K + (size_t)(j0 + jj) * ld + 16 * v);
            __asm__("" : "+v"(kr[v]));
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 d = _mm512_set1_ps(dsbuf[r * KS + jj]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) q[r][v] = _mm512_fmadd_ps(d, kr[v], q[r][v]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        if (r >= nr) break;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(dQ + (size_t)(i0 + r) * ld + 16 * v, q[r][v]);
    }
    /* dV_j += sum_r pd[r][j] dO_r ; dK_j += sum_r ds[r][j] Q_r: the R rows' dO and Q slices stay in registers */
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        __m512 g[R], x[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const int ir = i0 + (r < nr ? r : 0);
            g[r] = _mm512_loadu_ps(dO + (size_t)ir * ldo + 16 * v);
            x[r] = _mm512_loadu_ps(Q + (size_t)ir * ld + 16 * v);
        }
        /* four keys at a time: eight independent accumulation chains */
        int jj = 0;
        for (; jj + 4 <= nj; jj += 4) {
            __m512 av[4], ak[4];
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                av[u] = _mm512_loadu_ps(dV + (size_t)(j0 + jj + u) * HS + 16 * v);
                ak[u] = _mm512_loadu_ps(dK + (size_t)(j0 + jj + u) * HS + 16 * v);
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) {
                    av[u] = _mm512_fmadd_ps(_mm512_set1_ps(pbuf[r * KS + jj + u]), g[r], av[u]);
                    ak[u] = _mm512_fmadd_ps(_mm512_set1_ps(dsbuf[r * KS + jj + u]), x[r], ak[u]);
                }
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                _mm512_storeu_ps(dV + (size_t)(j0 + jj + u) * HS + 16 * v, av[u]);
                _mm512_storeu_ps(dK + (size_t)(j0 + jj + u) * HS + 16 * v, ak[u]);
            }
        }
        for (; jj < nj; jj++) {
            float *dvr = dV + (size_t)(j0 + jj) * HS + 16 * v, *dkr = dK + (size_t)(j0 + jj) * HS + 16 * v;
            __m512 av = _mm512_loadu_ps(dvr), ak = _mm512_loadu_ps(dkr);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                av = _mm512_fmadd_ps(_mm512_set1_ps(pbuf[r * KS + jj]), g[r], av);
                ak = _mm512_fmadd_ps(_mm512_set1_ps(dsbuf[r * KS + jj]), x[r], ak);
            }
            _mm512_storeu_ps(dvr, av);
            _mm512_storeu_ps(dkr, ak);
        }
    }
}

INL void bwd_head(float *dqkv, float *part, const float *dout, const float *qkv, const float *out, const float *lse,
                  int B, int b, int h, int T, int NH, int NKV, int HS, const mt_attn_dropout *drop,
                  const int32_t *doc, float *ws, const int NV) {
    const int32_t *ds = doc ? doc + (size_t)b * T : NULL;
    const int C = NH * HS, Tp = round_up(T, KB), kv = h / (NH / NKV);
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t th = (size_t)Tp * HS;
    float *KT = ws, *VT = KT + th, *dK = VT + th, *dV = dK + th;
    float *pbuf = dV + th, *dsbuf = pbuf + (size_t)R * KS, *rs = dsbuf + (size_t)R * KS;
    /* Q, K and dO are read in place and dQ accumulates in place (in dqkv);
     * K and V are gathered transposed, dK and dV accumulate in scratch. */
    const size_t ld = (size_t)(NH + 2 * NKV) * HS, ldo = (size_t)C;
    const float *row0 = qkv + (size_t)b * T * ld;
    const float *Q = row0 + (size_t)h * HS, *K = row0 + (size_t)(NH + kv) * HS;
    const float *dO = dout + (size_t)b * T * C + (size_t)h * HS;
    float *dQ = dqkv + (size_t)b * T * ld + (size_t)h * HS;
    gather_transposed(KT, K, T, Tp, HS, ld);
    gather_transposed(VT, K + (size_t)NKV * HS, T, Tp, HS, ld);
    memset(dK, 0, 2 * th * sizeof(float)); /* dK, dV */
    for (int t = 0; t < T; t++) memset(dQ + (size_t)t * ld, 0, (size_t)HS * sizeof(float));
    const float *lrow = lse + ((size_t)b * NH + h) * T;
    for (int i0 = 0; i0 < T; i0 += R) {
        const int nr = T - i0 < R ? T - i0 : R;
        float D[R] = {0};
        for (int r = 0; r < nr; r++) { /* D_i = dO_i . O_i */
            const float *o = out + ((size_t)b * T + i0 + r) * C + (size_t)h * HS, *g = dO + (size_t)(i0 + r) * ldo;
            __m512 dv = _mm512_setzero_ps();
            for (int v = 0; v < NV; v++)
                dv = _mm512_fmadd_ps(_mm512_loadu_ps(g + 16 * v), _mm512_loadu_ps(o + 16 * v), dv);
            D[r] = _mm512_reduce_add_ps(dv);
        }
        int lo[R], lo_min = T;
        for (int r = 0; r < R; r++) {
            lo[r] = ds && r < nr ? ds[i0 + r] : 0;
            if (r < nr && lo[r] < lo_min) lo_min = lo[r];
        }
        for (int j0 = lo_min / KS * KS; j0 < i0 + nr; j0 += KS)
            bwd_strip(Q, K, ld, KT, VT, dO, ldo, dQ, dK, dV, lrow, D, Tp, HS, i0, nr, j0, scale, pbuf, dsbuf, rs,
                      drop, b, h, lo, NV);
    }
    size_t ldk, ldv;
    float *kdst = op_attention_gqa_dkv_dst(dqkv, part, b, h, 0, B, T, NH, NKV, HS, &ldk);
    float *vdst = op_attention_gqa_dkv_dst(dqkv, part, b, h, 1, B, T, NH, NKV, HS, &ldv);
    copy_rows(kdst, ldk, dK, (size_t)HS, T, HS);
    copy_rows(vdst, ldv, dV, (size_t)HS, T, HS);
}

static void flash_backward_head(float *dqkv, float *part, const float *dout, const float *qkv, const float *out,
                                const float *lse, int B, int b, int h, int T, int NH, int NKV, int HS,
                                const mt_attn_dropout *drop, const int32_t *doc, float *ws) {
    switch (HS / 16) {
    case 1: bwd_head(dqkv, part, dout, qkv, out, lse, B, b, h, T, NH, NKV, HS, drop, doc, ws, 1); break;
    case 2: bwd_head(dqkv, part, dout, qkv, out, lse, B, b, h, T, NH, NKV, HS, drop, doc, ws, 2); break;
    case 3: bwd_head(dqkv, part, dout, qkv, out, lse, B, b, h, T, NH, NKV, HS, drop, doc, ws, 3); break;
    default: bwd_head(dqkv, part, dout, qkv, out, lse, B, b, h, T, NH, NKV, HS, drop, doc, ws, 4); break;
    }
}

void op_attention_flash_forward(mt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                                int HS, const mt_attn_dropout *drop, float *scratch) {
    const mt_attn_dropout *d = drop && drop->d.p > 0.0f ? drop : NULL;
    const int32_t *doc = drop ? drop->doc_start : NULL;
    const size_t ptf = per_thread(T, HS);
    float *wsbase = scratch + op_attention_gqa_partial_floats(B, T, NH, NKV, HS);
#pragma omp parallel for schedule(static) num_threads(be->nthreads > 1 ? be->nthreads : 1)
    for (int task = 0; task < B * NH; task++)
        flash_forward_head(out, lse, qkv, task / NH, task % NH, T, NH, NKV, HS, d, doc,
                           wsbase + ptf * (size_t)omp_get_thread_num());
}

void op_attention_flash_backward(mt_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                                 const float *lse, int B, int T, int NH, int NKV, int HS, const mt_attn_dropout *drop,
                                 float *scratch) {
    const mt_attn_dropout *d = drop && drop->d.p > 0.0f ? drop : NULL;
    const int32_t *doc = drop ? drop->doc_start : NULL;
    const size_t ptf = per_thread(T, HS);
    float *part = scratch, *wsbase = scratch + op_attention_gqa_partial_floats(B, T, NH, NKV, HS);
#pragma omp parallel for schedule(static) num_threads(be->nthreads > 1 ? be->nthreads : 1)
    for (int task = 0; task < B * NH; task++)
        flash_backward_head(dqkv, part, dout, qkv, out, lse, B, task / NH, task % NH, T, NH, NKV, HS, d, doc,
                            wsbase + ptf * (size_t)omp_get_thread_num());
    op_attention_gqa_reduce(be, dqkv, part, B, T, NH, NKV, HS);
}
#else
int op_attention_flash_supported(mt_backend *be, int T, int HS) {
    (void)T;
    (void)HS;
    return 0;
}
size_t op_attention_flash_scratch_floats(mt_backend *be, int B, int T, int NH, int NKV, int HS) {
    (void)B;
    (void)T;
    (void)NH;
    (void)NKV;
    (void)HS;
    return 0;
}
void op_attention_flash_forward(mt_backend *be, float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                                int HS, const mt_attn_dropout *drop, float *scratch) {
    (void)out; (void)lse; (void)qkv; (void)B; (void)T; (void)NH; (void)NKV; (void)HS; (void)drop; (void)scratch;
}
void op_attention_flash_backward(mt_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                                 const float *lse, int B, int T, int NH, int NKV, int HS, const mt_attn_dropout *drop,
                                 float *scratch) {
    (void)dqkv; (void)dout; (void)qkv; (void)out; (void)lse; (void)B; (void)T; (void)NH; (void)NKV; (void)HS;
    (void)drop; (void)scratch;
}
#endif
