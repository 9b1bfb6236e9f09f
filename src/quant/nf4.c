/* NF4 quantization, bit for bit bitsandbytes' reference quantize_4bit and
 * dequantize_4bit (see nf4.h for the format). Every step is one fp32
 * operation in the order bnb's PyTorch code does it, so that
 * tests/quant_ref.py reproduces every byte. */
#include "quant/nf4.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/dtype.h"

const float mt_nf4_code[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f,
};

/* create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8) as
 * PyTorch 1.13 (Debian) computes it: for i in 0..6, the 2^i means of
 * adjacent points of linspace(0.1, 1, 2^i + 1) in fp32 times +-10^(i-6),
 * plus 0 and 1, sorted. Hard-coded because the formula's fp32 linspace is
 * PyTorch's own (vectorized) kernel; hex literals are exact. */
const float mt_nf4_dynamic_map[256] = {
    -0x1.fc6666p-1f, -0x1.f53332p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f,
    -0x1.df9998p-1f, -0x1.d86666p-1f, -0x1.d13334p-1f, -0x1.cap-1f,
    -0x1.c2ccccp-1f, -0x1.bb9998p-1f, -0x1.b46666p-1f, -0x1.ad3332p-1f,
    -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.979998p-1f, -0x1.906666p-1f,
    -0x1.893334p-1f, -0x1.82p-1f, -0x1.7acccep-1f, -0x1.73999ap-1f,
    -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56cccep-1f,
    -0x1.4f999ap-1f, -0x1.486666p-1f, -0x1.413334p-1f, -0x1.3ap-1f,
    -0x1.32ccccp-1f, -0x1.2b999ap-1f, -0x1.246668p-1f, -0x1.1d3334p-1f,
    -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.07999ap-1f, -0x1.006666p-1f,
    -0x1.f26668p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f,
    -0x1.b8ccccp-2f, -0x1.aa6664p-2f, -0x1.9cp-2f, -0x1.8d9998p-2f,
    -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626664p-2f, -0x1.54p-2f,
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f,
    -0x1.0cp-2f, -0x1.fb3334p-3f, -0x1.de6668p-3f, -0x1.c1999ap-3f,
    -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3332p-3f, -0x1.4e6666p-3f,
    -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f,
    -0x1.93d70ap-4f, -0x1.8851eap-4f, -0x1.7ccccep-4f, -0x1.7147aep-4f,
    -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb85p-4f, -0x1.433334p-4f,
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f,
    -0x1.09999ap-4f, -0x1.fc28f4p-5f, -0x1.e51ebap-5f, -0x1.ce147ap-5f,
    -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f,
    -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c28ep-5f,
    -0x1.fd70a4p-6f, -0x1.cf5c26p-6f, -0x1.a147aep-6f, -0x1.733334p-6f,
    -0x1.451eb8p-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f,
    -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f,
    -0x1.e978d4p-8f, -0x1.c49ba6p-8f, -0x1.9fbe76p-8f, -0x1.7ae148p-8f,
    -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f,
    -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f,
    -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f, -0x1.3dd982p-11f,
    -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f,
    -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0.0f,
    0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f,
    0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f,
    0x1.19ce0ap-12f, 0x1.8fc506p-12f, 0x1.02de02p-11f, 0x1.3dd982p-11f,
    0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f,
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f,
    0x1.0c49bap-8f, 0x1.3126e8p-8f, 0x1.56041ap-8f, 0x1.7ae148p-8f,
    0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f,
    0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f,
    0x1.d1eb86p-7f, 0x1.170a3ep-6f, 0x1.451eb8p-6f, 0x1.733334p-6f,
    0x1.a147aep-6f, 0x1.cf5c26p-6f, 0x1.fd70a4p-6f, 0x1.15c28ep-5f,
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f,
    0x1.88f5c2p-5f, 0x1.ap-5f, 0x1.b70a3ep-5f, 0x1.ce147ap-5f,
    0x1.e51ebap-5f, 0x1.fc28f4p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f,
    0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f,
    0x1.4eb85p-4f, 0x1.5a3d7p-4f, 0x1.65c29p-4f, 0x1.7147aep-4f,
    0x1.7ccccep-4f, 0x1.8851eap-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f,
    0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f,
    0x1.6b3332p-3f, 0x1.88p-3f, 0x1.a4ccccp-3f, 0x1.c1999ap-3f,
    0x1.de6668p-3f, 0x1.fb3334p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f,
    0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f,
    0x1.626664p-2f, 0x1.70ccccp-2f, 0x1.7f3334p-2f, 0x1.8d9998p-2f,
    0x1.9cp-2f, 0x1.aa6664p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f,
    0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26668p-2f, 0x1.006666p-1f,
    0x1.07999ap-1f, 0x1.0eccccp-1f, 0x1.16p-1f, 0x1.1d3334p-1f,
    0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f,
    0x1.413334p-1f, 0x1.486666p-1f, 0x1.4f999ap-1f, 0x1.56cccep-1f,
    0x1.5ep-1f, 0x1.653334p-1f, 0x1.6c6668p-1f, 0x1.73999ap-1f,
    0x1.7acccep-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f,
    0x1.979998p-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3332p-1f,
    0x1.b46666p-1f, 0x1.bb9998p-1f, 0x1.c2ccccp-1f, 0x1.cap-1f,
    0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df9998p-1f, 0x1.e6ccccp-1f,
    0x1.eep-1f, 0x1.f53332p-1f, 0x1.fc6666p-1f, 0x1.0p+0f,
};

/* bnb clamps the divisor to 1e-38 (a double, rounded to fp32 by clamp) */
#define MT_NF4_MIN_ABSMAX ((float)1e-38)

/* Index of the nearest value of the sorted map: the number of midpoints
 * strictly below x (torch.bucketize with right=False), so a value on a
 * midpoint takes the lower code. */
static inline uint8_t nearest_code(float x, const float *mids, int nmids) {
    if (nmids <= 15) { /* NF4: a branchless count the compiler vectorizes */
        int k = 0;
        for (int i = 0; i < nmids; i++) k += mids[i] < x;
        return (uint8_t)k;
    }
    int lo = 0, hi = nmids; /* first midpoint >= x lies in [lo, hi] */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (mids[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return (uint8_t)lo;
}

static void midpoints(const float *map, int nmap, float *mids) {
    for (int i = 0; i + 1 < nmap; i++) mids[i] = (map[i] + map[i + 1]) / 2.0f;
}

/* One block of len values; `tail` is the short last block, which bnb scales
 * by a division and whose stored absmax is the clamped one. */
static float quantize_block(const float *x, int64_t len, int tail, const float *mids, int nmids, uint8_t *codes) {
    float am = 0.0f;
    for (int64_t i = 0; i < len; i++) am = fmaxf(am, fabsf(x[i]));
    float clamped = fmaxf(am, MT_NF4_MIN_ABSMAX);
    if (tail) {
        for (int64_t i = 0; i < len; i++) codes[i] = nearest_code(fminf(fmaxf(x[i] / clamped, -1.0f), 1.0f), mids, nmids);
        return clamped;
    }
    float inv = 1.0f / clamped;
    for (int64_t i = 0; i < len; i++) codes[i] = nearest_code(fminf(fmaxf(x[i] * inv, -1.0f), 1.0f), mids, nmids);
    return am;
}

void mt_nf4_quantize_blockwise(const float *x, int64_t n, int64_t block, const float *map, int nmap,
                               uint8_t *codes, float *absmax) {
    float mids[255];
    midpoints(map, nmap, mids);
    int64_t full = n / block;
    for (int64_t b = 0; b * block < n; b++) {
        int64_t len = b < full ? block : n - b * block;
        absmax[b] = quantize_block(x + b * block, len, b >= full, mids, nmap - 1, codes + b * block);
    }
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void mt_nf4_free(mt_nf4 *q) {
    free(q->packed);
    free(q->absmax);
    free(q->absmax_code);
    free(q->nested_absmax);
    memset(q, 0, sizeof *q);
}

int mt_nf4_init(mt_nf4 *q, const float *w, int64_t rows, int64_t cols, int double_quant, mt_error *err) {
    memset(q, 0, sizeof *q);
    if (rows < 1 || cols < 1) return mt_errorf(err, "nf4: bad shape [%lld, %lld]", (long long)rows, (long long)cols);
    int64_t n = rows * cols;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(w[i]))
            return mt_errorf(err, "nf4: element %lld (row %lld, column %lld) is %s; only finite weights can be quantized",
                             (long long)i, (long long)(i / cols), (long long)(i % cols),
                             isnan(w[i]) ? "nan" : w[i] > 0 ? "+inf" : "-inf");
    q->rows = rows;
    q->cols = cols;
    q->n = n;
    q->nblocks = ceil_div(n, MT_NF4_BLOCK);
    q->double_quant = double_quant != 0;
    q->quant_map = mt_nf4_code;
    q->nested_quant_map = mt_nf4_dynamic_map;
    q->packed = mt_xcalloc((size_t)((n + 1) / 2), 1, "nf4 codes");
    float *absmax = mt_xmalloc((size_t)q->nblocks * sizeof *absmax, "nf4 absmax");

    float mids[15];
    midpoints(mt_nf4_code, 16, mids);
    int64_t full = n / MT_NF4_BLOCK;
    uint8_t codes[MT_NF4_BLOCK];
    for (int64_t b = 0; b < q->nblocks; b++) {
        int64_t start = b * MT_NF4_BLOCK, len = b < full ? MT_NF4_BLOCK : n - start;
        absmax[b] = quantize_block(w + start, len, b >= full, mids, 15, codes);
        /* blocks start at even elements: byte start/2 onwards */
        uint8_t *p = q->packed + start / 2;
        for (int64_t i = 0; i < len; i++) p[i / 2] |= (uint8_t)(i % 2 ? codes[i] : codes[i] << 4);
    }
    if (!q->double_quant) {
        q->absmax = absmax;
        return 0;
    }
    /* torch's fp32 mean sums in its own (vectorized, cascaded) order; a
     * sequential double sum is exact enough that both agree nearly always,
     * and unlike torch's it is reproducible in any language */
    double sum = 0.0;
    for (int64_t b = 0; b < q->nblocks; b++) sum += (double)absmax[b];
    q->offset = (float)(sum / (double)q->nblocks);
    for (int64_t b = 0; b < q->nblocks; b++) absmax[b] = absmax[b] - q->offset; /* in place: fp32 as bnb */
    q->nnested = ceil_div(q->nblocks, MT_NF4_NESTED_BLOCK);
    q->absmax_code = mt_xmalloc((size_t)q->nblocks, "nf4 absmax codes");
    q->nested_absmax = mt_xmalloc((size_t)q->nnested * sizeof *q->nested_absmax, "nf4 nested absmax");
    mt_nf4_quantize_blockwise(absmax, q->nblocks, MT_NF4_NESTED_BLOCK, mt_nf4_dynamic_map, 256, q->absmax_code,
                              q->nested_absmax);
    free(absmax);
    return 0;
}

size_t mt_nf4_bytes(const mt_nf4 *q) {
    size_t b = (size_t)((q->n + 1) / 2);
    if (q->double_quant) b += (size_t)q->nblocks + (size_t)q->nnested * sizeof(float) + sizeof(float);
    else b += (size_t)q->nblocks * sizeof(float);
    return b;
}

float mt_nf4_block_absmax(const mt_nf4 *q, int64_t b) {
    if (!q->double_quant) return q->absmax[b];
    float v = q->nested_quant_map[q->absmax_code[b]] * q->nested_absmax[b / MT_NF4_NESTED_BLOCK];
    return v + q->offset;
}

/* Elements [e0, e0 + len) of the flattened matrix, block by block: the
 * 16 products code * absmax once per block (the same fp32 products), then
 * two lookups per byte. */
static void dequant_span(const mt_nf4 *q, int64_t e0, int64_t len, float *out) {
    int64_t e = e0, end = e0 + len;
    while (e < end) {
        int64_t b = e / MT_NF4_BLOCK, stop = (b + 1) * MT_NF4_BLOCK < end ? (b + 1) * MT_NF4_BLOCK : end;
        float am = mt_nf4_block_absmax(q, b), v[16];
        for (int k = 0; k < 16; k++) v[k] = q->quant_map[k] * am;
        const uint8_t *p = q->packed;
        if (e % 2 && e < stop) *out++ = v[p[e++ / 2] & 0xF]; /* a row starting on a low nibble */
        for (; e + 1 < stop; e += 2) {
            uint8_t byte = p[e / 2];
            out[0] = v[byte >> 4];
            out[1] = v[byte & 0xF];
            out += 2;
        }
        if (e < stop) *out++ = v[p[e++ / 2] >> 4]; /* ends on a high nibble */
    }
}

void mt_nf4_dequant_rows(const mt_nf4 *q, int64_t row0, int64_t nrows, int64_t cols, float *out) {
    if (row0 < 0 || nrows < 0 || row0 + nrows > q->rows || cols < q->cols)
        mt_die("mt_nf4_dequant_rows: rows [%lld, +%lld) stride %lld of a [%lld, %lld] matrix", (long long)row0,
               (long long)nrows, (long long)cols, (long long)q->rows, (long long)q->cols);
    for (int64_t r = 0; r < nrows; r++) dequant_span(q, (row0 + r) * q->cols, q->cols, out + r * cols);
}

void mt_nf4_dequant_rows_bf16(const mt_nf4 *q, int64_t row0, int64_t nrows, int64_t cols, uint16_t *out) {
    if (row0 < 0 || nrows < 0 || row0 + nrows > q->rows || cols < q->cols)
        mt_die("mt_nf4_dequant_rows_bf16: rows [%lld, +%lld) stride %lld of a [%lld, %lld] matrix", (long long)row0,
               (long long)nrows, (long long)cols, (long long)q->rows, (long long)q->cols);
    float buf[MT_NF4_BLOCK]; /* a block-sized piece at a time: no allocation */
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t c = 0; c < q->cols; c += MT_NF4_BLOCK) {
            int64_t len = q->cols - c < MT_NF4_BLOCK ? q->cols - c : MT_NF4_BLOCK;
            dequant_span(q, (row0 + r) * q->cols + c, len, buf);
            for (int64_t i = 0; i < len; i++) out[r * cols + c + i] = mt_fp32_to_bf16(buf[i]);
        }
}

void mt_nf4_dequant(const mt_nf4 *q, float *out) { mt_nf4_dequant_rows(q, 0, q->rows, q->cols, out); }
