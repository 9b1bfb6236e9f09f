/* GPT-2 tokenizer files (data/bpe.h): encoder.json and vocab.bpe, split at
 * the input's first NUL byte, loaded as `tokenize --vocab-dir` does and used
 * on a short text. */
#include "data/bpe.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *z = memchr(data, 0, size);
    size_t a = z ? (size_t)(z - data) : size;
    fuzz_file("encoder.json", data, a);
    fuzz_file("vocab.bpe", z ? z + 1 : data + size, z ? size - a - 1 : 0);
    mt_error err = {{0}};
    mt_bpe *b = mt_bpe_load(fuzz_dir(), &err);
    if (b) {
        static const char text[] = "Hello world, it's 2026!\n  \xc3\xa9t\xc3\xa9 ok";
        mt_tokens t = {0};
        (void)mt_bpe_encode(b, (const unsigned char *)text, sizeof text - 1, &t, &err);
        mt_tokens_free(&t);
        mt_bpe_free(b);
    }
    return 0;
}
