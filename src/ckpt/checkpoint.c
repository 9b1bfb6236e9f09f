/* Atomic, sharding-ready checkpoints: see checkpoint.h for the format and
 * the crash-safety argument. */
#include "core/fileio.h"
#include "ckpt/checkpoint.h"
#include "core/checksum.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "meshtrain checkpoints store little-endian data and assume a little-endian host"
#endif

int mt_ckpt_test_crash_after = 0;

#define MANIFEST "manifest.json"
#define MANIFEST_TMP "manifest.json.tmp"
#define MANIFEST_SUM_KEY "manifest_checksum"
#define CHECKSUM_PREFIX "fnv1a64x4:"
#define DATA_PREFIX "tensors-"
#define CONFIG_PREFIX "config-"
#define CONFIG_SUFFIX ".yaml"
#define MAX_RUN_CONFIG_BYTES ((uint64_t)1 << 20)
#define ALIGN_BYTES 64
#define MAX_MANIFEST_BYTES ((size_t)256 << 20)
#define IO_CHUNK ((size_t)8 << 20)

uint64_t mt_ckpt_checksum(const void *data, size_t bytes) {
    mt_checksum s;
    mt_checksum_init(&s);
    mt_checksum_update(&s, data, bytes);
    return mt_checksum_final(&s);
}

/* ---- file helpers ---- */

static int valid_file_name(const char *s, size_t len) {
    if (len == 0 || len > 200 || strlen(s) != len) return 0;
    if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return 0;
    return strchr(s, '/') == NULL && strchr(s, '\\') == NULL;
}

static int valid_file_name_z(const char *s) { return s && valid_file_name(s, strlen(s)); }

/* ---- save ---- */

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names unique and non-empty, shapes valid; numel (if given) equal to the
 * shape's product. */
static int validate_decls(const mt_ckpt_decl *t, int n, mt_error *err) {
    if (n < 0) return mt_errorf(err, "checkpoint save: tensor count %d is negative", n);
    if (n > 0 && !t) return mt_errorf(err, "checkpoint save: NULL tensor list with count %d", n);
    for (int i = 0; i < n; i++) {
        if (!t[i].name || !t[i].name[0]) return mt_errorf(err, "checkpoint save: tensor %d has an empty name", i);
        if (t[i].ndim < 0 || t[i].ndim > MT_CKPT_MAX_DIM)
            return mt_errorf(err, "checkpoint save: tensor '%s' has ndim %d (must be 0..%d)", t[i].name, t[i].ndim,
                             MT_CKPT_MAX_DIM);
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 0 || t[i].shape[d] > ((int64_t)1 << 40))
                return mt_errorf(err, "checkpoint save: tensor '%s' has invalid shape[%d] = %" PRId64, t[i].name, d,
                                 t[i].shape[d]);
    }
    if (n > 1) {
        const char **names = mt_xmalloc((size_t)n * sizeof *names, "checkpoint tensor names");
        for (int i = 0; i < n; i++) names[i] = t[i].name;
        qsort(names, (size_t)n, sizeof *names, cmp_str_ptr);
        for (int i = 1; i < n; i++)
            if (strcmp(names[i - 1], names[i]) == 0) {
                mt_errorf(err, "checkpoint save: tensor name '%s' appears more than once", names[i]);
                free(names);
                return -1;
            }
        free(names);
    }
    return 0;
}

static uint64_t decl_numel(const mt_ckpt_decl *t) {
    uint64_t p = 1;
    for (int d = 0; d < t->ndim; d++) p *= (uint64_t)t->shape[d];
    return p;
}

static int crash_here(int phase, mt_error *err) {
    if (mt_ckpt_test_crash_after == phase)
        return mt_errorf(err, "checkpoint save: simulated crash after phase %d (test hook)", phase);
    return 0;
}

static int is_kept(const char *nm, const char *const *keep, int nkeep) {
    for (int i = 0; i < nkeep; i++)
        if (strcmp(nm, keep[i]) == 0) return 1;
    return 0;
}

/* Deletes data files and temp files the new manifest does not reference. */
static void cleanup_dir(const char *dir, const char *const *keep, int nkeep) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "meshtrain: warning: cannot list checkpoint directory %s to remove old files: %s\n", dir,
                strerror(errno));
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        size_t cl = strlen(CONFIG_PREFIX);
        int config = strncmp(nm, CONFIG_PREFIX, cl) == 0 && nm[cl] >= '0' && nm[cl] <= '9' && strstr(nm, CONFIG_SUFFIX);
        int ours = strncmp(nm, DATA_PREFIX, strlen(DATA_PREFIX)) == 0 || strncmp(nm, MANIFEST_TMP, strlen(MANIFEST_TMP)) == 0 ||
                   config;
        if (!ours || is_kept(nm, keep, nkeep)) continue;
        char *p = mt_path_join(dir, nm);
        if (unlink(p) != 0)
            fprintf(stderr, "meshtrain: warning: cannot remove old checkpoint file %s: %s\n", p, strerror(errno));
        free(p);
    }
    closedir(d);
}

int mt_ckpt_data_base(const char *dir, int64_t step, char *base, size_t cap, mt_error *err) {
    if (!dir || !dir[0]) return mt_errorf(err, "checkpoint save: empty directory name");
    if (step < 0) return mt_errorf(err, "checkpoint save: step %" PRId64 " is negative", step);
    if (mt_make_dirs(dir, "checkpoint directory", err)) return -1;
    DIR *d = opendir(dir);
    if (!d) return mt_errorf(err, "cannot list checkpoint directory %s: %s", dir, strerror(errno));
    /* The lowest k whose name no file in the directory starts with: a
     * re-save of the current step never overwrites data the current
     * manifest points to. */
    for (int k = 0; k <= 1000; k++) {
        char b[96];
        if (k == 0) snprintf(b, sizeof b, DATA_PREFIX "%06" PRId64, step);
        else snprintf(b, sizeof b, DATA_PREFIX "%06" PRId64 ".%d", step, k);
        size_t bl = strlen(b);
        int used = 0;
        rewinddir(d);
        struct dirent *e;
        while (!used && (e = readdir(d)) != NULL)
            used = strncmp(e->d_name, b, bl) == 0 && (e->d_name[bl] == '.' || e->d_name[bl] == '-') &&
                   !(k == 0 && e->d_name[bl] == '.' && e->d_name[bl + 1] >= '0' && e->d_name[bl + 1] <= '9');
        if (!used) {
            closedir(d);
            if (bl + 1 > cap) return mt_errorf(err, "checkpoint save: name buffer too small");
            memcpy(base, b, bl + 1);
            return 0;
        }
    }
    closedir(d);
    return mt_errorf(err, "checkpoint save: too many files named like " DATA_PREFIX "%06" PRId64 "* in %s", step, dir);
}

struct mt_ckpt_file_writer {
    char *dir, *name, *path, *tmp;
    int fd, renamed;
    uint64_t pos;
    mt_checksum file_hash;
    mt_ckpt_piece *pieces;
    int n, cap;
};

mt_ckpt_file_writer *mt_ckpt_file_begin(const char *dir, const char *name, mt_error *err) {
    if (!valid_file_name_z(name)) {
        mt_errorf(err, "checkpoint save: '%s' is not a plain file name", name ? name : "(null)");
        return NULL;
    }
    mt_ckpt_file_writer *w = mt_xcalloc(1, sizeof *w, "checkpoint file writer");
    size_t dl = strlen(dir), nl = strlen(name);
    w->dir = mt_xmalloc(dl + 1, "checkpoint directory");
    memcpy(w->dir, dir, dl + 1);
    w->name = mt_xmalloc(nl + 1, "checkpoint file name");
    memcpy(w->name, name, nl + 1);
    w->path = mt_path_join(dir, name);
    w->tmp = mt_xmalloc(strlen(w->path) + 5, "checkpoint temp path");
    snprintf(w->tmp, strlen(w->path) + 5, "%s.tmp", w->path);
    w->fd = mt_create_temp(w->tmp, err);
    if (w->fd < 0) {
        mt_ckpt_file_free(w);
        return NULL;
    }
    mt_checksum_init(&w->file_hash);
    return w;
}

int mt_ckpt_file_put(mt_ckpt_file_writer *w, int tensor, uint64_t start, const float *data, size_t numel,
                     mt_error *err) {
    static const char zeros[ALIGN_BYTES] = {0};
    if (w->fd < 0) return mt_errorf(err, "checkpoint save: %s is already finished", w->path);
    if (numel == 0) return 0;
    size_t pad = (size_t)((ALIGN_BYTES - w->pos % ALIGN_BYTES) % ALIGN_BYTES);
    if (pad) {
        if (mt_write_all(w->fd, zeros, pad, w->tmp, err)) return -1;
        mt_checksum_update(&w->file_hash, zeros, pad);
        w->pos += pad;
    }
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->pieces = realloc(w->pieces, (size_t)w->cap * sizeof *w->pieces);
        if (!w->pieces) mt_die("out of memory growing the checkpoint piece list to %d entries", w->cap);
    }
    mt_checksum ph;
    mt_checksum_init(&ph);
    size_t bytes = numel * sizeof(float);
    const char *p = (const char *)data;
    for (size_t done = 0; done < bytes;) {
        size_t c = bytes - done < IO_CHUNK ? bytes - done : IO_CHUNK;
        if (mt_write_all(w->fd, p + done, c, w->tmp, err)) return -1;
        mt_checksum_update(&w->file_hash, p + done, c);
        mt_checksum_update(&ph, p + done, c);
        done += c;
    }
    w->pieces[w->n++] = (mt_ckpt_piece){tensor, start, numel, w->pos, mt_checksum_final(&ph)};
    w->pos += bytes;
    return 0;
}

int mt_ckpt_file_finish(mt_ckpt_file_writer *w, mt_ckpt_file_entry *out, mt_error *err) {
    if (w->fd < 0) return mt_errorf(err, "checkpoint save: %s is already finished", w->path);
    uint64_t sum = mt_checksum_final(&w->file_hash);
    int fd = w->fd;
    w->fd = -1;
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        return mt_errorf(err, "fsync of %s failed: %s", w->tmp, strerror(e));
    }
    if (close(fd) != 0) return mt_errorf(err, "closing %s failed: %s", w->tmp, strerror(errno));
    if (crash_here(1, err)) return -1;
    if (rename(w->tmp, w->path) != 0)
        return mt_errorf(err, "renaming %s to %s failed: %s", w->tmp, w->path, strerror(errno));
    w->renamed = 1;
    if (mt_fsync_dir(w->dir, err)) return -1;
    if (crash_here(2, err)) return -1;
    out->name = w->name;
    out->bytes = w->pos;
    out->checksum = sum;
    out->pieces = w->pieces;
    out->npieces = w->n;
    return 0;
}

void mt_ckpt_file_free(mt_ckpt_file_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    /* an unfinished file goes (the crash hooks leave theirs, as a crash would) */
    if (!w->renamed && mt_ckpt_test_crash_after != 1) unlink(w->tmp);
    free(w->dir);
    free(w->name);
    free(w->path);
    free(w->tmp);
    free(w->pieces);
    free(w);
}

void mt_ckpt_run_config_name(const char *base, char *name, size_t cap) {
    size_t dl = strlen(DATA_PREFIX);
    const char *stem = strncmp(base, DATA_PREFIX, dl) == 0 ? base + dl : base;
    snprintf(name, cap, CONFIG_PREFIX "%s" CONFIG_SUFFIX, stem);
}

int mt_ckpt_write_text(const char *dir, const char *name, const char *text, mt_ckpt_text_entry *out, mt_error *err) {
    if (!valid_file_name_z(name) || strlen(name) >= sizeof out->name)
        return mt_errorf(err, "checkpoint save: '%s' is not a plain file name", name ? name : "(null)");
    size_t n = strlen(text);
    if (n > MAX_RUN_CONFIG_BYTES)
        return mt_errorf(err, "checkpoint save: the run config is %zu bytes, more than the %" PRIu64 "-byte limit", n,
                         MAX_RUN_CONFIG_BYTES);
    char *path = mt_path_join(dir, name), *tmp = NULL;
    FILE *f = mt_fopen_temp(path, &tmp, err);
    int rc = f ? 0 : -1;
    if (f) {
        int failed = n && fwrite(text, 1, n, f) != n;
        if (failed) mt_errorf(err, "writing %s failed: %s (is the disk full?)", tmp, strerror(errno));
        rc = mt_fcommit_temp(f, tmp, path, failed, err);
    }
    free(path);
    if (rc) return -1;
    snprintf(out->name, sizeof out->name, "%s", name);
    out->bytes = n;
    out->checksum = mt_ckpt_checksum(text, n);
    return 0;
}

static int cmp_piece_ref(const void *a, const void *b) {
    const mt_ckpt_piece *x = *(const mt_ckpt_piece *const *)a, *y = *(const mt_ckpt_piece *const *)b;
    if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

static void jw_checksum(mt_json_writer *w, uint64_t h) {
    char sum[40];
    snprintf(sum, sizeof sum, CHECKSUM_PREFIX "%016" PRIx64, h);
    mt_jw_string(w, sum);
}

int mt_ckpt_write_manifest(const char *dir, int64_t step, const char *state_json, const char *saved_with_json,
                           const mt_ckpt_decl *decls, int nt, const mt_ckpt_file_entry *files, int nf,
                           const mt_ckpt_text_entry *run_config, mt_error *err) {
    if (step < 0) return mt_errorf(err, "checkpoint save: step %" PRId64 " is negative", step);
    if (!state_json) state_json = "{}";
    mt_error perr;
    mt_json_doc *state = mt_json_parse(state_json, strlen(state_json), 48, &perr);
    if (!state) return mt_errorf(err, "checkpoint save: state is not valid JSON: %s", perr.msg);
    mt_json_doc *saved = NULL;
    if (mt_json_root(state)->type != MT_JSON_OBJECT) {
        mt_json_free(state);
        return mt_errorf(err, "checkpoint save: state must be a JSON object");
    }
    if (saved_with_json) {
        saved = mt_json_parse(saved_with_json, strlen(saved_with_json), 8, &perr);
        if (!saved || mt_json_root(saved)->type != MT_JSON_OBJECT) {
            mt_json_free(saved);
            mt_json_free(state);
            return mt_errorf(err, "checkpoint save: the saved-with layout is not a JSON object");
        }
    }
    if (validate_decls(decls, nt, err)) {
        mt_json_free(saved);
        mt_json_free(state);
        return -1;
    }
    /* Every piece, by tensor then start: they must tile each tensor. */
    size_t np = 0;
    for (int f = 0; f < nf; f++) np += (size_t)files[f].npieces;
    const mt_ckpt_piece **refs = mt_xmalloc((np ? np : 1) * sizeof *refs, "checkpoint piece index");
    int *fileof = mt_xmalloc((np ? np : 1) * sizeof *fileof, "checkpoint piece index");
    size_t k = 0;
    for (int f = 0; f < nf; f++)
        for (int i = 0; i < files[f].npieces; i++) refs[k++] = &files[f].pieces[i];
    qsort(refs, np, sizeof *refs, cmp_piece_ref);
    for (size_t i = 0; i < np; i++) { /* the file of each piece (pieces are held in their file's array) */
        for (int f = 0; f < nf; f++)
            if (refs[i] >= files[f].pieces && refs[i] < files[f].pieces + files[f].npieces) fileof[i] = f;
    }
    char *man_path = NULL, *man_tmp = NULL;
    mt_json_writer w;
    mt_jw_init(&w);
    int rc = -1, fd = -1;
    size_t at = 0;
    for (int t = 0; t < nt; t++) {
        uint64_t next = 0, want = decl_numel(&decls[t]);
        for (; at < np && refs[at]->tensor == t; at++) {
            if (refs[at]->start != next) {
                mt_errorf(err, "checkpoint save: tensor '%s': the pieces written by the ranks %s element %" PRIu64
                          " (a bug in the writer's ownership; nothing was published)", decls[t].name,
                          refs[at]->start > next ? "leave a gap at" : "overlap at", next);
                goto out;
            }
            next += refs[at]->numel;
        }
        if (next != want) {
            mt_errorf(err, "checkpoint save: tensor '%s': the ranks wrote %" PRIu64 " of its %" PRIu64
                      " elements (nothing was published)", decls[t].name, next, want);
            goto out;
        }
    }
    if (at != np) {
        mt_errorf(err, "checkpoint save: a piece names tensor %d, but only %d are declared", refs[at]->tensor, nt);
        goto out;
    }

    mt_jw_begin_object(&w);
    mt_jw_key(&w, "format"); mt_jw_string(&w, MT_CKPT_FORMAT);
    mt_jw_key(&w, "version"); mt_jw_int(&w, MT_CKPT_VERSION);
    mt_jw_key(&w, "step"); mt_jw_int(&w, step);
    mt_jw_key(&w, "state");
    if (mt_jw_value(&w, mt_json_root(state), err)) goto out;
    if (saved) {
        mt_jw_key(&w, "saved_with");
        if (mt_jw_value(&w, mt_json_root(saved), err)) goto out;
    }
    if (run_config) {
        mt_jw_key(&w, "run_config");
        mt_jw_begin_object(&w);
        mt_jw_key(&w, "name"); mt_jw_string(&w, run_config->name);
        mt_jw_key(&w, "bytes"); mt_jw_int(&w, (int64_t)run_config->bytes);
        mt_jw_key(&w, "checksum"); jw_checksum(&w, run_config->checksum);
        mt_jw_end_object(&w);
    }
    mt_jw_key(&w, "files");
    mt_jw_begin_array(&w);
    for (int f = 0; f < nf; f++) {
        mt_jw_begin_object(&w);
        mt_jw_key(&w, "name"); mt_jw_string(&w, files[f].name);
        mt_jw_key(&w, "bytes"); mt_jw_int(&w, (int64_t)files[f].bytes);
        mt_jw_key(&w, "checksum"); jw_checksum(&w, files[f].checksum);
        mt_jw_end_object(&w);
    }
    mt_jw_end_array(&w);
    mt_jw_key(&w, "tensors");
    mt_jw_begin_array(&w);
    at = 0;
    for (int t = 0; t < nt; t++) {
        mt_jw_begin_object(&w);
        mt_jw_key(&w, "name"); mt_jw_string(&w, decls[t].name);
        mt_jw_key(&w, "dtype"); mt_jw_string(&w, "f32");
        mt_jw_key(&w, "shape");
        mt_jw_begin_array(&w);
        for (int d = 0; d < decls[t].ndim; d++) mt_jw_int(&w, decls[t].shape[d]);
        mt_jw_end_array(&w);
        mt_jw_key(&w, "numel"); mt_jw_int(&w, (int64_t)decl_numel(&decls[t]));
        mt_jw_key(&w, "pieces");
        mt_jw_begin_array(&w);
        for (; at < np && refs[at]->tensor == t; at++) {
            mt_jw_begin_object(&w);
            mt_jw_key(&w, "file"); mt_jw_int(&w, fileof[at]);
            mt_jw_key(&w, "offset"); mt_jw_int(&w, (int64_t)refs[at]->offset);
            mt_jw_key(&w, "start"); mt_jw_int(&w, (int64_t)refs[at]->start);
            mt_jw_key(&w, "numel"); mt_jw_int(&w, (int64_t)refs[at]->numel);
            mt_jw_key(&w, "checksum"); jw_checksum(&w, refs[at]->checksum);
            mt_jw_end_object(&w);
        }
        mt_jw_end_array(&w);
        mt_jw_end_object(&w);
    }
    mt_jw_end_array(&w);
    /* The manifest's own checksum covers every byte before its key. */
    uint64_t self = mt_ckpt_checksum(w.buf, w.len);
    mt_jw_key(&w, MANIFEST_SUM_KEY); jw_checksum(&w, self);
    mt_jw_end_object(&w);

    man_path = mt_path_join(dir, MANIFEST);
    man_tmp = mt_path_join(dir, MANIFEST_TMP);
    fd = mt_create_temp(man_tmp, err);
    if (fd < 0) goto out;
    if (mt_write_all(fd, w.buf, w.len, man_tmp, err) || mt_write_all(fd, "\n", 1, man_tmp, err)) {
        unlink(man_tmp);
        goto out;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        fd = -1;
        mt_errorf(err, "fsync/close of %s failed: %s", man_tmp, strerror(errno));
        unlink(man_tmp);
        goto out;
    }
    fd = -1;
    if (crash_here(3, err)) goto out;
    /* The atomic switch. */
    if (rename(man_tmp, man_path) != 0) {
        mt_errorf(err, "renaming %s to %s failed: %s", man_tmp, man_path, strerror(errno));
        unlink(man_tmp);
        goto out;
    }
    if (mt_fsync_dir(dir, err)) goto out;
    if (crash_here(4, err)) goto out;
    /* The previous step's data and any crash leftovers go. */
    {
        const char **keep = mt_xmalloc((size_t)(nf + 1) * sizeof *keep, "checkpoint file names");
        for (int f = 0; f < nf; f++) keep[f] = files[f].name;
        if (run_config) keep[nf] = run_config->name;
        cleanup_dir(dir, keep, nf + (run_config != NULL));
        free((void *)keep);
    }
    rc = 0;
out:
    if (fd >= 0) close(fd);
    free(man_path);
    free(man_tmp);
    free((void *)refs);
    free(fileof);
    mt_jw_free(&w);
    mt_json_free(saved);
    mt_json_free(state);
    return rc;
}

/* The single-writer save: one data file, then the manifest. */
int mt_ckpt_save(const char *dir, int64_t step, const char *state_json, const mt_ckpt_tensor *tensors, int n,
                 mt_error *err) {
    if (!dir || !dir[0]) return mt_errorf(err, "checkpoint save: empty directory name");
    if (step < 0) return mt_errorf(err, "checkpoint save: step %" PRId64 " is negative", step);
    if (!state_json) state_json = "{}";
    mt_error perr;
    mt_json_doc *state = mt_json_parse(state_json, strlen(state_json), 48, &perr);
    if (!state) return mt_errorf(err, "checkpoint save: state is not valid JSON: %s", perr.msg);
    int is_obj = mt_json_root(state)->type == MT_JSON_OBJECT;
    mt_json_free(state);
    if (!is_obj) return mt_errorf(err, "checkpoint save: state must be a JSON object");
    if (n < 0) return mt_errorf(err, "checkpoint save: tensor count %d is negative", n);
    if (n > 0 && !tensors) return mt_errorf(err, "checkpoint save: NULL tensor list with count %d", n);
    mt_ckpt_decl *decls = mt_xcalloc((size_t)(n ? n : 1), sizeof *decls, "checkpoint tensor list");
    for (int i = 0; i < n; i++) {
        decls[i].name = tensors[i].name;
        decls[i].ndim = tensors[i].ndim;
        memcpy(decls[i].shape, tensors[i].shape, sizeof decls[i].shape);
    }
    int rc = validate_decls(decls, n, err);
    for (int i = 0; i < n && !rc; i++) {
        if (tensors[i].numel > 0 && !tensors[i].data)
            rc = mt_errorf(err, "checkpoint save: tensor '%s' has %zu elements but a NULL data pointer", tensors[i].name,
                           tensors[i].numel);
        else if (decl_numel(&decls[i]) != (uint64_t)tensors[i].numel)
            rc = mt_errorf(err, "checkpoint save: tensor '%s' has numel %zu but its shape holds %" PRIu64 " elements",
                           tensors[i].name, tensors[i].numel, decl_numel(&decls[i]));
    }
    char base[96], name[112];
    mt_ckpt_file_writer *fw = NULL;
    mt_ckpt_file_entry fe;
    if (!rc) rc = mt_ckpt_data_base(dir, step, base, sizeof base, err);
    if (!rc) {
        snprintf(name, sizeof name, "%s.bin", base);
        fw = mt_ckpt_file_begin(dir, name, err);
        rc = fw ? 0 : -1;
    }
    for (int i = 0; i < n && !rc; i++) rc = mt_ckpt_file_put(fw, i, 0, tensors[i].data, tensors[i].numel, err);
    if (!rc) rc = mt_ckpt_file_finish(fw, &fe, err);
    if (!rc) rc = mt_ckpt_write_manifest(dir, step, state_json, NULL, decls, n, &fe, 1, NULL, err);
    /* a failed save leaves no new data file behind (the crash hooks excepted) */
    if (rc && fw && fw->renamed && mt_ckpt_test_crash_after == 0) unlink(fw->path);
    mt_ckpt_file_free(fw);
    free(decls);
    return rc;
}

/* ---- open / read ---- */

typedef struct {
    int file;
    uint64_t offset;
    uint64_t start, numel;
    uint64_t checksum;
    int has_sum;
    int verified; /* read whole and its checksum matched (set by reads) */
} ck_piece;

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[MT_CKPT_MAX_DIM];
    uint64_t numel;
    int npieces;
    ck_piece *pieces;
} ck_tensor;

typedef struct {
    const char *name;
    char *path;
    int fd;
    uint64_t bytes;
    uint64_t checksum;
} ck_file;

struct mt_ckpt {
    char *dir;
    mt_json_doc *doc;
    int version;
    const mt_json *saved_with;
    int64_t step;
    const mt_json *state;
    char *state_text;
    int nfiles;
    ck_file *files;
    int ntensors;
    ck_tensor *tensors;
    const ck_tensor **sorted; /* tensors sorted by name */
    const char *run_config;   /* "run_config": its file name, or NULL */
    uint64_t run_config_bytes, run_config_sum;
};

void mt_ckpt_close(mt_ckpt *ck) {
    if (!ck) return;
    for (int i = 0; i < ck->nfiles; i++) {
        if (ck->files[i].fd >= 0) close(ck->files[i].fd);
        free(ck->files[i].path);
    }
    free(ck->files);
    for (int i = 0; i < ck->ntensors; i++) free(ck->tensors[i].pieces);
    free(ck->tensors);
    free((void *)ck->sorted);
    free(ck->state_text);
    mt_json_free(ck->doc);
    free(ck->dir);
    free(ck);
}

static int read_whole_file(const char *path, size_t limit, char **out, size_t *len, mt_error *err) {
    if (!mt_read_file(path, limit, out, len, err)) return 0;
    if (errno == ENOENT) return mt_errorf(err, "%s does not exist (no checkpoint saved there yet?)", path);
    return -1;
}

static int get_u64(const mt_json *obj, const char *key, uint64_t *out, const char *ctx, mt_error *err) {
    int64_t v;
    mt_error e;
    if (mt_json_get_int64(obj, key, &v, &e)) return mt_errorf(err, "%s: %s", ctx, e.msg);
    if (v < 0) return mt_errorf(err, "%s: '%s' = %" PRId64 " is negative", ctx, key, v);
    *out = (uint64_t)v;
    return 0;
}

static const ck_tensor *find_tensor(const mt_ckpt *ck, const char *name) {
    int lo = 0, hi = ck->ntensors - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(ck->sorted[mid]->name, name);
        if (c == 0) return ck->sorted[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

static int cmp_tensor_ptr(const void *a, const void *b) {
    return strcmp((*(const ck_tensor *const *)a)->name, (*(const ck_tensor *const *)b)->name);
}

static int parse_checksum(const char *sum, uint64_t *out) {
    const char *pfx = CHECKSUM_PREFIX;
    if (strncmp(sum, pfx, strlen(pfx)) != 0 || strlen(sum) != strlen(pfx) + 16) return -1;
    uint64_t v = 0;
    for (const char *c = sum + strlen(pfx); *c; c++) {
        int d = *c >= '0' && *c <= '9' ? *c - '0' : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

typedef struct {
    uint64_t lo, hi;
    int file;
    const char *tensor;
} byte_range;

static int cmp_range(const void *a, const void *b) {
    const byte_range *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* No two pieces share a byte of a file (a piece pointed at another's
 * bytes would load the wrong values without any checksum failing). */
static int check_overlaps(const mt_ckpt *ck, const char *mpath, mt_error *err) {
    size_t n = 0, k = 0;
    for (int t = 0; t < ck->ntensors; t++) n += (size_t)ck->tensors[t].npieces;
    byte_range *r = mt_xmalloc((n ? n : 1) * sizeof *r, "checkpoint piece ranges");
    for (int t = 0; t < ck->ntensors; t++)
        for (int i = 0; i < ck->tensors[t].npieces; i++) {
            const ck_piece *p = &ck->tensors[t].pieces[i];
            if (!p->numel) continue;
            r[k++] = (byte_range){p->offset, p->offset + p->numel * sizeof(float), p->file, ck->tensors[t].name};
        }
    qsort(r, k, sizeof *r, cmp_range);
    for (size_t i = 1; i < k; i++)
        if (r[i].file == r[i - 1].file && r[i].lo < r[i - 1].hi) {
            mt_errorf(err, "%s: pieces of '%.60s' (bytes [%" PRIu64 ", %" PRIu64 ")) and '%.60s' (bytes [%" PRIu64
                      ", %" PRIu64 ")) overlap in %s (the manifest is damaged)", mpath, r[i - 1].tensor, r[i - 1].lo,
                      r[i - 1].hi, r[i].tensor, r[i].lo, r[i].hi, ck->files[r[i].file].name);
            free(r);
            return -1;
        }
    free(r);
    return 0;
}

/* Version 2: the text must end in ,"manifest_checksum":"fnv1a64x4:<hex>"}
 * (and a newline), and the checksum of everything before the comma match. */
static int check_manifest_sum(const char *text, size_t len, const char *mpath, mt_error *err) {
    static const char key[] = ",\"" MANIFEST_SUM_KEY "\":\"";
    size_t n = len;
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r')) n--;
    size_t kl = sizeof key - 1, sl = strlen(CHECKSUM_PREFIX) + 16;
    if (n < kl + sl + 2 || text[n - 1] != '}' || text[n - 2] != '"' || memcmp(text + n - 2 - sl - kl, key, kl) != 0)
        return mt_errorf(err, "%s does not end in its \"" MANIFEST_SUM_KEY "\" (version 2 manifests must; the file "
                         "is damaged or was edited)", mpath);
    char sum[40];
    memcpy(sum, text + n - 2 - sl, sl);
    sum[sl] = '\0';
    uint64_t want;
    if (parse_checksum(sum, &want))
        return mt_errorf(err, "%s: manifest_checksum '%s' is not of the form fnv1a64x4:<16 hex digits>", mpath, sum);
    uint64_t got = mt_ckpt_checksum(text, n - 2 - sl - kl);
    if (got != want)
        return mt_errorf(err, "%s: manifest checksum mismatch: computed " CHECKSUM_PREFIX "%016" PRIx64 ", the file says "
                         "%s (the manifest was changed after it was written; restore it or save again)", mpath, got, sum);
    return 0;
}

static int parse_manifest(mt_ckpt *ck, const char *mpath, mt_error *err) {
    const mt_json *r = mt_json_root(ck->doc);
    char ctx[64];
    if (r->type != MT_JSON_OBJECT) return mt_errorf(err, "%s: the manifest is not a JSON object", mpath);
    const char *fmt;
    mt_error e;
    if (mt_json_get_string(r, "format", &fmt, &e)) return mt_errorf(err, "%s: %s", mpath, e.msg);
    if (strcmp(fmt, MT_CKPT_FORMAT) != 0)
        return mt_errorf(err, "%s: format is '%.60s', expected '%s'", mpath, fmt, MT_CKPT_FORMAT);
    int64_t ver;
    if (mt_json_get_int64(r, "version", &ver, &e)) return mt_errorf(err, "%s: %s", mpath, e.msg);
    if (ver < 1 || ver > MT_CKPT_VERSION)
        return mt_errorf(err, "%s: checkpoint format version %" PRId64 " is not supported (this build reads versions 1 to %d%s)",
                         mpath, ver, MT_CKPT_VERSION, ver > MT_CKPT_VERSION ? "; written by a newer meshtrain?" : "");
    ck->version = (int)ver;
    ck->saved_with = mt_json_get(r, "saved_with");
    if (ck->saved_with && ck->saved_with->type != MT_JSON_OBJECT)
        return mt_errorf(err, "%s: 'saved_with' is not an object", mpath);
    if (mt_json_get_int64(r, "step", &ck->step, &e)) return mt_errorf(err, "%s: %s", mpath, e.msg);
    if (ck->step < 0) return mt_errorf(err, "%s: step %" PRId64 " is negative", mpath, ck->step);
    ck->state = mt_json_get(r, "state");
    if (!ck->state || ck->state->type != MT_JSON_OBJECT)
        return mt_errorf(err, "%s: 'state' is missing or not an object", mpath);

    const mt_json *rcf = mt_json_get(r, "run_config");
    if (rcf) {
        const mt_json *nm = mt_json_get(rcf, "name");
        const char *sum;
        if (rcf->type != MT_JSON_OBJECT || !nm || nm->type != MT_JSON_STRING || !valid_file_name(nm->str, nm->str_len))
            return mt_errorf(err, "%s: run_config is not an object with a plain file name", mpath);
        ck->run_config = nm->str;
        if (get_u64(rcf, "bytes", &ck->run_config_bytes, "run_config", &e)) return mt_errorf(err, "%s: %s", mpath, e.msg);
        if (ck->run_config_bytes > MAX_RUN_CONFIG_BYTES)
            return mt_errorf(err, "%s: run_config: %" PRIu64 " bytes is implausible", mpath, ck->run_config_bytes);
        if (mt_json_get_string(rcf, "checksum", &sum, &e)) return mt_errorf(err, "%s: run_config: %s", mpath, e.msg);
        if (parse_checksum(sum, &ck->run_config_sum))
            return mt_errorf(err, "%s: run_config.checksum '%.40s' is not of the form fnv1a64x4:<16 hex digits>", mpath, sum);
    }

    const mt_json *files = mt_json_get(r, "files");
    if (!files || files->type != MT_JSON_ARRAY) return mt_errorf(err, "%s: 'files' is missing or not an array", mpath);
    if (files->count > 1000000) return mt_errorf(err, "%s: %zu files is implausible", mpath, files->count);
    ck->files = mt_xcalloc(files->count ? files->count : 1, sizeof(ck_file), "checkpoint file table");
    for (const mt_json *f = files->child; f; f = f->next) {
        ck_file *cf = &ck->files[ck->nfiles];
        cf->fd = -1;
        ck->nfiles++;
        int i = ck->nfiles - 1;
        snprintf(ctx, sizeof ctx, "files[%d]", i);
        if (f->type != MT_JSON_OBJECT) return mt_errorf(err, "%s: %s is not an object", mpath, ctx);
        const mt_json *nm = mt_json_get(f, "name");
        if (!nm || nm->type != MT_JSON_STRING || !valid_file_name(nm->str, nm->str_len))
            return mt_errorf(err, "%s: %s.name is missing or not a plain file name", mpath, ctx);
        cf->name = nm->str;
        for (int j = 0; j < i; j++)
            if (strcmp(ck->files[j].name, cf->name) == 0)
                return mt_errorf(err, "%s: file '%s' is listed twice", mpath, cf->name);
        if (get_u64(f, "bytes", &cf->bytes, ctx, &e)) return mt_errorf(err, "%s: %s", mpath, e.msg);
        const char *sum;
        if (mt_json_get_string(f, "checksum", &sum, &e)) return mt_errorf(err, "%s: %s: %s", mpath, ctx, e.msg);
        if (parse_checksum(sum, &cf->checksum))
            return mt_errorf(err, "%s: %s.checksum '%.40s' is not of the form fnv1a64x4:<16 hex digits>", mpath, ctx, sum);
    }

    const mt_json *ts = mt_json_get(r, "tensors");
    if (!ts || ts->type != MT_JSON_ARRAY) return mt_errorf(err, "%s: 'tensors' is missing or not an array", mpath);
    if (ts->count > 10000000) return mt_errorf(err, "%s: %zu tensors is implausible", mpath, ts->count);
    ck->tensors = mt_xcalloc(ts->count ? ts->count : 1, sizeof(ck_tensor), "checkpoint tensor table");
    for (const mt_json *t = ts->child; t; t = t->next) {
        ck_tensor *ct = &ck->tensors[ck->ntensors++];
        snprintf(ctx, sizeof ctx, "tensors[%d]", ck->ntensors - 1);
        if (t->type != MT_JSON_OBJECT) return mt_errorf(err, "%s: %s is not an object", mpath, ctx);
        const mt_json *nm = mt_json_get(t, "name");
        if (!nm || nm->type != MT_JSON_STRING || nm->str_len == 0 || strlen(nm->str) != nm->str_len)
            return mt_errorf(err, "%s: %s.name is missing, empty or not a string", mpath, ctx);
        ct->name = nm->str;
        snprintf(ctx, sizeof ctx, "tensor '%.40s'", ct->name);
        const char *dt;
        if (mt_json_get_string(t, "dtype", &dt, &e)) return mt_errorf(err, "%s: %s: %s", mpath, ctx, e.msg);
        if (strcmp(dt, "f32") != 0) return mt_errorf(err, "%s: %s has dtype '%.20s'; only f32 is supported", mpath, ctx, dt);
        const mt_json *sh = mt_json_get(t, "shape");
        if (!sh || sh->type != MT_JSON_ARRAY || sh->count > MT_CKPT_MAX_DIM)
            return mt_errorf(err, "%s: %s: shape is missing or not an array of at most %d integers", mpath, ctx,
                             MT_CKPT_MAX_DIM);
        ct->ndim = (int)sh->count;
        uint64_t prod = 1;
        int d = 0;
        for (int k = 0; k < MT_CKPT_MAX_DIM; k++) ct->shape[k] = 1;
        for (const mt_json *s = sh->child; s; s = s->next, d++) {
            int64_t v;
            if (mt_json_int64(s, &v) || v < 0 || (v > 0 && prod > (UINT64_MAX >> 3) / (uint64_t)v))
                return mt_errorf(err, "%s: %s: shape[%d] is not a valid dimension", mpath, ctx, d);
            ct->shape[d] = v;
            prod *= (uint64_t)v;
        }
        if (get_u64(t, "numel", &ct->numel, ctx, &e)) return mt_errorf(err, "%s: %s", mpath, e.msg);
        if (ct->numel != prod)
            return mt_errorf(err, "%s: %s: numel %" PRIu64 " does not match its shape (%" PRIu64 " elements)", mpath, ctx,
                             ct->numel, prod);
        const mt_json *ps = mt_json_get(t, "pieces");
        if (!ps || ps->type != MT_JSON_ARRAY) return mt_errorf(err, "%s: %s: 'pieces' is missing or not an array", mpath, ctx);
        if (ps->count > 1000000) return mt_errorf(err, "%s: %s: %zu pieces is implausible", mpath, ctx, ps->count);
        ct->pieces = mt_xcalloc(ps->count ? ps->count : 1, sizeof(ck_piece), "checkpoint pieces");
        uint64_t next = 0;
        for (const mt_json *p = ps->child; p; p = p->next) {
            ck_piece *cp = &ct->pieces[ct->npieces++];
            char pctx[96];
            snprintf(pctx, sizeof pctx, "%s piece %d", ctx, ct->npieces - 1);
            if (p->type != MT_JSON_OBJECT) return mt_errorf(err, "%s: %s is not an object", mpath, pctx);
            uint64_t fi;
            if (get_u64(p, "file", &fi, pctx, &e) || get_u64(p, "offset", &cp->offset, pctx, &e) ||
                get_u64(p, "start", &cp->start, pctx, &e) || get_u64(p, "numel", &cp->numel, pctx, &e))
                return mt_errorf(err, "%s: %s", mpath, e.msg);
            if (fi >= (uint64_t)ck->nfiles)
                return mt_errorf(err, "%s: %s refers to file %" PRIu64 " but only %d files are listed", mpath, pctx, fi,
                                 ck->nfiles);
            cp->file = (int)fi;
            if (cp->start != next)
                return mt_errorf(err, "%s: %s starts at element %" PRIu64 ", expected %" PRIu64
                                 " (pieces must be sorted and contiguous)", mpath, pctx, cp->start, next);
            if (cp->numel > ct->numel - next)
                return mt_errorf(err, "%s: %s extends past the tensor's %" PRIu64 " elements", mpath, pctx, ct->numel);
            next += cp->numel;
            const mt_json *ps_sum = mt_json_get(p, "checksum");
            if (ps_sum) {
                if (ps_sum->type != MT_JSON_STRING || parse_checksum(ps_sum->str, &cp->checksum))
                    return mt_errorf(err, "%s: %s: checksum is not of the form fnv1a64x4:<16 hex digits>", mpath, pctx);
                cp->has_sum = 1;
            } else if (ck->version >= 2) {
                return mt_errorf(err, "%s: %s has no checksum (version 2 manifests give every piece one)", mpath, pctx);
            }
            uint64_t align = ck->version >= 2 ? ALIGN_BYTES : sizeof(float);
            if (cp->offset % align)
                return mt_errorf(err, "%s: %s: offset %" PRIu64 " is not a multiple of %" PRIu64
                                 " (the manifest is damaged)", mpath, pctx, cp->offset, align);
            uint64_t fb = ck->files[cp->file].bytes;
            if (cp->offset > fb || cp->numel * 4 > fb - cp->offset)
                return mt_errorf(err, "%s: %s: bytes [%" PRIu64 ", %" PRIu64 ") lie outside %s (%" PRIu64 " bytes)", mpath,
                                 pctx, cp->offset, cp->offset + cp->numel * 4, ck->files[cp->file].name, fb);
        }
        if (next != ct->numel)
            return mt_errorf(err, "%s: %s: pieces cover %" PRIu64 " of %" PRIu64 " elements", mpath, ctx, next, ct->numel);
    }
    if (check_overlaps(ck, mpath, err)) return -1;
    ck->sorted = mt_xmalloc((size_t)(ck->ntensors ? ck->ntensors : 1) * sizeof *ck->sorted, "checkpoint name index");
    for (int i = 0; i < ck->ntensors; i++) ck->sorted[i] = &ck->tensors[i];
    qsort(ck->sorted, (size_t)ck->ntensors, sizeof *ck->sorted, cmp_tensor_ptr);
    for (int i = 1; i < ck->ntensors; i++)
        if (strcmp(ck->sorted[i - 1]->name, ck->sorted[i]->name) == 0)
            return mt_errorf(err, "%s: tensor '%.60s' is listed twice", mpath, ck->sorted[i]->name);
    return 0;
}

static int open_and_verify_files(mt_ckpt *ck, int verify, mt_error *err) {
    char *buf = NULL;
    for (int i = 0; i < ck->nfiles; i++) {
        ck_file *f = &ck->files[i];
        f->path = mt_path_join(ck->dir, f->name);
        f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
        if (f->fd < 0) {
            int e = errno;
            free(buf);
            return mt_errorf(err, "checkpoint data file %s listed in the manifest cannot be opened: %s%s", f->path,
                             strerror(e), e == ENOENT ? " (missing: the checkpoint is incomplete)" : "");
        }
        struct stat st;
        if (fstat(f->fd, &st) != 0) {
            free(buf);
            return mt_errorf(err, "cannot stat %s: %s", f->path, strerror(errno));
        }
        if ((uint64_t)st.st_size != f->bytes) {
            free(buf);
            return mt_errorf(err, "checkpoint data file %s is %lld bytes but the manifest says %" PRIu64
                             " (truncated or replaced)", f->path, (long long)st.st_size, f->bytes);
        }
        if (!verify) continue;
        if (!buf) buf = mt_xmalloc(IO_CHUNK, "checkpoint verification buffer");
        mt_checksum hs;
        mt_checksum_init(&hs);
        for (uint64_t off = 0; off < f->bytes;) {
            size_t c = f->bytes - off < IO_CHUNK ? (size_t)(f->bytes - off) : IO_CHUNK;
            if (mt_pread_all(f->fd, buf, c, off, f->path, err)) { free(buf); return -1; }
            mt_checksum_update(&hs, buf, c);
            off += c;
        }
        uint64_t got = mt_checksum_final(&hs);
        if (got != f->checksum) {
            free(buf);
            return mt_errorf(err, "checksum mismatch in checkpoint data file %s: computed fnv1a64x4:%016" PRIx64
                             ", manifest says fnv1a64x4:%016" PRIx64 " (the file is corrupted)", f->path, got, f->checksum);
        }
    }
    free(buf);
    return 0;
}

mt_ckpt *mt_ckpt_open_ex(const char *dir, unsigned flags, mt_error *err) {
    if (!dir || !dir[0]) { mt_errorf(err, "checkpoint open: empty directory name"); return NULL; }
    mt_ckpt *ck = mt_xcalloc(1, sizeof *ck, "checkpoint");
    size_t dl = strlen(dir);
    ck->dir = mt_xmalloc(dl + 1, "checkpoint directory");
    memcpy(ck->dir, dir, dl + 1);
    char *mpath = mt_path_join(dir, MANIFEST);
    char *text = NULL;
    size_t len = 0;
    mt_error e;
    if (read_whole_file(mpath, MAX_MANIFEST_BYTES, &text, &len, err)) goto fail;
    ck->doc = mt_json_parse(text, len, 64, &e);
    if (!ck->doc) { free(text); mt_errorf(err, "%s is not valid JSON: %s", mpath, e.msg); goto fail; }
    {
        int64_t ver = 0;
        const mt_json *r = mt_json_root(ck->doc);
        /* a version 2 manifest proves itself before anything in it is trusted */
        if (r->type == MT_JSON_OBJECT && mt_json_get_int64(r, "version", &ver, NULL) == 0 && ver >= 2 &&
            check_manifest_sum(text, len, mpath, err)) {
            free(text);
            goto fail;
        }
    }
    free(text);
    if (parse_manifest(ck, mpath, err)) goto fail;
    int verify = !(flags & (MT_CKPT_NO_VERIFY | MT_CKPT_LAZY_VERIFY)) || ((flags & MT_CKPT_LAZY_VERIFY) && ck->version < 2);
    if (open_and_verify_files(ck, verify, err)) goto fail;
    mt_json_writer w;
    mt_jw_init(&w);
    if (mt_jw_value(&w, ck->state, &e)) {
        mt_jw_free(&w);
        mt_errorf(err, "%s: %s", mpath, e.msg);
        goto fail;
    }
    ck->state_text = w.buf; /* ownership moves to ck */
    free(mpath);
    return ck;
fail:
    free(mpath);
    mt_ckpt_close(ck);
    return NULL;
}

mt_ckpt *mt_ckpt_open(const char *dir, mt_error *err) { return mt_ckpt_open_ex(dir, 0, err); }

int64_t mt_ckpt_step(const mt_ckpt *ck) { return ck->step; }
const char *mt_ckpt_state_json(const mt_ckpt *ck) { return ck->state_text; }
const mt_json *mt_ckpt_state(const mt_ckpt *ck) { return ck->state; }
int mt_ckpt_n_tensors(const mt_ckpt *ck) { return ck->ntensors; }

const char *mt_ckpt_tensor_name(const mt_ckpt *ck, int i) {
    return i >= 0 && i < ck->ntensors ? ck->tensors[i].name : NULL;
}

int mt_ckpt_has(const mt_ckpt *ck, const char *name, size_t *numel) {
    const ck_tensor *t = find_tensor(ck, name);
    if (!t) return 0;
    if (numel) *numel = (size_t)t->numel;
    return 1;
}

int mt_ckpt_shape(const mt_ckpt *ck, const char *name, int64_t shape[MT_CKPT_MAX_DIM]) {
    const ck_tensor *t = find_tensor(ck, name);
    if (!t) return -1;
    for (int k = 0; k < MT_CKPT_MAX_DIM; k++) shape[k] = t->shape[k];
    return t->ndim;
}

#define VERIFY_CHUNK ((size_t)1 << 20)

/* Reads a piece whole (through a small buffer) and checks its checksum. */
static int verify_piece(const mt_ckpt *ck, const ck_tensor *t, ck_piece *p, mt_error *err) {
    const ck_file *f = &ck->files[p->file];
    char *buf = mt_xmalloc(VERIFY_CHUNK, "checkpoint verification buffer");
    mt_checksum hs;
    mt_checksum_init(&hs);
    uint64_t bytes = p->numel * sizeof(float);
    for (uint64_t off = 0; off < bytes;) {
        size_t c = bytes - off < VERIFY_CHUNK ? (size_t)(bytes - off) : VERIFY_CHUNK;
        if (mt_pread_all(f->fd, buf, c, p->offset + off, f->path, err)) {
            free(buf);
            return -1;
        }
        mt_checksum_update(&hs, buf, c);
        off += c;
    }
    free(buf);
    uint64_t got = mt_checksum_final(&hs);
    if (got != p->checksum)
        return mt_errorf(err, "checksum mismatch in checkpoint %s: tensor '%s' elements [%" PRIu64 ", %" PRIu64
                         ") at bytes %" PRIu64 " of %s: computed " CHECKSUM_PREFIX "%016" PRIx64 ", manifest says "
                         CHECKSUM_PREFIX "%016" PRIx64 " (the data file is corrupted)", ck->dir, t->name, p->start,
                         p->start + p->numel, p->offset, f->name, got, p->checksum);
    p->verified = 1;
    return 0;
}

int mt_ckpt_verify_pieces(const mt_ckpt *ck, mt_error *err) {
    for (int i = 0; i < ck->ntensors; i++)
        for (int k = 0; k < ck->tensors[i].npieces; k++) {
            ck_piece *p = &ck->tensors[i].pieces[k];
            if (p->has_sum && verify_piece(ck, &ck->tensors[i], p, err)) return -1;
        }
    return 0;
}

const char *mt_ckpt_run_config_file(const mt_ckpt *ck) { return ck->run_config; }

/* "DIR/config-N.yaml (the checkpoint's run config) <what>: restore it, or ..." */
static int run_config_error(const char *path, const char *what, mt_error *err) {
    return mt_errorf(err, "%s (the checkpoint's run config) %s: restore the file, or resume with "
                          "{ignore-stored-config} and the run's flags", path, what);
}

int mt_ckpt_read_run_config(const mt_ckpt *ck, char **text, mt_error *err) {
    *text = NULL;
    if (!ck->run_config) return 1;
    char *path = mt_path_join(ck->dir, ck->run_config), *buf = NULL, what[MT_ERROR_LEN + 64];
    int rc = -1, fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    mt_error e;
    if (fd < 0) {
        snprintf(what, sizeof what, "cannot be opened: %s%s", strerror(errno),
                 errno == ENOENT ? " (missing: the checkpoint is incomplete)" : "");
        run_config_error(path, what, err);
    } else if (fstat(fd, &st) != 0) {
        snprintf(what, sizeof what, "cannot be inspected: %s", strerror(errno));
        run_config_error(path, what, err);
    } else if ((uint64_t)st.st_size != ck->run_config_bytes) {
        snprintf(what, sizeof what, "is %lld bytes but the manifest says %" PRIu64 " (changed after the save)",
                 (long long)st.st_size, ck->run_config_bytes);
        run_config_error(path, what, err);
    } else {
        size_t n = (size_t)ck->run_config_bytes;
        buf = mt_xmalloc(n + 1, "checkpoint run config");
        buf[n] = '\0';
        uint64_t got = 0;
        if (mt_pread_all(fd, buf, n, 0, path, &e)) {
            snprintf(what, sizeof what, "cannot be read: %s", e.msg);
            run_config_error(path, what, err);
        } else if ((got = mt_ckpt_checksum(buf, n)) != ck->run_config_sum) {
            snprintf(what, sizeof what, "was changed after the save (checksum " CHECKSUM_PREFIX "%016" PRIx64
                     ", the manifest says " CHECKSUM_PREFIX "%016" PRIx64 ")", got, ck->run_config_sum);
            run_config_error(path, what, err);
        } else if (strlen(buf) != n) {
            run_config_error(path, "holds a NUL byte (not a YAML text)", err);
        } else {
            rc = 0;
        }
    }
    if (fd >= 0) close(fd);
    free(path);
    if (rc) free(buf);
    else *text = buf;
    return rc;
}

int mt_ckpt_version(const mt_ckpt *ck) { return ck->version; }
const mt_json *mt_ckpt_saved_with(const mt_ckpt *ck) { return ck->saved_with; }
int mt_ckpt_n_files(const mt_ckpt *ck) { return ck->nfiles; }
int mt_ckpt_file(const mt_ckpt *ck, int i, const char **name, uint64_t *bytes) {
    if (i < 0 || i >= ck->nfiles) return -1;
    if (name) *name = ck->files[i].name;
    if (bytes) *bytes = ck->files[i].bytes;
    return 0;
}

int mt_ckpt_read(const mt_ckpt *ck, const char *name, size_t elem_offset, size_t n, float *dst, mt_error *err) {
    const ck_tensor *t = find_tensor(ck, name);
    if (!t) return mt_errorf(err, "checkpoint %s has no tensor '%s'", ck->dir, name);
    if (elem_offset > t->numel || n > t->numel - elem_offset)
        return mt_errorf(err, "checkpoint %s: reading elements [%zu, %zu) of tensor '%s' which has %" PRIu64 " elements",
                         ck->dir, elem_offset, elem_offset + n, name, t->numel);
    if (n == 0) return 0;
    /* First piece whose range ends after elem_offset. */
    int lo = 0, hi = t->npieces - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (t->pieces[mid].start + t->pieces[mid].numel <= elem_offset) lo = mid + 1;
        else hi = mid;
    }
    uint64_t want = elem_offset, end = (uint64_t)elem_offset + n;
    for (int k = lo; k < t->npieces && want < end; k++) {
        const ck_piece *p = &t->pieces[k];
        if (p->start + p->numel <= want) continue;
        uint64_t stop = p->start + p->numel < end ? p->start + p->numel : end;
        const ck_file *f = &ck->files[p->file];
        if (p->has_sum && !p->verified && verify_piece(ck, t, (ck_piece *)p, err)) return -1;
        if (mt_pread_all(f->fd, dst + (want - elem_offset), (size_t)(stop - want) * sizeof(float),
                      p->offset + (want - p->start) * sizeof(float), f->path, err))
            return -1;
        want = stop;
    }
    if (want != end) return mt_errorf(err, "checkpoint %s: tensor '%s' pieces do not cover the requested range", ck->dir, name);
    return 0;
}
