/* safetensors (interop/safetensors.h): the header, every tensor read as fp32, and the GPT-2 import. */
#include "interop/safetensors.h"
#include "interop/weights.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_file("model.safetensors", data, size);
    mt_error err = {{0}};
    mt_st_file *f = mt_st_open(p, &err);
    if (f) {
        (void)mt_st_metadata(f);
        for (int i = 0; i < mt_st_count(f); i++) {
            const mt_st_entry *e = mt_st_entry_at(f, i);
            if (e->numel > (1u << 20)) continue; /* the fuzzer's memory limit, not the parser's */
            float *buf = malloc((e->numel ? e->numel : 1) * sizeof(float));
            if (!buf) abort();
            (void)mt_st_read_f32(f, e, buf, &err);
            free(buf);
        }
        mt_st_close(f);
    }
    mt_weights w;
    if (mt_safetensors_import_gpt2(p, 4, &w, &err) == 0) mt_weights_free(&w);
    return 0;
}
