/* Memory-lean optimizers: the 8-bit code maps and block quantisation,
 * 8-bit AdamW against fp32 AdamW, Adafactor sharded against unsharded (ranks
 * simulated by threads with a summing allreduce), checkpoint streams.
 * `test_lean_optim --dump FILE` writes an Adafactor run and the code maps for
 * tests/lean_optim_ref.py (run by tests/check_lean_optim.sh). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include "models/family.h"
#include "optim/adafactor.h"
#include "optim/adam8bit.h"
#include "optim/optimizer.h"
#include "testlib.h"
#include "testlib_unit.h"

/* ---- deterministic random numbers */
static double rng_uniform(uint64_t *s) { return ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0; }
static float rng_normal(uint64_t *s) {
    double u = rng_uniform(s), v = rng_uniform(s);
    return (float)(sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v));
}

/* ---- a hand-made unit with matrices whose rows are not multiples of any
 * shard size, a vector, a [1, n] matrix (unfactored) and a tiny matrix */
static mt_unit_layout test_unit(void) {
    static mt_unit_layout u; /* built once, read by every test (its tensors stay reachable) */
    if (u.n_tensors) return u;
    u.role = MT_UNIT_BLOCK;
    add_test_tensors(&u);
    return u;
}

/* Gradients with a scale per tensor (1e-4 .. 1) and one all-zero row. */
static void make_grads(const mt_unit_layout *u, uint64_t seed, float *g) {
    uint64_t s = seed;
    for (int i = 0; i < u->n_tensors; i++) {
        const mt_tensor *t = &u->t[i];
        float scale = powf(10.0f, -(float)(i % 5));
        for (size_t j = 0; j < t->numel; j++) g[t->offset + j] = scale * rng_normal(&s);
    }
    for (int c = 0; c < 23; c++) g[u->t[0].offset + 4 * 23 + c] = 0.0f;
}

/* ---- 8-bit code maps */
static int decade_of(double a, int zmax) { /* decade z: a in (10^-(z+1), 10^-z] */
    int z = 0;
    while (z < zmax && a < pow(10.0, -(z + 1))) z++;
    return z;
}

/* Half the code spacing at a = |x| / absmax: the largest rounding error. */
static double q8_half_step(double a, int is_signed) {
    int zmax = is_signed ? 6 : 7, z = decade_of(a, zmax);
    return z < zmax ? 0.45 * pow(10.0, -z) / (double)(1 << (zmax - z)) : pow(10.0, -zmax);
}
static int q8_within(float x, float y, float absmax, int is_signed) {
    if (absmax == 0.0f) return y == 0.0f && x == 0.0f;
    double a = fabs((double)x) / absmax;
    return fabs((double)x - y) / absmax <= q8_half_step(a, is_signed) * (1 + 1e-5) + 1e-7 * a;
}

static void test_code_maps(void) {
    for (int sg = 0; sg <= 1; sg++) {
        int bits = sg ? 7 : 8, zmax = bits - 1, top = (1 << bits) - 1;
        CHECK(mt_q8_decode(sg, 0) == 0.0f, "code 0 is zero");
        CHECK(mt_q8_decode(sg, (uint8_t)top) == 1.0f, "top code is exactly 1 (signed %d)", sg);
        CHECK_CLOSE(mt_q8_decode(sg, 1), pow(10.0, -zmax), 1e-6);
        int mono = 1, round_trip = 1;
        for (int c = 1; c <= top; c++) {
            if (!(mt_q8_decode(sg, (uint8_t)c) > mt_q8_decode(sg, (uint8_t)(c - 1)))) mono = 0;
            if (mt_q8_encode(sg, mt_q8_decode(sg, (uint8_t)c)) != c) round_trip = 0;
            if (sg && mt_q8_decode(1, (uint8_t)(c | 0x80)) != -mt_q8_decode(1, (uint8_t)c)) mono = 0;
            if (sg && mt_q8_encode(1, mt_q8_decode(1, (uint8_t)(c | 0x80))) != (c | 0x80)) round_trip = 0;
        }
        CHECK(mono, "magnitude codes increase with value and negative codes mirror them (signed %d)", sg);
        CHECK(round_trip, "encode(decode(c)) == c for every code (signed %d)", sg);
        /* encode picks the nearest code: brute force over all 256 codes on
         * log-uniform inputs (ties aside, within float rounding) */
        uint64_t s = 7 + (uint64_t)sg;
        int nearest = 1;
        double worst = 0.0;
        for (int it = 0; it < 5000; it++) {
            double a = pow(10.0, -8.0 * rng_uniform(&s));
            float x = (float)(sg && (it & 1) ? -a : a);
            float q = mt_q8_decode(sg, mt_q8_encode(sg, x));
            /* v (unsigned) never takes code 0 for x > 0, by design */
            double best = 1e30;
            for (int c = sg ? 0 : 1; c < 256; c++) best = fmin(best, fabs((double)x - mt_q8_decode(sg, (uint8_t)c)));
            double excess = fabs((double)x - q) - best;
            if (excess > 1e-7 * fabs(x) + 1e-12) nearest = 0;
            worst = fmax(worst, excess);
        }
        CHECK(nearest, "encode returns the nearest code (signed %d; worst excess %.3g)", sg, worst);
    }
    /* v: a positive value below half the smallest code keeps the smallest code */
    CHECK(mt_q8_encode(0, 1e-12f) == 1, "tiny positive v does not round to 0");
    CHECK(mt_q8_encode(1, 1e-12f) == 0, "tiny m rounds to 0");
    CHECK(mt_q8_encode(0, -0.5f) == 0, "unsigned map clamps negatives to 0");
    CHECK(mt_q8_encode(1, 3.0f) == 127 && mt_q8_encode(1, -3.0f) == 255, "clamped to +-1");
}

/* Quantisation error of every element is at most half the code spacing of
 * its decade (times absmax); zero blocks stay zero. */
static void test_block_round_trip(void) {
    uint64_t s = 11;
    float x[MT_Q8_BLOCK], y[MT_Q8_BLOCK];
    uint8_t q[MT_Q8_BLOCK];
    for (int sg = 0; sg <= 1; sg++) {
        int bound_ok = 1;
        double mean_rel = 0.0;
        for (int blk = 0; blk < 40; blk++) {
            size_t n = blk % 3 == 0 ? 1000 + (size_t)blk : MT_Q8_BLOCK;
            float scale = powf(10.0f, (float)(blk % 9) - 4.0f);
            for (size_t i = 0; i < n; i++) {
                float v = rng_normal(&s) * scale;
                if (i % 97 == 0) v *= 30.0f; /* outliers */
                x[i] = sg ? v : v * v;
            }
            float absmax = mt_q8_quantize(sg, x, n, q);
            mt_q8_dequantize(sg, q, absmax, n, y);
            float want = 0.0f;
            for (size_t i = 0; i < n; i++) want = fmaxf(want, fabsf(x[i]));
            if (absmax != want) bound_ok = 0;
            for (size_t i = 0; i < n; i++) {
                if (!q8_within(x[i], y[i], absmax, sg)) {
                    if (bound_ok) fprintf(stderr, "x=%g absmax=%g y=%g\n", x[i], absmax, y[i]);
                    bound_ok = 0;
                }
                mean_rel += fabs((double)x[i] - y[i]) / absmax;
            }
        }
        CHECK(bound_ok, "per-element error <= half the code spacing x absmax (signed %d)", sg);
        mean_rel /= 40.0 * 1800;
        printf("q8 signed=%d: mean |error| / absmax = %.3g\n", sg, mean_rel);
        CHECK(mean_rel < 2e-3, "mean error %.3g of absmax", mean_rel);
        /* all-zero block */
        memset(x, 0, sizeof x);
        memset(q, 0xAB, sizeof q);
        float am = mt_q8_quantize(sg, x, MT_Q8_BLOCK, q);
        mt_q8_dequantize(sg, q, am, MT_Q8_BLOCK, y);
        int zeros = am == 0.0f;
        for (size_t i = 0; i < MT_Q8_BLOCK; i++) zeros &= q[i] == 0 && y[i] == 0.0f;
        CHECK(zeros, "an all-zero block has absmax 0, codes 0 and dequantises to 0");
        /* zeros inside a nonzero block stay exactly zero */
        x[5] = sg ? -0.25f : 0.25f;
        am = mt_q8_quantize(sg, x, 100, q);
        mt_q8_dequantize(sg, q, am, 100, y);
        zeros = y[5] == x[5];
        for (size_t i = 0; i < 100; i++) zeros &= i == 5 || y[i] == 0.0f;
        CHECK(zeros, "zeros stay zero and the absmax element is exact");
    }
}

/* Block quantisation (vectorised where the CPU allows) gives, element for
 * element, the code of the scalar nearest-code search mt_q8_encode(x *
 * (1/absmax)): on every code's value and midpoint and their float
 * neighbours, log-uniform values of both signs, zeros, denormals, +-inf and
 * NaN, in blocks of lengths that leave vector tails. */
static void test_block_codes_equal_scalar(void) {
    enum { N = 4 * MT_Q8_BLOCK };
    float *x = malloc(N * sizeof(float));
    uint8_t *q = malloc(N);
    CHECK(x && q, "allocation");
    if (!x || !q) return;
    for (int sg = 0; sg <= 1; sg++) {
        size_t n = 0;
        for (int c = 0; c < 256 && n + 16 < N; c++) {
            float d = mt_q8_decode(sg, (uint8_t)c), mid = c ? 0.5f * (mt_q8_decode(sg, (uint8_t)(c - 1)) + d) : d;
            float pts[2] = {d, mid};
            for (int k = 0; k < 2; k++) {
                float lo = pts[k], hi = pts[k];
                x[n++] = pts[k];
                for (int j = 0; j < 3; j++) {
                    lo = nextafterf(lo, -INFINITY);
                    hi = nextafterf(hi, INFINITY);
                    x[n++] = lo;
                    x[n++] = hi;
                }
            }
        }
        uint64_t r = 77 + (uint64_t)sg;
        while (n < N - 16) {
            double a = pow(10.0, -9.0 * rng_uniform(&r));
            x[n] = (float)(rng_next(&r) & 1 ? -a : a);
            n++;
        }
        const float special[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-39f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f,
                                 1.0000001f, 3.0f, -2.5f, 1e-30f, 0.5f};
        for (size_t j = 0; j < sizeof special / sizeof *special; j++) x[n++] = special[j];
        /* the +-inf in block 3 makes its absmax inf; the others are
         * quantised with absmax 1 and whatever their own largest element is */
        int same = 1;
        const size_t lens[] = {MT_Q8_BLOCK, MT_Q8_BLOCK - 5, 37, 1, MT_Q8_BLOCK};
        size_t o = 0;
        for (size_t b = 0; b < sizeof lens / sizeof *lens && o < n; b++) {
            size_t len = lens[b] < n - o ? lens[b] : n - o;
            float am = mt_q8_quantize(sg, x + o, len, q + o);
            float inv = am > 0.0f ? 1.0f / am : 0.0f;
            for (size_t i = 0; i < len; i++) {
                uint8_t want = am > 0.0f ? mt_q8_encode(sg, x[o + i] * inv) : 0;
                if (q[o + i] != want) {
                    if (same) fprintf(stderr, "x=%a absmax=%a: code %u, scalar %u\n", x[o + i], am, q[o + i], want);
                    same = 0;
                }
            }
            o += len;
        }
        CHECK(same, "block codes equal the scalar search's (signed %d, %zu values)", sg, o);
    }
    free(x);
    free(q);
}

/* ---- 8-bit AdamW */
static mt_opt_hparams adamw_h(void) { return (mt_opt_hparams){MT_OPT_ADAMW, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.01f, 0.0f, 0.0f, 0.0f}; }

static void test_adam8bit_state_and_first_step(void) {
    mt_unit_layout u = test_unit();
    size_t n = u.numel;
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_adam8bit s;
    mt_adam8bit_init(&s, &u, 0, n, &mem);
    CHECK(s.bytes == 2 * n + 8 * ((n + MT_Q8_BLOCK - 1) / MT_Q8_BLOCK), "state bytes %zu for %zu params", s.bytes, n);
    CHECK(mem.cur[MT_MEM_OPTIM] == s.bytes, "accounted under optimizer: %zu", mem.cur[MT_MEM_OPTIM]);
    float *p = calloc(n, 4), *p32 = calloc(n, 4), *g = calloc(n, 4), *m32 = calloc(n, 4), *v32 = calloc(n, 4),
          *st = calloc(n, 4);
    uint64_t r = 3;
    for (size_t i = 0; i < n; i++) p[i] = p32[i] = 0.02f * rng_normal(&r);
    make_grads(&u, 5, g);
    mt_opt_hparams h = adamw_h();
    float *s32[2] = {m32, v32};
    mt_adam8bit_update(BE, &s, &h, &u, p, g, 1e-2f, 1, 0.5f);
    mt_opt_update_range(BE, &h, &u, 0, n, p32, g, s32, 1e-2f, 1, 0.5f);
    CHECK(!memcmp(p, p32, n * 4), "step 1 params equal fp32 AdamW bitwise (quantisation happens after)");
    mt_adam8bit_get_state(BE, &s, 1, st);
    int v_ok = 1, zero_ok = 1;
    for (size_t i = 0; i < n; i++) {
        if (!q8_within(v32[i], st[i], s.v_absmax[i / MT_Q8_BLOCK], 0)) v_ok = 0;
        if ((v32[i] == 0.0f) != (st[i] == 0.0f)) zero_ok = 0;
    }
    CHECK(v_ok, "dequantised v within the rounding bound of fp32 v");
    CHECK(zero_ok, "v is zero exactly where fp32 v is zero (the zero gradient row)");
    /* checkpoint streams: get -> set -> get is exact, and training goes on
     * bitwise the same from the restored state */
    mt_adam8bit s2;
    mt_adam8bit_init(&s2, &u, 0, n, &mem);
    float *full = calloc(n, 4), *p2 = malloc(n * 4);
    for (int k = 0; k < 2; k++) {
        mt_adam8bit_get_state(BE, &s, k, full);
        mt_adam8bit_set_state(BE, &s2, k, full);
    }
    CHECK(!memcmp(s.m, s2.m, n) && !memcmp(s.v, s2.v, n) &&
              !memcmp(s.m_absmax, s2.m_absmax, s.n_blocks * 4) && !memcmp(s.v_absmax, s2.v_absmax, s.n_blocks * 4),
          "save/load of the fp32 streams restores the same codes and absmax");
    memcpy(p2, p, n * 4);
    for (int t = 2; t <= 4; t++) {
        make_grads(&u, 100 + (uint64_t)t, g);
        mt_adam8bit_update(BE, &s, &h, &u, p, g, 1e-2f, t, 1.0f);
        mt_adam8bit_update(BE, &s2, &h, &u, p2, g, 1e-2f, t, 1.0f);
    }
    CHECK(!memcmp(p, p2, n * 4), "training resumes bitwise from restored 8-bit state");
    /* an owned range starting mid-unit: blocks are laid from `begin` */
    mt_adam8bit s3;
    size_t b0 = 333;
    mt_adam8bit_init(&s3, &u, b0, n, &mem);
    CHECK(s3.n_blocks == (n - b0 + MT_Q8_BLOCK - 1) / MT_Q8_BLOCK, "blocks over [begin, end)");
    mt_adam8bit_set_state(BE, &s3, 0, full);
    mt_adam8bit_get_state(BE, &s3, 0, st);
    int slice_ok = 1;
    for (size_t i = b0; i < n; i++) slice_ok &= q8_within(full[i], st[i - b0], s3.m_absmax[(i - b0) / MT_Q8_BLOCK], 1);
    CHECK(slice_ok, "set_state takes the owned slice of the full stream");
    mt_adam8bit_free(&s, &mem);
    mt_adam8bit_free(&s2, &mem);
    mt_adam8bit_free(&s3, &mem);
    CHECK(mem.cur[MT_MEM_OPTIM] == 0, "freed: %zu", mem.cur[MT_MEM_OPTIM]);
    free(p); free(p32); free(g); free(m32); free(v32); free(st); free(full); free(p2);
}

/* From a nonzero 8-bit state, one step equals: dequantise (get_state), fp32
 * AdamW (mt_opt_update_range), quantise per block: parameters bitwise, codes
 * and absmax identical. Tensors (decaying and not) cross block boundaries,
 * the owned range starts mid-tensor, and the unit ends in padding that no
 * tensor covers (left untouched). */
static void test_adam8bit_step_equals_fp32_then_quantise(void) {
    mt_unit_layout u;
    memset(&u, 0, sizeof u);
    add_tensor(&u, "w1", 2, 70, 45, 1);
    add_tensor(&u, "b1", 1, 3000, 1, 0);
    add_tensor(&u, "w2", 2, 33, 101, 1);
    size_t pad = 77, n = u.numel + pad, b0 = 333, len = n - b0;
    u.numel = n;
    mt_adam8bit s;
    mt_adam8bit_init(&s, &u, b0, n, NULL);
    float *full = calloc(n, 4), *p = malloc(len * 4), *p32 = malloc(len * 4), *g = malloc(len * 4);
    float *m32 = malloc(len * 4), *v32 = malloc(len * 4);
    uint8_t *mq = malloc(len), *vq = malloc(len);
    CHECK(full && p && p32 && g && m32 && v32 && mq && vq, "allocation");
    if (!full || !p || !p32 || !g || !m32 || !v32 || !mq || !vq) return;
    uint64_t r = 4242;
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < n; i++) {
            float x = rng_normal(&r) * powf(10.0f, -3.0f * (float)rng_uniform(&r));
            full[i] = k == 0 ? 1e-3f * x : 1e-6f * x * x;
        }
        mt_adam8bit_set_state(BE, &s, k, full);
    }
    for (size_t i = 0; i < len; i++) {
        p[i] = p32[i] = 0.02f * rng_normal(&r);
        g[i] = i % 101 == 0 ? 0.0f : 1e-3f * rng_normal(&r);
    }
    mt_adam8bit_get_state(BE, &s, 0, m32);
    mt_adam8bit_get_state(BE, &s, 1, v32);
    mt_opt_hparams h = adamw_h();
    float *st[2] = {m32, v32};
    mt_opt_update_range(BE, &h, &u, b0, n, p32, g, st, 3e-3f, 7, 0.8f);
    mt_adam8bit_update(BE, &s, &h, &u, p, g, 3e-3f, 7, 0.8f);
    int codes_ok = 1;
    for (size_t b = 0; b < s.n_blocks; b++) {
        size_t o = b * MT_Q8_BLOCK, bl = len - o < MT_Q8_BLOCK ? len - o : MT_Q8_BLOCK;
        float am = mt_q8_quantize(1, m32 + o, bl, mq + o), av = mt_q8_quantize(0, v32 + o, bl, vq + o);
        codes_ok &= am == s.m_absmax[b] && av == s.v_absmax[b];
    }
    codes_ok &= !memcmp(mq, s.m, len) && !memcmp(vq, s.v, len);
    CHECK(!memcmp(p, p32, len * 4), "parameters equal fp32 AdamW's on the dequantised state, bitwise");
    CHECK(codes_ok, "codes and absmax equal the quantised fp32 moments");
    mt_adam8bit_free(&s, NULL);
    free(full); free(p); free(p32); free(g); free(m32); free(v32); free(mq); free(vq);
    free(u.t);
}

/* Zero gradients (a never-used embedding row): m, v stay exactly zero, so
 * the parameter moves only by weight decay (none on this tensor). */
static void test_adam8bit_zero_blocks(void) {
    mt_unit_layout u;
    memset(&u, 0, sizeof u);
    add_tensor(&u, "bias", 1, 3 * MT_Q8_BLOCK + 10, 1, 0);
    size_t n = u.numel;
    mt_adam8bit s;
    mt_adam8bit_init(&s, &u, 0, n, NULL);
    float *p = calloc(n, 4), *g = calloc(n, 4), *p0 = calloc(n, 4);
    uint64_t r = 9;
    for (size_t i = 0; i < n; i++) p[i] = p0[i] = rng_normal(&r);
    mt_opt_hparams h = adamw_h();
    for (int t = 1; t <= 5; t++) {
        for (size_t i = 0; i < n; i++) g[i] = (i >= MT_Q8_BLOCK && i < 2 * MT_Q8_BLOCK) ? 0.0f : rng_normal(&r);
        mt_adam8bit_update(BE, &s, &h, &u, p, g, 1e-2f, t, 1.0f);
    }
    int ok = s.m_absmax[1] == 0.0f && s.v_absmax[1] == 0.0f;
    for (size_t i = MT_Q8_BLOCK; i < 2 * MT_Q8_BLOCK; i++) ok &= s.m[i] == 0 && s.v[i] == 0 && p[i] == p0[i];
    CHECK(ok, "an all-zero-gradient block keeps zero state (absmax 0) and its parameters");
    int finite = 1;
    for (size_t i = 0; i < n; i++) finite &= isfinite(p[i]);
    CHECK(finite, "all parameters finite");
    mt_adam8bit_free(&s, NULL);
    free(p); free(g); free(p0);
    free(u.t);
}

/* Noisy linear regression y = x.w* + noise, loss mean (x.w - y)^2: 8-bit
 * AdamW tracks fp32 AdamW. */
static double regression_loss(const float *w, const float *X, const float *y, int rows, int d) {
    double l = 0.0;
    for (int r = 0; r < rows; r++) {
        double pred = 0.0;
        for (int j = 0; j < d; j++) pred += (double)X[(size_t)r * d + j] * w[j];
        l += (pred - y[r]) * (pred - y[r]);
    }
    return l / rows;
}
static void regression_grad(const float *w, const float *X, const float *y, int rows, int d, float *g) {
    memset(g, 0, (size_t)d * 4);
    for (int r = 0; r < rows; r++) {
        double pred = 0.0;
        for (int j = 0; j < d; j++) pred += (double)X[(size_t)r * d + j] * w[j];
        float e = (float)(2.0 * (pred - y[r]) / rows);
        for (int j = 0; j < d; j++) g[j] += e * X[(size_t)r * d + j];
    }
}
static float rng_feature(uint64_t *s) { return (float)((rng_uniform(s) * 2.0 - 1.0) * 1.7320508); } /* variance 1 */

static void fill_samples(uint64_t *r, const float *wstar, int d, int n, float *X, float *y) {
    for (int i = 0; i < n; i++) {
        double t = 0;
        for (int j = 0; j < d; j++) t += (double)(X[(size_t)i * d + j] = rng_feature(r)) * wstar[j];
        y[i] = (float)t + 0.1f * rng_normal(r);
    }
}

static void test_adam8bit_tracks_fp32(void) {
    mt_unit_layout u;
    memset(&u, 0, sizeof u);
    add_tensor(&u, "w", 2, 40, 60, 1);
    add_tensor(&u, "b", 1, 60, 1, 0);
    int d = (int)u.numel, B = 64, E = 256, steps = 300;
    float *wstar = malloc((size_t)d * 4), *Xe = malloc((size_t)E * d * 4), *ye = malloc((size_t)E * 4);
    float *Xb = malloc((size_t)B * d * 4), *yb = malloc((size_t)B * 4);
    float *w8 = calloc((size_t)d, 4), *w32 = calloc((size_t)d, 4), *g = malloc((size_t)d * 4);
    float *m = calloc((size_t)d, 4), *v = calloc((size_t)d, 4), *st[2] = {m, v};
    uint64_t r = 2024;
    for (int j = 0; j < d; j++) wstar[j] = rng_normal(&r) / sqrtf((float)d) * 10.0f;
    fill_samples(&r, wstar, d, E, Xe, ye);
    mt_adam8bit s;
    mt_adam8bit_init(&s, &u, 0, (size_t)d, NULL);
    mt_opt_hparams h = adamw_h();
    double l0 = regression_loss(w32, Xe, ye, E, d);
    for (int t = 1; t <= steps; t++) {
        fill_samples(&r, wstar, d, B, Xb, yb); /* a fresh noisy batch */
        float lr = 2e-2f * (1.0f - (float)(t - 1) / steps);
        regression_grad(w32, Xb, yb, B, d, g);
        mt_opt_update_range(BE, &h, &u, 0, (size_t)d, w32, g, st, lr, t, 1.0f);
        regression_grad(w8, Xb, yb, B, d, g);
        mt_adam8bit_update(BE, &s, &h, &u, w8, g, lr, t, 1.0f);
    }
    double l32 = regression_loss(w32, Xe, ye, E, d), l8 = regression_loss(w8, Xe, ye, E, d);
    printf("regression (%d params, %d steps, held-out loss): initial %.4f, fp32 AdamW %.4f, 8-bit AdamW %.4f (%+.2f%%)\n",
           d, steps, l0, l32, l8, 100.0 * (l8 - l32) / l32);
    CHECK(l32 < 0.1 * l0, "fp32 AdamW makes progress: %g -> %g", l0, l32);
    CHECK(fabs(l8 - l32) <= 0.03 * l32, "8-bit within 3%% of fp32: %g vs %g", l8, l32);
    mt_adam8bit_free(&s, NULL);
    free(wstar); free(Xe); free(ye); free(Xb); free(yb); free(w8); free(w32); free(g); free(m); free(v);
    free(u.t);
}

/* ---- Adafactor: ranks simulated by threads; the allreduce sums every
 * rank's buffer in rank order (so all ranks get bitwise the same sums) */
#define MAX_RANKS 16
typedef struct {
    int n;
    pthread_barrier_t bar;
    double *slot[MAX_RANKS];
} fake_group;
typedef struct {
    fake_group *grp;
    int rank;
    int calls;
    size_t sizes[64];
} fake_rank;

static void fake_allreduce(void *ctx, double *buf, size_t n) {
    fake_rank *me = ctx;
    fake_group *grp = me->grp;
    if (me->calls < 64) me->sizes[me->calls] = n;
    me->calls++;
    memcpy(grp->slot[me->rank], buf, n * sizeof(double));
    pthread_barrier_wait(&grp->bar);
    for (size_t i = 0; i < n; i++) {
        double acc = 0.0;
        for (int q = 0; q < grp->n; q++) acc += grp->slot[q][i];
        buf[i] = acc;
    }
    pthread_barrier_wait(&grp->bar);
}

typedef struct {
    const mt_unit_layout *units;
    int n_units, steps;
    float **p;              /* per unit: the full parameter buffer (ranks write disjoint ranges) */
    float ***g;             /* [step][unit]: full gradients */
    const mt_adafactor_hparams *h;
    mt_adafactor *st;       /* [unit] for this rank */
    fake_rank *fr;
    int n, r;
} rank_job;

static void shard_range(size_t numel, int n, int r, size_t *b, size_t *e) {
    size_t S = (numel + (size_t)n - 1) / (size_t)n;
    *b = (size_t)r * S;
    *e = *b + S < numel ? *b + S : numel;
    if (*e < *b) *e = *b;
}

static void *rank_main(void *arg) {
    rank_job *j = arg;
    for (int t = 1; t <= j->steps; t++)
        for (int u = 0; u < j->n_units; u++) {
            mt_adafactor *s = &j->st[u];
            float lr = 1e-2f * (float)(11 - t) / 10.0f, coef = t == 3 ? 0.25f : 1.0f;
            mt_adafactor_update(BE, s, j->h, &j->units[u], j->p[u] + s->begin, j->g[t - 1][u] + s->begin, lr, t, coef,
                                j->fr ? fake_allreduce : NULL, j->fr);
        }
    return NULL;
}

/* Runs `steps` Adafactor steps over the units with n simulated ranks; p
 * holds the initial and then the final parameters. Returns 0 and fills
 * per-rank states (caller frees) when states != NULL. */
static void run_adafactor(const mt_unit_layout *units, int n_units, int steps, float ***g, float **p, int n,
                          const mt_adafactor_hparams *h, mt_adafactor states[][4], fake_rank *fr) {
    fake_group grp;
    grp.n = n;
    pthread_barrier_init(&grp.bar, NULL, (unsigned)n);
    size_t mx = 0;
    for (int u = 0; u < n_units; u++) mx = units[u].numel * 2 + 16 > mx ? units[u].numel * 2 + 16 : mx;
    for (int r = 0; r < n; r++) grp.slot[r] = malloc(mx * sizeof(double));
    pthread_t th[MAX_RANKS];
    rank_job jobs[MAX_RANKS];
    for (int r = 0; r < n; r++) {
        for (int u = 0; u < n_units; u++) {
            size_t b, e;
            shard_range(units[u].numel, n, r, &b, &e);
            mt_adafactor_init(&states[r][u], h, &units[u], b, e, NULL);
        }
        fr[r] = (fake_rank){&grp, r, 0, {0}};
        jobs[r] = (rank_job){units, n_units, steps, p, g, h, states[r], n > 1 ? &fr[r] : NULL, n, r};
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < n; r++) free(grp.slot[r]);
    pthread_barrier_destroy(&grp.bar);
}

/* max |a - b| / max |ref - p0|: the error relative to how far the params moved */
static double rel_displacement_err(const float *a, const float *ref, const float *p0, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - ref[i]));
        den = fmax(den, fabs((double)ref[i] - p0[i]));
    }
    return den > 0 ? num / den : num;
}

static void test_adafactor_sharded(int use_gpt, float beta1, int scale_parameter) {
    mt_layout gl;
    mt_unit_layout one = test_unit();
    const mt_unit_layout *units = &one;
    int n_units = 1;
    if (use_gpt) {
        mt_model_config cfg = {.n_layer = 1, .n_embd = 12, .n_head = 2, .vocab_size = 50, .padded_vocab = mt_pad_vocab(50), .seq_len = 16, .dropout = 0.0f};
        mt_model_layout_build(&cfg, 1, 0, &gl);
        units = gl.units;
        n_units = gl.n_units;
    }
    int steps = 10;
    mt_adafactor_hparams h;
    mt_adafactor_hparams_default(&h);
    h.weight_decay = 0.1f;
    h.beta1 = beta1;
    h.scale_parameter = scale_parameter;
    float ***g = malloc((size_t)steps * sizeof *g);
    for (int t = 0; t < steps; t++) {
        g[t] = malloc((size_t)n_units * sizeof **g);
        for (int u = 0; u < n_units; u++) {
            g[t][u] = malloc(units[u].numel * 4);
            uint64_t s = 1000 * (uint64_t)t + (uint64_t)u;
            for (size_t i = 0; i < units[u].numel; i++) g[t][u][i] = rng_normal(&s) * (i % 7 == 0 ? 3.0f : 0.5f);
            if (!use_gpt) make_grads(&units[u], 1000 * (uint64_t)t + 7, g[t][u]);
        }
    }
    float *p0[4], *pref[4], *psh[4];
    for (int u = 0; u < n_units; u++) {
        p0[u] = malloc(units[u].numel * 4);
        pref[u] = malloc(units[u].numel * 4);
        psh[u] = malloc(units[u].numel * 4);
        uint64_t s = 77 + (uint64_t)u;
        for (size_t i = 0; i < units[u].numel; i++) p0[u][i] = 0.05f * rng_normal(&s);
        memcpy(pref[u], p0[u], units[u].numel * 4);
    }
    static mt_adafactor ref_st[1][4], sh_st[MAX_RANKS][4];
    fake_rank fr[MAX_RANKS];
    run_adafactor(units, n_units, steps, g, pref, 1, &h, ref_st, fr);
    /* rank counts that split rows mid-way, do not divide numel, and (7 and
     * 16 on the 24-element head of the GPT layout) leave some ranks nothing */
    int ns[] = {2, 3, 7, 16};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int n = ns[k];
        for (int u = 0; u < n_units; u++) memcpy(psh[u], p0[u], units[u].numel * 4);
        run_adafactor(units, n_units, steps, g, psh, n, &h, sh_st, fr);
        double worst = 0.0;
        for (int u = 0; u < n_units; u++) worst = fmax(worst, rel_displacement_err(psh[u], pref[u], p0[u], units[u].numel));
        printf("adafactor %s beta1=%.1f%s, %2d shards: max |p - p_unsharded| / max displacement = %.3g\n",
               use_gpt ? "gpt layout" : "test unit", (double)beta1, scale_parameter ? " scaled" : "", n, worst);
        CHECK(worst <= 1e-6, "%d shards agree with unsharded: %.3g", n, worst);
        int calls_ok = 1, replicas_ok = 1;
        for (int r = 0; r < n; r++) {
            calls_ok &= fr[r].calls == 2 * steps * n_units;
            for (int c = 0; c < fr[r].calls && c < 64; c++) calls_ok &= fr[r].sizes[c] == fr[0].sizes[c];
            for (int u = 0; u < n_units; u++)
                replicas_ok &= !memcmp(sh_st[r][u].rc, sh_st[0][u].rc, sh_st[0][u].n_rc * 4);
        }
        CHECK(calls_ok, "every rank made the same reductions (count and sizes), whatever its shard");
        CHECK(replicas_ok, "R and C replicas are bitwise identical on all ranks");
        int empty = 0;
        for (int r = 0; r < n; r++) empty |= sh_st[r][n_units - 1].end == sh_st[r][n_units - 1].begin;
        if (n >= 7 && use_gpt) CHECK(empty, "some rank owns nothing of the head unit (%d shards)", n);
        /* checkpoint streams: assemble the full fp32 streams from the shards,
         * then load them into one unsharded state: it equals the reference */
        for (int u = 0; u < n_units; u++) {
            size_t nu = units[u].numel;
            float *full = calloc(nu, 4), *want = calloc(nu, 4);
            for (int kk = 0; kk < 2; kk++) {
                for (int r = 0; r < n; r++)
                    mt_adafactor_get_state(BE, &sh_st[r][u], &units[u], kk, full + sh_st[r][u].begin);
                mt_adafactor_get_state(BE, &ref_st[0][u], &units[u], kk, want);
                double e = 0.0, mx = 0.0;
                for (size_t i = 0; i < nu; i++) {
                    e = fmax(e, fabs((double)full[i] - want[i]));
                    mx = fmax(mx, fabs((double)want[i]));
                }
                CHECK(e <= 1e-5 * mx, "stream %d of unit %d assembled from %d shards: %.3g of %.3g", kk, u, n, e, mx);
                if (kk == 1 && n == 3) {
                    mt_adafactor fresh;
                    mt_adafactor_init(&fresh, &h, &units[u], 0, nu, NULL);
                    mt_adafactor_set_state(BE, &fresh, &units[u], 1, full);
                    CHECK(!memcmp(fresh.rc, sh_st[0][u].rc, fresh.n_rc * 4), "set_state restores R, C whole");
                    float *back = calloc(nu, 4);
                    mt_adafactor_get_state(BE, &fresh, &units[u], 1, back);
                    CHECK(!memcmp(back, full, nu * 4), "get(set(stream)) == stream");
                    free(back);
                    mt_adafactor_free(&fresh, NULL);
                }
            }
            free(full);
            free(want);
        }
        for (int r = 0; r < n; r++)
            for (int u = 0; u < n_units; u++) mt_adafactor_free(&sh_st[r][u], NULL);
    }
    for (int u = 0; u < n_units; u++) {
        mt_adafactor_free(&ref_st[0][u], NULL);
        free(p0[u]); free(pref[u]); free(psh[u]);
    }
    for (int t = 0; t < steps; t++) {
        for (int u = 0; u < n_units; u++) free(g[t][u]);
        free(g[t]);
    }
    free(g);
    if (use_gpt) mt_layout_free(&gl);
}

/* State bytes: (rows + cols) * 4 per factored matrix, 4 per other element. */
static void test_adafactor_bytes(void) {
    mt_model_config cfg = {.n_layer = 2, .n_embd = 64, .n_head = 4, .vocab_size = 256, .padded_vocab = 256, .seq_len = 64, .dropout = 0.0f};
    mt_layout gl;
    mt_model_layout_build(&cfg, 1, 0, &gl);
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_adafactor_hparams h;
    mt_adafactor_hparams_default(&h);
    size_t matrix_params = 0, want = 0, total = 0;
    for (int u = 0; u < gl.n_units; u++) {
        mt_adafactor s;
        mt_adafactor_init(&s, &h, &gl.units[u], 0, gl.units[u].numel, &mem);
        for (int i = 0; i < gl.units[u].n_tensors; i++) {
            const mt_tensor *t = &gl.units[u].t[i];
            if (t->ndim == 2) {
                matrix_params += t->numel;
                want += (size_t)(t->shape[0] + t->shape[1]) * 4;
            } else {
                want += t->numel * 4;
            }
        }
        total += mt_adafactor_state_bytes(&s);
        mt_adafactor_free(&s, &mem);
    }
    CHECK(total == want, "state bytes %zu == sum (rows+cols)*4 + 4 per vector element = %zu", total, want);
    CHECK(mem.peak[MT_MEM_OPTIM] <= want, "accounted optimizer bytes %zu", mem.peak[MT_MEM_OPTIM]);
    printf("adafactor state: %zu bytes for %zu params (%zu in matrices): %.4f bytes/param (AdamW: 8)\n", total,
           gl.total_params, matrix_params, (double)total / (double)gl.total_params);
    mt_layout_free(&gl);
}

/* Writes the test unit, 10 steps of gradients, the C result and the code
 * maps for tests/lean_optim_ref.py. */
static int dump(const char *path) {
    mt_unit_layout u = test_unit();
    int steps = 10;
    size_t n = u.numel;
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        return 1;
    }
    /* cases: no momentum; momentum; no momentum with the relative step and d = 1.5 */
    for (int c = 0; c < 3; c++) {
        mt_adafactor_hparams h;
        mt_adafactor_hparams_default(&h);
        h.weight_decay = 0.1f;
        h.beta1 = c == 1 ? 0.9f : 0.0f;
        h.scale_parameter = c == 2;
        if (c == 2) h.clip_threshold = 1.5f;
        int64_t hdr[3] = {u.n_tensors, (int64_t)n, steps};
        fwrite(hdr, sizeof hdr, 1, f);
        for (int i = 0; i < u.n_tensors; i++) {
            int64_t d[5] = {(int64_t)u.t[i].offset, u.t[i].shape[0], u.t[i].shape[1], u.t[i].ndim, u.t[i].weight_decay};
            fwrite(d, sizeof d, 1, f);
        }
        double hp[7] = {h.beta1, h.decay_rate, h.eps1, h.clip_threshold, h.weight_decay, h.scale_parameter, h.eps2};
        fwrite(hp, sizeof hp, 1, f);
        float *p = malloc(n * 4), *g = malloc(n * 4);
        uint64_t s = 5;
        for (size_t i = 0; i < n; i++) p[i] = 0.05f * rng_normal(&s);
        if (c == 2) /* a zero-initialised bias: its RMS stays under eps2 for a few steps */
            memset(p + u.t[1].offset, 0, u.t[1].numel * sizeof(float));
        fwrite(p, 4, n, f);
        mt_adafactor st;
        mt_adafactor_init(&st, &h, &u, 0, n, NULL);
        for (int t = 1; t <= steps; t++) {
            make_grads(&u, 500 + (uint64_t)t, g);
            float lr = (c == 2 ? 2e-1f : 1e-2f) * (float)(11 - t) / 10.0f, coef = t == 3 ? 0.25f : 1.0f;
            double lc[2] = {lr, coef};
            fwrite(lc, sizeof lc, 1, f);
            fwrite(g, 4, n, f);
            mt_adafactor_update(BE, &st, &h, &u, p, g, lr, t, coef, NULL, NULL);
        }
        fwrite(p, 4, n, f);
        mt_adafactor_free(&st, NULL);
        free(p);
        free(g);
    }
    float maps[512];
    for (int c = 0; c < 256; c++) {
        maps[c] = mt_q8_decode(1, (uint8_t)c);
        maps[256 + c] = mt_q8_decode(0, (uint8_t)c);
    }
    fwrite(maps, 4, 512, f);
    int rc = fclose(f) != 0;
    if (rc) fprintf(stderr, "writing %s failed\n", path);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--dump")) return dump(argv[2]);
    test_code_maps();
    test_block_round_trip();
    test_block_codes_equal_scalar();
    test_adam8bit_state_and_first_step();
    test_adam8bit_step_equals_fp32_then_quantise();
    test_adam8bit_zero_blocks();
    test_adam8bit_tracks_fp32();
    test_adafactor_bytes();
    test_adafactor_sharded(0, 0.0f, 0);
    test_adafactor_sharded(1, 0.0f, 0);
    test_adafactor_sharded(1, 0.9f, 0);
    test_adafactor_sharded(0, 0.0f, 1);
    test_adafactor_sharded(1, 0.0f, 1);
    mt_error err;
    mt_opt_kind k;
    CHECK(mt_opt_kind_parse("adafactor", &k, &err) == 0 && k == MT_OPT_ADAFACTOR && mt_opt_is_lean(k), "adafactor kind");
    CHECK(mt_opt_kind_parse("adamw8bit", &k, &err) == 0 && !strcmp(mt_opt_kind_name(k), "adamw8bit"), "adamw8bit kind");
    CHECK(mt_opt_kind_parse("lion", &k, &err) == -1 && strstr(err.msg, "adamw8bit or adagrad"), "%s", err.msg);
    TEST_MAIN_END("test_lean_optim");
}
