/* A peft adapter directory's adapter_config.json (interop/peft.h): peft_type,
 * rank and scale, target and feedforward module lists, then the targets
 * checked against a small GPT-2 and a small Llama (the module-name matching
 * and the layout they imply). */
#include "models/family.h"
#include "interop/peft.h"
#include "fuzz_util.h"
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_file("adapter_config.json", data, size);
    mt_error err = {{0}};
    mt_adapter_spec s;
    if (mt_peft_read_config(fuzz_dir(), &s, &err)) return 0;
    for (int f = 0; f < 2; f++) {
        mt_model_config cfg;
        memset(&cfg, 0, sizeof cfg);
        mt_model_config_defaults(&cfg, f ? MT_FAMILY_LLAMA : MT_FAMILY_GPT2);
        cfg.n_layer = 1, cfg.n_embd = 16, cfg.n_head = 2, cfg.vocab_size = 32, cfg.padded_vocab = 128, cfg.seq_len = 8;
        if (f) cfg.n_kv_head = 1, cfg.head_dim = 8, cfg.ffn_dim = 32, cfg.max_pos = 8;
        cfg.adapters = s;
        if (mt_model_adapters_check(&cfg, &err) == 0) {
            mt_layout l;
            mt_model_layout_build(&cfg, 1, 0, &l);
            mt_layout_free(&l);
        }
    }
    return 0;
}
