/* Where the time of a training step goes, without the trainer: the model's
 * forward and backward with the profile on, then the gradient norm and the
 * AdamW update of every unit (timed as "optimizer"), on random tokens.
 * Prints the mean per-step table over the measured steps (the first `warm`
 * steps are dropped).
 *
 * usage: model_profile L C H V B T [steps] [warm]    (OMP_NUM_THREADS threads) */
#include "models/model.h"
#include "ops/ops.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int parse_pos(const char *s, const char *what) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v <= 0 || v > 1 << 30) {
        fprintf(stderr, "model_profile: %s must be a positive integer, got '%s'\n", what, s);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv) {
    if (argc < 7 || argc > 9) {
        fprintf(stderr, "usage: model_profile L C H V B T [steps] [warm]\n");
        return 2;
    }
    mt_model_config cfg = {0};
    cfg.n_layer = parse_pos(argv[1], "L");
    cfg.n_embd = parse_pos(argv[2], "C");
    cfg.n_head = parse_pos(argv[3], "H");
    cfg.vocab_size = parse_pos(argv[4], "V");
    cfg.padded_vocab = mt_pad_vocab(cfg.vocab_size);
    int B = parse_pos(argv[5], "B"), T = parse_pos(argv[6], "T");
    cfg.seq_len = T;
    int steps = argc > 7 ? parse_pos(argv[7], "steps") : 5, warm = argc > 8 ? atoi(argv[8]) : 1;
    mt_error err;
    if (mt_model_config_validate(&cfg, &err)) {
        fprintf(stderr, "model_profile: %s\n", err.msg);
        return 2;
    }
    mt_mem mem = {0};
    mt_model m;
    mt_model_create(&m, &cfg, B, T, 1337, &mem);
    mt_profile prof;
    mt_profile_init(&prof);
    int nu = m.layout.n_units;
    float **mom = mt_xcalloc((size_t)nu * 2, sizeof(float *), "moment table");
    for (int u = 0; u < nu; u++)
        for (int k = 0; k < 2; k++)
            mom[2 * u + k] = mt_mem_alloc(&mem, MT_MEM_OPTIM, m.layout.units[u].numel * sizeof(float), "moments");
    uint64_t rng = 42;
    for (int s = 0; s < steps + warm; s++) {
        for (int i = 0; i < B * T; i++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            m.acts.tokens[i] = (int32_t)((rng >> 33) % (uint64_t)cfg.vocab_size);
            m.acts.targets[i] = (int32_t)((rng >> 13) % (uint64_t)cfg.vocab_size);
        }
        for (int b = 0; b < B; b++) m.acts.sample_ids[b] = (uint64_t)s * B + b;
        m.prof = s >= warm ? &prof : NULL;
        double t0 = mt_profile_now();
        double t = mt_prof_begin(m.prof);
        mt_model_zero_grads(&m);
        mt_prof_end(m.prof, MT_PROF_OPTIMIZER, t);
        mt_fwd_ctx fc = {1, (uint32_t)s};
        mt_model_forward(&m, &fc, 1.0f / (float)(B * T));
        mt_model_backward(&m, &fc);
        t = mt_prof_begin(m.prof);
        double ss = 0.0;
        for (int u = 0; u < nu; u++) ss += op_sumsq(m.grads[u], m.layout.units[u].numel);
        float coef = ss > 1.0 ? (float)(1.0 / sqrt(ss)) : 1.0f;
        for (int u = 0; u < nu; u++)
            op_adamw_update(m.params[u], m.grads[u], mom[2 * u], mom[2 * u + 1], m.layout.units[u].numel, 3e-4f, 0.9f,
                            0.95f, 1e-8f, 0.1f, s + 1, coef);
        mt_prof_end(m.prof, MT_PROF_OPTIMIZER, t);
        if (m.prof) mt_profile_end_step(&prof, s + 1, mt_profile_now() - t0);
    }
    mt_profile_print_summary(&prof, stdout);
    if (mt_profile_write_json(&prof, stdout, 1, &err)) fprintf(stderr, "model_profile: %s\n", err.msg);
    return 0;
}
