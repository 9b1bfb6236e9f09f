/* interop/gguf: the block formats against values worked out by hand from
 * the format's definition, and the file layout (header, metadata, tensor
 * descriptions, 32-byte aligned data) read back field by field. The
 * equality with llama.cpp's own quantizer and loader is tests/check_gguf.sh
 * (K-quants: tests/check_gguf_kquants.sh). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/dtype.h"
#include "interop/gguf.h"

static int fails = 0;
#define CHECK(c, ...)                 \
    do {                              \
        if (!(c)) {                   \
            printf("FAIL: " __VA_ARGS__); \
            printf("\n");             \
            fails++;                  \
        }                             \
    } while (0)

static void block_formats(void) {
    float x[32], y[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16); /* -16 .. 15 */
    /* q8_0: d = amax / 127 = 16/127 as f16; q = round(x * 127/16) */
    unsigned char q8[34];
    mt_gguf_encode(MT_GGUF_Q8_0, x, 32, q8);
    mt_fp16 h;
    memcpy(&h, q8, 2);
    CHECK(h == mt_fp32_to_fp16(16.0f / 127.0f), "q8_0 scale %04x", h);
    CHECK((int8_t)q8[2] == -127 && (int8_t)q8[2 + 16] == 0 && (int8_t)q8[2 + 31] == (int8_t)roundf(15.0f * 127.0f / 16.0f),
          "q8_0 values %d %d %d", (int8_t)q8[2], (int8_t)q8[18], (int8_t)q8[33]);
    mt_gguf_decode(MT_GGUF_Q8_0, q8, 32, y);
    for (int j = 0; j < 32; j++) CHECK(fabsf(y[j] - x[j]) <= 16.0f / 127.0f * 0.51f, "q8_0 value %d: %g for %g", j, y[j], x[j]);
    /* q4_0: the largest magnitude is -16, d = -16 / -8 = 2; q = min(15, trunc(x / 2 + 8.5)):
     * x = -16 -> 0, x = 0 -> 8, x = 15 -> min(15, 16) = 15; element j in the low nibble of
     * byte j, element j + 16 in its high nibble */
    unsigned char q4[18];
    mt_gguf_encode(MT_GGUF_Q4_0, x, 32, q4);
    memcpy(&h, q4, 2);
    CHECK(h == mt_fp32_to_fp16(2.0f), "q4_0 scale %04x", h);
    CHECK((q4[2] & 15) == 0 && (q4[2] >> 4) == 8 && (q4[2 + 15] >> 4) == 15 && (q4[2 + 1] & 15) == 1,
          "q4_0 nibbles %02x %02x %02x", q4[2], q4[3], q4[17]);
    mt_gguf_decode(MT_GGUF_Q4_0, q4, 32, y);
    CHECK(y[0] == -16.0f && y[16] == 0.0f && y[31] == 14.0f && y[1] == -14.0f, "q4_0 decode %g %g %g %g", y[0], y[16],
          y[31], y[1]);
    /* an all-zero block: scale 0, every value 0 (no division by zero) */
    float z[32] = {0};
    mt_gguf_encode(MT_GGUF_Q4_0, z, 32, q4);
    mt_gguf_decode(MT_GGUF_Q4_0, q4, 32, y);
    for (int j = 0; j < 32; j++) CHECK(y[j] == 0.0f, "q4_0 zero block %d: %g", j, y[j]);
    CHECK(mt_gguf_block_bytes(MT_GGUF_Q8_0) == 34 && mt_gguf_block_bytes(MT_GGUF_Q4_0) == 18, "block sizes");
}

/* K-quants: the sizes, a zero super-block, and the round trip of 1024
 * seeded values (their exactness is llama.cpp's quantizer's bytes,
 * tests/check_gguf_kquants.sh): RMS error within 2.5% (q6_k) and 9% (q4_k)
 * of the values' RMS -- a uniform grid's step / sqrt(12), the step about
 * 2 amax / 63 of a 16-value sub-block (q6_k) or (max - min) / 15 of a
 * 32-value one (q4_k), amax ~ 2.3 sigma for these values. */
static void k_quants(void) {
    CHECK(mt_gguf_block_size(MT_GGUF_Q4_K) == 256 && mt_gguf_block_bytes(MT_GGUF_Q4_K) == 144 &&
              mt_gguf_block_size(MT_GGUF_Q6_K) == 256 && mt_gguf_block_bytes(MT_GGUF_Q6_K) == 210,
          "k-quant block sizes");
    enum { N = 1024 };
    static float x[N], y[N];
    static unsigned char q[N / 256 * 210];
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) { /* sums of uniforms: roughly normal, some blocks shifted */
        float v = 0;
        for (int k = 0; k < 4; k++) {
            s = s * 1664525u + 1013904223u;
            v += (float)(s >> 8) / 16777216.0f - 0.5f;
        }
        x[i] = v * (i < 512 ? 0.02f : 3.0f) + (i >= 768 ? 0.5f : 0.0f);
    }
    const mt_gguf_type types[2] = {MT_GGUF_Q6_K, MT_GGUF_Q4_K};
    const double bound[2] = {0.025, 0.09};
    for (int t = 0; t < 2; t++) {
        mt_gguf_encode(types[t], x, N, q);
        mt_gguf_decode(types[t], q, N, y);
        for (int b = 0; b < N / 256; b++) {
            double e2 = 0, x2 = 0;
            for (int i = 256 * b; i < 256 * (b + 1); i++) e2 += (double)(y[i] - x[i]) * (y[i] - x[i]), x2 += (double)x[i] * x[i];
            CHECK(sqrt(e2 / x2) < bound[t], "%s block %d: relative RMS error %.4f (bound %.2f)", mt_gguf_type_name(types[t]),
                  b, sqrt(e2 / x2), bound[t]);
        }
        float z[256] = {0};
        mt_gguf_encode(types[t], z, 256, q);
        mt_gguf_decode(types[t], q, 256, y);
        int nz = 0;
        for (int i = 0; i < 256; i++) nz += y[i] != 0.0f;
        CHECK(nz == 0, "%s: a zero block decodes to %d non-zeros", mt_gguf_type_name(types[t]), nz);
    }
}

static uint64_t u64_at(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static uint32_t u32_at(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void file_layout(void) {
    char path[] = "/tmp/test_gguf_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        printf("FAIL: mkstemp\n");
        fails++;
        return;
    }
    close(fd);
    mt_gguf_writer *w = mt_gguf_writer_new();
    mt_gguf_kv_string(w, "general.architecture", "llama");
    mt_gguf_kv_u32(w, "llama.block_count", 7);
    float a[3] = {1, 2, 3}, b[64];
    for (int i = 0; i < 64; i++) b[i] = (float)i / 8;
    int64_t nea[1] = {3}, neb[2] = {32, 2}, bad[2] = {48, 1};
    mt_error err = {{0}};
    CHECK(!mt_gguf_add_tensor(w, "a", 1, nea, MT_GGUF_F32, a, &err), "add a: %s", err.msg);
    CHECK(!mt_gguf_add_tensor(w, "b", 2, neb, MT_GGUF_Q8_0, b, &err), "add b: %s", err.msg);
    CHECK(mt_gguf_add_tensor(w, "c", 2, bad, MT_GGUF_Q4_0, b, &err) && strstr(err.msg, "multiple of 32"),
          "rows of 48 refused for q4_0: %s", err.msg);
    CHECK(!mt_gguf_write(w, path, &err), "write: %s", err.msg);
    mt_gguf_writer_free(w);
    FILE *f = fopen(path, "rb");
    unsigned char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    unlink(path);
    CHECK(n > 24 && !memcmp(buf, "GGUF", 4) && u32_at(buf + 4) == 3 && u64_at(buf + 8) == 2 && u64_at(buf + 16) == 2,
          "header");
    size_t o = 24;
    /* key "general.architecture", type 8 (string), "llama" */
    CHECK(u64_at(buf + o) == 20 && !memcmp(buf + o + 8, "general.architecture", 20) && u32_at(buf + o + 28) == 8 &&
              u64_at(buf + o + 32) == 5 && !memcmp(buf + o + 40, "llama", 5), "string key");
    o += 45;
    CHECK(u64_at(buf + o) == 17 && u32_at(buf + o + 25) == 4 && u32_at(buf + o + 29) == 7, "u32 key");
    o += 33;
    /* tensor a: name, 1 dim {3}, F32, offset 0; tensor b: 2 dims {32, 2}, Q8_0, offset 32 (12 bytes aligned up) */
    CHECK(u64_at(buf + o) == 1 && buf[o + 8] == 'a' && u32_at(buf + o + 9) == 1 && u64_at(buf + o + 13) == 3 &&
              u32_at(buf + o + 21) == 0 && u64_at(buf + o + 25) == 0, "tensor a");
    o += 33;
    CHECK(u64_at(buf + o) == 1 && buf[o + 8] == 'b' && u32_at(buf + o + 9) == 2 && u64_at(buf + o + 13) == 32 &&
              u64_at(buf + o + 21) == 2 && u32_at(buf + o + 29) == 8 && u64_at(buf + o + 33) == 32, "tensor b");
    o += 41;
    size_t data = (o + 31) / 32 * 32;
    CHECK(n == data + 32 + 2 * 34 + (32 - 2 * 34 % 32), "file size %zu (data at %zu)", n, data);
    float a0[3];
    memcpy(a0, buf + data, 12);
    CHECK(a0[0] == 1 && a0[2] == 3, "tensor a's data");
    unsigned char q[68];
    mt_gguf_encode(MT_GGUF_Q8_0, b, 64, q);
    CHECK(!memcmp(buf + data + 32, q, 68), "tensor b's blocks");
    /* a file that cannot be written: an error, nothing left */
    w = mt_gguf_writer_new();
    CHECK(mt_gguf_write(w, "/nonexistent-dir/x.gguf", &err) && strstr(err.msg, "/nonexistent-dir"), "unwritable: %s",
          err.msg);
    mt_gguf_writer_free(w);
}

int main(void) {
    block_formats();
    k_quants();
    file_layout();
    if (fails) return 1;
    printf("gguf: block formats and file layout ok\n");
    return 0;
}
