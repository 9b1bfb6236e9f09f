/* GGUF files (version 3, the format llama.cpp loads), written from the
 * specification (llama.cpp's docs/gguf.md): a header ("GGUF", version,
 * tensor count, key/value count), typed key/value metadata, tensor
 * descriptions (name, dimensions with ne[0] the fastest-varying, ggml type,
 * data offset), then the tensor data, each aligned to 32 bytes
 * (general.alignment's default). All little-endian.
 *
 * Tensor types: F32, F16, BF16 (rounded to nearest even, core/dtype.h) and
 * the block formats Q8_0 and Q4_0 of quant/ggml_blocks.h (the rounding of
 * ggml's reference quantizers, so a file equals what llama.cpp's own
 * quantizer writes for these types), and the K-quants Q4_K and Q6_K of
 * quant/ggml_kquants.h (ggml's reference search, equally byte-exact). A
 * block type needs rows (ne[0]) that are a multiple of its block: 32, and
 * 256 for the K-quants.
 *
 * The writer keeps the metadata in memory and the tensors as the caller's
 * fp32 values, encoding one tensor at a time while writing (memory: the
 * model once, plus one encoded tensor); the file is written under a
 * temporary name and renamed into place only when complete (no partial
 * file is ever left at the path). */
#ifndef MT_INTEROP_GGUF_H
#define MT_INTEROP_GGUF_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

/* ggml's type ids. */
typedef enum {
    MT_GGUF_F32 = 0,
    MT_GGUF_F16 = 1,
    MT_GGUF_Q4_0 = 2,
    MT_GGUF_Q8_0 = 8,
    MT_GGUF_Q4_K = 12,
    MT_GGUF_Q6_K = 14,
    MT_GGUF_BF16 = 30
} mt_gguf_type;

/* "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k" -> type; -1 for anything else. */
int mt_gguf_type_parse(const char *s, mt_gguf_type *t);
const char *mt_gguf_type_name(mt_gguf_type t);
/* Values per block (1 for the float types) and bytes per block. */
int mt_gguf_block_size(mt_gguf_type t);
size_t mt_gguf_block_bytes(mt_gguf_type t);
/* llama.cpp's general.file_type (enum llama_ftype) for a model whose large
 * matrices are t: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2, MOSTLY_Q8_0 7,
 * MOSTLY_BF16 32, MOSTLY_Q4_K_S 14 (for Q4_K), MOSTLY_Q6_K 18. */
uint32_t mt_gguf_file_type(mt_gguf_type t);

/* Encodes n values (a multiple of the block size) of x as t into out
 * (n / block * block_bytes bytes). */
void mt_gguf_encode(mt_gguf_type t, const float *x, size_t n, void *out);
/* The inverse (for tests and for comparing a quantized model). */
void mt_gguf_decode(mt_gguf_type t, const void *in, size_t n, float *x);

typedef struct mt_gguf_writer mt_gguf_writer;

mt_gguf_writer *mt_gguf_writer_new(void);
void mt_gguf_writer_free(mt_gguf_writer *w);

/* Metadata, in the order added (a key must not be added twice). */
void mt_gguf_kv_string(mt_gguf_writer *w, const char *key, const char *value);
void mt_gguf_kv_u32(mt_gguf_writer *w, const char *key, uint32_t value);
void mt_gguf_kv_i32(mt_gguf_writer *w, const char *key, int32_t value);
void mt_gguf_kv_f32(mt_gguf_writer *w, const char *key, float value);
void mt_gguf_kv_bool(mt_gguf_writer *w, const char *key, int value);
/* An array of n strings: s[i] of len[i] bytes (len NULL: NUL-terminated). */
void mt_gguf_kv_string_array(mt_gguf_writer *w, const char *key, size_t n, const char *const *s, const size_t *len);
void mt_gguf_kv_i32_array(mt_gguf_writer *w, const char *key, size_t n, const int32_t *v);
void mt_gguf_kv_f32_array(mt_gguf_writer *w, const char *key, size_t n, const float *v);

/* A tensor of ndim (1..4) dimensions ne[] (ne[0] fastest: a row-major
 * [rows, cols] matrix is ne = {cols, rows}) from fp32 data, stored as t.
 * data is borrowed: it must stay valid and unchanged until mt_gguf_write.
 * -1 with err when a block type does not divide ne[0]. */
int mt_gguf_add_tensor(mt_gguf_writer *w, const char *name, int ndim, const int64_t *ne, mt_gguf_type t,
                       const float *data, mt_error *err);
/* The same, the writer taking data (malloc'd) over: freed with the writer,
 * or at once on error. */
int mt_gguf_add_tensor_owned(mt_gguf_writer *w, const char *name, int ndim, const int64_t *ne, mt_gguf_type t,
                             float *data, mt_error *err);

/* Writes the file atomically (temporary name, fsync, rename). */
int mt_gguf_write(const mt_gguf_writer *w, const char *path, mt_error *err);

#endif
