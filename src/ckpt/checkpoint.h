/* Atomic, sharding-ready checkpoints.
 *
 * A checkpoint is a directory:
 *   manifest.json          the only file a reader starts from
 *   tensors-<step>.bin     raw little-endian f32 data (one file per writer)
 *
 * manifest.json (format version 1):
 *   { "format": "meshtrain-checkpoint", "version": 1, "step": 10,
 *     "state": { ...caller's JSON object: "config", "step", data position, seeds... },
 *     "files": [ { "name": "tensors-000010.bin", "bytes": 123456,
 *                  "checksum": "fnv1a64x4:0123456789abcdef" } ],
 *     "tensors": [ { "name": "model/wte.weight", "dtype": "f32", "shape": [Vp, C],
 *                    "numel": N,
 *                    "pieces": [ { "file": 0, "offset": 0, "start": 0, "numel": N } ] } ] }
 *
 * A tensor is stored as one or more pieces; piece k holds the logical
 * (row-major, unsharded) elements [start, start+numel) at byte `offset` of
 * files[file]. Pieces are sorted by start and tile [0, numel) exactly. A
 * single-writer save produces one piece per tensor; a multi-rank save (each
 * rank writing "tensors-<step>-r<rank>.bin" with the element ranges it owns,
 * rank 0 writing the manifest after a barrier) fits the same format, and a
 * reader with any other sharding reads its ranges with mt_ckpt_read, which
 * stitches pieces together (resharding on load).
 *
 * Checksum "fnv1a64x4": the file is consumed as little-endian 64-bit words in
 * blocks of four; word i of a block goes to lane i: h = (h ^ w) * 0x100000001b3
 * (lanes start at the FNV-1a offset basis xor the lane index). Trailing bytes
 * (< 32) are folded byte by byte into lane 0 the same way. The result mixes
 * the four lanes and the byte length (see checkpoint.c: ckpt_hash_final).
 * Each step is a bijection of the lane state, so any change confined to one
 * 8-byte word is always detected.
 *
 * Atomicity of mt_ckpt_save: the data file is written under a temporary name,
 * fsync'd and renamed to a step-specific name that no current manifest
 * references; then the manifest is written to a temporary file, fsync'd,
 * renamed over manifest.json and the directory fsync'd; only then are data
 * files that the new manifest does not reference deleted (the previous step's
 * and any leftovers of crashed saves). A crash at any point leaves either the
 * previous or the new checkpoint loadable. The directory belongs to the
 * checkpoint writer: files named tensors-* or manifest.json.tmp* in it that
 * the manifest does not reference are removed by the next save.
 *
 * Naming used by the trainer: "model/<tensor name>" for parameters (names and
 * shapes of the family's layout, models/family.h), "optim/m/<name>", "optim/v/<name>",
 * "optim/momentum/<name>" for optimizer state. The state JSON contains
 * "config" (mt_model_config_write_json) and "step". */
#ifndef MT_CKPT_CHECKPOINT_H
#define MT_CKPT_CHECKPOINT_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "core/json.h"

#define MT_CKPT_FORMAT "meshtrain-checkpoint"
#define MT_CKPT_VERSION 1
#define MT_CKPT_MAX_DIM 4

/* One tensor to save: `numel` contiguous floats (the whole tensor), with its
 * logical shape (ndim 0..MT_CKPT_MAX_DIM; the product must equal numel). */
typedef struct {
    const char *name;
    const float *data;
    size_t numel;
    int ndim;
    int64_t shape[MT_CKPT_MAX_DIM];
} mt_ckpt_tensor;

/* Saves tensors[0..n) and the state (a JSON object as text) as step `step`
 * into dir (created if missing, parents included). Names must be unique and
 * non-empty. Returns 0, or -1 with err set; on error the previous checkpoint
 * in dir (if any) is untouched. */
int mt_ckpt_save(const char *dir, int64_t step, const char *state_json, const mt_ckpt_tensor *tensors, int n,
                 mt_error *err);

typedef struct mt_ckpt mt_ckpt;

/* Opens dir/manifest.json and validates all of it (format, version, types,
 * names, shapes vs numel, piece tiling, offsets within files, file sizes) and
 * verifies every data file's checksum. Returns NULL with err set on any
 * problem. */
mt_ckpt *mt_ckpt_open(const char *dir, mt_error *err);
/* Same, with checksum verification optional (sizes are always checked): a
 * rank that reads only its slice of a large checkpoint may skip reading all
 * bytes. flags: MT_CKPT_NO_VERIFY. */
enum { MT_CKPT_NO_VERIFY = 1 };
mt_ckpt *mt_ckpt_open_ex(const char *dir, unsigned flags, mt_error *err);
/* Frees everything; NULL is a no-op. */
void mt_ckpt_close(mt_ckpt *ck);

int64_t mt_ckpt_step(const mt_ckpt *ck);
/* The state object as compact JSON text (owned by ck). */
const char *mt_ckpt_state_json(const mt_ckpt *ck);
/* The state object as a parsed tree (owned by ck). */
const mt_json *mt_ckpt_state(const mt_ckpt *ck);

int mt_ckpt_n_tensors(const mt_ckpt *ck);
/* Name of tensor i (manifest order), NULL if out of range. */
const char *mt_ckpt_tensor_name(const mt_ckpt *ck, int i);
/* 1 if the tensor exists (setting *numel if non-NULL), else 0. */
int mt_ckpt_has(const mt_ckpt *ck, const char *name, size_t *numel);
/* Shape of a tensor: returns ndim (0..MT_CKPT_MAX_DIM) and fills shape
 * (MT_CKPT_MAX_DIM entries, unused ones 1), or -1 if absent. */
int mt_ckpt_shape(const mt_ckpt *ck, const char *name, int64_t shape[MT_CKPT_MAX_DIM]);
/* Reads logical elements [elem_offset, elem_offset + n) of tensor `name`
 * into dst. Returns 0, or -1 with err (absent tensor, range out of bounds,
 * short read). */
int mt_ckpt_read(const mt_ckpt *ck, const char *name, size_t elem_offset, size_t n, float *dst, mt_error *err);

/* The checksum used in manifests, exposed for tests and tools. */
uint64_t mt_ckpt_checksum(const void *data, size_t bytes);

/* Test hook: when > 0, mt_ckpt_save stops (returning -1, leaving files as a
 * crash would) right after phase k: 1 = data temp file written and fsync'd,
 * 2 = data file renamed, 3 = manifest temp written, 4 = manifest renamed and
 * directory fsync'd (old data files not yet deleted). */
extern int mt_ckpt_test_crash_after;

#endif
