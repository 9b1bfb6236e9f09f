/* Hugging Face model directories: see hf_dir.h. */
#include "interop/hf_dir.h"
#include "core/checksum.h"
#include "core/fileio.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* config.json and the index are small (a 1000-shard index is well under
 * 1 MiB); the cap stops a wrong file from being read whole. */
#define MAX_JSON_FILE ((uint64_t)64 << 20)
#define COPY_BUF ((size_t)1 << 20)

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *p = mt_xmalloc(n + 1, "string");
    memcpy(p, s, n + 1);
    return p;
}

/* Reads a whole (small) file and parses it as JSON. *missing is set when
 * the file does not exist, so callers can phrase that case themselves. */
mt_json_doc *mt_hf_read_json_file(const char *path, int *missing, mt_error *err) {
    *missing = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *missing = errno == ENOENT;
        mt_errorf(err, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        mt_errorf(err, "cannot stat %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > MAX_JSON_FILE) {
        mt_errorf(err, "%s is %s; expected a JSON file of at most %" PRIu64 " bytes", path,
                  S_ISREG(st.st_mode) ? "too large" : "not a regular file", MAX_JSON_FILE);
        close(fd);
        return NULL;
    }
    size_t len = (size_t)st.st_size;
    char *buf = mt_xmalloc(len, "JSON file");
    int rc = mt_pread_all(fd, buf, len, 0, path, err);
    close(fd);
    if (rc) { free(buf); return NULL; }
    mt_error je;
    mt_json_doc *doc = mt_json_parse(buf, len, 64, &je);
    free(buf);
    if (!doc) { mt_errorf(err, "%s is not valid JSON: %s", path, je.msg); return NULL; }
    if (mt_json_root(doc)->type != MT_JSON_OBJECT) {
        mt_errorf(err, "%s is not a JSON object", path);
        mt_json_free(doc);
        return NULL;
    }
    return doc;
}

/* ================= reading ================= */

typedef struct {
    const char *name;  /* the entry's name (owned by its file) */
    int file;          /* index into files */
    const mt_st_entry *e;
} tref;

struct mt_hf_dir {
    char *dir;
    mt_json_doc *config;
    int sharded;
    int n_files;
    mt_st_file **files;
    char **file_names; /* as in the index (or MT_HF_WEIGHTS) */
    size_t n;
    tref *t; /* sorted by name */
};

static int cmp_tref(const void *a, const void *b) { return strcmp(((const tref *)a)->name, ((const tref *)b)->name); }

static const tref *find_ref(const mt_hf_dir *d, const char *name) {
    tref key = {.name = name};
    return d->n ? bsearch(&key, d->t, d->n, sizeof *d->t, cmp_tref) : NULL;
}

void mt_hf_dir_close(mt_hf_dir *d) {
    if (!d) return;
    for (int i = 0; i < d->n_files; i++) {
        mt_st_close(d->files[i]);
        free(d->file_names[i]);
    }
    free(d->files);
    free(d->file_names);
    free(d->t);
    mt_json_free(d->config);
    free(d->dir);
    free(d);
}

static int add_file(mt_hf_dir *d, const char *name, mt_error *err) {
    char *path = mt_path_join(d->dir, name);
    mt_st_file *f = mt_st_open(path, err);
    free(path);
    if (!f) return -1;
    d->files = realloc(d->files, (size_t)(d->n_files + 1) * sizeof *d->files);
    d->file_names = realloc(d->file_names, (size_t)(d->n_files + 1) * sizeof *d->file_names);
    if (!d->files || !d->file_names) mt_die("out of memory growing the shard list of %s", d->dir);
    d->files[d->n_files] = f;
    d->file_names[d->n_files] = dup_str(name);
    d->n_files++;
    return 0;
}

/* A shard name must stay inside dir: a plain file name. */
static int plain_file_name(const char *s, size_t len) {
    return len > 0 && strlen(s) == len && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int open_index(mt_hf_dir *d, const char *ipath, mt_error *err) {
    int missing;
    mt_json_doc *doc = mt_hf_read_json_file(ipath, &missing, err);
    if (!doc) return -1;
    int rc = -1;
    const mt_json *root = mt_json_root(doc), *wm = mt_json_get(root, "weight_map"), *meta = mt_json_get(root, "metadata");
    if (!wm || wm->type != MT_JSON_OBJECT) {
        mt_errorf(err, "%s has no \"weight_map\" object (tensor name -> shard file): not a safetensors index", ipath);
        goto out;
    }
    if (meta) {
        const mt_json *ts = meta->type == MT_JSON_OBJECT ? mt_json_get(meta, "total_size") : NULL;
        if (meta->type != MT_JSON_OBJECT || (ts && (ts->type != MT_JSON_NUMBER || ts->number < 0)))
            { mt_errorf(err, "%s: \"metadata\" must be an object whose \"total_size\" is a byte count", ipath); goto out; }
    }
    if (wm->count == 0) { mt_errorf(err, "%s: \"weight_map\" is empty", ipath); goto out; }
    d->t = mt_xcalloc(wm->count, sizeof *d->t, "tensor table");
    for (const mt_json *m = wm->child; m; m = m->next) {
        if (m->key_len == 0 || strlen(m->key) != m->key_len) {
            mt_errorf(err, "%s: \"weight_map\" has an empty or NUL-containing tensor name", ipath);
            goto out;
        }
        if (m->type != MT_JSON_STRING || !plain_file_name(m->str, m->str_len)) {
            mt_errorf(err, "%s: \"weight_map\" entry '%.80s' must be a shard file name inside the directory (a string without '/')",
                      ipath, m->key);
            goto out;
        }
        int fi = -1;
        for (int i = 0; i < d->n_files && fi < 0; i++)
            if (strcmp(d->file_names[i], m->str) == 0) fi = i;
        if (fi < 0) {
            char *sp = mt_path_join(d->dir, m->str);
            struct stat st;
            int absent = stat(sp, &st) != 0 && errno == ENOENT;
            free(sp);
            if (absent) {
                mt_errorf(err, "%s maps tensor '%.80s' to shard '%.80s', which does not exist in %s (incomplete download?)", ipath,
                          m->key, m->str, d->dir);
                goto out;
            }
            if (add_file(d, m->str, err)) goto out;
            fi = d->n_files - 1;
        }
        const mt_st_entry *e = mt_st_find(d->files[fi], m->key);
        if (!e) {
            mt_errorf(err, "%s maps tensor '%.80s' to shard '%.80s', but that file has no such tensor", ipath, m->key, m->str);
            goto out;
        }
        d->t[d->n++] = (tref){.name = e->name, .file = fi, .e = e};
    }
    qsort(d->t, d->n, sizeof *d->t, cmp_tref);
    for (size_t i = 1; i < d->n; i++)
        if (strcmp(d->t[i - 1].name, d->t[i].name) == 0) {
            mt_errorf(err, "%s lists tensor '%.80s' twice in \"weight_map\"", ipath, d->t[i].name);
            goto out;
        }
    /* The other direction: every tensor of a shard is mapped to that shard. */
    for (int fi = 0; fi < d->n_files; fi++)
        for (int i = 0; i < mt_st_count(d->files[fi]); i++) {
            const char *name = mt_st_entry_at(d->files[fi], i)->name;
            const tref *r = find_ref(d, name);
            if (!r || r->file != fi) {
                mt_errorf(err, "%s/%s holds tensor '%.80s', which %s maps %s%s: the index and the shards disagree", d->dir,
                          d->file_names[fi], name, MT_HF_INDEX, r ? "to " : "nowhere", r ? d->file_names[r->file] : "");
                goto out;
            }
        }
    d->sharded = 1;
    rc = 0;
out:
    mt_json_free(doc); /* names point into the shard headers, not the index */
    return rc;
}

int mt_hf_dir_open(const char *dir, mt_hf_dir **out, mt_error *err) {
    *out = NULL;
    mt_hf_dir *d = mt_xcalloc(1, sizeof *d, "model directory");
    d->dir = dup_str(dir);
    char *cpath = mt_path_join(dir, MT_HF_CONFIG), *wpath = mt_path_join(dir, MT_HF_WEIGHTS), *ipath = mt_path_join(dir, MT_HF_INDEX);
    int rc = -1, missing;
    mt_error e2;
    d->config = mt_hf_read_json_file(cpath, &missing, &e2);
    if (!d->config) {
        if (missing) mt_errorf(err, "%s has no %s: not a Hugging Face model directory (or the config was not saved with the weights)", dir,
                               MT_HF_CONFIG);
        else mt_errorf(err, "%s", e2.msg);
        goto out;
    }
    struct stat st;
    if (stat(wpath, &st) == 0) {
        if (add_file(d, MT_HF_WEIGHTS, err)) goto out;
        d->n = (size_t)mt_st_count(d->files[0]);
        d->t = mt_xcalloc(d->n, sizeof *d->t, "tensor table");
        for (size_t i = 0; i < d->n; i++) {
            const mt_st_entry *e = mt_st_entry_at(d->files[0], (int)i);
            d->t[i] = (tref){.name = e->name, .file = 0, .e = e};
        }
        qsort(d->t, d->n, sizeof *d->t, cmp_tref); /* names are unique: the safetensors reader checks */
    } else if (errno != ENOENT) {
        mt_errorf(err, "cannot stat %s: %s", wpath, strerror(errno));
        goto out;
    } else if (stat(ipath, &st) != 0) {
        if (errno == ENOENT)
            mt_errorf(err, "%s has neither %s nor %s: no safetensors weights (convert a pytorch_model.bin checkpoint first)", dir,
                      MT_HF_WEIGHTS, MT_HF_INDEX);
        else mt_errorf(err, "cannot stat %s: %s", ipath, strerror(errno));
        goto out;
    } else if (open_index(d, ipath, err)) goto out;
    rc = 0;
out:
    free(cpath);
    free(wpath);
    free(ipath);
    if (rc) mt_hf_dir_close(d);
    else *out = d;
    return rc;
}

const mt_json *mt_hf_dir_config(const mt_hf_dir *d) { return mt_json_root(d->config); }
int mt_hf_dir_sharded(const mt_hf_dir *d) { return d->sharded; }
size_t mt_hf_dir_count(const mt_hf_dir *d) { return d->n; }
const char *mt_hf_dir_name(const mt_hf_dir *d, size_t i) { return i < d->n ? d->t[i].name : NULL; }
const mt_st_entry *mt_hf_dir_entry(const mt_hf_dir *d, size_t i) { return i < d->n ? d->t[i].e : NULL; }

int mt_hf_dir_find(const mt_hf_dir *d, const char *name, int *ndim, int64_t *shape, mt_error *err) {
    const tref *r = find_ref(d, name);
    if (!r) return mt_errorf(err, "%s: no tensor '%.120s'", d->dir, name);
    if (ndim) *ndim = r->e->ndim;
    if (shape) memcpy(shape, r->e->shape, (size_t)r->e->ndim * sizeof *shape);
    return (int)(r - d->t);
}

int mt_hf_dir_read_f32(mt_hf_dir *d, const char *name, float *dst, size_t n, mt_error *err) {
    const tref *r = find_ref(d, name);
    if (!r) return mt_errorf(err, "%s: no tensor '%.120s'", d->dir, name);
    const mt_st_entry *e = r->e;
    if (strcmp(e->dtype, "F32") && strcmp(e->dtype, "BF16") && strcmp(e->dtype, "F16"))
        return mt_errorf(err, "%s/%s: tensor '%.120s' has dtype %s, which cannot be read as fp32 (supported: F32, BF16, F16)", d->dir,
                         d->file_names[r->file], name, e->dtype);
    if ((uint64_t)n != e->numel)
        return mt_errorf(err, "%s: tensor '%.120s' has %" PRIu64 " elements but the caller's buffer holds %zu (shape mismatch?)", d->dir,
                         name, e->numel, n);
    return mt_st_read_f32(d->files[r->file], e, dst, err);
}

int mt_hf_dir_read_raw(mt_hf_dir *d, const char *name, const char *dtype, void *dst, size_t n, mt_error *err) {
    const tref *r = find_ref(d, name);
    if (!r) return mt_errorf(err, "%s: no tensor '%.120s'", d->dir, name);
    if ((uint64_t)n != r->e->numel)
        return mt_errorf(err, "%s: tensor '%.120s' has %" PRIu64 " elements, expected %zu (shape mismatch?)", d->dir,
                         name, r->e->numel, n);
    return mt_st_read_raw(d->files[r->file], r->e, dtype, dst, err);
}

/* ================= writing ================= */

typedef struct {
    size_t id; /* index into names */
    int ndim;
    int64_t shape[MT_ST_MAX_DIM];
    uint64_t off, bytes; /* in the spool */
} pending;

struct mt_hf_writer {
    char *dir;
    mt_dtype dt;
    size_t esz;
    uint64_t limit;
    int spool; /* unlinked temp file holding the current shard's encoded bytes */
    uint64_t spool_len;
    pending *cur;
    size_t n_cur, cap_cur;
    uint64_t cur_bytes;
    char **names; /* every tensor added, in order */
    int *shard_of;
    size_t n_all, cap_all;
    size_t *ht; /* open addressing over names: index + 1, 0 = empty */
    size_t ht_cap;
    int n_shards; /* shards closed so far (written to partial files) */
    uint64_t total;
    int failed;
    void *buf;
};

static size_t *ht_slot(mt_hf_writer *w, const char *name) {
    size_t i = (size_t)mt_checksum_fnv1a(name) & (w->ht_cap - 1);
    while (w->ht[i] && strcmp(w->names[w->ht[i] - 1], name) != 0) i = (i + 1) & (w->ht_cap - 1);
    return &w->ht[i];
}

static void ht_grow(mt_hf_writer *w) {
    size_t *old = w->ht, oc = w->ht_cap;
    w->ht_cap = oc ? 2 * oc : 64;
    w->ht = mt_xcalloc(w->ht_cap, sizeof *w->ht, "tensor name table");
    for (size_t i = 0; i < oc; i++)
        if (old[i]) *ht_slot(w, w->names[old[i] - 1]) = old[i];
    free(old);
}

/* Hidden temporary name of shard k (0-based), renamed at finish. */
static char *partial_shard(const mt_hf_writer *w, int k) {
    char n[64];
    snprintf(n, sizeof n, ".model-%05d.safetensors.partial", k + 1);
    return mt_path_join(w->dir, n);
}

static char *partial_of(const mt_hf_writer *w, const char *name) {
    size_t len = strlen(name) + 16;
    char *n = mt_xmalloc(len, "path");
    snprintf(n, len, ".%s.partial", name);
    char *p = mt_path_join(w->dir, n);
    free(n);
    return p;
}

static void unlink_partials(mt_hf_writer *w, int from_shard) {
    for (int k = from_shard; k < w->n_shards; k++) {
        char *p = partial_shard(w, k);
        unlink(p);
        free(p);
    }
}

static void writer_free(mt_hf_writer *w) {
    if (w->spool >= 0) close(w->spool);
    for (size_t i = 0; i < w->n_all; i++) free(w->names[i]);
    free(w->names);
    free(w->shard_of);
    free(w->ht);
    free(w->cur);
    free(w->buf);
    free(w->dir);
    free(w);
}

void mt_hf_writer_abort(mt_hf_writer *w) {
    if (!w) return;
    unlink_partials(w, 0);
    writer_free(w);
}

int mt_hf_writer_open(const char *dir, mt_dtype out_dtype, size_t shard_limit_bytes, mt_hf_writer **out, mt_error *err) {
    *out = NULL;
    if (out_dtype != MT_FP32 && out_dtype != MT_BF16 && out_dtype != MT_FP16)
        return mt_errorf(err, "HF writer: output dtype value %d is not fp32, bf16 or fp16", (int)out_dtype);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return mt_errorf(err, "cannot create directory %s: %s (does its parent exist?)", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return mt_errorf(err, "%s exists and is not a directory", dir);
    char *tmpl = mt_path_join(dir, ".mt-hf-spool-XXXXXX");
    int fd = mkstemp(tmpl);
    if (fd < 0) {
        mt_errorf(err, "cannot create a temporary file in %s: %s (is it writable?)", dir, strerror(errno));
        free(tmpl);
        return -1;
    }
    unlink(tmpl); /* the data lives as long as fd: nothing is left behind, even on a crash */
    free(tmpl);
    mt_hf_writer *w = mt_xcalloc(1, sizeof *w, "HF writer");
    w->dir = dup_str(dir);
    w->dt = out_dtype;
    w->esz = mt_dtype_size(out_dtype);
    w->limit = shard_limit_bytes;
    w->spool = fd;
    w->buf = mt_xmalloc(COPY_BUF, "conversion buffer");
    ht_grow(w);
    *out = w;
    return 0;
}

/* Encoded bytes of data (numel fp32 values) appended to the spool. */
static int spool_tensor(mt_hf_writer *w, const float *data, uint64_t numel, mt_error *err) {
    if (w->dt == MT_FP32) return mt_write_all(w->spool, data, (size_t)numel * 4, "HF writer spool file", err);
    size_t per = COPY_BUF / 2;
    for (uint64_t i = 0; i < numel; i += per) {
        size_t k = numel - i < per ? (size_t)(numel - i) : per;
        mt_convert_to_16(w->dt, w->buf, data + i, k);
        if (mt_write_all(w->spool, w->buf, k * 2, "HF writer spool file", err)) return -1;
    }
    return 0;
}

static int cmp_pending(const void *a, const void *b, void *names) {
    char **n = names;
    return strcmp(n[((const pending *)a)->id], n[((const pending *)b)->id]);
}

/* Writes the current shard to its partial file, tensors in name order (the
 * reference serializer's order), and empties the spool. */
static int close_shard(mt_hf_writer *w, mt_error *err) {
    qsort_r(w->cur, w->n_cur, sizeof *w->cur, cmp_pending, w->names);
    mt_st_spec *specs = mt_xcalloc(w->n_cur, sizeof *specs, "safetensors specs");
    for (size_t i = 0; i < w->n_cur; i++) {
        specs[i].name = w->names[w->cur[i].id];
        specs[i].ndim = w->cur[i].ndim;
        memcpy(specs[i].shape, w->cur[i].shape, sizeof specs[i].shape);
        specs[i].dtype = w->dt;
    }
    static const char *const meta[] = {"format", "pt"};
    char *path = partial_shard(w, w->n_shards);
    mt_st_writer *sw = mt_st_writer_open(path, specs, (int)w->n_cur, meta, 1, err);
    free(specs);
    int rc = sw ? 0 : -1;
    for (size_t i = 0; i < w->n_cur && !rc; i++)
        for (uint64_t o = 0; o < w->cur[i].bytes && !rc; o += COPY_BUF) {
            size_t k = w->cur[i].bytes - o < COPY_BUF ? (size_t)(w->cur[i].bytes - o) : COPY_BUF;
            rc = mt_pread_all(w->spool, w->buf, k, w->cur[i].off + o, "HF writer spool file", err) ||
                 mt_st_writer_put_bytes(sw, w->buf, k, err);
        }
    if (rc) {
        mt_st_writer_abort(sw);
        free(path);
        return -1;
    }
    rc = mt_st_writer_close(sw, err); /* fsyncs and renames <path>.tmp to <path> */
    free(path);
    if (rc) return -1;
    w->n_shards++;
    w->n_cur = 0;
    w->cur_bytes = 0;
    if (ftruncate(w->spool, 0) != 0 || lseek(w->spool, 0, SEEK_SET) != 0)
        return mt_errorf(err, "HF writer: cannot empty the spool file in %s: %s", w->dir, strerror(errno));
    w->spool_len = 0;
    return 0;
}

/* Tensor names go into JSON as they are: refuse what would not come back
 * byte-identical (control characters, invalid UTF-8). */
static int name_ok(const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        int n = *u < 0x80 ? 1 : (*u & 0xE0) == 0xC0 && *u >= 0xC2 ? 2 : (*u & 0xF0) == 0xE0 ? 3 : (*u & 0xF8) == 0xF0 && *u <= 0xF4 ? 4 : 0;
        if (n == 0 || *u < 0x20 || *u == 0x7F) return 0;
        for (int i = 1; i < n; i++)
            if ((u[i] & 0xC0) != 0x80) return 0;
        u += n;
    }
    return 1;
}

int mt_hf_writer_add(mt_hf_writer *w, const char *name, int ndim, const int64_t *shape, const float *data, mt_error *err) {
    if (w->failed) return mt_errorf(err, "HF writer for %s: an earlier write failed; abort and start over", w->dir);
    if (!name || !*name || !name_ok(name) || strcmp(name, "__metadata__") == 0)
        return mt_errorf(err, "HF writer: tensor name '%.80s' is empty, reserved or not printable UTF-8", name ? name : "(null)");
    if (ndim < 0 || ndim > MT_ST_MAX_DIM || (ndim > 0 && !shape))
        return mt_errorf(err, "HF writer: tensor '%.80s' has ndim %d; expected 0..%d with a shape", name, ndim, MT_ST_MAX_DIM);
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] > 0 && numel > ((uint64_t)1 << 60) / (uint64_t)shape[d]))
            return mt_errorf(err, "HF writer: tensor '%.80s' shape[%d] = %" PRId64 " is negative or too large", name, d, shape[d]);
        numel *= (uint64_t)shape[d];
    }
    if (numel > 0 && !data) return mt_errorf(err, "HF writer: tensor '%.80s' has %" PRIu64 " elements but no data", name, numel);
    if (*ht_slot(w, name)) return mt_errorf(err, "HF writer: tensor '%.80s' was already added", name);
    uint64_t bytes = numel * w->esz;
    /* Shard boundary, as transformers splits: the next tensor would pass the
     * limit (an oversized one thus stands alone). */
    if (w->limit && w->n_cur > 0 && w->cur_bytes + bytes > w->limit && close_shard(w, err)) { w->failed = 1; return -1; }
    if (spool_tensor(w, data, numel, err)) { w->failed = 1; return -1; }
    if (w->n_cur == w->cap_cur) {
        w->cap_cur = w->cap_cur ? 2 * w->cap_cur : 64;
        w->cur = realloc(w->cur, w->cap_cur * sizeof *w->cur);
        if (!w->cur) mt_die("out of memory growing the HF writer's shard list");
    }
    if (w->n_all == w->cap_all) {
        w->cap_all = w->cap_all ? 2 * w->cap_all : 64;
        w->names = realloc(w->names, w->cap_all * sizeof *w->names);
        w->shard_of = realloc(w->shard_of, w->cap_all * sizeof *w->shard_of);
        if (!w->names || !w->shard_of) mt_die("out of memory growing the HF writer's tensor list");
    }
    pending *p = &w->cur[w->n_cur++];
    memset(p, 0, sizeof *p);
    p->id = w->n_all;
    p->ndim = ndim;
    for (int d = 0; d < ndim; d++) p->shape[d] = shape[d];
    p->off = w->spool_len;
    p->bytes = bytes;
    w->spool_len += bytes;
    w->cur_bytes += bytes;
    w->total += bytes;
    w->names[w->n_all] = dup_str(name);
    w->shard_of[w->n_all] = w->n_shards;
    w->n_all++;
    if (2 * w->n_all > w->ht_cap) ht_grow(w);
    *ht_slot(w, name) = w->n_all;
    return 0;
}

static int write_text_file(const char *path, const char *text, size_t len, mt_error *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return mt_errorf(err, "cannot create %s: %s", path, strerror(errno));
    if (mt_write_all(fd, text, len, path, err)) { close(fd); unlink(path); return -1; }
    if (fsync(fd) != 0 || close(fd) != 0) {
        mt_errorf(err, "fsync/close of %s failed: %s", path, strerror(errno));
        unlink(path);
        return -1;
    }
    return 0;
}

static void shard_name(char *buf, size_t n, int k, int total) {
    if (total == 1) snprintf(buf, n, "%s", MT_HF_WEIGHTS);
    else snprintf(buf, n, "model-%05d-of-%05d.safetensors", k + 1, total);
}

/* A growable byte buffer for the index text. */
typedef struct {
    char *buf;
    size_t len, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->len + n > b->cap) {
        while (b->len + n > b->cap) b->cap = b->cap ? 2 * b->cap : 4096;
        b->buf = realloc(b->buf, b->cap);
        if (!b->buf) mt_die("out of memory building the safetensors index (%zu bytes)", b->cap);
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
}

/* A JSON string literal, escaped by json.h's writer, appended to out. */
static void sb_quoted(sbuf *out, const char *s) {
    mt_json_writer q;
    mt_jw_init(&q);
    mt_jw_string(&q, s);
    sb_put(out, q.buf, q.len);
    mt_jw_free(&q);
}

static int cmp_name_idx(const void *a, const void *b, void *names) {
    char **n = names;
    return strcmp(n[*(const size_t *)a], n[*(const size_t *)b]);
}

/* model.safetensors.index.json as transformers writes it: json.dumps(index,
 * indent=2, sort_keys=True) + "\n". */
static void build_index(const mt_hf_writer *w, sbuf *out) {
    char line[96];
    snprintf(line, sizeof line, "{\n  \"metadata\": {\n    \"total_size\": %" PRIu64 "\n  },\n  \"weight_map\": {\n", w->total);
    sb_put(out, line, strlen(line));
    size_t *order = mt_xmalloc(w->n_all * sizeof *order, "index order");
    for (size_t i = 0; i < w->n_all; i++) order[i] = i;
    qsort_r(order, w->n_all, sizeof *order, cmp_name_idx, w->names);
    for (size_t i = 0; i < w->n_all; i++) {
        char file[64];
        shard_name(file, sizeof file, w->shard_of[order[i]], w->n_shards);
        sb_put(out, "    ", 4);
        sb_quoted(out, w->names[order[i]]);
        sb_put(out, ": ", 2);
        sb_quoted(out, file);
        sb_put(out, i + 1 < w->n_all ? ",\n" : "\n", i + 1 < w->n_all ? 2 : 1);
    }
    free(order);
    sb_put(out, "  }\n}\n", 6);
}

/* Removes a file if present; a failure other than "absent" is an error. */
static int remove_stale(const char *dir, const char *name, mt_error *err) {
    char *p = mt_path_join(dir, name);
    int rc = 0;
    if (unlink(p) != 0 && errno != ENOENT)
        rc = mt_errorf(err, "the new model files are in %s, but the stale %s could not be removed: %s (remove it by hand)", dir, name,
                       strerror(errno));
    free(p);
    return rc;
}

/* model-XXXXX-of-YYYYY.safetensors: the shard names transformers uses. */
static int is_shard_name(const char *s, int *k, int *total) {
    char tail[16];
    int n = 0;
    if (strlen(s) != 32 || sscanf(s, "model-%5d-of-%5d%15s%n", k, total, tail, &n) != 3 || n != 32) return 0;
    for (int i = 6; i < 11; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    for (int i = 15; i < 20; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return strcmp(tail, ".safetensors") == 0;
}

static int remove_stale_shards(const mt_hf_writer *w, mt_error *err) {
    DIR *dh = opendir(w->dir);
    if (!dh) return mt_errorf(err, "cannot list %s to remove stale shards: %s", w->dir, strerror(errno));
    int rc = 0;
    struct dirent *de;
    char keep[64];
    while (!rc && (de = readdir(dh))) {
        int k, total;
        if (!is_shard_name(de->d_name, &k, &total)) continue;
        shard_name(keep, sizeof keep, k - 1, w->n_shards);
        if (w->n_shards > 1 && total == w->n_shards && k >= 1 && k <= total && strcmp(keep, de->d_name) == 0) continue;
        rc = remove_stale(w->dir, de->d_name, err);
    }
    closedir(dh);
    return rc;
}

int mt_hf_writer_finish(mt_hf_writer *w, const char *config_json_text, mt_error *err) {
    char *cfg_part = partial_of(w, MT_HF_CONFIG), *idx_part = partial_of(w, MT_HF_INDEX);
    int renamed = 0, rc = -1;
    sbuf ix = {0};
    if (w->failed) { mt_errorf(err, "HF writer for %s: an earlier write failed; nothing was put in place", w->dir); goto out; }
    mt_error je;
    mt_json_doc *cfg = config_json_text ? mt_json_parse(config_json_text, strlen(config_json_text), 64, &je) : NULL;
    int cfg_obj = cfg && mt_json_root(cfg)->type == MT_JSON_OBJECT;
    mt_json_free(cfg);
    if (!cfg_obj) {
        if (!config_json_text) mt_errorf(err, "HF writer: no config.json text given");
        else if (!cfg) mt_errorf(err, "HF writer: the config.json text is not valid JSON: %s", je.msg);
        else mt_errorf(err, "HF writer: the config.json text is not a JSON object");
        goto out;
    }
    if ((w->n_cur > 0 || w->n_shards == 0) && close_shard(w, err)) goto out;
    if (w->n_shards > 99999) { mt_errorf(err, "HF writer: %d shards exceed the 5-digit file numbering; raise the shard limit", w->n_shards); goto out; }
    if (write_text_file(cfg_part, config_json_text, strlen(config_json_text), err)) goto out;
    if (w->n_shards > 1) {
        build_index(w, &ix);
        if (write_text_file(idx_part, ix.buf, ix.len, err)) goto out;
    }
    /* Everything is on disk under temporary names: put it in place. With a
     * sharded export the stale single file goes before the index arrives,
     * since readers prefer model.safetensors. */
    for (; renamed < w->n_shards; renamed++) {
        char name[64], *from = partial_shard(w, renamed), *to;
        shard_name(name, sizeof name, renamed, w->n_shards);
        to = mt_path_join(w->dir, name);
        int r = rename(from, to);
        if (r != 0) mt_errorf(err, "renaming %s to %s failed: %s", from, to, strerror(errno));
        free(from);
        free(to);
        if (r != 0) goto out;
    }
    char *cfg_final = mt_path_join(w->dir, MT_HF_CONFIG), *idx_final = mt_path_join(w->dir, MT_HF_INDEX);
    int bad = 0;
    if (w->n_shards > 1) {
        bad = remove_stale(w->dir, MT_HF_WEIGHTS, err);
        if (!bad && rename(idx_part, idx_final) != 0) bad = mt_errorf(err, "renaming %s to %s failed: %s", idx_part, idx_final, strerror(errno));
    } else bad = remove_stale(w->dir, MT_HF_INDEX, err);
    if (!bad && rename(cfg_part, cfg_final) != 0) bad = mt_errorf(err, "renaming %s to %s failed: %s", cfg_part, cfg_final, strerror(errno));
    free(cfg_final);
    free(idx_final);
    if (bad || remove_stale_shards(w, err) || mt_fsync_dir(w->dir, err)) goto out;
    rc = 0;
out:
    unlink_partials(w, renamed);
    unlink(cfg_part); /* no-ops once renamed */
    unlink(idx_part);
    free(cfg_part);
    free(idx_part);
    free(ix.buf);
    writer_free(w);
    return rc;
}
