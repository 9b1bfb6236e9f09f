/* NF4 weight storage as bitsandbytes' quantize_4bit(quant_type="nf4",
 * blocksize=64) does it (QLoRA, Dettmers et al. 2023), for frozen bases.
 *   Blocks of 64 over the flattened row-major fp32 weight (the last block
 *   may be short: the tail). absmax[b] = max |w| over block b (fp32).
 *   A full block scales by w * (1 / max(absmax, 1e-38)); the tail by
 *   w / max(absmax, 1e-38) and stores the clamped absmax (bnb's reference
 *   does exactly this, so an all-zero tail stores fp32(1e-38), not 0).
 *   Code = index of the nearest of the 16 NF4 values (mt_nf4_code): the
 *   number of midpoints (fp32 (c[i] + c[i+1]) / 2) strictly below the
 *   scaled value, so a tie goes to the lower code; 0 -> index 7 (0.0).
 *   Packing: element 2i in the high nibble of byte i, 2i+1 in the low one
 *   (an odd count leaves the last low nibble 0); ceil(n/2) bytes, which
 *   bnb/transformers store as `weight` uint8 [ceil(n/2), 1].
 *   Double quant (bnb compress_statistics=True): offset = mean of absmax
 *   (a sequential double sum / nblocks, rounded to fp32), absmax - offset
 *   quantized blockwise in blocks of 256 against the 8-bit signed dynamic
 *   map (mt_nf4_dynamic_map) with the same full/tail rules: uint8 codes
 *   (`weight.absmax`), fp32 nested absmax per 256 blocks, fp32 offset.
 *   4 + 8/64 + 32/(64*256) + 32/n ~ 4.127 bits per parameter.
 *   Value = code_value * absmax_b in fp32, where with double quant
 *   absmax_b = dyn[acode[b]] * nested_absmax[b/256] + offset (fp32, in
 *   that order): bnb's dequantize_4bit, bit for bit.
 * tests/quant_ref.py re-implements all of it in PyTorch (check_quant_bnb). */
#ifndef MT_QUANT_NF4_H
#define MT_QUANT_NF4_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

#define MT_NF4_BLOCK 64         /* weights per absmax */
#define MT_NF4_NESTED_BLOCK 256 /* absmaxes per nested absmax (double quant) */

/* The 16 NF4 values exactly as bitsandbytes publishes them (get_4bit_type). */
extern const float mt_nf4_code[16];
/* bitsandbytes' create_dynamic_map(signed=True): 256 sorted fp32 values in
 * [-0.99296875, 1], as the Python formula gives them under the tests'
 * PyTorch. Other PyTorch builds' linspace differs by 1-2 ulp in a few
 * dozen entries, which is why bnb files carry their own nested_quant_map. */
extern const float mt_nf4_dynamic_map[256];

typedef struct {
    int64_t rows, cols, n;     /* the original [rows, cols] fp32 matrix, n = rows * cols */
    int64_t nblocks;           /* ceil(n / 64) */
    int double_quant;
    uint8_t *packed;           /* ceil(n / 2) bytes of codes */
    float *absmax;             /* nblocks fp32 (NULL with double quant) */
    uint8_t *absmax_code;      /* nblocks 8-bit codes (double quant only) */
    int64_t nnested;           /* ceil(nblocks / 256) (double quant only) */
    float *nested_absmax;      /* nnested fp32 (double quant only) */
    float offset;              /* mean of the absmaxes (double quant only) */
    const float *quant_map;    /* 16 values: mt_nf4_code */
    const float *nested_quant_map; /* 256 values: mt_nf4_dynamic_map (an importer may
                                    * point this at a file's map it keeps alive) */
} mt_nf4;

/* Quantizes w [rows, cols] (row-major fp32) into q, which owns its arrays.
 * Rejects inf or NaN (the message names the element): returns -1 with q
 * left empty (safe to free). */
int mt_nf4_init(mt_nf4 *q, const float *w, int64_t rows, int64_t cols, int double_quant, mt_error *err);
void mt_nf4_free(mt_nf4 *q);
/* Bytes q stores per matrix: codes, absmax (fp32, or uint8 codes plus
 * nested fp32 absmax and the offset). The two maps are shared constants
 * (1088 bytes for all matrices) and not counted. */
size_t mt_nf4_bytes(const mt_nf4 *q);
/* Block b's absmax as dequantization uses it (through the nested
 * quantization when double_quant). */
float mt_nf4_block_absmax(const mt_nf4 *q, int64_t b);
/* Rows [row0, row0 + nrows) of the original matrix into out, row r at
 * out + (r - row0) * cols (cols >= q->cols: the tile's row stride). A row
 * may start mid-block. No allocation: what the GEMM calls a tile at a time. */
void mt_nf4_dequant_rows(const mt_nf4 *q, int64_t row0, int64_t nrows, int64_t cols, float *out);
/* The same values rounded to bf16 (round to nearest even). */
void mt_nf4_dequant_rows_bf16(const mt_nf4 *q, int64_t row0, int64_t nrows, int64_t cols, uint16_t *out);
/* The whole matrix, [rows, cols] contiguous. */
void mt_nf4_dequant(const mt_nf4 *q, float *out);

/* The blockwise quantizer both levels use (exposed for the tests): x[n]
 * in blocks of `block`, codes against the sorted `map` of `nmap` values,
 * fp32 absmax per block with bnb's full/tail rules (see above). */
void mt_nf4_quantize_blockwise(const float *x, int64_t n, int64_t block, const float *map, int nmap,
                               uint8_t *codes, float *absmax);

#endif
