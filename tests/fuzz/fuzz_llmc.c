/* llm.c model files (interop/llmc.h), imported as `meshtrain import --format llmc` does. */
#include "interop/llmc.h"
#include "interop/weights.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_file("model.bin", data, size);
    mt_error err = {{0}};
    mt_weights w;
    /* heads 0: from the file's header, as import without --heads (a fixed count would stop every input
     * whose header names another one at that check: the seed's 2 heads reached nothing deeper) */
    if (mt_llmc_import(p, 0, &w, &err) == 0) mt_weights_free(&w);
    return 0;
}
