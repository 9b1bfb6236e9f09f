// Every CUDA kernel of src/cuda against its CPU reference (the ops of
// build/libmeshtrain.a), on odd sizes, with outputs poisoned (NaN bytes)
// before each launch. Element-wise kernels must be
// bitwise the CPU's; reductions (column sums too) and GEMMs within the stated relative bound
// (max |gpu - cpu| / max |cpu|). Built with nvcc (`make gpu`, real GPU) and
// against the CPU emulation (`make gpu-emu`). Exit 0 all passed, 1 a
// mismatch or error, 77 no device.
#include "cuda/compat.h"
#include "cuda/kernels.h"
#include "cuda/philox_device.h"
#include "cuda/device_math.h"
#include "cuda/launch_util.h"
#include "cuda/tensor_core.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
extern "C" {
#include "core/philox.h"
#include "ops/ops.h"
#include "ops/matmul_lowp.h"
#include "quant/int8.h"
#include "quant/nf4.h"
}

static int failures = 0, checks = 0;
static mt_cuda_ctx ctx;
/* The CPU backend of the reference ops (every op_* takes it first), at the current thread count. */
static mt_backend *cpu_backend() {
    static mt_backend be;
    be = mt_backend_cpu(MT_GEMM_DEFAULT);
    return &be;
}
#define CPU_BE cpu_backend()
static std::vector<void *> buffers; // freed at the end

#define CK(call)                                                                                          \
    do {                                                                                                  \
        int e_ = (int)(call);                                                                             \
        if (e_ != 0) {                                                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, mt_cuda_error_string(e_)); \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

static std::vector<float> rnd(size_t n, unsigned seed, float scale) {
    std::vector<float> x(n);
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = scale * ((float)(s >> 8) / 16777216.0f * 2.0f - 1.0f);
    }
    return x;
}

// device buffers: made from host data, or poisoned (0xFF bytes: NaN floats)
template <typename T> static T *dev(const std::vector<T> &h) {
    T *d;
    CK(cudaMalloc(&d, h.size() * sizeof(T)));
    buffers.push_back(d);
    CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
template <typename T> static T *poisoned(size_t n) {
    T *d;
    CK(cudaMalloc(&d, n * sizeof(T)));
    buffers.push_back(d);
    CK(cudaMemset(d, 0xFF, n * sizeof(T)));
    return d;
}
template <typename T> static std::vector<T> host(const T *d, size_t n) {
    CK(mt_cuda_sync(&ctx));
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

static void report(bool ok, const char *what, const char *detail) {
    checks++;
    failures += !ok;
    printf("%s %-34s %s\n", ok ? "ok  " : "FAIL", what, detail);
}

template <typename T> static void bitwise(const char *what, const std::vector<T> &cpu, const std::vector<T> &gpu) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < cpu.size(); i++)
        if (memcmp(&cpu[i], &gpu[i], sizeof(T))) {
            if (!bad) first = i;
            bad++;
        }
    char d[160];
    if (bad && sizeof(T) == 4)
        snprintf(d, sizeof d, "%zu of %zu differ (first %zu: cpu %.9g gpu %.9g)", bad, cpu.size(), first,
                 (double)*(const float *)&cpu[first], (double)*(const float *)&gpu[first]);
    else snprintf(d, sizeof d, bad ? "%zu of %zu differ" : "bitwise equal (%zu values)", bad ? bad : cpu.size(), cpu.size());
    report(!bad, what, d);
}

static void within(const char *what, const std::vector<float> &cpu, const std::vector<float> &gpu, double tol) {
    double worst = 0, mx = 0;
    bool nan = false;
    for (size_t i = 0; i < cpu.size(); i++) {
        if (isnan(gpu[i]) != isnan(cpu[i])) nan = true;
        worst = fmax(worst, fabs((double)cpu[i] - gpu[i]));
        mx = fmax(mx, fabs((double)cpu[i]));
    }
    double rel = worst / (mx > 0 ? mx : 1);
    char d[128];
    snprintf(d, sizeof d, "rel %.2e (bound %.0e)%s", rel, tol, nan ? " NaN mismatch" : "");
    report(!nan && rel <= tol, what, d);
}

static void test_elementwise(void) {
    const int N = 37, OC = 67, F = 45;
    size_t n = (size_t)N * OC;
    std::vector<float> x = rnd(n, 1, 4.0f), dy = rnd(n, 2, 1.0f), bias = rnd(OC, 3, 0.5f);
    float *dx = dev(x), *ddy = dev(dy), *dbias = dev(bias), *o = poisoned<float>(n);
    std::vector<float> ref(n);
    op_gelu_forward(CPU_BE, ref.data(), x.data(), n);
    CK(mt_cuda_gelu_forward(&ctx, o, dx, n));
    bitwise("gelu forward", ref, host(o, n));
    op_gelu_backward(CPU_BE, ref.data(), x.data(), dy.data(), n);
    CK(mt_cuda_gelu_backward(&ctx, o, dx, ddy, n));
    bitwise("gelu backward", ref, host(o, n));
    // bias + GELU, and its backward with the bias gradient (accumulating onto a start value)
    std::vector<float> pre = x, out(n), db = rnd(OC, 4, 1.0f);
    op_bias_gelu_forward(CPU_BE, pre.data(), out.data(), NULL, bias.data(), N, OC);
    float *dpre = dev(x);
    CK(mt_cuda_bias_gelu_forward(&ctx, dpre, o, NULL, dbias, N, OC));
    bitwise("bias+gelu forward (pre)", pre, host(dpre, n));
    bitwise("bias+gelu forward (out)", out, host(o, n));
    // with the bf16 output for the next linear layer (fp32 output too, or alone), rows of 67 (one element a
    // thread) and of 68 (four): the CPU's bits
    for (int oc : {OC, 68}) {
        size_t m = (size_t)N * oc;
        std::vector<float> p0 = rnd(m, 7, 4.0f), b0 = rnd(oc, 8, 0.5f), pc = p0, oc32(m);
        std::vector<uint16_t> ref16(m);
        op_bias_gelu_forward(CPU_BE, pc.data(), oc32.data(), ref16.data(), b0.data(), N, oc);
        for (int with_out = 0; with_out < 2; with_out++) {
            float *dp = dev(p0), *db0 = dev(b0), *o32 = with_out ? poisoned<float>(m) : NULL;
            uint16_t *o16 = poisoned<uint16_t>(m);
            CK(mt_cuda_bias_gelu_forward(&ctx, dp, o32, o16, db0, N, oc));
            char what[96];
            snprintf(what, sizeof what, "bias+gelu forward, bf16 output, OC %d%s", oc, with_out ? ", fp32 too" : "");
            bitwise(what, pc, host(dp, m));
            bitwise(what, ref16, host(o16, m));
            if (o32) bitwise(what, oc32, host(o32, m));
        }
    }
    std::vector<float> dpre_ref(n), dbr = db;
    op_gelu_bias_backward(CPU_BE, dpre_ref.data(), dbr.data(), pre.data(), dy.data(), N, OC);
    float *ddb = dev(db);
    CK(mt_cuda_gelu_bias_backward(&ctx, o, ddb, dpre, ddy, N, OC));
    bitwise("gelu+bias backward (dpre)", dpre_ref, host(o, n));
    within("gelu+bias backward (dbias)", dbr, host(ddb, OC), 1e-6);
    // SwiGLU, gates far into both tails
    std::vector<float> gu = rnd((size_t)N * 2 * F, 5, 30.0f), d2 = rnd((size_t)N * F, 6, 1.0f);
    std::vector<float> sw((size_t)N * F), dsw((size_t)N * 2 * F);
    float *dgu = dev(gu), *dd2 = dev(d2), *o2 = poisoned<float>((size_t)N * 2 * F);
    op_swiglu_forward(CPU_BE, sw.data(), gu.data(), N, F);
    CK(mt_cuda_swiglu_forward(&ctx, o2, dgu, N, F));
    bitwise("swiglu forward", sw, host(o2, (size_t)N * F));
    op_swiglu_backward(CPU_BE, dsw.data(), d2.data(), gu.data(), N, F);
    CK(mt_cuda_swiglu_backward(&ctx, o2, dd2, dgu, N, F));
    bitwise("swiglu backward", dsw, host(o2, (size_t)N * 2 * F));
    // residual adds, accumulate, scale
    std::vector<float> a = rnd(n, 7, 1.0f), r(n);
    float *da = dev(a);
    op_residual_add(CPU_BE, r.data(), x.data(), a.data(), bias.data(), N, OC);
    CK(mt_cuda_residual_add(&ctx, o, dx, da, dbias, N, OC));
    bitwise("residual add (+bias)", r, host(o, n));
    op_add(CPU_BE, r.data(), x.data(), a.data(), n);
    CK(mt_cuda_residual_add(&ctx, o, dx, da, NULL, N, OC));
    bitwise("residual add", r, host(o, n));
    op_add(CPU_BE, r.data(), a.data(), x.data(), n);
    CK(mt_cuda_add(&ctx, o, da, dx, n));
    bitwise("add", r, host(o, n));
    op_accumulate(CPU_BE, r.data(), a.data(), n);
    CK(mt_cuda_accumulate(&ctx, o, da, n));
    op_scale(CPU_BE, r.data(), 0.37f, n);
    CK(mt_cuda_scale(&ctx, o, 0.37f, n));
    bitwise("accumulate, scale", r, host(o, n));
    CK(mt_cuda_zero(&ctx, o, n - 1));
    std::vector<float> z = host(o, n);
    bool zeroed = z[n - 1] == r[n - 1];
    for (size_t i = 0; i + 1 < n; i++) zeroed = zeroed && z[i] == 0.0f && !signbit(z[i]);
    report(zeroed, "zero", zeroed ? "n-1 values +0, the last untouched" : "wrong");
    // RoPE on 3 of 5 heads of a wider row, forward and inverse
    const int T = 7, nh = 3, HS = 10;
    size_t ld = 5 * HS;
    std::vector<float> inv(HS / 2), ct((size_t)T * HS / 2), st((size_t)T * HS / 2), q = rnd((size_t)N * ld, 8, 1.0f);
    op_rope_inv_freq(CPU_BE, inv.data(), HS, 10000.0f, NULL);
    op_rope_table(CPU_BE, ct.data(), st.data(), inv.data(), T, HS);
    float *dct = dev(ct), *dst = dev(st), *dq = dev(q);
    op_rope_apply(CPU_BE, q.data(), N, T, nh, HS, ld, ct.data(), st.data(), 0);
    CK(mt_cuda_rope_apply(&ctx, dq, N, T, nh, HS, ld, dct, dst, 0));
    bitwise("rope", q, host(dq, q.size()));
    op_rope_apply(CPU_BE, q.data(), N, T, nh, HS, ld, ct.data(), st.data(), 1);
    CK(mt_cuda_rope_apply(&ctx, dq, N, T, nh, HS, ld, dct, dst, 1));
    bitwise("rope inverse", q, host(dq, q.size()));
    // dropout rows (GPT-2's residual dropout) from the CPU's Philox coordinates
    std::vector<uint64_t> ids = {5, 1ull << 33, 77, 9, 123456, 3};
    mt_dropout d = {0.3f, 0x1234567890ull, 17, 4, MT_DROPOUT_MLP_RESID};
    std::vector<float> dr = a, s(OC);
    size_t row0 = 3;
    for (int i = 0; i < N; i++) {
        size_t rr = row0 + i;
        mt_dropout_row_scales(s.data(), &d, ids[rr / T], (uint32_t)(rr % T), 0, 0, OC);
        for (int c = 0; c < OC; c++) dr[(size_t)i * OC + c] *= s[c];
    }
    uint64_t *dids = dev(ids);
    CK(mt_cuda_dropout_rows(&ctx, da, &d, dids, row0, N, T, OC));
    bitwise("dropout rows", dr, host(da, n));
    // Philox itself and a dropout row, host side of the device header, against core/philox.c
    bool same = true;
    for (uint32_t k = 0; k < 1000; k++) {
        mt_u32x4 c1 = mt_philox4x32(k, k * 7, ~k, k << 9, 0xdeadbeef, k * 3);
        mt_dev_u32x4 c2 = mt_dev_philox4x32(k, k * 7, ~k, k << 9, 0xdeadbeef, k * 3);
        same = same && !memcmp(c1.v, c2.v, sizeof c1.v);
    }
    report(same, "philox (host side of the header)", same ? "bitwise equal (1000 counters)" : "differs");
    // conversions: every bf16/fp16 class (normals, subnormals, ties, inf, NaN, overflow)
    std::vector<float> cv = rnd(4099, 9, 70000.0f);
    const uint32_t special[] = {0x7f800000u, 0xff800000u, 0x7fc00001u, 0xff812345u, 0x00000001u, 0x80400000u,
                                0x3f808000u, 0x3f818000u, 0x477ff000u, 0x477fefffu, 0x33000000u, 0x387fe000u};
    for (size_t i = 0; i < sizeof special / 4; i++) memcpy(&cv[i], &special[i], 4);
    for (size_t i = 12; i < 200; i++) cv[i] *= 1e-9f;
    float *dcv = dev(cv);
    for (int dt = 1; dt <= 2; dt++) {
        std::vector<uint16_t> h16(cv.size());
        std::vector<float> back(cv.size());
        mt_convert_to_16((mt_dtype)dt, h16.data(), cv.data(), cv.size());
        mt_convert_from_16((mt_dtype)dt, back.data(), h16.data(), cv.size());
        uint16_t *d16 = poisoned<uint16_t>(cv.size());
        float *dback = poisoned<float>(cv.size());
        CK(mt_cuda_convert_to_16(&ctx, dt, d16, dcv, cv.size()));
        CK(mt_cuda_convert_from_16(&ctx, dt, dback, d16, cv.size()));
        bitwise(dt == 1 ? "fp32 -> bf16" : "fp32 -> fp16", h16, host(d16, cv.size()));
        bitwise(dt == 1 ? "bf16 -> fp32" : "fp16 -> fp32", back, host(dback, cv.size()));
        // buffers off the vector form's alignment: the scalar form throughout
        uint16_t *u16 = poisoned<uint16_t>(cv.size());
        CK(mt_cuda_convert_to_16(&ctx, dt, u16 + 1, dcv + 1, cv.size() - 1));
        std::vector<uint16_t> got = host(u16, cv.size()), want(h16.begin() + 1, h16.end());
        bitwise(dt == 1 ? "fp32 -> bf16 (unaligned)" : "fp32 -> fp16 (unaligned)", want,
                std::vector<uint16_t>(got.begin() + 1, got.end()));
    }
}

// C = 83: the block-per-row forms; C a multiple of 4 (aligned rows): LayerNorm's warp-per-row forward
static void test_norms(int N = 37, int C = 83) {
    printf("-- norms, N %d C %d\n", N, C);
    size_t n = (size_t)N * C;
    std::vector<float> x = rnd(n, 11, 2.0f), w = rnd(C, 12, 1.0f), b = rnd(C, 13, 0.3f), dy = rnd(n, 14, 1.0f);
    for (size_t i = 0; i < n; i++) x[i] += 0.5f; // a mean away from 0
    std::vector<float> out(n), mean(N), rstd(N);
    float *dx = dev(x), *dw = dev(w), *db = dev(b), *ddy = dev(dy);
    float *o = poisoned<float>(n), *dm = poisoned<float>(N), *dr = poisoned<float>(N);
    op_layernorm_forward(CPU_BE, out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    CK(mt_cuda_layernorm_forward(&ctx, o, dm, dr, dx, dw, db, N, C));
    within("layernorm forward", out, host(o, n), 2e-6);
    within("layernorm mean", mean, host(dm, N), 2e-6);
    within("layernorm rstd", rstd, host(dr, N), 2e-6);
    // backward from the CPU's own statistics, dinp accumulating (dw/db: column sums in another order, 1e-6)
    std::vector<float> dinp = rnd(n, 15, 0.1f), gw = rnd(C, 16, 0.1f), gb = rnd(C, 17, 0.1f);
    float *ddinp = dev(dinp), *dgw = dev(gw), *dgb = dev(gb), *cm = dev(mean), *cr = dev(rstd);
    op_layernorm_backward(CPU_BE, dinp.data(), gw.data(), gb.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    CK(mt_cuda_layernorm_backward(&ctx, ddinp, dgw, dgb, ddy, dx, dw, cm, cr, N, C));
    within("layernorm backward dinp", dinp, host(ddinp, n), 1e-5);
    within("layernorm backward dw", gw, host(dgw, C), 1e-6);
    within("layernorm backward db", gb, host(dgb, C), 1e-6);
    // fused residual + LayerNorm
    std::vector<float> br = rnd(n, 18, 1.0f), bias = rnd(C, 19, 0.2f), res(n);
    float *dbr = dev(br), *dbias = dev(bias), *dres = poisoned<float>(n);
    op_residual_layernorm_forward(CPU_BE, res.data(), out.data(), mean.data(), rstd.data(), x.data(), br.data(), bias.data(),
                                  w.data(), b.data(), N, C);
    CK(mt_cuda_residual_layernorm_forward(&ctx, dres, o, dm, dr, dx, dbr, dbias, dw, db, N, C));
    bitwise("residual+layernorm (res)", res, host(dres, n));
    within("residual+layernorm (out)", out, host(o, n), 2e-6);
    // RMSNorm
    const float eps = 1e-6f;
    op_rmsnorm_forward(CPU_BE, out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    CK(mt_cuda_rmsnorm_forward(&ctx, o, dr, dx, dw, N, C, eps));
    within("rmsnorm forward", out, host(o, n), 2e-6);
    within("rmsnorm rstd", rstd, host(dr, N), 2e-6);
    CK(cudaMemcpy(cr, rstd.data(), N * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ddinp, dinp.data(), n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dgw, gw.data(), C * 4, cudaMemcpyHostToDevice));
    op_rmsnorm_backward(CPU_BE, dinp.data(), gw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
    CK(mt_cuda_rmsnorm_backward(&ctx, ddinp, dgw, ddy, dx, dw, cr, N, C));
    within("rmsnorm backward dinp", dinp, host(ddinp, n), 1e-5);
    within("rmsnorm backward dw", gw, host(dgw, C), 1e-6);
    op_residual_add(CPU_BE, res.data(), x.data(), br.data(), NULL, N, C);
    op_rmsnorm_forward(CPU_BE, out.data(), rstd.data(), res.data(), w.data(), N, C, eps);
    CK(mt_cuda_residual_rmsnorm_forward(&ctx, dres, o, dr, dx, dbr, dw, N, C, eps));
    bitwise("residual+rmsnorm (res)", res, host(dres, n));
    within("residual+rmsnorm (out)", out, host(o, n), 2e-6);
}

static void test_matmul(void) {
    const int N = 29, C = 53, OC = 41;
    std::vector<float> x = rnd((size_t)N * C, 21, 1.0f), w = rnd((size_t)OC * C, 22, 0.3f), b = rnd(OC, 23, 0.5f);
    std::vector<float> dy = rnd((size_t)N * OC, 24, 1.0f), out((size_t)N * OC);
    float *dx = dev(x), *dw = dev(w), *db = dev(b), *ddy = dev(dy), *o = poisoned<float>((size_t)N * OC);
    op_matmul_forward(CPU_BE, out.data(), x.data(), w.data(), b.data(), N, C, OC);
    CK(mt_cuda_matmul_forward(&ctx, o, dx, dw, db, N, C, OC));
    within("matmul forward (+bias)", out, host(o, out.size()), 1e-6);
    std::vector<float> dinp = rnd((size_t)N * C, 25, 0.1f), gw = rnd((size_t)OC * C, 26, 0.1f), gb = rnd(OC, 27, 0.1f);
    float *ddinp = dev(dinp), *dgw = dev(gw), *dgb = dev(gb);
    op_matmul_backward(CPU_BE, dinp.data(), gw.data(), gb.data(), dy.data(), x.data(), w.data(), N, C, OC, 1);
    CK(mt_cuda_matmul_backward(&ctx, ddinp, dgw, dgb, ddy, dx, dw, N, C, OC, 1));
    within("matmul backward dinp (+=)", dinp, host(ddinp, dinp.size()), 1e-6);
    within("matmul backward dw (+=)", gw, host(dgw, gw.size()), 1e-6);
    within("matmul backward dbias", gb, host(dgb, OC), 1e-6);
    float *pd = poisoned<float>(dinp.size()), *pw = poisoned<float>(gw.size());
    op_matmul_backward(CPU_BE, dinp.data(), gw.data(), NULL, dy.data(), x.data(), w.data(), N, C, OC, 2);
    CK(mt_cuda_matmul_backward(&ctx, pd, pw, NULL, ddy, dx, dw, N, C, OC, 2));
    within("matmul backward dinp (=, poisoned)", dinp, host(pd, dinp.size()), 1e-6);
    within("matmul backward dw (=, poisoned)", gw, host(pw, gw.size()), 1e-6);
    // bf16 operands, fp32 accumulation: against ops/matmul_lowp.h (oneDNN's bf16 GEMMs)
    std::vector<uint16_t> x16(x.size()), w16(w.size()), dy16(dy.size());
    mt_convert_fp32_to_bf16(x16.data(), x.data(), x.size());
    mt_convert_fp32_to_bf16(w16.data(), w.data(), w.size());
    mt_convert_fp32_to_bf16(dy16.data(), dy.data(), dy.size());
    uint16_t *dx16 = dev(x16), *dw16 = dev(w16), *ddy16 = dev(dy16), *o16 = poisoned<uint16_t>(out.size());
    op_matmul_forward_bf16(CPU_BE, out.data(), x16.data(), w16.data(), b.data(), N, C, OC);
    CK(mt_cuda_matmul_forward_bf16(&ctx, o, dx16, dw16, db, N, C, OC));
    within("matmul bf16 forward (+bias)", out, host(o, out.size()), 1e-6);
    op_matmul_forward_bf16(CPU_BE, out.data(), x16.data(), w16.data(), NULL, N, C, OC);
    CK(mt_cuda_matmul_forward_bf16_out16(&ctx, o16, dx16, dw16, NULL, N, C, OC));
    std::vector<uint16_t> g16 = host(o16, out.size());
    std::vector<float> g(out.size());
    mt_convert_bf16_to_fp32(g.data(), g16.data(), g.size());
    within("matmul bf16 forward -> bf16", out, g, 4e-3); // one bf16 rounding: 2^-8 relative
    std::vector<float> gb2 = host(dgb, OC);
    CK(cudaMemcpy(pw, gw.data(), gw.size() * 4, cudaMemcpyHostToDevice));
    op_matmul_backward_bf16(CPU_BE, dinp.data(), gw.data(), gb2.data(), dy16.data(), x16.data(), w16.data(), N, C, OC, 1);
    CK(mt_cuda_matmul_backward_bf16(&ctx, pd, pw, dgb, ddy16, dx16, dw16, N, C, OC, 1));
    within("matmul bf16 backward dinp (+=)", dinp, host(pd, dinp.size()), 1e-6);
    within("matmul bf16 backward dw (+=)", gw, host(pw, gw.size()), 1e-6);
    within("matmul bf16 backward dbias", gb2, host(dgb, OC), 1e-6);
    // the wrapper refuses what cuBLAS would: mixed A/B types, a short leading dimension
    int e1 = mt_cuda_gemm(&ctx, 'N', 'N', 4, 4, 4, 1, dx, MT_CUDA_F32, 4, 0, dx16, MT_CUDA_BF16, 4, 0, 0, o, MT_CUDA_F32, 4, 0, 1);
    int e2 = mt_cuda_gemm(&ctx, 'N', 'N', 4, 4, 4, 1, dx, MT_CUDA_F32, 3, 0, dx, MT_CUDA_F32, 4, 0, 0, o, MT_CUDA_F32, 4, 0, 1);
    report(e1 == MT_CUDA_BLAS_ERROR + 7 && e2 == MT_CUDA_BLAS_ERROR + 7, "gemm argument checks",
           e1 ? mt_cuda_error_string(e1) : "accepted a mixed-type GEMM");
}

static void test_attention(int NH, int NKV, float p, int T = 13, int HS = 8) {
    const int B = 2;
    int ld = (NH + 2 * NKV) * HS;
    size_t nq = (size_t)B * T * ld, no = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    std::vector<float> qkv = rnd(nq, 31 + NKV, 1.5f), dout = rnd(no, 32, 1.0f), out(no), lse(nl), dqkv(nq);
    std::vector<uint64_t> ids = {11, 4};
    mt_attn_dropout cd = {{p, 99, 3, 2, MT_DROPOUT_ATTN_PROBS}, ids.data(), 1, NULL}; /* no packed documents */
    std::vector<float> scratch(op_attention_scratch_floats_gqa(CPU_BE, B, T, NH, NKV, HS));
    op_attention_forward_gqa(CPU_BE, out.data(), lse.data(), qkv.data(), B, T, NH, NKV, HS, &cd, scratch.data());
    op_attention_backward_gqa(CPU_BE, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, NH, NKV, HS, &cd,
                              scratch.data());
    uint64_t *dids = dev(ids);
    mt_cuda_attn_dropout gd = {cd.d, dids, 1};
    float *dq = dev(qkv), *ddo = dev(dout), *o = poisoned<float>(no), *l = poisoned<float>(nl),
          *dd = poisoned<float>(nq), *s = poisoned<float>(mt_cuda_attention_scratch_floats(B, T, NH, NKV, HS));
    CK(mt_cuda_attention_forward_gqa(&ctx, o, l, dq, B, T, NH, NKV, HS, &gd, s));
    CK(mt_cuda_attention_backward_gqa(&ctx, dd, ddo, dq, o, l, B, T, NH, NKV, HS, &gd, s));
    char name[96];
    snprintf(name, sizeof name, "attention NH %d NKV %d p %.1f out", NH, NKV, p);
    if (HS != 8) snprintf(name, sizeof name, "attention T %d HS %d out", T, HS);
    within(name, out, host(o, no), 1e-5);
    snprintf(name, sizeof name, "attention NH %d NKV %d p %.1f lse", NH, NKV, p);
    if (HS != 8) snprintf(name, sizeof name, "attention T %d HS %d lse", T, HS);
    within(name, lse, host(l, nl), 1e-6);
    snprintf(name, sizeof name, "attention NH %d NKV %d p %.1f dqkv", NH, NKV, p);
    if (HS != 8) snprintf(name, sizeof name, "attention T %d HS %d dqkv", T, HS);
    within(name, dqkv, host(dd, nq), 1e-5);
    // TF32 (bf16 mixed precision's attention): operands rounded to 10 mantissa bits, 2^-11 relative each
    if (HS == 8 && p == 0.0f) {
        mt_cuda_ctx c32 = ctx;
        c32.tf32 = 1;
        CK(mt_cuda_attention_forward_gqa(&c32, o, l, dq, B, T, NH, NKV, HS, &gd, s));
        CK(mt_cuda_attention_backward_gqa(&c32, dd, ddo, dq, o, l, B, T, NH, NKV, HS, &gd, s));
        snprintf(name, sizeof name, "attention tf32 NH %d NKV %d out", NH, NKV);
        within(name, out, host(o, no), 3e-3);
        snprintf(name, sizeof name, "attention tf32 NH %d NKV %d dqkv", NH, NKV);
        within(name, dqkv, host(dd, nq), 3e-3);
    }
    // the flash form: the same outputs without scratch
    float *fo = poisoned<float>(no), *fl = poisoned<float>(nl), *fd = poisoned<float>(nq);
    CK(mt_cuda_attention_flash_forward_gqa(&ctx, fo, fl, dq, B, T, NH, NKV, HS, &gd));
    CK(mt_cuda_attention_flash_backward_gqa(&ctx, fd, ddo, dq, fo, fl, B, T, NH, NKV, HS, &gd));
    snprintf(name, sizeof name, "flash attn NH %d NKV %d p %.1f out", NH, NKV, p);
    if (HS != 8) snprintf(name, sizeof name, "flash attn T %d HS %d out", T, HS);
    within(name, out, host(fo, no), 1e-5);
    snprintf(name, sizeof name, "flash attn NH %d NKV %d p %.1f lse", NH, NKV, p);
    if (HS != 8) snprintf(name, sizeof name, "flash attn T %d HS %d lse", T, HS);
    within(name, lse, host(fl, nl), 1e-6);
    snprintf(name, sizeof name, "flash attn NH %d NKV %d p %.1f dqkv", NH, NKV, p);
    if (HS != 8) snprintf(name, sizeof name, "flash attn T %d HS %d dqkv", T, HS);
    within(name, dqkv, host(fd, nq), 1e-5);
}

/* The ldmatrix fragment loads alone (cuda/tensor_core.h's mt_tc_ldsm_*): a 16 x 24 bf16 tile whose
 * elements are their own indices, in shared memory at row stride 24; each lane stores the registers of
 * an A fragment (columns 8..23), a B pair from [n][k] and a B pair from [k][n] (.trans, columns 8..23),
 * compared bit for bit with the layout the attention kernels are written against. */
__global__ static void ldsm_layout_kernel(uint32_t *out, const uint16_t *tile) {
    MT_DYNAMIC_SHARED(uint16_t, sm);
    const int lane = (int)threadIdx.x;
    for (int e = lane; e < 16 * 24; e += 32) sm[e] = tile[e];
    __syncthreads();
    uint32_t r[12];
    mt_tc_ldsm_a(r, sm, 24, 0, 8, lane);
    mt_tc_ldsm_b_nk(r + 4, sm, 24, 0, 0, lane);
    mt_tc_ldsm_b_kn(r + 8, sm, 24, 0, 8, lane);
    for (int i = 0; i < 12; i++) out[lane * 12 + i] = r[i];
}
static void test_ldsm_layout(void) {
    std::vector<uint16_t> tile(16 * 24);
    for (int i = 0; i < 16 * 24; i++) tile[i] = (uint16_t)i;
    auto at = [&](int row, int col) { return (uint32_t)tile[row * 24 + col]; };
    std::vector<uint32_t> ref(32 * 12);
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        uint32_t *r = &ref[lane * 12];
        for (int i = 0; i < 4; i++) {
            int row = g + 8 * (i % 2), col = 8 + 2 * t + 8 * (i / 2); // A: a[i]
            r[i] = at(row, col) | at(row, col + 1) << 16;
            int n = 8 * (i / 2) + g, k = 2 * t + 8 * (i % 2); // B from [n][k]: block i / 2, register i % 2
            r[4 + i] = at(n, k) | at(n, k + 1) << 16;
            n = 8 + 8 * (i / 2) + g; // B from [k][n]
            r[8 + i] = at(k, n) | at(k + 1, n) << 16;
        }
    }
    uint32_t *d = poisoned<uint32_t>(32 * 12);
    MT_LAUNCH(ldsm_layout_kernel, 1, 32, 16 * 24 * sizeof(uint16_t), mt_stream(&ctx), d, dev(tile));
    CK(mt_launch_status());
    std::vector<uint32_t> got = host(d, 32 * 12);
    int bad[3] = {0, 0, 0};
    for (int i = 0; i < 32 * 12; i++) bad[i % 12 / 4] += got[i] != ref[i];
    char detail[96];
    snprintf(detail, sizeof detail, "wrong registers: A %d, B [n][k] %d, B [k][n] %d (of 128 each)", bad[0], bad[1], bad[2]);
    report(!bad[0] && !bad[1] && !bad[2], "ldmatrix fragment layout", detail);
}

/* The register-fragment product alone (cuda/tensor_core.h's mt_mma_16816): each lane loads the registers
 * the PTX ISA's fragment layout gives it from a row-major 16 x 16 A and 16 x 8 B (bf16), multiplies into
 * C = C0 + A B and stores its four accumulator values where the layout says they belong. On a GPU this
 * checks the layout the attention kernels are written against; products of bf16 values are exact in
 * fp32, so only the order of 17 fp32 additions may differ from the reference. */
__global__ static void mma_layout_kernel(float *C, const uint16_t *A, const uint16_t *Bm) {
    const int lane = (int)threadIdx.x, g = lane / 4, t = lane % 4;
    uint32_t a[4], b[2];
    for (int r = 0; r < 4; r++) {
        int row = g + 8 * (r % 2), col = 2 * t + 8 * (r / 2);
        a[r] = mt_tc_pack2(A[row * 16 + col], A[row * 16 + col + 1]);
    }
    for (int r = 0; r < 2; r++) b[r] = mt_tc_pack2(Bm[(2 * t + 8 * r) * 8 + g], Bm[(2 * t + 8 * r + 1) * 8 + g]);
    float c[4];
    for (int e = 0; e < 4; e++) c[e] = C[(g + 8 * (e / 2)) * 8 + 2 * t + e % 2];
    mt_mma_16816(c, a, b);
    for (int e = 0; e < 4; e++) C[(g + 8 * (e / 2)) * 8 + 2 * t + e % 2] = c[e];
}
static void test_mma_layout(void) {
    std::vector<float> af = rnd(256, 61, 2.0f), bf = rnd(128, 62, 2.0f), c0 = rnd(128, 63, 1.0f), ref(128);
    std::vector<uint16_t> a(256), b(128);
    for (int i = 0; i < 256; i++) a[i] = mt_dev_fp32_to_bf16(af[i]);
    for (int i = 0; i < 128; i++) b[i] = mt_dev_fp32_to_bf16(bf[i]);
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            double s = c0[r * 8 + n];
            for (int k = 0; k < 16; k++) s += (double)mt_dev_bf16_to_fp32(a[r * 16 + k]) * mt_dev_bf16_to_fp32(b[k * 8 + n]);
            ref[r * 8 + n] = (float)s;
        }
    float *dc = dev(c0);
    MT_LAUNCH(mma_layout_kernel, 1, 32, 0, mt_stream(&ctx), dc, dev(a), dev(b));
    CK(mt_launch_status());
    std::vector<float> got = host(dc, 128);
    int before = failures;
    within("mma m16n8k16 register layout", ref, got, 1e-5);
    if (failures == before) return;
    // which of the 16 x 8 results are wrong (x), to tell a row, column or operand mix-up apart
    for (int r = 0; r < 16; r++) {
        printf("     row %2d ", r);
        for (int n = 0; n < 8; n++) printf("%c", fabsf(got[r * 8 + n] - ref[r * 8 + n]) > 1e-4f * (1 + fabsf(ref[r * 8 + n])) ? 'x' : '.');
        printf("\n");
    }
}

// The tensor-core forward (bf16 operands, fp32 softmax and accumulation) against the CPU op's fp32
// result: q, k, v and p rounded to bf16 (2^-9 relative each) bound the difference near 1e-2.
static void test_attention_tc_forward(int NH, int NKV, float p, int T, int HS, bool misaligned = false) {
    const int B = 2;
    int ld = (NH + 2 * NKV) * HS;
    size_t nq = (size_t)B * T * ld, no = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    std::vector<float> qkv = rnd(nq, 41 + NKV, 1.5f), out(no), lse(nl);
    std::vector<uint64_t> ids = {7, 12};
    mt_attn_dropout cd = {{p, 99, 3, 2, MT_DROPOUT_ATTN_PROBS}, ids.data(), 1, NULL};
    std::vector<float> scratch(op_attention_scratch_floats_gqa(CPU_BE, B, T, NH, NKV, HS));
    op_attention_forward_gqa(CPU_BE, out.data(), lse.data(), qkv.data(), B, T, NH, NKV, HS, &cd, scratch.data());
    uint64_t *dids = dev(ids);
    mt_cuda_attn_dropout gd = {cd.d, dids, 1};
    // misaligned: qkv one float past a 16-byte boundary (the kernel's scalar staging instead of float4)
    std::vector<float> shifted(qkv);
    if (misaligned) shifted.insert(shifted.begin(), 0.0f);
    float *dq = dev(shifted) + (misaligned ? 1 : 0), *o = poisoned<float>(no), *l = poisoned<float>(nl);
    char name[96];
    const char *mis = misaligned ? " unaligned" : "";
    // the register form's operand tiles (poisoned: every value a kernel reads must be prepared)
    void *ws = poisoned<float>(mt_cuda_attention_mma_workspace_bytes(B, T, NH, NKV, HS) / sizeof(float) + 1);
    CK(mt_cuda_attention_mma_forward_gqa(&ctx, o, l, dq, B, T, NH, NKV, HS, &gd, ws));
    snprintf(name, sizeof name, "mma attn fwd NH %d NKV %d p %.1f T %d HS %d out%s", NH, NKV, p, T, HS, mis);
    within(name, out, host(o, no), 1e-2);
    snprintf(name, sizeof name, "mma attn fwd NH %d NKV %d p %.1f T %d HS %d lse%s", NH, NKV, p, T, HS, mis);
    within(name, lse, host(l, nl), 1e-2);
}

/* The tensor-core backward against the CPU op's dqkv, from the scalar flash forward's out and lse (so it
 * stands apart from the tensor-core forward): q, k, v, dout, P and dS rounded to bf16 before their
 * products (8 mantissa bits, 2^-9 relative each), sums in fp32, so within 1e-2 of the fp32 reference (measured at most 4.4e-3);
 * a second run gives the same bits (no atomics); and after the tensor-core forward. off > 0 shifts every tensor by off floats (rows not
 * 16-byte aligned: the kernels' scalar loads). */
static void test_attention_tc_backward(int NH, int NKV, float p, int T, int HS, int B = 2, int off = 0) {
    int ld = (NH + 2 * NKV) * HS;
    size_t nq = (size_t)B * T * ld, no = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    std::vector<float> qkv = rnd(nq, 51 + NKV, 1.5f), dout = rnd(no, 52, 1.0f), out(no), lse(nl), dqkv(nq);
    std::vector<uint64_t> ids = {11, 4, 7, 2};
    ids.resize((size_t)B);
    mt_attn_dropout cd = {{p, 99, 3, 2, MT_DROPOUT_ATTN_PROBS}, ids.data(), 1, NULL};
    std::vector<float> scratch(op_attention_scratch_floats_gqa(CPU_BE, B, T, NH, NKV, HS));
    op_attention_forward_gqa(CPU_BE, out.data(), lse.data(), qkv.data(), B, T, NH, NKV, HS, &cd, scratch.data());
    op_attention_backward_gqa(CPU_BE, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, NH, NKV, HS, &cd,
                              scratch.data());
    uint64_t *dids = dev(ids);
    mt_cuda_attn_dropout gd = {cd.d, dids, 1};
    std::vector<float> sq(off, 0.0f), so(off, 0.0f);
    sq.insert(sq.end(), qkv.begin(), qkv.end());
    so.insert(so.end(), dout.begin(), dout.end());
    float *dq = dev(sq) + off, *ddo = dev(so) + off, *fo = poisoned<float>(no + off) + off, *fl = poisoned<float>(nl),
          *dd = poisoned<float>(nq + off) + off, *dd2 = poisoned<float>(nq);
    char name[96];
    void *ws = poisoned<float>(mt_cuda_attention_mma_workspace_bytes(B, T, NH, NKV, HS) / sizeof(float) + 1);
    for (int form = 0; form < 2; form++) { // WMMA tiles (the backward above HS 96), register fragments
        const char *f = form ? "mma" : "tc";
        auto bwd = [&](float *dst) {
            return form ? mt_cuda_attention_mma_backward_gqa(&ctx, dst, ddo, dq, fo, fl, B, T, NH, NKV, HS, &gd, ws)
                        : mt_cuda_attention_tc_backward_gqa(&ctx, dst, ddo, dq, fo, fl, B, T, NH, NKV, HS, &gd);
        };
        CK(mt_cuda_attention_flash_forward_gqa(&ctx, fo, fl, dq, B, T, NH, NKV, HS, &gd));
        CK(cudaMemset(dd, 0xFF, nq * sizeof(float)));
        CK(bwd(dd));
        CK(bwd(dd2));
        snprintf(name, sizeof name, "%s attn NH %d NKV %d p %.1f T %d HS %d%s dqkv", f, NH, NKV, p, T, HS,
                 off ? " unaligned" : "");
        std::vector<float> got = host(dd, nq);
        within(name, dqkv, got, 1e-2);
        snprintf(name, sizeof name, "%s attn T %d HS %d dqkv rerun", f, T, HS);
        bitwise(name, got, host(dd2, nq));
        // chained as in training: from the tensor-core forward's out and lse (bf16 rounding in both passes)
        CK(mt_cuda_attention_mma_forward_gqa(&ctx, fo, fl, dq, B, T, NH, NKV, HS, &gd, ws));
        CK(cudaMemset(dd, 0xFF, nq * sizeof(float)));
        CK(bwd(dd));
        snprintf(name, sizeof name, "%s attn fwd+bwd T %d HS %d dqkv", f, T, HS);
        within(name, dqkv, host(dd, nq), 1e-2);
    }
}

// The tensor-core form's head sizes (multiples of 16 up to MT_CUDA_TC_MAX_HS); the backward refuses others
static void test_attention_tc_args(void) {
    bool sizes = mt_cuda_attention_tc_supported(16) && mt_cuda_attention_tc_supported(64) &&
                 mt_cuda_attention_tc_supported(MT_CUDA_TC_MAX_HS) && !mt_cuda_attention_tc_supported(8) &&
                 !mt_cuda_attention_tc_supported(72) && !mt_cuda_attention_tc_supported(MT_CUDA_TC_MAX_HS + 16);
    float *x = poisoned<float>(16);
    int e1 = mt_cuda_attention_tc_backward_gqa(&ctx, x, x, x, x, x, 1, 1, 2, 1, 8, NULL);
    int e2 = mt_cuda_attention_tc_backward_gqa(&ctx, x, x, x, x, x, 1, 1, 3, 2, 16, NULL);
    report(sizes && e1 == (int)cudaErrorInvalidValue && e2 == (int)cudaErrorInvalidValue, "tc attn head sizes, bwd checks",
           sizes ? (e1 ? mt_cuda_error_string(e2) : "accepted HS 8") : "wrong supported sizes");
}

// V = 301: the row cached in shared memory; V = 52001 (a row of 208 KB): read from global memory
static void test_xent(int V = 301, int Vp = 320) {
    const int N = 9;
    std::vector<float> x = rnd((size_t)N * Vp, 41, 8.0f), loss(N);
    std::vector<int32_t> t = {0, V - 1, -1, 17, 150, V - 2, 1, -1, 42};
    std::vector<float> g = x;
    float *dx = dev(x), *dl = poisoned<float>(N);
    int32_t *dt = dev(t);
    op_softmax_xent(CPU_BE, g.data(), loss.data(), t.data(), N, V, Vp, 1.0f / 7);
    CK(mt_cuda_softmax_xent(&ctx, dx, dl, dt, N, V, Vp, 1.0f / 7));
    const char *big = V > 50000 ? " (uncached row)" : "";
    char nm[80];
    snprintf(nm, sizeof nm, "softmax+xent loss%s", big);
    within(nm, loss, host(dl, N), 1e-6);
    snprintf(nm, sizeof nm, "softmax+xent dlogits%s", big);
    within(nm, g, host(dx, g.size()), 1e-6);
    std::vector<uint16_t> g16(x.size());
    float *dx2 = dev(x);
    uint16_t *d16 = poisoned<uint16_t>(x.size());
    op_softmax_xent_bf16(CPU_BE, x.data(), g16.data(), loss.data(), t.data(), N, V, Vp, 1.0f / 7);
    CK(mt_cuda_softmax_xent_bf16(&ctx, dx2, d16, dl, dt, N, V, Vp, 1.0f / 7));
    std::vector<uint16_t> h16 = host(d16, x.size());
    std::vector<float> a(x.size()), b(x.size());
    mt_convert_bf16_to_fp32(a.data(), g16.data(), a.size());
    mt_convert_bf16_to_fp32(b.data(), h16.data(), b.size());
    snprintf(nm, sizeof nm, "softmax+xent bf16 dlogits%s", big);
    within(nm, a, b, 4e-3);
    // the bf16 form's hardware exponential (~2 ulp a term) moves the loss by ~1e-6 relative at most
    snprintf(nm, sizeof nm, "softmax+xent bf16 loss%s", big);
    within(nm, loss, host(dl, N), 1e-5);
    snprintf(nm, sizeof nm, "softmax+xent bf16: logits kept%s", big);
    bitwise(nm, x, host(dx2, x.size()));
}

// the vocabulary-parallel loss: S = 3 shards of V = 301 columns (101, 101, 99) in rows of stride ld = 112 (padding
// columns poisoned, left as they are); targets at the shard edges, ignored rows
static void test_xent_shards(void) {
    const int N = 11, V = 301, S = 3, ld = 112, Vls[S] = {101, 101, 99}, v0s[S] = {0, 101, 202};
    std::vector<int32_t> t = {0, 300, -1, 100, 101, 201, 202, 17, 150, -1, 299};
    int32_t *dt = dev(t);
    std::vector<float> stats((size_t)S * 3 * N), lse(N), loss(N);
    float *dstats = poisoned<float>(stats.size());
    std::vector<std::vector<float>> x(S);
    bool fused = mt_softmax_exp_fused();
    for (int s = 0; s < S; s++) {
        x[s] = rnd((size_t)N * ld, 81 + s, 8.0f);
        for (int i = 0; i < N; i++) // one shard holds a row's large values (exp rescaling in the combination)
            for (int j = 0; j < Vls[s]; j++) x[s][(size_t)i * ld + j] += (float)((i + s) % S == 0) * 20.0f;
        float *mine = stats.data() + (size_t)s * 3 * N;
        op_xent_shard_stats(CPU_BE, x[s].data(), mine, mine + N, mine + 2 * N, t.data(), N, Vls[s], ld, v0s[s]);
        float *dx = dev(x[s]), *dm = dstats + (size_t)s * 3 * N;
        CK(mt_cuda_xent_shard_stats(&ctx, dx, dm, dm + N, dm + 2 * N, dt, N, Vls[s], ld, v0s[s]));
        std::vector<float> g = host(dm, 3 * (size_t)N);
        char name[64];
        snprintf(name, sizeof name, "xent shard %d stats: max", s);
        bitwise(name, std::vector<float>(mine, mine + N), std::vector<float>(g.begin(), g.begin() + N));
        snprintf(name, sizeof name, "xent shard %d stats: sum of exp", s);
        within(name, std::vector<float>(mine + N, mine + 2 * N), std::vector<float>(g.begin() + N, g.begin() + 2 * N),
               1e-6);
        snprintf(name, sizeof name, "xent shard %d stats: target logit", s);
        bitwise(name, std::vector<float>(mine + 2 * N, mine + 3 * N), std::vector<float>(g.begin() + 2 * N, g.end()));
    }
    // a shard as wide as half of GPT-2's vocabulary (~100 columns a thread before the block tree), against the
    // exact sum (double, libm's exp) and the CPU's
    {
        const int NW = 3, VW = 25133, LW = 25136;
        std::vector<float> xw = rnd((size_t)NW * LW, 89, 8.0f), sw(3 * NW);
        std::vector<int32_t> tw = {7, -1, 30000 + VW - 1};
        op_xent_shard_stats(CPU_BE, xw.data(), sw.data(), sw.data() + NW, sw.data() + 2 * NW, tw.data(), NW, VW, LW, 30000);
        float *dsw = poisoned<float>(3 * NW);
        CK(mt_cuda_xent_shard_stats(&ctx, dev(xw), dsw, dsw + NW, dsw + 2 * NW, dev(tw), NW, VW, LW, 30000));
        std::vector<float> g = host(dsw, 3 * NW);
        bitwise("xent wide shard stats: max, target", std::vector<float>{sw[0], sw[1], sw[2], sw[6], sw[7], sw[8]},
                std::vector<float>{g[0], g[1], g[2], g[6], g[7], g[8]});
        std::vector<float> exact(NW);
        for (int i = 0; i < NW; i++) {
            double acc = 0;
            for (int j = 0; j < VW; j++) acc += exp((double)xw[(size_t)i * LW + j] - (double)sw[i]);
            exact[i] = (float)acc;
        }
        // the block tree is the closer to the exact sum; the CPU's 16 lane sums of ~1,600 terms each drift further
        within("xent wide shard: sum vs double", exact, std::vector<float>(g.begin() + NW, g.begin() + 2 * NW), 1e-6);
        within("xent wide shard: sum vs cpu", std::vector<float>(sw.begin() + NW, sw.begin() + 2 * NW),
               std::vector<float>(g.begin() + NW, g.begin() + 2 * NW), 4e-6);
    }
    // a shard without a real column: max -FLT_MAX, sum 0 (the combination skips it)
    float *dm0 = poisoned<float>(3 * (size_t)N);
    std::vector<float> e0(3 * (size_t)N);
    op_xent_shard_stats(CPU_BE, x[0].data(), e0.data(), e0.data() + N, e0.data() + 2 * N, t.data(), N, 0, ld, 301);
    CK(mt_cuda_xent_shard_stats(&ctx, dev(x[0]), dm0, dm0 + N, dm0 + 2 * N, dt, N, 0, ld, 301));
    bitwise("xent empty shard stats", e0, host(dm0, e0.size()));
    // the combination and the losses from the CPU's gathered statistics (each kernel on the same input)
    CK(cudaMemcpy(dstats, stats.data(), stats.size() * 4, cudaMemcpyHostToDevice));
    float *dlse = poisoned<float>(N), *dloss = poisoned<float>(N);
    op_xent_combine_lse(CPU_BE, lse.data(), stats.data(), stats.data() + N, S, N, 3 * N);
    CK(mt_cuda_xent_combine_lse(&ctx, dlse, dstats, dstats + N, S, N, 3 * N));
    within("xent combine lse", lse, host(dlse, N), 2e-7); // logf: the last bit or two
    CK(cudaMemcpy(dlse, lse.data(), N * 4, cudaMemcpyHostToDevice));
    op_xent_losses_from_stats(CPU_BE, loss.data(), lse.data(), stats.data(), S, N, t.data(), V);
    CK(mt_cuda_xent_losses_from_stats(&ctx, dloss, dlse, dstats, S, N, dt, V));
    bitwise("xent losses from stats", loss, host(dloss, N));
    std::vector<int32_t> bad = t;
    bad[4] = V;
    CK(mt_cuda_xent_losses_from_stats(&ctx, dloss, dlse, dstats, S, N, dev(bad), V));
    std::vector<float> bl = host(dloss, N);
    report(isnan(bl[4]) && bl[3] == loss[3], "xent losses: target past V", isnan(bl[4]) ? "NaN loss" : "not NaN");
    // the gradient of each shard from the CPU's lse, padding columns kept
    for (int s = 0; s < S; s++) {
        std::vector<float> g = x[s];
        float *dx = dev(x[s]);
        op_xent_shard_grad(CPU_BE, g.data(), lse.data(), t.data(), N, Vls[s], ld, v0s[s], 1.0f / 7);
        CK(mt_cuda_xent_shard_grad(&ctx, dx, dlse, dt, N, Vls[s], ld, v0s[s], 1.0f / 7, fused));
        char name[64];
        snprintf(name, sizeof name, "xent shard %d grad (exp %s)", s, fused ? "fused" : "unfused");
        bitwise(name, g, host(dx, g.size()));
    }
    // the other exp form against its scalar definition (the CPU build takes one of the two)
    std::vector<float> ref = x[1];
    float *dx = dev(x[1]);
    CK(mt_cuda_xent_shard_grad(&ctx, dx, dlse, dt, N, Vls[1], ld, v0s[1], 0.5f, !fused));
    for (int i = 0; i < N; i++)
        for (int j = 0; j < Vls[1]; j++) {
            size_t k = (size_t)i * ld + j;
            float d = ref[k] - lse[i];
            ref[k] = t[i] < 0 ? 0.0f : 0.5f * (fused ? mt_dev_expf(d) : mt_dev_expf_fused(d));
            if (t[i] >= 0 && t[i] - v0s[1] == j) ref[k] -= 0.5f;
        }
    bitwise(fused ? "xent shard grad (exp unfused)" : "xent shard grad (exp fused)", ref, host(dx, ref.size()));
}

// Falcon's q/k/v re-layouts: 3 groups of G = 4 query heads, a rank's share q0 = 1, nq = 2 (and all of them)
static void test_tp_rows(void) {
    const int N = 7, ng = 3, G = 4, hd = 5;
    for (int share = 0; share < 2; share++) {
        int q0 = share ? 1 : 0, nq = share ? 2 : G;
        size_t w = (size_t)ng * (G + 2) * hd, pw = (size_t)ng * (nq + 2) * hd;
        std::vector<float> grouped = rnd(N * w, 91, 1.0f), planar(N * pw), back(N * w);
        float *dg = dev(grouped), *dp = poisoned<float>(N * pw), *db = poisoned<float>(N * w);
        op_qkv_grouped_to_planar(CPU_BE, planar.data(), grouped.data(), N, ng, G, q0, nq, hd);
        CK(mt_cuda_qkv_grouped_to_planar(&ctx, dp, dg, N, ng, G, q0, nq, hd));
        bitwise(share ? "qkv grouped -> planar (2 of 4)" : "qkv grouped -> planar", planar, host(dp, planar.size()));
        op_qkv_planar_to_grouped(CPU_BE, back.data(), planar.data(), N, ng, G, q0, nq, hd);
        CK(mt_cuda_qkv_planar_to_grouped(&ctx, db, dp, N, ng, G, q0, nq, hd));
        bitwise(share ? "qkv planar -> grouped (2 of 4)" : "qkv planar -> grouped", back, host(db, back.size()));
    }
    // a shard's padding columns cleared; a bias added to rows
    const int R = 9, C = 67;
    const size_t ld = 80;
    std::vector<float> x = rnd(R * ld, 92, 1.0f), b = rnd(C, 93, 0.5f);
    float *dx = dev(x), *dbias = dev(b);
    op_zero_cols(CPU_BE, x.data(), R, ld, 61, 13);
    CK(mt_cuda_zero_cols(&ctx, dx, R, ld, 61, 13));
    bitwise("zero cols", x, host(dx, x.size()));
    op_add_bias_rows(CPU_BE, x.data(), b.data(), R, C);
    CK(mt_cuda_add_bias_rows(&ctx, dx, dbias, R, C));
    bitwise("add bias rows", x, host(dx, x.size()));
    // 16-bit gradient accumulation over three microbatches, then added into fp32
    const size_t n = 1543;
    for (int dt = 1; dt <= 2; dt++) {
        std::vector<uint16_t> acc(n);
        std::vector<float> dst = rnd(n, 94, 1.0f);
        mt_convert_to_16((mt_dtype)dt, acc.data(), rnd(n, 95, 2.0f).data(), n);
        uint16_t *dacc = dev(acc);
        float *ddst = dev(dst);
        for (int k = 0; k < 3; k++) {
            std::vector<float> g = rnd(n, 96 + k, k == 2 ? 70000.0f : 1.0f); // the last overflows fp16 somewhere
            float *dgr = dev(g);
            op_accumulate_16(CPU_BE, (mt_dtype)dt, acc.data(), g.data(), n);
            CK(mt_cuda_accumulate_16(&ctx, dt, dacc, dgr, n));
        }
        bitwise(dt == 1 ? "accumulate into bf16 (3 times)" : "accumulate into fp16 (3 times)", acc, host(dacc, n));
        op_add_from_16(CPU_BE, (mt_dtype)dt, dst.data(), acc.data(), n);
        CK(mt_cuda_add_from_16(&ctx, dt, ddst, dacc, n));
        bitwise(dt == 1 ? "add from bf16" : "add from fp16", dst, host(ddst, n));
    }
    report(mt_cuda_accumulate_16(&ctx, 0, NULL, NULL, 1) != 0 && mt_cuda_add_from_16(&ctx, 3, NULL, NULL, 1) != 0,
           "16-bit accumulation: dtype check", "refused dt 0 and 3");
}

static void test_embed(void) {
    const int V = 50, B = 30, T = 11, C = 83, maxT = 16, pos0 = 2;
    std::vector<float> wte = rnd((size_t)V * C, 51, 1.0f), wpe = rnd((size_t)maxT * C, 52, 0.1f), out((size_t)B * T * C);
    std::vector<int32_t> tok(B * T);
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7) % 13; // repeated tokens
    float *dwte = dev(wte), *dwpe = dev(wpe), *o = poisoned<float>(out.size());
    int32_t *dtok = dev(tok);
    op_embed_forward(CPU_BE, out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, pos0);
    CK(mt_cuda_embed_forward(&ctx, o, dtok, dwte, dwpe, B, T, C, pos0));
    bitwise("embed forward", out, host(o, out.size()));
    std::vector<float> dy = rnd(out.size(), 53, 1.0f), gte = rnd(wte.size(), 54, 0.1f), gpe = rnd(wpe.size(), 55, 0.1f);
    float *ddy = dev(dy), *dgte = dev(gte), *dgpe = dev(gpe);
    op_embed_backward(CPU_BE, gte.data(), gpe.data(), dy.data(), tok.data(), B, T, C, pos0);
    CK(mt_cuda_embed_backward(&ctx, dgte, dgpe, ddy, dtok, B, T, C, pos0));
    bitwise("embed backward dwte", gte, host(dgte, gte.size()));
    bitwise("embed backward dwpe", gpe, host(dgpe, gpe.size()));
    const int v0 = 5, Vl = 6;
    op_embed_shard_forward(CPU_BE, out.data(), tok.data(), wte.data() + (size_t)v0 * C, v0, Vl, B * T, C);
    CK(mt_cuda_embed_shard_forward(&ctx, o, dtok, dwte + (size_t)v0 * C, v0, Vl, B * T, C));
    bitwise("embed shard forward", out, host(o, out.size()));
    op_embed_shard_backward(CPU_BE, gte.data() + (size_t)v0 * C, NULL, dy.data(), tok.data(), v0, Vl, B, T, C);
    CK(mt_cuda_embed_shard_backward(&ctx, dgte + (size_t)v0 * C, NULL, ddy, dtok, v0, Vl, B, T, C));
    bitwise("embed shard backward", gte, host(dgte, gte.size()));
    for (int dt = 1; dt <= 2; dt++) {
        std::vector<uint16_t> w16(wte.size());
        mt_convert_to_16((mt_dtype)dt, w16.data(), wte.data(), wte.size());
        uint16_t *dw16 = dev(w16);
        op_embed_shard_forward_16(CPU_BE, out.data(), tok.data(), (mt_dtype)dt, w16.data() + (size_t)v0 * C, v0, Vl, B * T, C);
        CK(mt_cuda_embed_shard_forward_16(&ctx, o, dtok, dt, dw16 + (size_t)v0 * C, v0, Vl, B * T, C));
        bitwise(dt == 1 ? "embed shard forward from bf16" : "embed shard forward from fp16", out, host(o, out.size()));
    }
    op_add_positions(CPU_BE, out.data(), wpe.data(), 5, B * T - 5, T, C);
    CK(mt_cuda_add_positions(&ctx, o, dwpe, 5, B * T - 5, T, C));
    bitwise("add positions", out, host(o, out.size()));
    // many rows over few tokens: long runs of one token, within one sorted chunk of rows
    // (3000 rows) and across several (9192 rows: the chunks add in row order)
    const int shapes[2][3] = {{30, 100, 37}, {12, 766, 5}};
    for (const auto &sh : shapes) {
        const int b = sh[0], t = sh[1], c = sh[2], n = b * t;
        std::vector<int32_t> tk(n);
        unsigned r = 77;
        for (int i = 0; i < n; i++) {
            r = r * 1664525u + 1013904223u;
            tk[i] = i % 1000 < 300 ? 3 : (int)((r >> 8) % 50); // a run of 300 rows of token 3 every 1000
        }
        std::vector<float> y = rnd((size_t)n * c, 56, 1.0f), te = rnd((size_t)V * c, 57, 0.1f), pe = rnd((size_t)t * c, 58, 0.1f);
        int32_t *dtk = dev(tk);
        float *dy2 = dev(y), *dte = dev(te), *dpe = dev(pe);
        op_embed_backward(CPU_BE, te.data(), pe.data(), y.data(), tk.data(), b, t, c, 0);
        CK(mt_cuda_embed_backward(&ctx, dte, dpe, dy2, dtk, b, t, c, 0));
        char what[64];
        snprintf(what, sizeof what, "embed backward dwte, %d rows", n);
        bitwise(what, te, host(dte, te.size()));
        snprintf(what, sizeof what, "embed backward dwpe, %d rows", n);
        bitwise(what, pe, host(dpe, pe.size()));
        const int s0 = 2, sl = 20; // the shard [2, 22) holds token 3
        op_embed_shard_backward(CPU_BE, te.data() + (size_t)s0 * c, NULL, y.data(), tk.data(), s0, sl, b, t, c);
        CK(mt_cuda_embed_shard_backward(&ctx, dte + (size_t)s0 * c, NULL, dy2, dtk, s0, sl, b, t, c));
        snprintf(what, sizeof what, "embed shard backward, %d rows", n);
        bitwise(what, te, host(dte, te.size()));
    }
}

static void test_reductions(void) {
    const size_t n = 70001;
    std::vector<float> x = rnd(n, 61, 3.0f);
    float *dx = dev(x);
    double *out = poisoned<double>(1), *part = poisoned<double>(MT_CUDA_SUMSQ_BLOCKS);
    double ref = op_sumsq(CPU_BE, x.data(), n);
    CK(mt_cuda_sumsq(&ctx, out, dx, n, part));
    double g1 = host(out, 1)[0];
    CK(mt_cuda_sumsq(&ctx, out, dx, n, part));
    double g2 = host(out, 1)[0];
    char d[128];
    snprintf(d, sizeof d, "rel %.2e (bound 1e-12), two runs %s", fabs(g1 - ref) / ref, g1 == g2 ? "equal" : "DIFFER");
    report(fabs(g1 - ref) / ref <= 1e-12 && g1 == g2, "sumsq (two-stage, double)", d);
    std::vector<uint16_t> x16(n);
    mt_convert_fp32_to_bf16(x16.data(), x.data(), n);
    uint16_t *d16 = dev(x16);
    double ref16 = op_sumsq_16(CPU_BE, MT_BF16, x16.data(), n);
    CK(mt_cuda_sumsq_16(&ctx, out, 1, d16, n, part));
    double g16 = host(out, 1)[0];
    snprintf(d, sizeof d, "rel %.2e (bound 1e-12)", fabs(g16 - ref16) / ref16);
    report(fabs(g16 - ref16) / ref16 <= 1e-12, "sumsq bf16", d);
    std::vector<uint16_t> r16(n);
    double refr = op_round_to_16_sumsq(CPU_BE, MT_FP16, r16.data(), x.data(), n);
    uint16_t *dr16 = poisoned<uint16_t>(n);
    CK(mt_cuda_round_to_16_sumsq(&ctx, out, 2, dr16, dx, n, part));
    double gr = host(out, 1)[0];
    bitwise("round to fp16 (+ sumsq)", r16, host(dr16, n));
    snprintf(d, sizeof d, "rel %.2e (bound 1e-12)", fabs(gr - refr) / refr);
    report(fabs(gr - refr) / refr <= 1e-12, "round to fp16: sumsq", d);
    int zero = 0, *flag = dev(std::vector<int>(1, 0));
    CK(mt_cuda_nonfinite(&ctx, flag, dx, n));
    int f1 = host(flag, 1)[0];
    float inf = INFINITY;
    CK(cudaMemcpy(dx + 12345, &inf, 4, cudaMemcpyHostToDevice));
    CK(mt_cuda_nonfinite(&ctx, flag, dx, n));
    int f2 = host(flag, 1)[0];
    CK(cudaMemcpy(flag, &zero, 4, cudaMemcpyHostToDevice));
    float nan = NAN;
    CK(cudaMemcpy(dx + 12345, &nan, 4, cudaMemcpyHostToDevice));
    CK(mt_cuda_nonfinite(&ctx, flag, dx, n));
    int f3 = host(flag, 1)[0];
    report(f1 == 0 && f2 == 1 && f3 == 1, "non-finite flag", f1 == 0 && f2 == 1 && f3 == 1 ? "finite 0, inf 1, NaN 1" : "wrong");
}

static void test_optim(void) {
    const size_t n = 1031;
    std::vector<float> p = rnd(n, 71, 0.5f), g = rnd(n, 72, 0.01f), m(n, 0.0f), v(n, 0.0f);
    float *dp = dev(p), *dg = dev(g), *dm = dev(m), *dv = dev(v);
    std::vector<float> p2 = p, m2 = m, v2 = v;
    float *dp2 = dev(p), *dm2 = dev(m), *dv2 = dev(v);
    for (int step = 1; step <= 10; step++) {
        op_adamw_update(CPU_BE, p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f);
        CK(mt_cuda_adamw_update(&ctx, dp, dg, dm, dv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f));
        op_adam_update(CPU_BE, p2.data(), g.data(), m2.data(), v2.data(), n, 3e-3f, 0.8f, 0.99f, 1e-6f, 0.01f, step, 1.0f);
        CK(mt_cuda_adam_update(&ctx, dp2, dg, dm2, dv2, n, 3e-3f, 0.8f, 0.99f, 1e-6f, 0.01f, step, 1.0f));
    }
    bitwise("adamw 10 steps (p)", p, host(dp, n));
    bitwise("adamw 10 steps (m)", m, host(dm, n));
    bitwise("adamw 10 steps (v)", v, host(dv, n));
    bitwise("adam 10 steps (p)", p2, host(dp2, n));
    std::vector<float> buf(n, 0.0f), p3 = p;
    float *db = dev(buf), *dp3 = dev(p3);
    for (int step = 1; step <= 5; step++) {
        op_sgd_update(CPU_BE, p3.data(), g.data(), buf.data(), n, 0.1f, 0.9f, 0.01f, step, 0.7f);
        CK(mt_cuda_sgd_update(&ctx, dp3, dg, db, n, 0.1f, 0.9f, 0.01f, step, 0.7f));
    }
    bitwise("sgd momentum 5 steps", p3, host(dp3, n));
    for (int dt = 1; dt <= 2; dt++) {
        std::vector<uint16_t> g16(n), p16(n);
        mt_convert_to_16((mt_dtype)dt, g16.data(), g.data(), n);
        std::vector<float> pm = p, mm(n, 0.0f), vm(n, 0.0f);
        float *dpm = dev(pm), *dmm = dev(mm), *dvm = dev(vm);
        uint16_t *dg16 = dev(g16), *dp16 = poisoned<uint16_t>(n);
        for (int step = 1; step <= 3; step++) {
            op_adamw_update_16(CPU_BE, pm.data(), g16.data(), p16.data(), (mt_dtype)dt, mm.data(), vm.data(), n, 1e-3f, 0.9f,
                               0.95f, 1e-8f, 0.1f, step, 1.0f);
            CK(mt_cuda_adamw_update_16(&ctx, dpm, dg16, dp16, dt, dmm, dvm, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step,
                                       1.0f));
        }
        bitwise(dt == 1 ? "adamw bf16 3 steps (master)" : "adamw fp16 3 steps (master)", pm, host(dpm, n));
        bitwise(dt == 1 ? "adamw bf16 3 steps (p16)" : "adamw fp16 3 steps (p16)", p16, host(dp16, n));
        for (int step = 4; step <= 5; step++) { // Adam (L2 penalty) on the same state
            op_adam_update_16(CPU_BE, pm.data(), g16.data(), p16.data(), (mt_dtype)dt, mm.data(), vm.data(), n, 2e-3f, 0.9f,
                              0.99f, 1e-8f, 0.05f, step, 0.9f);
            CK(mt_cuda_adam_update_16(&ctx, dpm, dg16, dp16, dt, dmm, dvm, n, 2e-3f, 0.9f, 0.99f, 1e-8f, 0.05f, step,
                                      0.9f));
        }
        bitwise(dt == 1 ? "adam bf16 2 more steps (p16)" : "adam fp16 2 more steps (p16)", p16, host(dp16, n));
    }
}

/* The column sums over enough rows to be cut into row groups (launch_util.h's two stages: partials in the
 * context's scratch, then added in group order): LayerNorm's and RMSNorm's weight/bias gradients, GELU's and
 * a linear layer's bias gradient, accumulating onto start values, against the CPU ops (row order). Two orders
 * of 1500-term fp32 sums with cancellation: 4e-6 of the largest (the CPU's own error is of that size). */
static void test_col_sums(void) {
    const int N = 1500, C = 83; // 5 row groups of 300
    size_t n = (size_t)N * C;
    std::vector<float> x = rnd(n, 61, 2.0f), w = rnd(C, 62, 1.0f), dy = rnd(n, 63, 1.0f), mean(N), rstd(N), out(n);
    float *dx = dev(x), *dw = dev(w), *ddy = dev(dy);
    op_layernorm_forward(CPU_BE, out.data(), mean.data(), rstd.data(), x.data(), w.data(), w.data(), N, C);
    std::vector<float> dinp(n), gw = rnd(C, 64, 0.1f), gb = rnd(C, 65, 0.1f);
    float *ddinp = dev(dinp), *dgw = dev(gw), *dgb = dev(gb), *cm = dev(mean), *cr = dev(rstd);
    op_layernorm_backward(CPU_BE, dinp.data(), gw.data(), gb.data(), dy.data(), x.data(), w.data(), mean.data(),
                          rstd.data(), N, C);
    CK(mt_cuda_layernorm_backward(&ctx, ddinp, dgw, dgb, ddy, dx, dw, cm, cr, N, C));
    within("layernorm backward dw, 1500 rows", gw, host(dgw, C), 4e-6);
    within("layernorm backward db, 1500 rows", gb, host(dgb, C), 4e-6);
    std::vector<float> rw = rnd(C, 66, 0.1f);
    float *drw = dev(rw);
    op_rmsnorm_forward(CPU_BE, out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    CK(cudaMemcpy(cr, rstd.data(), N * 4, cudaMemcpyHostToDevice));
    op_rmsnorm_backward(CPU_BE, dinp.data(), rw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
    CK(mt_cuda_rmsnorm_backward(&ctx, ddinp, drw, ddy, dx, dw, cr, N, C));
    within("rmsnorm backward dw, 1500 rows", rw, host(drw, C), 4e-6);
    std::vector<float> pre = x, db = rnd(C, 67, 1.0f), dpre(n);
    float *dpre_d = poisoned<float>(n), *ddb = dev(db);
    op_gelu_bias_backward(CPU_BE, dpre.data(), db.data(), pre.data(), dy.data(), N, C);
    CK(mt_cuda_gelu_bias_backward(&ctx, dpre_d, ddb, dx, ddy, N, C));
    bitwise("gelu+bias backward (dpre), 1500 rows", dpre, host(dpre_d, n));
    within("gelu+bias backward (dbias), 1500 rows", db, host(ddb, C), 4e-6);
    const int IC = 19;
    std::vector<float> xi = rnd((size_t)N * IC, 68, 1.0f), wi = rnd((size_t)C * IC, 69, 0.5f), bg = rnd(C, 70, 0.1f);
    float *dxi = dev(xi), *dwi = dev(wi), *dbg = dev(bg);
    op_matmul_backward(CPU_BE, NULL, NULL, bg.data(), dy.data(), xi.data(), wi.data(), N, IC, C, 0);
    CK(mt_cuda_matmul_backward(&ctx, NULL, NULL, dbg, ddy, dxi, dwi, N, IC, C, 0));
    within("matmul backward dbias, 1500 rows", bg, host(dbg, C), 4e-6);
}

// LoRA's input dropout and IA3's column scalings (cuda/adapters.cu): bitwise the CPU ops
static void test_adapters(void) {
    const int N = 13, T = 5, C = 70; // rows of 3 samples (the last short), a width not a multiple of 4
    std::vector<uint64_t> ids = {7, 1ull << 33, 42};
    std::vector<float> x = rnd((size_t)N * C, 201, 1.0f), y((size_t)N * C);
    uint64_t *dids = dev(ids);
    float *dx = dev(x), *dy = poisoned<float>(y.size());
    for (int k = 0; k < 3; k++) {
        float p = k == 2 ? 0.0f : 0.1f + 0.3f * k;
        mt_dropout d = {p, 1234 + (uint64_t)k, 3u + k, 1u, 5u};
        uint32_t site = 2u + k, col0 = k == 1 ? 96u : 0u; // a row-parallel target's columns start mid-row
        op_dropout_feature_rows(CPU_BE, y.data(), x.data(), &d, ids.data(), N, T, C, site, col0);
        CK(mt_cuda_dropout_feature_rows(&ctx, dy, dx, &d, dids, N, T, C, site, col0));
        char w[64];
        snprintf(w, sizeof w, "LoRA dropout rows (p %.1f)", (double)p);
        bitwise(w, y, host(dy, y.size()));
    }
    std::vector<float> l = rnd(C, 202, 2.0f), s((size_t)N * C), acc = rnd((size_t)N * C, 203, 1.0f);
    float *dl = dev(l), *ds = poisoned<float>(s.size()), *dacc = dev(acc);
    op_scale_cols(CPU_BE, s.data(), x.data(), l.data(), N, C);
    CK(mt_cuda_scale_cols(&ctx, ds, dx, dl, N, C));
    bitwise("IA3 scale cols", s, host(ds, s.size()));
    op_scale_cols_into(CPU_BE, acc.data(), x.data(), l.data(), N, C, 1);
    CK(mt_cuda_scale_cols_into(&ctx, dacc, dx, dl, N, C, 1));
    bitwise("IA3 scale cols into (accumulate)", acc, host(dacc, acc.size()));
    op_scale_cols_into(CPU_BE, s.data(), x.data(), l.data(), N, C, 0);
    CK(mt_cuda_scale_cols_into(&ctx, ds, dx, dl, N, C, 0));
    bitwise("IA3 scale cols into", s, host(ds, s.size()));
    const int col0 = 11, R = 23; // a target's column block of a fused output
    op_scale_cols_in_place(CPU_BE, x.data(), l.data(), N, C, col0, R);
    CK(mt_cuda_scale_cols_in_place(&ctx, dx, dl, N, C, col0, R));
    bitwise("IA3 scale cols in place", x, host(dx, x.size()));
    std::vector<float> b = rnd((size_t)N * R, 204, 1.0f), g = rnd(R, 205, 0.1f);
    float *db = dev(b), *dg = dev(g);
    op_col_dot_acc(CPU_BE, g.data(), x.data(), C, col0, b.data(), N, R);
    CK(mt_cuda_col_dot_acc(&ctx, dg, dx, C, col0, db, N, R));
    bitwise("IA3 column dot (gradient)", g, host(dg, g.size()));
}

// A quantized base's row tiles (cuda/quant.cu) against the CPU op and quant/'s own dequantization:
// NF4 with and without double quantization, int8 rows; fp32 and bf16 tiles; a first row that starts
// mid-block and on a low nibble (odd cols), a wider row stride.
static void test_quant_dequant(void) {
    const int64_t rows = 37, cols = 45, row0 = 3, nr = 29, ld = 50;
    std::vector<float> w = rnd((size_t)(rows * cols), 211, 0.3f);
    for (int i = 0; i < 45; i++) w[(size_t)(200 + i)] = 0.0f; // an all-zero stretch: code 7, and a zero absmax block
    std::vector<float> code(mt_nf4_code, mt_nf4_code + 16), nmap(mt_nf4_dynamic_map, mt_nf4_dynamic_map + 256);
    float *dcode = dev(code), *dnmap = dev(nmap);
    for (int dq = 0; dq < 2; dq++) {
        mt_nf4 q;
        mt_error err;
        if (mt_nf4_init(&q, w.data(), rows, cols, dq, &err)) {
            report(false, "nf4 quantize", err.msg);
            return;
        }
        std::vector<uint8_t> packed(q.packed, q.packed + (q.n + 1) / 2);
        mt_nf4_codes hc = {q.packed, q.absmax, q.absmax_code, q.nested_absmax, q.offset, q.quant_map,
                           q.nested_quant_map, rows, cols};
        mt_cuda_nf4 dc = {dev(packed), NULL, NULL, NULL, q.offset, dcode, dnmap, rows, cols};
        if (dq) {
            dc.absmax_code = dev(std::vector<uint8_t>(q.absmax_code, q.absmax_code + q.nblocks));
            dc.nested_absmax = dev(std::vector<float>(q.nested_absmax, q.nested_absmax + q.nnested));
        } else dc.absmax = dev(std::vector<float>(q.absmax, q.absmax + q.nblocks));
        std::vector<float> ref((size_t)(nr * ld), 0.0f), cpu = ref;
        float *dout = dev(ref); // the stride's gap stays as it was (zeros) in all three
        mt_nf4_dequant_rows(&q, row0, nr, ld, ref.data());
        op_nf4_dequant_rows(CPU_BE, &hc, row0, nr, ld, MT_FP32, cpu.data());
        bitwise(dq ? "nf4 rows (double quant): cpu op" : "nf4 rows: cpu op = quant/nf4", ref, cpu);
        CK(mt_cuda_nf4_dequant_rows(&ctx, &dc, row0, nr, ld, 0, dout));
        bitwise(dq ? "nf4 rows (double quant)" : "nf4 rows", ref, host(dout, ref.size()));
        std::vector<uint16_t> r16((size_t)(nr * ld), 0), c16 = r16;
        uint16_t *d16 = dev(r16);
        mt_nf4_dequant_rows_bf16(&q, row0, nr, ld, r16.data());
        op_nf4_dequant_rows(CPU_BE, &hc, row0, nr, ld, MT_BF16, c16.data());
        bitwise(dq ? "nf4 rows bf16 (double quant): cpu op" : "nf4 rows bf16: cpu op", r16, c16);
        CK(mt_cuda_nf4_dequant_rows(&ctx, &dc, row0, nr, ld, 1, d16));
        bitwise(dq ? "nf4 rows bf16 (double quant)" : "nf4 rows bf16", r16, host(d16, r16.size()));
        mt_nf4_free(&q);
    }
    mt_int8w q8;
    mt_error err;
    for (int i = 0; i < cols; i++) w[(size_t)(5 * cols + i)] = 0.0f; // an all-zero row
    if (mt_int8w_init(&q8, w.data(), rows, cols, &err)) {
        report(false, "int8 quantize", err.msg);
        return;
    }
    int8_t *dq8 = dev(std::vector<int8_t>(q8.q, q8.q + rows * cols));
    float *dscb = dev(std::vector<float>(q8.scb, q8.scb + rows));
    std::vector<float> ref((size_t)(nr * ld), 0.0f), cpu = ref;
    float *dout = dev(ref);
    mt_int8w_dequant_rows(&q8, row0, nr, ld, ref.data());
    op_int8_dequant_rows(CPU_BE, q8.q, q8.scb, cols, row0, nr, ld, MT_FP32, cpu.data());
    bitwise("int8 rows: cpu op = quant/int8", ref, cpu);
    CK(mt_cuda_int8_dequant_rows(&ctx, dq8, dscb, cols, row0, nr, ld, 0, dout));
    bitwise("int8 rows", ref, host(dout, ref.size()));
    std::vector<uint16_t> r16((size_t)(nr * ld), 0);
    uint16_t *d16 = dev(r16);
    mt_int8w_dequant_rows_bf16(&q8, row0, nr, ld, r16.data());
    CK(mt_cuda_int8_dequant_rows(&ctx, dq8, dscb, cols, row0, nr, ld, 1, d16));
    bitwise("int8 rows bf16", r16, host(d16, r16.size()));
    mt_int8w_free(&q8);
}

int main(void) {
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device (%s): the kernels were built, not run\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s\n", prop.name);
    CK(mt_cuda_ctx_init(&ctx));
    test_elementwise();
    test_col_sums();
    test_norms();
    test_norms(37, 96);  // one float4 a lane
    test_norms(21, 768); // GPT-2's width: six float4s a lane
    test_matmul();
    test_attention(4, 4, 0.0f); // GPT-2: multi-head
    test_attention(4, 2, 0.0f); // Llama: grouped-query
    test_attention(6, 2, 0.2f); // with attention dropout
    test_attention(2, 1, 0.1f, 37, 64); // a GPT-2-sized head, longer rows
    test_attention(4, 2, 0.0f, 512, 16); // causal blocks: T 512 in two blocks of 256
    test_mma_layout();
    test_ldsm_layout();
    test_attention_tc_forward(4, 4, 0.0f, 13, 16);  // tensor cores: one partial tile
    test_attention_tc_forward(4, 2, 0.0f, 100, 64); // grouped-query, GPT-2's head size, two tiles
    test_attention_tc_forward(6, 2, 0.2f, 70, 32);  // with attention dropout
    test_attention_tc_forward(2, 1, 0.0f, 150, 128); // the largest head size, three tiles
    test_attention_tc_forward(2, 2, 0.0f, 40, 48, true); // an odd head size, qkv not 16-byte aligned
    test_attention_tc_backward(4, 4, 0.0f, 13, 16);  // GPT-2: multi-head, one partial tile
    test_attention_tc_backward(4, 2, 0.0f, 33, 32, 2, 1); // Llama: grouped-query, rows not 16-byte aligned
    test_attention_tc_backward(6, 2, 0.2f, 33, 16);  // with attention dropout
    test_attention_tc_backward(2, 1, 0.1f, 100, 64); // a GPT-2-sized head, a partial second tile
    test_attention_tc_backward(2, 2, 0.0f, 70, 128); // the largest head
    test_attention_tc_backward(2, 1, 0.0f, 256, 32, 1); // four tiles each way
    test_attention_tc_backward(4, 2, 0.1f, 40, 48, 1); // the register form's two query passes, with dropout
    test_attention_tc_backward(2, 1, 0.0f, 90, 96, 1); // the register form's largest head
    test_attention_tc_args();
    test_xent();
    test_xent(52001, 52008);
    test_xent_shards();
    test_tp_rows();
    test_embed();
    test_reductions();
    test_optim();
    test_adapters();
    test_quant_dequant();
    CK(mt_cuda_sync(&ctx));
    for (void *b : buffers) CK(cudaFree(b));
    mt_cuda_ctx_destroy(&ctx);
    printf("%d of %d kernel checks failed\n", failures, checks);
    return failures ? 1 : 0;
}
