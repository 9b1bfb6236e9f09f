/* A Hugging Face model directory's config.json (interop/hf_model.h): family,
 * the family's config reader, validation and the layout it implies, against
 * a weights file with no tensors (so the import stops at the first missing
 * tensor, after the config has been fully read). */
#include "interop/hf_model.h"
#include "interop/weights.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char empty[] = "\x02\0\0\0\0\0\0\0{}";
    fuzz_file("model.safetensors", empty, sizeof empty - 1);
    fuzz_file("config.json", data, size);
    mt_error err = {{0}};
    mt_weights w;
    if (mt_hf_import(fuzz_dir(), &w, &err) == 0) mt_weights_free(&w);
    return 0;
}
