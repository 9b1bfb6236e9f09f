/* Hugging Face model directories, family-neutral: config.json plus either
 * model.safetensors or model.safetensors.index.json and the shard files it
 * names. This module knows tensor names, shapes, dtypes and bytes only; what
 * the tensors mean is the model family's business.
 *
 * Reading. mt_hf_dir_open parses dir/config.json (kept for the caller), then
 * opens dir/model.safetensors if it exists (transformers prefers it too),
 * else dir/model.safetensors.index.json: {"metadata": {"total_size": N},
 * "weight_map": {tensor: shard file}}. Every shard file the map names is
 * opened once and fully validated (safetensors.h). The index is authoritative
 * and must agree with the shards both ways: a tensor mapped to a file that
 * lacks it, and a tensor in a shard that the map does not send there, are
 * errors. Shard names must be plain file names inside dir.
 *
 * Tensors are enumerated in name (strcmp) order. Values are read as fp32
 * from F32, BF16 or F16; any other dtype is an error naming the tensor.
 *
 * Writing. mt_hf_writer takes tensors one at a time as fp32 and stores them
 * in out_dtype (bf16/fp16 rounded to nearest even, dtype.h). Tensors go to
 * shards in the order they were added: a new shard starts when the next
 * tensor would take the current one past shard_limit_bytes (tensor bytes,
 * as transformers counts them), and a tensor larger than the limit gets a
 * shard of its own (transformers would put it before the shard being
 * filled; here the order of the additions is kept). Limit 0, or everything
 * fitting, gives one model.safetensors; otherwise model-00001-of-0000N
 * .safetensors ... plus model.safetensors.index.json, written as
 * transformers does (indent 2, keys sorted, metadata.total_size = the sum
 * of tensor bytes, trailing newline). Inside a file the tensors are sorted
 * by name, with {"format":"pt"} metadata: the layout of the reference
 * serializer (safetensors' save_file), so a shard is byte for byte what
 * transformers would write for the same tensors. Output is deterministic.
 *
 * Memory: the writer never holds tensor data beyond a 1 MiB conversion
 * buffer. Encoded bytes go to an unlinked spool file in dir (so a crash
 * leaves nothing behind), and each shard is copied out of it, in name order,
 * when it is complete; disk use peaks at the output plus one shard.
 *
 * Atomicity: each file is written under a hidden temporary name in dir
 * (".<name>.partial", fsynced) and nothing is renamed into place until
 * finish has written them all; then the shards, the index and config.json
 * are renamed, stale weight files of an earlier export in dir are removed
 * (model.safetensors when the new export is sharded, the index when it is
 * not, and model-XXXXX-of-YYYYY.safetensors not in the new set), and dir is
 * fsynced. An error before the renames removes the temporaries and leaves
 * dir as it was; a crash during the renames can leave a mix of old and new
 * files. */
#ifndef MT_INTEROP_HF_DIR_H
#define MT_INTEROP_HF_DIR_H
#include <stddef.h>
#include <stdint.h>
#include "interop/safetensors.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/json.h"

/* File names used in a model directory. */
#define MT_HF_CONFIG "config.json"
#define MT_HF_WEIGHTS "model.safetensors"
#define MT_HF_INDEX "model.safetensors.index.json"

/* ---- reading ---- */

typedef struct mt_hf_dir mt_hf_dir;

/* Returns 0 and *out, or -1 with err (nothing to close then). */
int mt_hf_dir_open(const char *dir, mt_hf_dir **out, mt_error *err);
void mt_hf_dir_close(mt_hf_dir *d);
/* The parsed config.json (a JSON object); lives as long as d. */
const mt_json *mt_hf_dir_config(const mt_hf_dir *d);
/* 1 when the weights come from an index and shards, 0 for one file. */
int mt_hf_dir_sharded(const mt_hf_dir *d);

/* Tensors in name order: i < mt_hf_dir_count(d). */
size_t mt_hf_dir_count(const mt_hf_dir *d);
const char *mt_hf_dir_name(const mt_hf_dir *d, size_t i);
/* Full header entry (dtype string, shape, byte range) of tensor i. */
const mt_st_entry *mt_hf_dir_entry(const mt_hf_dir *d, size_t i);

/* Looks a tensor up by exact name. Found: returns its index i (>= 0) and
 * sets *ndim and shape[0..ndim) (shape must hold MT_ST_MAX_DIM values;
 * either pointer may be NULL). Absent: returns -1 and, if err is non-NULL,
 * fills it with "<dir>: no tensor '<name>'", so a caller for whom absence is
 * an error can pass it on and one probing optional tensors can ignore it. */
int mt_hf_dir_find(const mt_hf_dir *d, const char *name, int *ndim, int64_t *shape, mt_error *err);

/* Reads a whole tensor into dst as fp32 (from F32, BF16 or F16). n must be
 * its element count. 0 or -1 with err. */
int mt_hf_dir_read_f32(mt_hf_dir *d, const char *name, float *dst, size_t n, mt_error *err);
/* Reads a whole tensor's bytes as stored (n elements of safetensors dtype
 * `dtype`, e.g. "I32"; any other dtype is an error naming the tensor). */
int mt_hf_dir_read_raw(mt_hf_dir *d, const char *name, const char *dtype, void *dst, size_t n, mt_error *err);

/* ---- writing ---- */

typedef struct mt_hf_writer mt_hf_writer;

/* Creates dir if missing (one level). out_dtype: MT_FP32, MT_BF16 or
 * MT_FP16. shard_limit_bytes: 0 = one file. */
int mt_hf_writer_open(const char *dir, mt_dtype out_dtype, size_t shard_limit_bytes, mt_hf_writer **w, mt_error *err);
/* Adds one tensor (data: numel fp32 values, row-major; NULL allowed when
 * numel is 0). A bad name/shape is refused with w unchanged; after an I/O
 * error w only accepts mt_hf_writer_abort. */
int mt_hf_writer_add(mt_hf_writer *w, const char *name, int ndim, const int64_t *shape, const float *data, mt_error *err);
/* Writes config.json (config_json_text, which must parse as a JSON object)
 * and the weights, then puts everything in place (see above). Frees w in
 * all cases; on error dir is left as it was. */
int mt_hf_writer_finish(mt_hf_writer *w, const char *config_json_text, mt_error *err);
/* Discards everything written so far (temporaries removed) and frees w. */
void mt_hf_writer_abort(mt_hf_writer *w);

/* Reads a whole small JSON file (an object); *missing set when it does not exist. */
mt_json_doc *mt_hf_read_json_file(const char *path, int *missing, mt_error *err);

#endif
