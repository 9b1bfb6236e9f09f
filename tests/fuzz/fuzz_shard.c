/* Token shards (data/shard.h): the 1024-byte llm.c header and the tokens, read as train does. */
#include "data/shard.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_file("shard.bin", data, size);
    mt_error err = {{0}};
    uint32_t *tok = NULL, mx = 0;
    size_t n = 0;
    if (mt_shard_read(p, &tok, &n, &mx, &err) == 0) free(tok);
    mt_shard s;
    memset(&s, 0, sizeof s);
    if (mt_shard_open(&s, p, &err) == 0) mt_shard_close(&s);
    return 0;
}
