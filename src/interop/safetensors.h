/* safetensors files (Hugging Face): an 8-byte little-endian header length N,
 * N bytes of JSON header {"name": {"dtype": "F32", "shape": [..],
 * "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}, then the
 * data section; offsets are relative to the data section's start.
 *
 * The reader validates everything before any data is used: header length vs
 * file size, JSON, dtypes, shapes, byte ranges matching numel x element size,
 * ranges tiling the data section exactly (no overlap, no gap, nothing past
 * the end), unique names. The writer writes F32, BF16 or F16 tensors
 * atomically (temp file, fsync, rename) with the header padded by spaces to
 * 8-byte alignment, as the reference serializer does.
 *
 * GPT-2 conversion uses Hugging Face names without prefix (wte.weight [V, C]
 * unpadded, wpe.weight, h.N.ln_1.weight, h.N.attn.c_attn.weight [C, 3C] (HF
 * Conv1D: the transpose of our [out, in]), ..., ln_f.bias). Import accepts a
 * "transformer." prefix, ignores lm_head.weight (tied to wte) and the
 * attn.bias / attn.masked_bias buffers, converts F32/F16/BF16 to fp32 and
 * zero-pads wte to mt_pad_vocab(V) rows. */
#ifndef MT_INTEROP_SAFETENSORS_H
#define MT_INTEROP_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>
#include "interop/weights.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/json.h"

#define MT_ST_MAX_DIM 8
#define MT_ST_MAX_HEADER ((uint64_t)100 << 20)

typedef struct {
    const char *name;  /* as in the header */
    const char *dtype; /* e.g. "F32", "BF16" */
    int elem_size;     /* bytes per element */
    int ndim;
    int64_t shape[MT_ST_MAX_DIM];
    uint64_t numel;
    uint64_t begin, end; /* byte range within the data section */
} mt_st_entry;

typedef struct mt_st_file mt_st_file;

/* Opens and fully validates a safetensors file (see above). */
mt_st_file *mt_st_open(const char *path, mt_error *err);
void mt_st_close(mt_st_file *f);
int mt_st_count(const mt_st_file *f);
const mt_st_entry *mt_st_entry_at(const mt_st_file *f, int i); /* header order */
const mt_st_entry *mt_st_find(const mt_st_file *f, const char *name);
/* The "__metadata__" object, or NULL. */
const mt_json *mt_st_metadata(const mt_st_file *f);
/* Reads a whole F32, F16 or BF16 tensor as fp32 into dst (numel floats). */
int mt_st_read_f32(const mt_st_file *f, const mt_st_entry *e, float *dst, mt_error *err);
/* Reads a whole tensor's bytes (numel * element size) into dst as stored,
 * refusing any dtype but `dtype` (e.g. "I32"). */
int mt_st_read_raw(const mt_st_file *f, const mt_st_entry *e, const char *dtype, void *dst, mt_error *err);

/* Writer: declares all tensors up front, then receives their data in
 * declaration order through any number of put calls. Header entries and
 * data follow the declaration order (data_offsets ascending and contiguous,
 * which is what readers require). */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[MT_ST_MAX_DIM];
    mt_dtype dtype; /* MT_FP32 (0, so zero-initialised specs stay F32), MT_BF16 or MT_FP16 */
    const char *raw_dtype; /* instead: any safetensors dtype ("U8", "I8", "I32", "F16", ...), its bytes written with
                              mt_st_writer_put_bytes */
} mt_st_spec;

typedef struct mt_st_writer mt_st_writer;
/* meta: n_meta key/value string pairs for "__metadata__" (meta[2i] = key). */
mt_st_writer *mt_st_writer_open(const char *path, const mt_st_spec *specs, int n, const char *const *meta, int n_meta,
                                mt_error *err);
/* fp32 values; only when every declared tensor is F32. */
int mt_st_writer_put(mt_st_writer *w, const float *data, size_t n, mt_error *err);
/* Data already encoded in the declared dtypes (little-endian), any dtype. */
int mt_st_writer_put_bytes(mt_st_writer *w, const void *bytes, size_t n, mt_error *err);
/* Checks that every declared byte was written, fsyncs and renames the temp
 * file into place. Frees w in all cases; on error nothing is left at path. */
int mt_st_writer_close(mt_st_writer *w, mt_error *err);
/* Abandons the file (removes the temp file) and frees w. */
void mt_st_writer_abort(mt_st_writer *w);

/* GPT-2 export (Hugging Face layout, metadata format=pt plus n_head, n_layer,
 * n_embd, vocab_size, n_positions) and import. n_head > 0 overrides; else it
 * comes from config.json in the file's directory (n_head or
 * num_attention_heads; its n_embd/n_layer/vocab_size, when present, must
 * match the tensors), else from the file's "__metadata__" n_head; else an
 * error. `out` is allocated by the import (free with mt_weights_free). */
int mt_safetensors_export_gpt2(const char *path, const mt_weights *w, mt_error *err);
int mt_safetensors_import_gpt2(const char *path, int n_head, mt_weights *out, mt_error *err);

#endif
