/* Checkpoint manifests (ckpt/checkpoint.h), opened as eval/train --resume
 * do, every tensor's shape asked and its first elements read. A manifest
 * carries its own checksum, which random edits almost never keep, so when
 * the input's first byte is odd the rest is taken as the manifest body and
 * sealed with the right checksum first (as tests/ckpt_tamper.py does): the
 * fuzzer then reaches the structure checks behind it. One data file of a
 * fixed pattern sits beside it. */
#include <inttypes.h>
#include "ckpt/checkpoint.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    static uint8_t blob[65536];
    static int blob_written; /* the data file never changes: written once, not per input */
    if (!blob_written) {
        for (size_t i = 0; i < sizeof blob; i++) blob[i] = (uint8_t)(i * 131u);
        fuzz_file("tensors-000002-r00000.bin", blob, sizeof blob);
        blob_written = 1;
    }
    const char *body = (const char *)data + 1;
    size_t n = size - 1;
    if (data[0] & 1) {
        char *t = malloc(n + 64);
        if (!t) abort();
        memcpy(t, body, n);
        int k = snprintf(t + n, 64, ",\"manifest_checksum\":\"fnv1a64x4:%016" PRIx64 "\"}\n", mt_ckpt_checksum(body, n));
        fuzz_file("manifest.json", t, n + (size_t)k);
        free(t);
    } else {
        fuzz_file("manifest.json", body, n);
    }
    mt_error err = {{0}};
    mt_ckpt *ck = mt_ckpt_open_ex(fuzz_dir(), 0, &err);
    if (ck) {
        (void)mt_ckpt_state(ck);
        (void)mt_ckpt_verify_pieces(ck, &err);
        float buf[256];
        for (int i = 0; i < mt_ckpt_n_tensors(ck); i++) {
            const char *name = mt_ckpt_tensor_name(ck, i);
            size_t numel = 0;
            int64_t shape[MT_CKPT_MAX_DIM];
            if (!mt_ckpt_has(ck, name, &numel)) continue;
            (void)mt_ckpt_shape(ck, name, shape);
            (void)mt_ckpt_read(ck, name, 0, numel < 256 ? numel : 256, buf, &err);
        }
        mt_ckpt_close(ck);
    }
    return 0;
}
