/* Model-level checks: backward of the whole GPT-2 (with and without
 * dropout) against central finite differences of the loss, gradient
 * accumulation over microbatches, and determinism of init. */
#include "models/model.h"
#include "models/gpt2/gpt2.h"
#include "core/philox.h"
#include "testlib.h"
#include <stdlib.h>
#include <string.h>

static void fill_batch(mt_model *m, int V, uint64_t seed) {
    int N = m->acts.B * m->acts.T;
    for (int i = 0; i < N; i++) {
        mt_u32x4 r = mt_philox4x32((uint32_t)i, 7, 0, 0, (uint32_t)seed, 1);
        m->acts.tokens[i] = (int32_t)(r.v[0] % (uint32_t)V);
        m->acts.targets[i] = (int32_t)(r.v[1] % (uint32_t)V);
    }
    m->acts.targets[3] = -1; /* one ignored target */
    for (int b = 0; b < m->acts.B; b++) m->acts.sample_ids[b] = 100 + (uint64_t)b;
}

static double loss_of(mt_model *m, const mt_fwd_ctx *fc, double count) {
    return mt_model_forward(m, fc, 0.0f) / count;
}

static void gradcheck(float dropout) {
    mt_model_config cfg = {.n_layer = 2, .n_embd = 16, .n_head = 2, .vocab_size = 37, .padded_vocab = 40, .seq_len = 8, .dropout = dropout};
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_model m;
    mt_model_create(&m, BE, &cfg, 2, 6, 42, &mem);
    /* larger weights than 0.02 so the loss moves measurably */
    for (int u = 0; u < m.layout.n_units; u++)
        for (size_t i = 0; i < m.layout.units[u].numel; i++) m.params[u][i] *= 5.0f;
    fill_batch(&m, cfg.vocab_size, 3);
    mt_fwd_ctx fc = {1, 5, 0.0f, 0.0f};
    double count = 2 * 6 - 1;
    mt_model_zero_grads(&m);
    mt_model_forward(&m, &fc, (float)(1.0 / count));
    mt_model_backward(&m, &fc);
    int checked = 0, bad = 0;
    double worst = 0;
    for (int u = 0; u < m.layout.n_units; u++) {
        const mt_unit_layout *ul = &m.layout.units[u];
        for (int ti = 0; ti < ul->n_tensors; ti++) {
            const mt_tensor *t = &ul->t[ti];
            size_t lim = t->numel;
            if (t->init_rows != t->shape[0]) lim = (size_t)t->init_rows * t->shape[1];
            for (int k = 0; k < 3; k++) {
                size_t idx = t->offset + (size_t)((k * 7919u + 13u) % lim);
                float *p = &m.params[u][idx];
                float old = *p, h = 1e-2f;
                *p = old + h;
                double lp = loss_of(&m, &fc, count);
                *p = old - h;
                double lm = loss_of(&m, &fc, count);
                *p = old;
                double fd = (lp - lm) / (2.0 * h), an = m.grads[u][idx];
                double err = fabs(fd - an) / fmax(1e-2, fabs(fd) + fabs(an));
                if (err > worst) worst = err;
                checked++;
                if (err > 3e-2) {
                    bad++;
                    fprintf(stderr, "  %s[%zu]: analytic %.6g finite-diff %.6g\n", t->name, idx - t->offset, an, fd);
                }
            }
        }
    }
    CHECK(bad == 0, "dropout %.1f: %d of %d gradient entries disagree with finite differences (worst rel %.3g)",
          (double)dropout, bad, checked, worst);
    printf("gradcheck dropout=%.1f: %d entries, worst relative error %.3g\n", (double)dropout, checked, worst);
    mt_model_free(&m);
}

/* One batch of 4 vs two microbatches of 2 with the same global samples. */
static void accumulation(void) {
    mt_model_config cfg = {.n_layer = 2, .n_embd = 16, .n_head = 2, .vocab_size = 37, .padded_vocab = 40, .seq_len = 8, .dropout = 0.1f};
    mt_mem mem;
    memset(&mem, 0, sizeof mem);
    mt_model big, small;
    mt_model_create(&big, BE, &cfg, 4, 8, 9, &mem);
    mt_model_create(&small, BE, &cfg, 2, 8, 9, &mem);
    fill_batch(&big, 37, 11);
    mt_fwd_ctx fc = {1, 2, 0.0f, 0.0f};
    double count = 4 * 8 - 1;
    mt_model_zero_grads(&big);
    double lb = mt_model_forward(&big, &fc, (float)(1.0 / count));
    mt_model_backward(&big, &fc);
    mt_model_zero_grads(&small);
    double ls = 0;
    for (int j = 0; j < 2; j++) {
        memcpy(small.acts.tokens, big.acts.tokens + j * 16, 16 * sizeof(int32_t));
        memcpy(small.acts.targets, big.acts.targets + j * 16, 16 * sizeof(int32_t));
        memcpy(small.acts.sample_ids, big.acts.sample_ids + j * 2, 2 * sizeof(uint64_t));
        ls += mt_model_forward(&small, &fc, (float)(1.0 / count));
        mt_model_backward(&small, &fc);
    }
    CHECK_CLOSE(ls / count, lb / count, 1e-6);
    double maxd = 0, maxa = 0;
    for (int u = 0; u < big.layout.n_units; u++)
        for (size_t i = 0; i < big.layout.units[u].numel; i++) {
            maxd = fmax(maxd, fabs(big.grads[u][i] - small.grads[u][i]));
            maxa = fmax(maxa, fabs(big.grads[u][i]));
        }
    CHECK(maxd <= 1e-5 * maxa, "accumulated gradients differ: max abs diff %.3g vs max abs %.3g", maxd, maxa);
    mt_model_free(&big);
    mt_model_free(&small);
}

/* The vectorised block form of the dropout stream equals the scalar
 * reference (mt_philox4x32) element for element. */
static void dropout_forms_agree(void) {
    mt_dropout d = {0.3f, 0x123456789ULL, 17, 5, MT_DROPOUT_ATTN_PROBS};
    float a[260], b[260];
    int mismatches = 0, kept = 0;
    for (uint32_t pos = 0; pos < 40; pos += 3)
        for (uint32_t block0 = 0; block0 < 9; block0 += 4) {
            mt_dropout_block_scales(a, &d, (5ULL << 32) + pos, pos, 3, block0, 64);
            mt_dropout_row_scales(b, &d, (5ULL << 32) + pos, pos, 3, block0 * 4, 256);
            for (int j = 0; j < 256; j++) {
                mismatches += a[j] != b[j];
                kept += b[j] != 0.0f;
            }
        }
    CHECK(mismatches == 0, "%d dropout scales differ between the block and row forms", mismatches);
    CHECK(kept > 0 && kept < 14 * 3 * 256, "kept %d", kept);
}

/* Tensor-parallel slices: every tp rank's initial slices, put together,
 * are the tp = 1 model bitwise; to_full/from_full are inverse; the split
 * kinds cut where Megatron cuts (checked on c_attn: a rank holds whole heads
 * of q, k and v). */
static void tp_slices(void) {
    mt_model_config cfg = {.n_layer = 2, .n_embd = 32, .n_head = 4, .vocab_size = 250, .padded_vocab = 256, .seq_len = 8, .dropout = 0.0f};
    mt_error err;
    CHECK(mt_model_tp_check(&cfg, 3, &err) != 0 && strstr(err.msg, "attention heads"), "tp 3: %s", err.msg);
    mt_model_config odd = cfg; /* tp 4 does not divide 250 rows: padded to 512 for that layout, 250 in checkpoints */
    odd.padded_vocab = 250;
    CHECK(mt_model_tp_check(&odd, 4, &err) == 0, "vocab padded per layout: %s", err.msg);
    mt_layout padl;
    mt_model_layout_build(&odd, 4, 3, &padl);
    CHECK(padl.units[0].t[MT_T_WTE].gshape[0] == 512 && padl.units[0].t[MT_T_WTE].shape[0] == 128 &&
          padl.units[0].t[MT_T_WTE].ckpt_rows == 250, "wte rows under tp 4");
    mt_layout_free(&padl);
    mt_layout whole;
    mt_model_layout_build(&cfg, 1, 0, &whole);
    for (int tp = 2; tp <= 4; tp *= 2) {
        CHECK(mt_model_tp_check(&cfg, tp, &err) == 0, "tp %d", tp);
        for (int u = 0; u < whole.n_units; u++) {
            size_t gn = whole.units[u].numel;
            float *ref = calloc(gn, 4), *full = calloc(gn, 4);
            mt_unit_init_params(&whole, u, ref, 7);
            for (size_t i = 0; i < gn; i++) full[i] = NAN;
            size_t sum = 0;
            for (int r = 0; r < tp; r++) {
                mt_layout l;
                mt_model_layout_build(&cfg, tp, r, &l);
                CHECK(l.units[u].gnumel == gn, "unit %d gnumel", u);
                float *loc = calloc(l.units[u].numel, 4), *back = calloc(l.units[u].numel, 4);
                mt_unit_init_params(&l, u, loc, 7);
                mt_unit_to_full(&l, u, loc, full);
                mt_unit_from_full(&l, u, full, back);
                CHECK(memcmp(loc, back, l.units[u].numel * 4) == 0, "tp %d rank %d unit %d round trip", tp, r, u);
                for (int i = 0; i < l.units[u].n_tensors; i++)
                    sum += l.units[u].t[i].split == MT_TP_REPLICATED ? (r == 0 ? l.units[u].t[i].numel : 0)
                                                                   : l.units[u].t[i].numel;
                if (u == 1) { /* c_attn row 0 of rank r is q of head r*NH/tp; row C/tp is k of that head */
                    const mt_tensor *t = &l.units[1].t[MT_T_QKV_W];
                    CHECK(t->shape[0] == 3 * 32 / tp && t->shape[1] == 32, "c_attn local shape");
                    CHECK(mt_tensor_row_origin(&l, t, 0) == (size_t)(r * 32 / tp) * 32, "q origin");
                    CHECK(mt_tensor_row_origin(&l, t, 32 / tp) == (size_t)(32 + r * 32 / tp) * 32, "k origin");
                    const mt_tensor *pr = &l.units[1].t[MT_T_ATTPROJ_W];
                    CHECK(pr->shape[0] == 32 && pr->shape[1] == 32 / tp, "c_proj local shape");
                }
                free(loc);
                free(back);
                mt_layout_free(&l);
            }
            CHECK(sum == gn, "tp %d unit %d: slices cover %zu of %zu", tp, u, sum, gn);
            CHECK(memcmp(ref, full, gn * 4) == 0, "tp %d unit %d: slices differ from the tp=1 init", tp, u);
            free(ref);
            free(full);
        }
    }
    mt_layout_free(&whole);
}

int main(void) {
    tp_slices();
    dropout_forms_agree();
    gradcheck(0.0f);
    gradcheck(0.3f);
    accumulation();
    TEST_MAIN_END("test_model");
}
