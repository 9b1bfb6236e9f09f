/* A checkpoint can carry inf/NaN (its format stores raw floats), so the
 * commands that read one must refuse it: this test writes a tiny GPT-2
 * checkpoint whose ln_f.weight holds a NaN and checks that it reads back as
 * NaN. With a directory argument it only writes that checkpoint there (for
 * tests/check_robustness.sh: train --init-from, eval and generate refuse it;
 * the model is --layers 1 --dim 16 --heads 2 --seq-len 16, byte vocabulary). */
#include "interop/weights.h"
#include "testlib.h"
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

static int write_nan_ckpt(const char *dir, mt_error *e) {
    mt_model_config c = {.n_layer = 1, .n_embd = 16, .n_head = 2, .vocab_size = 256, .padded_vocab = 256,
                         .seq_len = 16, .dropout = 0};
    mt_weights w;
    mt_weights_alloc(&w, &c);
    const mt_tensor *t = NULL;
    float *lnf = mt_weights_tensor(&w, "ln_f.weight", &t);
    for (size_t i = 0; lnf && i < t->numel; i++) lnf[i] = 1.0f;
    if (lnf) lnf[3] = NAN;
    int rc = lnf ? mt_weights_to_ckpt(dir, &w, 0, e) : mt_errorf(e, "the GPT-2 layout has no ln_f.weight");
    mt_weights_free(&w);
    return rc;
}

int main(int argc, char **argv) {
    mt_error e = {{0}};
    if (argc > 1) {
        if (write_nan_ckpt(argv[1], &e)) {
            fprintf(stderr, "test_nonfinite_ckpt: %s\n", e.msg);
            return 1;
        }
        return 0;
    }
    char dir[] = "/tmp/test_nonfinite_ckpt_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    CHECK(write_nan_ckpt(dir, &e) == 0, "%s", e.msg);
    mt_ckpt *ck = mt_ckpt_open(dir, &e);
    CHECK(ck != NULL, "%s", e.msg);
    if (ck) {
        mt_weights w;
        CHECK(mt_weights_from_ckpt(ck, &w, &e) == 0, "%s", e.msg);
        const mt_tensor *t = NULL;
        float *lnf = mt_weights_tensor(&w, "ln_f.weight", &t);
        CHECK(lnf && isnan(lnf[3]) && lnf[2] == 1.0f, "the NaN did not survive the round trip");
        mt_weights_free(&w);
        mt_ckpt_close(ck);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    TEST_MAIN_END("test_nonfinite_ckpt");
}
