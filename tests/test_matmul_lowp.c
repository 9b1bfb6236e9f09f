/* Low-precision groundwork: the dtype helpers, the fp32 <-> bf16 / fp16
 * conversions (named cases, independent round-to-nearest-even oracles, the
 * vectorised arrays against the scalar reference bit for bit) and the bf16
 * linear layer against an fp32-exact reference on the bf16-rounded inputs. */
#define TL_LCG_SEED 0x9e3779b97f4a7c15ULL
#include "core/dtype.h"
#include "core/error.h"
#include "ops/matmul_lowp.h"
#include "testlib.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

static uint32_t rand32(void) { return (uint32_t)(lcg_next() >> 32); }
/* [-a, a) from the top 32 bits (the kernel tests' frand takes 53) */
static float frand32(float a) { return (float)(((double)rand32() / 4294967296.0 * 2.0 - 1.0) * a); }
static void *xalloc(size_t bytes) { return mt_xmalloc(bytes ? bytes : 1, "test buffer"); }

/* ---------- dtype helpers ---------- */
static void test_dtype_names(void) {
    mt_dtype t = MT_FP32;
    CHECK(mt_dtype_parse("bf16", &t) == 0 && t == MT_BF16, "bf16");
    CHECK(mt_dtype_parse("fp16", &t) == 0 && t == MT_FP16, "fp16");
    CHECK(mt_dtype_parse("fp32", &t) == 0 && t == MT_FP32, "fp32");
    CHECK(mt_dtype_parse("float16", &t) == -1 && t == MT_FP32, "unknown name leaves t");
    CHECK(mt_dtype_parse(NULL, &t) == -1, "NULL");
    CHECK(strcmp(mt_dtype_name(MT_BF16), "bf16") == 0 && strcmp(mt_dtype_name((mt_dtype)7), "?") == 0, "names");
    CHECK(mt_dtype_size(MT_FP32) == 4 && mt_dtype_size(MT_BF16) == 2 && mt_dtype_size(MT_FP16) == 2 &&
              mt_dtype_size((mt_dtype)7) == 0, "sizes");
}

/* ---------- oracles: nearest representable value by exact double arithmetic ---------- */
/* bf16: the two candidates around |x| are its truncation and the next bf16
 * up; pick the nearer, the even one on a tie. */
static mt_bf16 bf16_oracle(float x) {
    uint32_t u = mt_f32_bits(x), sign = u & 0x80000000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (mt_bf16)((u >> 16) | 0x40u);
    if (a == 0x7f800000u) return (mt_bf16)(u >> 16);
    uint32_t lo = a & 0xffff0000u, hi = lo + 0x10000u;
    double v = fabs((double)x), dlo = v - (double)mt_f32_from_bits(lo);
    double dhi = (hi == 0x7f800000u ? ldexp(1.0, 128) : (double)mt_f32_from_bits(hi)) - v;
    uint32_t r = dlo < dhi ? lo : dhi < dlo ? hi : ((lo >> 16) & 1u) ? hi : lo;
    return (mt_bf16)((sign | r) >> 16);
}

/* fp16: every finite non-negative fp16 value in increasing order (bits
 * 0..0x7bff are monotone); binary search for the neighbours of |x|. */
static double fp16_table[0x7c00];
static void fp16_table_init(void) {
    for (int h = 0; h < 0x7c00; h++) {
        int e = h >> 10, m = h & 0x3ff;
        fp16_table[h] = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    }
}
static mt_fp16 fp16_oracle(float x) {
    uint32_t u = mt_f32_bits(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (mt_fp16)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    double v = fabs((double)x);
    if (v >= 65520.0) return (mt_fp16)(sign | 0x7c00u); /* halfway to 2^16, the next step after 65504 */
    int lo = 0, hi = 0x7bff; /* largest h with table[h] <= v */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (fp16_table[mid] <= v) lo = mid;
        else hi = mid - 1;
    }
    int r = lo;
    if (lo < 0x7bff) {
        double dlo = v - fp16_table[lo], dhi = fp16_table[lo + 1] - v;
        if (dhi < dlo || (dhi == dlo && (lo & 1))) r = lo + 1;
    }
    return (mt_fp16)(sign | (uint32_t)r);
}

/* ---------- named cases ---------- */
static void check_bf16(uint32_t in, uint16_t want) {
    mt_bf16 got = mt_fp32_to_bf16(mt_f32_from_bits(in)), vec;
    float x = mt_f32_from_bits(in);
    mt_convert_fp32_to_bf16(&vec, &x, 1);
    CHECK(got == want && vec == want, "bf16(%08x) = %04x (vector %04x), want %04x", in, got, vec, want);
}
static void check_fp16(uint32_t in, uint16_t want) {
    mt_fp16 got = mt_fp32_to_fp16(mt_f32_from_bits(in)), vec;
    float x = mt_f32_from_bits(in);
    mt_convert_fp32_to_fp16(&vec, &x, 1);
    CHECK(got == want && vec == want, "fp16(%08x) = %04x (vector %04x), want %04x", in, got, vec, want);
}

static void test_named_cases(void) {
    check_bf16(0x3f800000, 0x3f80);                         /* 1 */
    check_bf16(0x3f808000, 0x3f80);                         /* tie, kept part even: down */
    check_bf16(0x3f818000, 0x3f82);                         /* tie, kept part odd: up */
    check_bf16(0x3f808001, 0x3f81);                         /* just above the tie */
    check_bf16(0x3f807fff, 0x3f80);                         /* just below */
    check_bf16(0xbf818000, 0xbf82);                         /* negative tie */
    check_bf16(0x80000000, 0x8000);                         /* -0 */
    check_bf16(0x7f800000, 0x7f80);                         /* inf */
    check_bf16(0xff800000, 0xff80);                         /* -inf */
    check_bf16(0x7f7fffff, 0x7f80);                         /* FLT_MAX rounds up to inf */
    check_bf16(0x7f7f7fff, 0x7f7f);                         /* largest that stays finite */
    check_bf16(0x7f800001, 0x7fc0);                         /* signalling NaN: quiet NaN */
    check_bf16(0x7fc00000, 0x7fc0);                         /* quiet NaN */
    check_bf16(0xff812345, 0xffc1);                         /* negative NaN keeps sign, top payload */
    check_bf16(0x7f80ffff, 0x7fc0);                         /* NaN whose rounding would carry: stays NaN */
    check_bf16(0x00008000, 0x0000);                         /* subnormal tie to even zero */
    check_bf16(0x00018000, 0x0002);                         /* subnormal tie, odd: up */
    check_bf16(0x807fffff, 0x8080);                         /* largest subnormal rounds to the smallest normal */
    check_bf16(0x00000001, 0x0000);                         /* smallest subnormal */
    CHECK(isnan(mt_bf16_to_fp32(mt_fp32_to_bf16(NAN))), "NaN round trip");
    CHECK(mt_f32_bits(mt_bf16_to_fp32(0x8000)) == 0x80000000u, "-0 widens to -0");

    check_fp16(0x3f800000, 0x3c00);                         /* 1 */
    check_fp16(0x3f801000, 0x3c00);                         /* 1 + 2^-11: tie, even: down */
    check_fp16(0x3f803000, 0x3c02);                         /* 1 + 3*2^-11: tie, odd: up */
    check_fp16(0x3f801001, 0x3c01);                         /* above the tie */
    check_fp16(0x477fe000, 0x7bff);                         /* 65504, the largest finite */
    check_fp16(0x477fefff, 0x7bff);                         /* just below 65520 */
    check_fp16(0x477ff000, 0x7c00);                         /* 65520: tie, the even side is inf */
    check_fp16(0x49742400, 0x7c00);                         /* 1e6 overflows */
    check_fp16(0xc9742400, 0xfc00);                         /* -1e6 */
    check_fp16(0x7f800000, 0x7c00);                         /* inf */
    check_fp16(0x80000000, 0x8000);                         /* -0 */
    check_fp16(0x7f800001, 0x7e00);                         /* signalling NaN: quiet NaN */
    check_fp16(0xff812345, 0xfe09);                         /* NaN keeps sign and top payload bits */
    check_fp16(0x38800000, 0x0400);                         /* 2^-14, the smallest normal */
    check_fp16(0x387fc000, 0x03ff);                         /* 1023 * 2^-24, the largest subnormal */
    check_fp16(0x387fe000, 0x0400);                         /* 1023.5 * 2^-24: tie, odd: up to the normal */
    check_fp16(0x33800000, 0x0001);                         /* 2^-24, the smallest subnormal */
    check_fp16(0x33000000, 0x0000);                         /* 2^-25: tie, even: zero */
    check_fp16(0x33000001, 0x0001);                         /* just above 2^-25 */
    check_fp16(0x33c00000, 0x0002);                         /* 3 * 2^-25: tie, odd: up */
    check_fp16(0xb3000000, 0x8000);                         /* -2^-25: -0 */
    check_fp16(0x00000001, 0x0000);                         /* fp32 subnormal */
    CHECK(mt_fp16_to_fp32(0x0001) == 0x1p-24f && mt_fp16_to_fp32(0x03ff) == 1023 * 0x1p-24f, "fp16 subnormals widen");
    CHECK(mt_fp16_to_fp32(0x7bff) == 65504.0f && isinf(mt_fp16_to_fp32(0xfc00)) && mt_fp16_to_fp32(0xfc00) < 0,
          "65504, -inf");
    CHECK(mt_f32_bits(mt_fp16_to_fp32(0x7c01)) == 0x7fc02000u, "fp16 NaN widens quiet, payload kept");
}

/* ---------- every 16-bit value; oracles on many fp32 values ---------- */
static void test_exhaustive_16bit(void) {
    size_t bad_rt_b = 0, bad_rt_h = 0, bad_wide_b = 0, bad_wide_h = 0;
    mt_bf16 *hb = xalloc(65536 * sizeof(mt_bf16));
    float *wb = xalloc(65536 * sizeof(float)), *wh = xalloc(65536 * sizeof(float));
    for (uint32_t i = 0; i < 65536; i++) hb[i] = (uint16_t)i;
    mt_convert_bf16_to_fp32(wb, hb, 65536);
    mt_convert_fp16_to_fp32(wh, hb, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        float b = mt_bf16_to_fp32((mt_bf16)i), h = mt_fp16_to_fp32((mt_fp16)i);
        bad_wide_b += mt_f32_bits(b) != mt_f32_bits(wb[i]);
        bad_wide_h += mt_f32_bits(h) != mt_f32_bits(wh[i]);
        int bnan = (i & 0x7f80u) == 0x7f80u && (i & 0x7fu), hnan = (i & 0x7c00u) == 0x7c00u && (i & 0x3ffu);
        /* narrowing the widened value gives the value back (NaN: a NaN) */
        bad_rt_b += bnan ? !isnan(b) || (mt_fp32_to_bf16(b) & 0x7f80u) != 0x7f80u : mt_fp32_to_bf16(b) != i;
        bad_rt_h += hnan ? !isnan(h) || (mt_fp32_to_fp16(h) & 0x7c00u) != 0x7c00u : mt_fp32_to_fp16(h) != i;
        /* fp16's value by the independent formula */
        if (!hnan && (i & 0x7c00u) != 0x7c00u) {
            int e = (int)(i >> 10) & 0x1f, m = (int)(i & 0x3ff);
            double v = (e ? ldexp(1024 + m, e - 25) : ldexp(m, -24)) * ((i & 0x8000u) ? -1 : 1);
            bad_rt_h += (double)h != v || !!signbit(h) != !!(i & 0x8000u);
        }
    }
    CHECK(bad_wide_b == 0 && bad_wide_h == 0, "widening: vector != scalar on %zu bf16, %zu fp16 values", bad_wide_b,
          bad_wide_h);
    CHECK(bad_rt_b == 0 && bad_rt_h == 0, "round trips: %zu bf16, %zu fp16 values wrong", bad_rt_b, bad_rt_h);
    free(hb); free(wb); free(wh);
}

/* Random fp32 values that reach every case: arbitrary bit patterns (all
 * exponents, NaNs, subnormals), values in fp16's range with uniform
 * exponents, and exact ties of both formats. */
static float test_value(void) {
    uint32_t r = rand32(), k = r % 5;
    uint32_t bits = rand32();
    if (k == 1) bits = (bits & 0x807fffffu) | ((uint32_t)(96 + rand32() % 50) << 23); /* 2^-31 .. 2^18 */
    if (k == 2) bits = (bits & 0xffff0000u) | 0x8000u;                               /* bf16 tie */
    if (k == 3) bits = (bits & 0x807fe000u) | ((uint32_t)(100 + rand32() % 44) << 23) | 0x1000u; /* fp16 tie */
    if (k == 4) bits &= 0x807fffffu;                                                  /* fp32 subnormal or 0 */
    return mt_f32_from_bits(bits);
}

static void test_arrays(int threads) {
    omp_set_num_threads(threads);
    /* odd lengths, unaligned starts; the longest takes the parallel path */
    const size_t lens[] = {0, 1, 15, 16, 17, 31, 33, 1000, 65537, 1000003};
    size_t bad_ob = 0, bad_oh = 0, bad_vb = 0, bad_vh = 0, bad_w = 0, bad_guard = 0, total = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        float *src = xalloc((n + 1) * sizeof(float)), *back = xalloc((n + 1) * sizeof(float));
        mt_bf16 *b = xalloc((n + 2) * sizeof(mt_bf16));
        mt_fp16 *h = xalloc((n + 2) * sizeof(mt_fp16));
        for (size_t i = 0; i <= n; i++) src[i] = test_value();
        b[n + 1] = h[n + 1] = 0xabcd; /* a guard after the end */
        mt_convert_fp32_to_bf16(b + 1, src + 1, n);
        mt_convert_fp32_to_fp16(h + 1, src + 1, n);
        bad_guard += b[n + 1] != 0xabcd || h[n + 1] != 0xabcd;
        for (size_t i = 1; i <= n; i++) {
            mt_bf16 sb = mt_fp32_to_bf16(src[i]);
            mt_fp16 sh = mt_fp32_to_fp16(src[i]);
            bad_vb += b[i + 0] != sb;
            bad_vh += h[i + 0] != sh;
            bad_ob += sb != bf16_oracle(src[i]);
            bad_oh += sh != fp16_oracle(src[i]);
        }
        mt_convert_bf16_to_fp32(back + 1, b + 1, n);
        for (size_t i = 1; i <= n; i++) bad_w += mt_f32_bits(back[i]) != mt_f32_bits(mt_bf16_to_fp32(b[i]));
        mt_convert_fp16_to_fp32(back + 1, h + 1, n);
        for (size_t i = 1; i <= n; i++) bad_w += mt_f32_bits(back[i]) != mt_f32_bits(mt_fp16_to_fp32(h[i]));
        total += n;
        free(src); free(back); free(b); free(h);
    }
    CHECK(bad_vb == 0 && bad_vh == 0, "%d threads: vector != scalar on %zu bf16, %zu fp16 of %zu values", threads,
          bad_vb, bad_vh, total);
    CHECK(bad_ob == 0 && bad_oh == 0, "scalar != round-to-nearest-even oracle on %zu bf16, %zu fp16 of %zu values",
          bad_ob, bad_oh, total);
    CHECK(bad_w == 0 && bad_guard == 0, "widening arrays: %zu wrong; %zu guards overwritten", bad_w, bad_guard);
}

/* ---------- bf16 linear layer ---------- */
/* Reference: every product of two bf16 values is exact in fp32 and in
 * double, so the GEMM's only error is its fp32 summation. Any order of
 * summing n terms (the dot product's K products plus the initial value of
 * the output: bias or the accumulated gradient) in fp32 with round to
 * nearest has |error| <= (n-1) u / (1 - (n-1) u) * sum |terms|, u = 2^-24
 * (Higham, Accuracy and Stability, eq. 3.4 and its blocked forms); we allow
 * (n + 1) u * sum |terms|, computed per element in double. A result that
 * ignored the bf16 rounding of the inputs, or summed in bf16, fails it. */
typedef struct {
    double *val, *mag; /* exact sum and sum of |terms| per output element */
} ref_t;

static size_t check_ref(const char *what, const float *got, const ref_t *r, size_t n, int nterms, int threads) {
    size_t bad = 0, worst = 0;
    double wr = 0.0, u = 0x1p-24;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - r->val[i]), tol = (nterms + 1) * u * r->mag[i];
        double ratio = tol > 0 ? err / tol : (err > 0 ? INFINITY : 0);
        if (!(ratio <= 1.0)) bad++;
        if (!(ratio <= wr)) { wr = ratio; worst = i; }
    }
    CHECK(bad == 0, "%s (%d threads): %zu of %zu outside the bound, worst [%zu] %.9g vs %.9g (%.3g of the bound)",
          what, threads, bad, n, worst, n ? (double)got[worst] : 0.0, n ? r->val[worst] : 0.0, wr);
    return bad;
}

static void fill_bf16(mt_bf16 *h, float *f, size_t n) { /* random bf16 values and their fp32 copies */
    for (size_t i = 0; i < n; i++) {
        h[i] = mt_fp32_to_bf16(frand32(1.0f));
        f[i] = mt_bf16_to_fp32(h[i]);
    }
}

static void test_matmul_bf16(int N, int C, int OC, int threads) {
    omp_set_num_threads(threads);
    size_t nc = (size_t)N * C, oc = (size_t)OC * C, no = (size_t)N * OC;
    mt_bf16 *inp = xalloc(nc * 2), *w = xalloc(oc * 2), *dout = xalloc(no * 2);
    float *finp = xalloc(nc * 4), *fw = xalloc(oc * 4), *fdout = xalloc(no * 4), *bias = xalloc(OC * 4);
    fill_bf16(inp, finp, nc); fill_bf16(w, fw, oc); fill_bf16(dout, fdout, no);
    for (int o = 0; o < OC; o++) bias[o] = frand32(1.0f);
    size_t mx = no > nc ? no : nc;
    mx = mx > oc ? mx : oc;
    ref_t r = {xalloc(mx * sizeof(double)), xalloc(mx * sizeof(double))};
    float *out = xalloc(no * 4), *out2 = xalloc(no * 4);

    for (int withb = 0; withb < 2; withb++) {
        for (size_t i = 0; i < no; i++) out[i] = NAN; /* overwritten, never read */
        op_matmul_forward_bf16(BE, out, inp, w, withb ? bias : NULL, N, C, OC);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double s = withb ? bias[o] : 0.0, m = fabs(s);
                for (int c = 0; c < C; c++) {
                    double p = (double)finp[(size_t)n * C + c] * fw[(size_t)o * C + c];
                    s += p; m += fabs(p);
                }
                r.val[(size_t)n * OC + o] = s; r.mag[(size_t)n * OC + o] = m;
            }
        check_ref(withb ? "fwd+bias" : "fwd", out, &r, no, C + 1, threads);
        op_matmul_forward_bf16(BE, out2, inp, w, withb ? bias : NULL, N, C, OC);
        CHECK(memcmp(out, out2, no * 4) == 0, "forward deterministic (%d threads)", threads);
    }

    float *dinp = xalloc(nc * 4), *dw = xalloc(oc * 4), *db = xalloc(OC * 4);
    float *dinp0 = xalloc(nc * 4), *dw0 = xalloc(oc * 4), *db0 = xalloc(OC * 4);
    for (size_t i = 0; i < nc; i++) dinp0[i] = frand32(1.0f);
    for (size_t i = 0; i < oc; i++) dw0[i] = frand32(1.0f);
    for (int o = 0; o < OC; o++) db0[o] = frand32(1.0f);
    for (int acc = 0; acc < 2; acc++) {
        if (acc) memcpy(dinp, dinp0, nc * 4);
        else for (size_t i = 0; i < nc; i++) dinp[i] = NAN; /* overwritten, never read */
        memcpy(dw, dw0, oc * 4); memcpy(db, db0, OC * 4);
        op_matmul_backward_bf16(BE, dinp, dw, db, dout, inp, w, N, C, OC, acc);
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double s = acc ? dinp0[(size_t)n * C + c] : 0.0, m = fabs(s);
                for (int o = 0; o < OC; o++) {
                    double p = (double)fdout[(size_t)n * OC + o] * fw[(size_t)o * C + c];
                    s += p; m += fabs(p);
                }
                r.val[(size_t)n * C + c] = s; r.mag[(size_t)n * C + c] = m;
            }
        check_ref(acc ? "dinp accumulate" : "dinp", dinp, &r, nc, OC + 1, threads);
        for (int o = 0; o < OC; o++)
            for (int c = 0; c < C; c++) {
                double s = dw0[(size_t)o * C + c], m = fabs(s);
                for (int n = 0; n < N; n++) {
                    double p = (double)fdout[(size_t)n * OC + o] * finp[(size_t)n * C + c];
                    s += p; m += fabs(p);
                }
                r.val[(size_t)o * C + c] = s; r.mag[(size_t)o * C + c] = m;
            }
        check_ref("dw", dw, &r, oc, N + 1, threads);
        for (int o = 0; o < OC; o++) {
            double s = db0[o], m = fabs(s);
            for (int n = 0; n < N; n++) { s += fdout[(size_t)n * OC + o]; m += fabs(fdout[(size_t)n * OC + o]); }
            r.val[o] = s; r.mag[o] = m;
        }
        check_ref("dbias", db, &r, OC, N + 1, threads);
    }
    /* NULL outputs are skipped; the others are as with all three */
    float *dw2 = xalloc(oc * 4), *dinp2 = xalloc(nc * 4), *db2 = xalloc(OC * 4);
    memcpy(dw2, dw0, oc * 4);
    op_matmul_backward_bf16(BE, NULL, dw2, NULL, dout, inp, w, N, C, OC, 0);
    CHECK(memcmp(dw2, dw, oc * 4) == 0, "dw alone equals dw with the others (%d threads)", threads);
    memcpy(dinp2, dinp0, nc * 4); memcpy(db2, db0, OC * 4);
    op_matmul_backward_bf16(BE, dinp2, NULL, db2, dout, inp, w, N, C, OC, 1);
    CHECK(memcmp(dinp2, dinp, nc * 4) == 0 && memcmp(db2, db, OC * 4) == 0, "dinp, dbias without dw");
    /* MT_SET_DW: dw written over whatever the buffer held (NaN), equal to
     * adding into zeros */
    for (size_t i = 0; i < oc; i++) dw[i] = 0.0f, dw2[i] = NAN;
    op_matmul_backward_bf16(BE, NULL, dw, NULL, dout, inp, w, N, C, OC, 0);
    op_matmul_backward_bf16(BE, NULL, dw2, NULL, dout, inp, w, N, C, OC, MT_SET_DW);
    int same = 1;
    for (size_t i = 0; i < oc; i++) same &= dw2[i] == dw[i];
    CHECK(same, "dw with MT_SET_DW equals dw added into zeros (%d threads)", threads);
    free(dw2); free(dinp2); free(db2);
    free(inp); free(w); free(dout); free(finp); free(fw); free(fdout); free(bias); free(r.val); free(r.mag);
    free(out); free(out2); free(dinp); free(dw); free(db); free(dinp0); free(dw0); free(db0);
}

/* K == 0: no products; forward leaves the bias, dinp is cleared or kept. */
static void test_empty_k(void) {
    float out[6], bias[3] = {1, 2, 3}, dinp[2] = {5, 6}, dw[3] = {7, 8, 9};
    mt_bf16 in = 0, w = 0, dout[6] = {0};
    op_matmul_forward_bf16(BE, out, &in, &w, bias, 2, 0, 3);
    CHECK(out[0] == 1 && out[2] == 3 && out[3] == 1 && out[5] == 3, "C = 0 forward gives the bias");
    op_matmul_backward_bf16(BE, dinp, NULL, NULL, dout, &in, &w, 2, 1, 0, 0);
    CHECK(dinp[0] == 0 && dinp[1] == 0, "OC = 0: dinp cleared");
    op_matmul_backward_bf16(BE, NULL, dw, NULL, dout, &in, &w, 0, 1, 3, 0);
    CHECK(dw[0] == 7 && dw[2] == 9, "N = 0: dw unchanged");
}

/* Mixed-precision storage helpers against the scalar conversions: acc =
 * narrow(widen(acc) + x) and dst += widen(src), over a length that spans
 * the thread split, the 512-element chunks and a vector tail. */
static void test_accumulate_16(int threads) {
    omp_set_num_threads(threads);
    const size_t n = 100003;
    uint16_t *acc = malloc(n * sizeof *acc), *ref = malloc(n * sizeof *ref);
    float *x = malloc(n * sizeof *x), *dst = malloc(n * sizeof *dst), *want = malloc(n * sizeof *want);
    for (int k = 0; k < 2; k++) {
        mt_dtype t = k ? MT_FP16 : MT_BF16;
        for (size_t i = 0; i < n; i++) {
            float a = frand32(4.0f), b = frand32(4.0f);
            acc[i] = ref[i] = t == MT_BF16 ? mt_fp32_to_bf16(a) : mt_fp32_to_fp16(a);
            x[i] = b;
            dst[i] = want[i] = frand32(1.0f);
        }
        mt_accumulate_16(t, acc, x, n);
        mt_add_from_16(t, dst, ref, n);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            float w = t == MT_BF16 ? mt_bf16_to_fp32(ref[i]) : mt_fp16_to_fp32(ref[i]);
            uint16_t r = t == MT_BF16 ? mt_fp32_to_bf16(w + x[i]) : mt_fp32_to_fp16(w + x[i]);
            bad += acc[i] != r || dst[i] != want[i] + w;
        }
        CHECK(bad == 0, "%s accumulate / add, %d threads: %zu of %zu elements differ", mt_dtype_name(t), threads, bad, n);
    }
    free(acc); free(ref); free(x); free(dst); free(want);
}

int main(void) {
    fp16_table_init();
    test_accumulate_16(1);
    test_accumulate_16(2);
    test_dtype_names();
    test_named_cases();
    test_exhaustive_16bit();
    test_arrays(1);
    test_arrays(2);
    for (int threads = 1; threads <= 2; threads++) {
        test_matmul_bf16(1, 1, 1, threads);
        test_matmul_bf16(7, 13, 5, threads);     /* odd, below the row split: columns */
        test_matmul_bf16(33, 70, 129, threads);
        test_matmul_bf16(131, 67, 29, threads);  /* rows split across threads; dw by columns */
        test_matmul_bf16(150, 96, 200, threads); /* dw rows split */
        test_matmul_bf16(1, 48, 300, threads);   /* one row (generation) */
    }
    test_empty_k();
    TEST_MAIN_END("test_matmul_lowp");
}
