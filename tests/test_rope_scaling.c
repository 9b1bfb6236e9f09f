/* RoPE frequency scalings (ops/rope.c: linear, dynamic NTK, YaRN; llama3 is
 * test_llama_ops'): with no arguments, their defining properties; with
 *   test_rope_scaling HFDIR T IN OUT
 * the rotation tool of tests/check_rope_scaling.sh: HFDIR/config.json read
 * as import reads it (mt_hf_config_read), the tables of a context of T
 * positions, and IN (fp32 [T][(heads + kv heads) * head_dim], the q|k of
 * each position) rotated into OUT, as the Llama forward rotates q and k. */
#include "core/fileio.h"
#include "core/json.h"
#include "device/backend.h"
#include "interop/hf_model.h"
#include "models/llama/llama.h"
#include "ops/ops.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
/* the CPU backend the ops run on (set in main) */
static mt_backend cpu_be;
#define BE (&cpu_be)
#define CHECK(c, ...)                                                                                                  \
    do {                                                                                                               \
        if (!(c)) {                                                                                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
            fails++;                                                                                                   \
        }                                                                                                              \
    } while (0)

enum { HS = 64, H = HS / 2 };

static void test_linear(void) {
    float plain[H], f[H];
    mt_rope_scaling s = {.type = MT_ROPE_LINEAR, .factor = 4.0f};
    op_rope_inv_freq(BE, plain, HS, 10000.0f, NULL);
    op_rope_inv_freq(BE, f, HS, 10000.0f, &s);
    int same = 0;
    for (int j = 0; j < H; j++) same += f[j] == plain[j] / 4.0f;
    CHECK(same == H, "linear: %d of %d frequencies are the plain ones / 4", same, H);
    CHECK(op_rope_attention_factor(BE, &s) == 1.0f, "linear has no attention factor");
}

static void test_dynamic(void) {
    float plain[H], f[H];
    mt_rope_scaling s = {.type = MT_ROPE_DYNAMIC, .factor = 2.0f, .original_max_position = 128, .seq_len = 128};
    op_rope_inv_freq(BE, plain, HS, 10000.0f, NULL);
    op_rope_inv_freq(BE, f, HS, 10000.0f, &s);
    CHECK(!memcmp(f, plain, sizeof f), "dynamic up to the original context must be the plain frequencies");
    s.seq_len = 512; /* base 1e4 * (2 * 4 - 1)^(64/62) */
    op_rope_inv_freq(BE, f, HS, 10000.0f, &s);
    double base = 10000.0 * pow(7.0, 64.0 / 62.0), worst = 0;
    for (int j = 0; j < H; j++) worst = fmax(worst, fabs(f[j] - pow(base, -2.0 * j / HS)) / pow(base, -2.0 * j / HS));
    CHECK(f[0] == 1.0f && worst < 2e-6, "dynamic at 4x the context: frequencies off by %.3g relative", worst);
    printf("  dynamic NTK at 4x: max rel err vs float64 %.2g\n", worst);
}

static void test_yarn(void) {
    float plain[H], f[H];
    mt_rope_scaling s = {.type = MT_ROPE_YARN, .factor = 8.0f, .original_max_position = 256, .truncate = 1};
    op_rope_inv_freq(BE, plain, HS, 10000.0f, NULL);
    op_rope_inv_freq(BE, f, HS, 10000.0f, &s);
    /* dims turning > 32 times over 256 positions keep their frequency, < 1 time are divided by 8 */
    int kept = 0, divided = 0, ramp = 0;
    for (int j = 0; j < H; j++) {
        double turns = 256.0 * plain[j] / (2 * M_PI);
        if (turns > 32.0 * 1.2) kept += f[j] == plain[j];
        else if (turns < 1.0 / 1.2) divided += fabsf(f[j] - plain[j] / 8.0f) <= 1e-6f * plain[j];
        else ramp++;
    }
    int want_kept = 0, want_div = 0;
    for (int j = 0; j < H; j++) {
        double turns = 256.0 * plain[j] / (2 * M_PI);
        want_kept += turns > 32.0 * 1.2, want_div += turns < 1.0 / 1.2;
    }
    printf("  yarn factor 8 over 256: %d kept, %d divided, %d near the ramp\n", kept, divided, ramp);
    CHECK(kept == want_kept && divided == want_div && kept > 0 && divided > 0, "yarn bands %d/%d %d/%d", kept,
          want_kept, divided, want_div);
    for (int j = 1; j < H; j++) CHECK(f[j] <= f[j - 1], "yarn frequencies must fall with j (%d)", j);
    float a = op_rope_attention_factor(BE, &s);
    CHECK(fabs(a - (0.1 * log(8.0) + 1.0)) < 1e-7, "yarn attention factor %g", (double)a);
    s.attention_factor = 1.25f;
    CHECK(op_rope_attention_factor(BE, &s) == 1.25f, "a given attention factor stands");
    s.attention_factor = 0.0f, s.mscale = 1.0f, s.mscale_all_dim = 0.5f;
    double want = (0.1 * log(8.0) + 1.0) / (0.05 * log(8.0) + 1.0);
    CHECK(fabs(op_rope_attention_factor(BE, &s) - want) < 1e-7, "mscale form %g, want %g",
          (double)op_rope_attention_factor(BE, &s), want);
    /* the backward with scaled tables is the adjoint: <R x, y> = <x, R^T y> */
    enum { T = 9, NHD = 3 };
    float ct[T * H], st[T * H], x[T * NHD * HS], y[T * NHD * HS], rx[T * NHD * HS], rty[T * NHD * HS];
    s.mscale = s.mscale_all_dim = 0.0f;
    op_rope_tables(BE, ct, st, T, HS, 10000.0f, &s);
    CHECK(fabsf(ct[0] - op_rope_attention_factor(BE, &s)) < 1e-7f, "cos at position 0 is the attention factor");
    for (int i = 0; i < T * NHD * HS; i++) x[i] = rx[i] = sinf(0.3f * i), y[i] = rty[i] = cosf(0.7f * i + 1.0f);
    op_rope_apply(BE, rx, T, T, NHD, HS, NHD * HS, ct, st, 0);
    op_rope_apply(BE, rty, T, T, NHD, HS, NHD * HS, ct, st, 1);
    double l = 0, r = 0;
    for (int i = 0; i < T * NHD * HS; i++) l += (double)rx[i] * y[i], r += (double)x[i] * rty[i];
    CHECK(fabs(l - r) < 1e-4, "adjoint: %.8g vs %.8g", l, r);
}

/* The rotation tool (see the header). */
static int rotate(const char *dir, int T, const char *in, const char *out) {
    mt_error err = {{0}};
    char *path = mt_path_join(dir, "config.json"), *text = NULL;
    size_t len = 0;
    if (mt_read_file(path, 1 << 20, &text, &len, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    mt_json_doc *doc = mt_json_parse(text, len, 32, &err);
    mt_model_config c;
    if (!doc || mt_hf_config_read(mt_json_root(doc), &c, &err) || mt_model_config_validate(&c, &err))
        return fprintf(stderr, "%s: %s\n", path, err.msg), 1;
    int hd = mt_model_head_dim(&c), nh = c.n_head + mt_model_kv_heads(&c);
    size_t n = (size_t)T * (size_t)nh * (size_t)hd;
    float *x = malloc(n * sizeof *x), *ct = malloc((size_t)T * hd / 2 * sizeof *ct), *st = malloc((size_t)T * hd / 2 * sizeof *st);
    FILE *f = fopen(in, "rb");
    if (!x || !ct || !st || !f || fread(x, sizeof *x, n, f) != n) return fprintf(stderr, "cannot read %zu floats of %s\n", n, in), 1;
    fclose(f);
    mt_rope_scaling s = mt_llama_rope_scaling(&c, T);
    op_rope_tables(BE, ct, st, T, hd, c.rope_theta, &s);
    op_rope_apply(BE, x, T, T, nh, hd, (size_t)nh * hd, ct, st, 0);
    f = fopen(out, "wb");
    if (!f || fwrite(x, sizeof *x, n, f) != n || fclose(f)) return fprintf(stderr, "cannot write %s\n", out), 1;
    printf("rotated %d positions x %d heads of %d (%s scaling, attention factor %g)\n", T, nh, hd,
           mt_llama_rope_type_name(c.rope_scaling), (double)op_rope_attention_factor(BE, &s));
    free(x), free(ct), free(st), free(text), free(path);
    mt_json_free(doc);
    return 0;
}

int main(int argc, char **argv) {
    cpu_be = mt_backend_cpu(MT_GEMM_DEFAULT);
    if (argc == 5) return rotate(argv[1], atoi(argv[2]), argv[3], argv[4]);
    if (argc != 1) return fprintf(stderr, "usage: %s [HFDIR T IN OUT]\n", argv[0]), 2;
    test_linear();
    test_dynamic();
    test_yarn();
    printf(fails ? "test_rope_scaling: %d FAILED\n" : "test_rope_scaling: OK\n", fails);
    return fails != 0;
}
