/* The JSON reader (core/json.h): every config, manifest and tokenizer file goes through it. */
#include "core/json.h"
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mt_error err = {{0}};
    mt_json_doc *d = mt_json_parse((const char *)data, size, 64, &err);
    if (d) {
        const mt_json *r = mt_json_root(d);
        int64_t i;
        double x;
        const char *s;
        (void)mt_json_get_int64(r, "step", &i, NULL);
        (void)mt_json_get_double(r, "lr", &x, NULL);
        (void)mt_json_get_string(r, "model_type", &s, NULL);
        for (size_t k = 0; k < 4; k++) (void)mt_json_at(r, k);
        mt_json_free(d);
    }
    return 0;
}
