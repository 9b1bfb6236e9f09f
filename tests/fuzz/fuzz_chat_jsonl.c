/* The instruction / chat JSONL that `tokenize --format jsonl` reads
 * (data/chat_data.h), through the same entry point, with the byte
 * tokenizer. The first two input bytes choose the settings (template,
 * {train-on}, {packing}, {overlong}, {seq-len} 8..263); the rest is the
 * file. Whatever the file, the result is whole windows whose flags are
 * consistent (padding is never a counted target), or one error line. */
#include "data/chat_data.h"
#include "data/shard.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static mt_tokenizer *byte_tokenizer(void) {
    static mt_tokenizer *tk;
    if (!tk) {
        mt_error err = {{0}};
        tk = mt_tokenizer_open("byte", NULL, &err);
        if (!tk) abort();
    }
    return tk;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    mt_chat_data d;
    memset(&d, 0, sizeof d);
    d.tk = byte_tokenizer();
    d.has_template = (data[0] & 7) != 7;
    d.tpl = (mt_chat_template)((data[0] & 7) % MT_CHAT_COUNT);
    d.train_on = (mt_train_on)((data[0] >> 3) % 3);
    d.packing = (data[0] >> 5) & 1;
    d.overlong = (mt_overlong)((data[0] >> 6) % 3);
    d.seq_len = 8 + data[1];
    d.bos = -1;
    d.eos = mt_tokenizer_eot(d.tk);
    d.pad = d.eos >= 0 ? d.eos : 0;
    mt_error err = {{0}};
    int rc = mt_chat_data_add_jsonl(&d, "fuzz.jsonl", (const char *)data + 2, size - 2, &err);
    if (rc && !err.msg[0]) abort(); /* an error says why */
    if (!rc) {
        mt_chat_data_finish(&d);
        if (d.tokens.len != (size_t)d.windows * (size_t)d.seq_len) abort();
        if (d.tokens.len && !d.flags) abort();
        int64_t counted = 0, real = 0;
        for (size_t i = 0; i < d.tokens.len; i++) {
            uint8_t f = d.flags[i];
            if (f & ~(MT_TOK_LOSS | MT_TOK_DOC | MT_TOK_PAD)) abort();
            if ((f & MT_TOK_PAD) && (f & (MT_TOK_LOSS | MT_TOK_DOC))) abort();
            if (d.tokens.data[i] < 0 || d.tokens.data[i] >= mt_tokenizer_vocab_size(d.tk)) abort();
            counted += (f & MT_TOK_LOSS) != 0;
            real += !(f & MT_TOK_PAD);
        }
        if (real != d.sample_tokens || counted != d.counted) abort();
    }
    mt_chat_data_free(&d);
    return 0;
}
