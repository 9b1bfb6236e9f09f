/* tokenizer.json (data/bpe.h mt_bpe_load_hf): loaded as `tokenize
 * --tokenizer hf:PATH` does and used on a short text. */
#include "data/bpe.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_file("tokenizer.json", data, size);
    mt_error err = {{0}};
    mt_bpe *b = mt_bpe_load_hf(p, &err);
    if (b) {
        static const char text[] = "Hello world, it's 2026!\n  \xc3\xa9t\xc3\xa9 <|endoftext|> ok";
        mt_tokens t = {0};
        (void)mt_bpe_encode(b, (const unsigned char *)text, sizeof text - 1, &t, &err);
        mt_tokens_free(&t);
        mt_bpe_free(b);
    }
    return 0;
}
