/* AdaGrad (optim/optimizer.h's "adagrad" entry, ops/optim_update.c):
 *  - a closed form: one element with a constant gradient g has after t steps
 *    sum = acc0 + t g^2 and p = p0 - sum_k clr_k g / (sqrt(acc0 + k g^2) + eps)
 *    (double; the fp32 update agrees to 1e-6 relative);
 *  - the hyperparameter checks name the flags;
 *  - `test_adagrad --dump FILE` writes a 10-step run of the table entry on the
 *    optimizer tests' unit (weight decay on its matrices, a decaying rate, a
 *    non-zero initial accumulator, a changing lr and clipping coefficient)
 *    for tests/adagrad_ref.py, which replays it with torch.optim.Adagrad:
 *      int64 n_tensors, numel, steps; per tensor int64 offset, numel, decay
 *      float64 lr_decay, initial_accumulator, eps, weight_decay
 *      float32 p0[numel]; per step float64 lr, grad_scale + float32 grad[numel]
 *      float32 p_final[numel], sum_final[numel] */
#include <stdint.h>
#include <stdlib.h>
#include "optim/optimizer.h"
#include "testlib.h"
#include "testlib_unit.h"

static mt_opt_config adagrad_config(float lr_decay, float acc0, float eps, float wd) {
    mt_opt_config c;
    memset(&c, 0, sizeof c);
    c.h.kind = MT_OPT_ADAGRAD;
    c.h.lr = 1e-2f;
    c.h.beta1 = 0.9f;
    c.h.beta2 = 0.95f;
    c.h.eps = eps;
    c.h.weight_decay = wd;
    c.h.lr_decay = lr_decay;
    c.h.initial_accumulator = acc0;
    c.adafactor_clip = 1.0f;
    return c;
}

static const float *plain_grad(void *ctx, size_t off, size_t n) {
    (void)n;
    return (const float *)ctx + off;
}
static void no_round(void *ctx, size_t off, size_t n, const float *master) {
    (void)ctx, (void)off, (void)n, (void)master;
}

static void test_closed_form(void) {
    mt_tensor t[1];
    mt_unit_layout u;
    memset(&u, 0, sizeof u);
    u.t = t;
    u.cap = 1;
    add_tensor(&u, "v", 1, 1, 1, 0);
    mt_opt_config c = adagrad_config(0.05f, 0.3f, 1e-10f, 0.0f);
    const mt_optimizer *op = mt_optimizer_get(MT_OPT_ADAGRAD);
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_opt_state *s = op->init(&c, &u, 0, 1, 1, &mem);
    float p = 0.5f, g = -0.25f;
    mt_opt_target tg = {&p, MT_FP32, NULL, NULL, plain_grad, no_round, &g, .sum = NULL, .sum_ctx = NULL, .be = BE};
    double pd = 0.5;
    for (int k = 1; k <= 20; k++) {
        op->step(s, &c, &u, &tg, 0.1f, k, 1.0f);
        double sum = (double)c.h.initial_accumulator + k * (double)g * g;
        pd -= 0.1 / (1.0 + (k - 1) * (double)c.h.lr_decay) * g / (sqrt(sum) + 1e-10);
        float st;
        op->get_stream(s, &u, 0, &st);
        CHECK_CLOSE(st, sum, 1e-6);
    }
    CHECK(fabs(p - pd) <= 1e-6 * fabs(pd), "20 steps: %.9g vs closed form %.9g", (double)p, pd);
    op->free(s, &mem);
    CHECK(!strcmp(op->streams[0].name, "sum") && op->n_streams == 1 && op->elementwise, "one fp32 stream 'sum'");
}

static void test_checks(void) {
    mt_error err;
    mt_opt_config c = adagrad_config(-1.0f, 0.0f, 1e-10f, 0.0f);
    CHECK(mt_opt_config_check(&c, &err) == -1 && strstr(err.msg, "{adagrad-lr-decay}"), "%s", err.msg);
    c = adagrad_config(0.0f, -0.5f, 1e-10f, 0.0f);
    CHECK(mt_opt_config_check(&c, &err) == -1 && strstr(err.msg, "{adagrad-initial-accumulator}"), "%s", err.msg);
    c = adagrad_config(0.0f, 0.1f, 1e-10f, 0.0f);
    CHECK(mt_opt_config_check(&c, &err) == 0, "valid: %s", err.msg);
    c.h.kind = MT_OPT_ADAMW;
    CHECK(mt_opt_config_check(&c, &err) == -1 && strstr(err.msg, "apply to {optimizer} adagrad"), "%s", err.msg);
}

static int dump(const char *path) {
    mt_unit_layout u;
    memset(&u, 0, sizeof u);
    add_test_tensors(&u);
    size_t n = u.numel;
    const int steps = 10;
    mt_opt_config c = adagrad_config(0.01f, 0.1f, 1e-10f, 0.05f);
    const mt_optimizer *op = mt_optimizer_get(MT_OPT_ADAGRAD);
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_opt_state *s = op->init(&c, &u, 0, n, n, &mem);
    float *p = falloc(n), *g = falloc(n), *sum = falloc(n);
    uint64_t r = 7;
    for (size_t i = 0; i < n; i++) p[i] = 0.1f * rng_sym(&r);
    FILE *f = fopen(path, "wb");
    if (!f) return perror(path), 2;
    int64_t head[3] = {u.n_tensors, (int64_t)n, steps};
    fwrite(head, 8, 3, f);
    for (int i = 0; i < u.n_tensors; i++) {
        int64_t t[3] = {(int64_t)u.t[i].offset, (int64_t)u.t[i].numel, u.t[i].weight_decay};
        fwrite(t, 8, 3, f);
    }
    double hp[4] = {c.h.lr_decay, c.h.initial_accumulator, c.h.eps, c.h.weight_decay};
    fwrite(hp, 8, 4, f);
    fwrite(p, 4, n, f);
    mt_opt_target tg = {p, MT_FP32, NULL, NULL, plain_grad, no_round, g, .sum = NULL, .sum_ctx = NULL, .be = BE};
    for (int t = 1; t <= steps; t++) {
        float lr = 1e-2f * (1.0f + 0.1f * (float)t), scale = t % 3 ? 1.0f : 0.625f;
        for (size_t i = 0; i < n; i++) g[i] = (i % 5 ? 1.0f : 1e-3f) * rng_sym(&r);
        double d[2] = {lr, scale};
        fwrite(d, 8, 2, f);
        fwrite(g, 4, n, f);
        op->step(s, &c, &u, &tg, lr, t, scale);
    }
    op->get_stream(s, &u, 0, sum);
    fwrite(p, 4, n, f);
    fwrite(sum, 4, n, f);
    if (fclose(f)) return perror(path), 2;
    op->free(s, &mem);
    free(p), free(g), free(sum), free(u.t);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--dump")) return dump(argv[2]);
    test_closed_form();
    test_checks();
    TEST_MAIN_END("test_adagrad");
}
