/* Atomic, sharded checkpoints.
 *
 * A checkpoint is a directory:
 *   manifest.json                 the only file a reader starts from
 *   tensors-<step>-r<rank>.bin    raw little-endian f32 data, one file per
 *                                 writing rank (a single writer: tensors-<step>.bin)
 *   config-<step>.yaml            optional: the settings of the run that saved
 *                                 it (train's YAML, cli/config_file.h)
 *
 * manifest.json (format version 2):
 *   { "format": "meshtrain-checkpoint", "version": 2, "step": 10,
 *     "state": { ...caller's JSON object: "config", "step", data position, seeds... },
 *     "saved_with": { ...optional: the layout that wrote it (dp, tp, pp, zero...) },
 *     "run_config": { ...optional: "name": "config-000010.yaml", "bytes": 812,
 *                     "checksum": "fnv1a64x4:..." },
 *     "files": [ { "name": "tensors-000010-r00000.bin", "bytes": 123456,
 *                  "checksum": "fnv1a64x4:0123456789abcdef" } ],
 *     "tensors": [ { "name": "model/wte.weight", "dtype": "f32", "shape": [Vp, C],
 *                    "numel": N,
 *                    "pieces": [ { "file": 0, "offset": 0, "start": 0, "numel": N,
 *                                  "checksum": "fnv1a64x4:..." } ] } ],
 *     "manifest_checksum": "fnv1a64x4:..." }
 *
 * A tensor is stored as one or more pieces; piece k holds the logical
 * (row-major, unsharded) elements [start, start+numel) at byte `offset` of
 * files[file]. Pieces are sorted by start and tile [0, numel) exactly; their
 * offsets are multiples of 64 and no two pieces of a file overlap. A
 * multi-rank save has each rank write the element ranges it owns to its own
 * file (mt_ckpt_file_begin/put/finish) and rank 0 write the manifest last
 * (mt_ckpt_write_manifest), after every file is fsync'd and renamed into
 * place; a reader with any other sharding reads its ranges with
 * mt_ckpt_read, which stitches pieces together (resharding on load).
 *
 * The manifest cannot lie: "manifest_checksum" is the checksum of every byte
 * of the file before `,"manifest_checksum"` (the key is the object's last);
 * each piece's checksum covers its bytes, so a reader that reads only some
 * pieces still verifies everything it reads (once per piece); each file's
 * checksum covers the whole file (padding included) and is checked by
 * mt_ckpt_open and `meshtrain ckpt verify`; the run config's by every
 * mt_ckpt_read_run_config (`ckpt verify`, a resume). "run_config" is
 * optional and older readers ignore it: checkpoints saved without it (before
 * it existed, or by mt_ckpt_save) stay valid. Version 1 manifests (no manifest
 * or piece checksums, a single file) stay readable: their files are
 * verified whole when opened.
 *
 * Checksum "fnv1a64x4": the file is consumed as little-endian 64-bit words in
 * blocks of four; word i of a block goes to lane i: h = (h ^ w) * 0x100000001b3
 * (lanes start at the FNV-1a offset basis xor the lane index). Trailing bytes
 * (< 32) are folded byte by byte into lane 0 the same way. The result mixes
 * the four lanes and the byte length (see checkpoint.c: ckpt_hash_final).
 * Each step is a bijection of the lane state, so any change confined to one
 * 8-byte word is always detected.
 *
 * Atomicity: data files are written under temporary names, fsync'd and
 * renamed to step-specific names that no current manifest references
 * (mt_ckpt_data_base); then the manifest is written to a temporary file,
 * fsync'd, renamed over manifest.json and the directory fsync'd; only then
 * are data files that the new manifest does not reference deleted (the
 * previous step's and any leftovers of crashed saves). A crash at any point
 * leaves either the previous or the new checkpoint loadable. The directory
 * The run config is written the same way (temporary, fsync, rename) under a
 * name derived from the data files' stem, config-<step>[.k].yaml, so that a
 * crash never leaves the current manifest naming a file of another save.
 * The directory
 * belongs to the checkpoint writer: files named tensors-*, config-<digit>*.yaml*
 * or manifest.json.tmp* in it that the manifest does not reference are removed
 * by the next save. Every rank must see the directory (one file system).
 *
 * Naming used by the trainer: "model/<tensor name>" for parameters (names and
 * shapes of the family's layout, models/family.h), "optim/<stream>/<name>"
 * for optimizer state. The state JSON contains "config"
 * (mt_model_config_write_json) and "step". */
#ifndef MT_CKPT_CHECKPOINT_H
#define MT_CKPT_CHECKPOINT_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "core/json.h"

#define MT_CKPT_FORMAT "meshtrain-checkpoint"
#define MT_CKPT_VERSION 2
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

/* Multi-writer save. The data file name stem for step `step` in dir
 * (created if missing) that no file there uses yet: "tensors-<step>" or
 * "tensors-<step>.<k>"; the caller appends e.g. "-r<rank>.bin". */
int mt_ckpt_data_base(const char *dir, int64_t step, char *base, size_t cap, mt_error *err);

/* One piece a writer put: element range [start, start + numel) of tensor
 * `tensor` (an index into the manifest's tensor list) at byte `offset`. */
typedef struct {
    int32_t tensor;
    uint64_t start, numel, offset, checksum;
} mt_ckpt_piece;
typedef struct mt_ckpt_file_writer mt_ckpt_file_writer;
/* A finished data file, as the manifest lists it. */
typedef struct {
    const char *name;
    uint64_t bytes, checksum;
    const mt_ckpt_piece *pieces;
    int npieces;
} mt_ckpt_file_entry;
/* Creates dir/name.tmp (no symlink followed, any stale one replaced). */
mt_ckpt_file_writer *mt_ckpt_file_begin(const char *dir, const char *name, mt_error *err);
/* Appends a piece (64-byte aligned; its checksum is computed on the way). */
int mt_ckpt_file_put(mt_ckpt_file_writer *w, int tensor, uint64_t start, const float *data, size_t numel,
                     mt_error *err);
/* fsync, close, rename to dir/name, fsync dir; *out stays valid until
 * mt_ckpt_file_free. */
int mt_ckpt_file_finish(mt_ckpt_file_writer *w, mt_ckpt_file_entry *out, mt_error *err);
/* Frees the writer; an unfinished file's temporary is removed. */
void mt_ckpt_file_free(mt_ckpt_file_writer *w);

/* A small text file saved beside the data files (the run config): its
 * name, size and checksum as the manifest lists them. */
typedef struct {
    char name[128];
    uint64_t bytes, checksum;
} mt_ckpt_text_entry;
/* The run config's file name for a data stem from mt_ckpt_data_base:
 * "tensors-000010.1" -> "config-000010.1.yaml". */
void mt_ckpt_run_config_name(const char *base, char *name, size_t cap);
/* Writes text to dir/name whole or not at all (temporary file, fsync,
 * rename) and fills *out for mt_ckpt_write_manifest. */
int mt_ckpt_write_text(const char *dir, const char *name, const char *text, mt_ckpt_text_entry *out, mt_error *err);

/* A tensor the manifest declares (its shape; numel is the product). */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[MT_CKPT_MAX_DIM];
} mt_ckpt_decl;
/* Writes dir/manifest.json atomically for finished files: checks that the
 * pieces of all files tile every declared tensor exactly (else nothing is
 * published), then cleans the directory of unreferenced data files.
 * saved_with_json: a JSON object describing the writing layout, or NULL.
 * run_config: the run's settings written by mt_ckpt_write_text, or NULL. */
int mt_ckpt_write_manifest(const char *dir, int64_t step, const char *state_json, const char *saved_with_json,
                           const mt_ckpt_decl *decls, int nt, const mt_ckpt_file_entry *files, int nf,
                           const mt_ckpt_text_entry *run_config, mt_error *err);

typedef struct mt_ckpt mt_ckpt;

/* Opens dir/manifest.json and validates all of it (format, version, types,
 * names, shapes vs numel, piece tiling, offsets within files, file sizes) and
 * verifies every data file's checksum. Returns NULL with err set on any
 * problem. */
mt_ckpt *mt_ckpt_open(const char *dir, mt_error *err);
/* Same, with whole-file checksum verification optional (sizes and the
 * manifest's own checksum are always checked): a rank that reads only its
 * slice of a large checkpoint skips reading all bytes; mt_ckpt_read still
 * verifies every piece it touches (version 2). flags: MT_CKPT_NO_VERIFY;
 * MT_CKPT_LAZY_VERIFY: NO_VERIFY unless the manifest has no piece checksums
 * (version 1), whose files are then verified whole. */
enum { MT_CKPT_NO_VERIFY = 1, MT_CKPT_LAZY_VERIFY = 2 };
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

/* Format version, and the "saved_with" object (NULL if absent). */
int mt_ckpt_version(const mt_ckpt *ck);
const mt_json *mt_ckpt_saved_with(const mt_ckpt *ck);
/* Data files: count, and file i's name and bytes (-1 if out of range). */
int mt_ckpt_n_files(const mt_ckpt *ck);
int mt_ckpt_file(const mt_ckpt *ck, int i, const char **name, uint64_t *bytes);
/* The run config's file name, or NULL when the manifest lists none. */
const char *mt_ckpt_run_config_file(const mt_ckpt *ck);
/* Reads the run config whole and checks its size and checksum against the
 * manifest: 0 with *text (malloc'd, NUL-terminated; the caller frees it),
 * 1 when the manifest lists none (*text NULL), -1 with err (missing,
 * resized or changed since the save). */
int mt_ckpt_read_run_config(const mt_ckpt *ck, char **text, mt_error *err);
/* Pieces of every tensor read and checked against their checksums (what
 * `ckpt verify` adds to mt_ckpt_open's whole-file checks). */
int mt_ckpt_verify_pieces(const mt_ckpt *ck, mt_error *err);

/* The checksum used in manifests, exposed for tests and tools. */
uint64_t mt_ckpt_checksum(const void *data, size_t bytes);

/* Test hook: when > 0, mt_ckpt_save stops (returning -1, leaving files as a
 * crash would) right after phase k: 1 = data temp file written and fsync'd,
 * 2 = data file renamed, 3 = manifest temp written, 4 = manifest renamed and
 * directory fsync'd (old data files not yet deleted). */
extern int mt_ckpt_test_crash_after;

#endif
