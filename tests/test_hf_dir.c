/* Hugging Face model directories (interop/hf_dir.h): write/read round trips in
 * fp32, bf16 and fp16 (one file and >= 3 shards + index), the exact bytes of
 * a file against the reference serializer's layout, the exact index text,
 * determinism, stale-file cleanup, and the error cases, each one line. */
#include "interop/hf_dir.h"
#include "testlib.h"
#include <dirent.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_root[256];

static char *P(const char *a, const char *b) { /* static ring of paths */
    static char ring[8][768];
    static int k;
    char *p = ring[k++ & 7];
    if (b) snprintf(p, sizeof ring[0], "%s/%s/%s", g_root, a, b);
    else snprintf(p, sizeof ring[0], "%s/%s", g_root, a);
    return p;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static void cp_tree(const char *from, const char *to) {
    mkdir(to, 0755);
    DIR *d = opendir(from);
    struct dirent *e;
    char a[1024], b[1024];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(a, sizeof a, "%s/%s", from, e->d_name);
            snprintf(b, sizeof b, "%s/%s", to, e->d_name);
            size_t n;
            char *x = slurp(a, &n);
            if (x) spit(b, x, n);
            free(x);
        }
    if (d) closedir(d);
}

/* Names in dir, sorted, joined by spaces (hidden files included). */
static void listing(const char *dir, char *out, size_t cap) {
    char names[64][256];
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) && n < 64)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    if (d) closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        strncat(out, names[i], cap - strlen(out) - 1);
        if (i + 1 < n) strncat(out, " ", cap - strlen(out) - 1);
    }
}

/* ---- the test model ---- */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[3];
} spec;

static const char *CONFIG = "{\"model_type\": \"test\", \"hidden_size\": 5}\n";

/* Added in this order; with the fp32 limit of 100 bytes the shards are
 * [layers.0.w 80 + layers.0.b 20] [layers.1.w 80] [big 140, alone]
 * [layers.1.b 20 + z 4 + empty 0]. */
static const spec MODEL[] = {
    {"layers.0.w", 2, {4, 5}}, {"layers.0.b", 1, {5}}, {"layers.1.w", 2, {4, 5}}, {"big", 2, {7, 5}},
    {"layers.1.b", 1, {5}},    {"z", 0, {0}},          {"empty", 2, {0, 4}},
};
#define NT (int)(sizeof MODEL / sizeof MODEL[0])

static size_t numel_of(const spec *s) {
    size_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= (size_t)s->shape[d];
    return n;
}

/* Values with bits below bf16/fp16 precision (so rounding is exercised),
 * within fp16 range; a few exact halfway cases and a tiny subnormal. */
static float *values(int which, size_t n) {
    float *v = malloc((n ? n : 1) * sizeof *v);
    uint32_t s = 12345u + 977u * (uint32_t)which;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 8.0f;
    }
    if (n > 2) {
        v[0] = mt_f32_from_bits(0x3f808000u); /* 1 + 2^-8: bf16 tie, rounds to even (down) */
        v[1] = mt_f32_from_bits(0x3f818000u); /* tie, rounds up */
        v[2] = 1e-6f;                         /* fp16 subnormal */
    }
    return v;
}

static float expect_as(mt_dtype t, float x) {
    if (t == MT_BF16) return mt_bf16_to_fp32(mt_fp32_to_bf16(x));
    if (t == MT_FP16) return mt_fp16_to_fp32(mt_fp32_to_fp16(x));
    return x;
}

static int write_model(const char *dir, mt_dtype t, size_t limit, mt_error *err) {
    mt_hf_writer *w;
    if (mt_hf_writer_open(dir, t, limit, &w, err)) return -1;
    for (int i = 0; i < NT; i++) {
        float *v = values(i, numel_of(&MODEL[i]));
        int rc = mt_hf_writer_add(w, MODEL[i].name, MODEL[i].ndim, MODEL[i].shape, v, err);
        free(v);
        if (rc) { mt_hf_writer_abort(w); return -1; }
    }
    return mt_hf_writer_finish(w, CONFIG, err);
}

static void check_model(const char *dir, mt_dtype t, int sharded) {
    mt_error err = {{0}};
    mt_hf_dir *d;
    int rc = mt_hf_dir_open(dir, &d, &err);
    CHECK(rc == 0, "open %s: %s", dir, err.msg);
    if (rc) return;
    CHECK(mt_hf_dir_sharded(d) == sharded, "sharded %d", mt_hf_dir_sharded(d));
    const mt_json *cfg = mt_hf_dir_config(d);
    const mt_json *mt = mt_json_get(cfg, "model_type");
    CHECK(mt && mt->type == MT_JSON_STRING && strcmp(mt->str, "test") == 0, "config model_type");
    CHECK(mt_hf_dir_count(d) == (size_t)NT, "count %zu", mt_hf_dir_count(d));
    for (size_t i = 1; i < mt_hf_dir_count(d); i++)
        CHECK(strcmp(mt_hf_dir_name(d, i - 1), mt_hf_dir_name(d, i)) < 0, "names in order at %zu", i);
    CHECK(mt_hf_dir_name(d, (size_t)NT) == NULL, "name past the end");
    for (int i = 0; i < NT; i++) {
        int nd = -1;
        int64_t sh[MT_ST_MAX_DIM];
        int idx = mt_hf_dir_find(d, MODEL[i].name, &nd, sh, &err);
        CHECK(idx >= 0 && strcmp(mt_hf_dir_name(d, (size_t)idx), MODEL[i].name) == 0, "find %s", MODEL[i].name);
        if (idx < 0) continue;
        CHECK(nd == MODEL[i].ndim, "%s ndim %d", MODEL[i].name, nd);
        for (int k = 0; k < nd && k < MODEL[i].ndim; k++) CHECK(sh[k] == MODEL[i].shape[k], "%s shape[%d]", MODEL[i].name, k);
        const char *want_dt = t == MT_FP32 ? "F32" : t == MT_BF16 ? "BF16" : "F16";
        CHECK(strcmp(mt_hf_dir_entry(d, (size_t)idx)->dtype, want_dt) == 0, "%s dtype %s", MODEL[i].name,
              mt_hf_dir_entry(d, (size_t)idx)->dtype);
        size_t n = numel_of(&MODEL[i]);
        float *v = values(i, n), *got = malloc((n ? n : 1) * sizeof *got);
        rc = mt_hf_dir_read_f32(d, MODEL[i].name, got, n, &err);
        CHECK(rc == 0, "read %s: %s", MODEL[i].name, err.msg);
        int bad = 0;
        for (size_t k = 0; k < n && !rc; k++) bad += mt_f32_bits(got[k]) != mt_f32_bits(expect_as(t, v[k]));
        CHECK(bad == 0, "%s (%s): %d values differ from the rounded input", MODEL[i].name, mt_dtype_name(t), bad);
        free(v);
        free(got);
    }
    mt_hf_dir_close(d);
}

/* ---- round trips, format, determinism ---- */

static void test_round_trips(void) {
    const mt_dtype ts[] = {MT_FP32, MT_BF16, MT_FP16};
    char ls[2048];
    for (int i = 0; i < 3; i++) {
        mt_error err = {{0}};
        char one[32], shd[32];
        snprintf(one, sizeof one, "one_%s", mt_dtype_name(ts[i]));
        snprintf(shd, sizeof shd, "shd_%s", mt_dtype_name(ts[i]));
        CHECK(write_model(P(one, NULL), ts[i], 0, &err) == 0, "write %s: %s", one, err.msg);
        listing(P(one, NULL), ls, sizeof ls);
        CHECK(strcmp(ls, "config.json model.safetensors") == 0, "%s holds: %s", one, ls);
        check_model(P(one, NULL), ts[i], 0);
        /* 100 fp32 bytes = 50 16-bit bytes: the same boundaries */
        size_t limit = ts[i] == MT_FP32 ? 100 : 50;
        CHECK(write_model(P(shd, NULL), ts[i], limit, &err) == 0, "write %s: %s", shd, err.msg);
        listing(P(shd, NULL), ls, sizeof ls);
        CHECK(strcmp(ls, "config.json model-00001-of-00004.safetensors model-00002-of-00004.safetensors "
                         "model-00003-of-00004.safetensors model-00004-of-00004.safetensors model.safetensors.index.json") == 0,
              "%s holds: %s", shd, ls);
        check_model(P(shd, NULL), ts[i], 1);
        /* A limit everything fits in gives one file, no index. */
        CHECK(write_model(P("fits", NULL), ts[i], 1 << 20, &err) == 0, "write fits: %s", err.msg);
        CHECK(same_file(P("fits", "model.safetensors"), P(one, "model.safetensors")), "fits == one file");
        CHECK(!exists(P("fits", MT_HF_INDEX)), "no index when one shard");
    }
    size_t n;
    char *cfg = slurp(P("one_fp32", "config.json"), &n);
    CHECK(cfg && strcmp(cfg, CONFIG) == 0, "config.json is the given text");
    free(cfg);

    /* The index as transformers writes it (indent 2, sorted keys, total_size =
     * tensor bytes: 80+20+80+140+20+4+0 fp32). */
    const char *want =
        "{\n  \"metadata\": {\n    \"total_size\": 344\n  },\n  \"weight_map\": {\n"
        "    \"big\": \"model-00003-of-00004.safetensors\",\n"
        "    \"empty\": \"model-00004-of-00004.safetensors\",\n"
        "    \"layers.0.b\": \"model-00001-of-00004.safetensors\",\n"
        "    \"layers.0.w\": \"model-00001-of-00004.safetensors\",\n"
        "    \"layers.1.b\": \"model-00004-of-00004.safetensors\",\n"
        "    \"layers.1.w\": \"model-00002-of-00004.safetensors\",\n"
        "    \"z\": \"model-00004-of-00004.safetensors\"\n"
        "  }\n}\n";
    char *ix = slurp(P("shd_fp32", MT_HF_INDEX), &n);
    CHECK(ix && strcmp(ix, want) == 0, "index text:\n%s", ix ? ix : "(missing)");
    free(ix);
    ix = slurp(P("shd_bf16", MT_HF_INDEX), &n);
    CHECK(ix && strstr(ix, "\"total_size\": 172\n"), "bf16 total_size is half");
    free(ix);

    /* Determinism: written again elsewhere and over itself, byte-identical. */
    mt_error err = {{0}};
    CHECK(write_model(P("shd_again", NULL), MT_BF16, 50, &err) == 0, "%s", err.msg);
    cp_tree(P("shd_bf16", NULL), P("shd_copy", NULL));
    CHECK(write_model(P("shd_bf16", NULL), MT_BF16, 50, &err) == 0, "%s", err.msg);
    const char *files[] = {"config.json", MT_HF_INDEX, "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                           "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors"};
    for (int i = 0; i < 6; i++) {
        CHECK(same_file(P("shd_again", files[i]), P("shd_bf16", files[i])), "%s identical (other dir)", files[i]);
        CHECK(same_file(P("shd_copy", files[i]), P("shd_bf16", files[i])), "%s identical (rewritten)", files[i]);
    }
}

/* The exact bytes of one file: what safetensors' serializer writes for the
 * same tensors with metadata {"format": "pt"}: __metadata__ first, tensors
 * sorted by name with ascending contiguous offsets, compact JSON, header
 * padded with spaces to a multiple of 8. */
static void test_exact_bytes(void) {
    mt_error err = {{0}};
    mt_hf_writer *w;
    CHECK(mt_hf_writer_open(P("exact", NULL), MT_FP32, 0, &w, &err) == 0, "%s", err.msg);
    const float b[2] = {1.0f, -2.0f}, a[3] = {0.5f, 0.25f, 3.0f};
    const int64_t sb[1] = {2}, sa[2] = {1, 3};
    CHECK(mt_hf_writer_add(w, "b", 1, sb, b, &err) == 0, "%s", err.msg);
    CHECK(mt_hf_writer_add(w, "a", 2, sa, a, &err) == 0, "%s", err.msg);
    CHECK(mt_hf_writer_finish(w, "{}", &err) == 0, "%s", err.msg);
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[0,12]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}";
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    unsigned char want[512];
    size_t k = 0;
    for (int i = 0; i < 8; i++) want[k++] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(want + k, hdr, hl);
    k += hl;
    while (k < 8 + padded) want[k++] = ' ';
    memcpy(want + k, a, sizeof a);
    k += sizeof a;
    memcpy(want + k, b, sizeof b);
    k += sizeof b;
    size_t n;
    char *got = slurp(P("exact", "model.safetensors"), &n);
    CHECK(got && n == k && memcmp(got, want, k) == 0, "model.safetensors bytes differ from the reference layout (%zu vs %zu bytes)", n, k);
    free(got);
    /* 16-bit dtype strings and alignment of every written header. */
    const char *files[] = {"model-00001-of-00004.safetensors", "model-00003-of-00004.safetensors"};
    const char *dirs[] = {"shd_bf16", "shd_fp16"}, *dts[] = {"\"dtype\":\"BF16\"", "\"dtype\":\"F16\""};
    for (int di = 0; di < 2; di++)
        for (int fi = 0; fi < 2; fi++) {
            char *f = slurp(P(dirs[di], files[fi]), &n);
            uint64_t h = 0;
            for (int i = 7; f && n >= 8 && i >= 0; i--) h = (h << 8) | (unsigned char)f[i];
            CHECK(f && h % 8 == 0 && h + 8 <= n && strncmp(f + 8, "{\"__metadata__\":{\"format\":\"pt\"},", 32) == 0 &&
                      strstr(f + 8, dts[di]),
                  "%s/%s header", dirs[di], files[fi]);
            free(f);
        }
}

/* Large enough for several conversion/copy chunks (1 MiB buffers). */
static void test_large(void) {
    mt_error err = {{0}};
    const size_t n = 600 * 1000;
    float *v = values(99, n), *got = malloc(n * sizeof *got);
    const int64_t sh[2] = {600, 1000};
    mt_hf_writer *w;
    CHECK(mt_hf_writer_open(P("large", NULL), MT_BF16, 0, &w, &err) == 0, "%s", err.msg);
    CHECK(mt_hf_writer_add(w, "x", 2, sh, v, &err) == 0, "%s", err.msg);
    CHECK(mt_hf_writer_add(w, "y", 2, sh, v, &err) == 0, "%s", err.msg);
    CHECK(mt_hf_writer_finish(w, CONFIG, &err) == 0, "%s", err.msg);
    mt_hf_dir *d;
    CHECK(mt_hf_dir_open(P("large", NULL), &d, &err) == 0, "%s", err.msg);
    const char *nm[] = {"x", "y"};
    for (int t = 0; t < 2; t++) {
        CHECK(mt_hf_dir_read_f32(d, nm[t], got, n, &err) == 0, "%s", err.msg);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += mt_f32_bits(got[i]) != mt_f32_bits(expect_as(MT_BF16, v[i]));
        CHECK(bad == 0, "large %s: %zu values differ", nm[t], bad);
    }
    mt_hf_dir_close(d);
    free(v);
    free(got);
}

/* Re-exporting into a directory removes the other layout's weight files. */
static void test_stale(void) {
    mt_error err = {{0}};
    char ls[2048];
    const char *dir = P("stale", NULL);
    CHECK(write_model(dir, MT_FP32, 100, &err) == 0, "%s", err.msg);
    spit(P("stale", "README.md"), "hi\n", 3);
    spit(P("stale", "model-00007-of-00009.safetensors"), "x", 1); /* an older, larger export */
    CHECK(write_model(dir, MT_FP32, 0, &err) == 0, "%s", err.msg);
    listing(dir, ls, sizeof ls);
    CHECK(strcmp(ls, "README.md config.json model.safetensors") == 0, "after single export: %s", ls);
    check_model(dir, MT_FP32, 0);
    CHECK(write_model(dir, MT_FP32, 100, &err) == 0, "%s", err.msg);
    listing(dir, ls, sizeof ls);
    CHECK(strcmp(ls, "README.md config.json model-00001-of-00004.safetensors model-00002-of-00004.safetensors "
                     "model-00003-of-00004.safetensors model-00004-of-00004.safetensors model.safetensors.index.json") == 0,
          "after sharded export: %s", ls);
    check_model(dir, MT_FP32, 1);
}

/* ---- errors ---- */

static void one_line(const char *msg, const char *want, int line) {
    CHECK(msg[0] && !strchr(msg, '\n') && strstr(msg, want), "line %d: error '%s' should be one line containing '%s'", line, msg, want);
    printf("  expected error: %s\n", msg);
}

static void expect_open_error(const char *dir, const char *want, int line) {
    mt_error err = {{0}};
    mt_hf_dir *d = (mt_hf_dir *)&err;
    int rc = mt_hf_dir_open(dir, &d, &err);
    CHECK(rc == -1 && d == NULL, "line %d: open %s should fail", line, dir);
    if (rc == 0) mt_hf_dir_close(d);
    one_line(err.msg, want, line);
}

static void edit_file(const char *path, const char *from, const char *to) {
    size_t n;
    char *s = slurp(path, &n);
    char *at = s ? strstr(s, from) : NULL;
    if (!at) { fprintf(stderr, "edit_file: '%s' not in %s\n", from, path); exit(1); }
    size_t a = (size_t)(at - s), fl = strlen(from), tl = strlen(to);
    char *o = malloc(n - fl + tl + 1);
    memcpy(o, s, a);
    memcpy(o + a, to, tl);
    memcpy(o + a + tl, at + fl, n - a - fl);
    spit(path, o, n - fl + tl);
    free(o);
    free(s);
}

/* A safetensors file holding an I64 tensor, written by hand. */
static void write_i64_file(const char *path) {
    const char *h = "{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
                    "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}";
    size_t hl = strlen(h), pad = (8 - hl % 8) % 8, n = 8 + hl + pad + 24;
    unsigned char *b = calloc(1, n);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)(hl + pad) >> (8 * i));
    memcpy(b + 8, h, hl);
    memset(b + 8 + hl, ' ', pad);
    int64_t ids[2] = {7, 11};
    float w[2] = {1.5f, -1.0f};
    memcpy(b + 8 + hl + pad, ids, 16);
    memcpy(b + 8 + hl + pad + 16, w, 8);
    spit(path, b, n);
    free(b);
}

static void test_errors(void) {
    mt_error err = {{0}};
    /* missing config.json */
    cp_tree(P("one_fp32", NULL), P("e_nocfg", NULL));
    unlink(P("e_nocfg", "config.json"));
    expect_open_error(P("e_nocfg", NULL), "has no config.json", __LINE__);
    /* config.json not an object */
    cp_tree(P("one_fp32", NULL), P("e_cfgarr", NULL));
    spit(P("e_cfgarr", "config.json"), "[1]", 3);
    expect_open_error(P("e_cfgarr", NULL), "is not a JSON object", __LINE__);
    /* no weights at all */
    mkdir(P("e_noweights", NULL), 0755);
    spit(P("e_noweights", "config.json"), "{}", 2);
    expect_open_error(P("e_noweights", NULL), "has neither model.safetensors nor", __LINE__);
    /* index naming a missing shard */
    cp_tree(P("shd_fp32", NULL), P("e_noshard", NULL));
    unlink(P("e_noshard", "model-00002-of-00004.safetensors"));
    expect_open_error(P("e_noshard", NULL), "to shard 'model-00002-of-00004.safetensors', which does not exist", __LINE__);
    /* tensor listed in the map but absent from its shard */
    cp_tree(P("shd_fp32", NULL), P("e_ghost", NULL));
    edit_file(P("e_ghost", MT_HF_INDEX), "\"weight_map\": {\n", "\"weight_map\": {\n    \"ghost\": \"model-00001-of-00004.safetensors\",\n");
    expect_open_error(P("e_ghost", NULL), "maps tensor 'ghost' to shard 'model-00001-of-00004.safetensors', but that file has no such tensor",
                      __LINE__);
    /* a shard tensor the map does not list, and one it sends elsewhere */
    cp_tree(P("shd_fp32", NULL), P("e_extra", NULL));
    edit_file(P("e_extra", MT_HF_INDEX), "    \"empty\": \"model-00004-of-00004.safetensors\",\n", "");
    expect_open_error(P("e_extra", NULL), "holds tensor 'empty', which model.safetensors.index.json maps nowhere", __LINE__);
    cp_tree(P("shd_fp32", NULL), P("e_moved", NULL));
    edit_file(P("e_moved", MT_HF_INDEX), "\"z\": \"model-00004-of-00004.safetensors\"", "\"z\": \"model-00001-of-00004.safetensors\"");
    expect_open_error(P("e_moved", NULL), "but that file has no such tensor", __LINE__);
    /* malformed index.json */
    cp_tree(P("shd_fp32", NULL), P("e_badjson", NULL));
    edit_file(P("e_badjson", MT_HF_INDEX), "  }\n}\n", "  \n");
    expect_open_error(P("e_badjson", NULL), "model.safetensors.index.json is not valid JSON: ", __LINE__);
    cp_tree(P("shd_fp32", NULL), P("e_nomap", NULL));
    const char *nomap = "{\"metadata\": {\"total_size\": 1}, \"weight_map\": [1]}";
    spit(P("e_nomap", MT_HF_INDEX), nomap, strlen(nomap));
    expect_open_error(P("e_nomap", NULL), "has no \"weight_map\" object", __LINE__);
    cp_tree(P("shd_fp32", NULL), P("e_numval", NULL));
    edit_file(P("e_numval", MT_HF_INDEX), "\"big\": \"model-00003-of-00004.safetensors\"", "\"big\": 3");
    expect_open_error(P("e_numval", NULL), "entry 'big' must be a shard file name", __LINE__);
    cp_tree(P("shd_fp32", NULL), P("e_escape", NULL));
    edit_file(P("e_escape", MT_HF_INDEX), "\"big\": \"model-00003-of-00004.safetensors\"",
              "\"big\": \"../shd_fp32/model-00003-of-00004.safetensors\"");
    expect_open_error(P("e_escape", NULL), "entry 'big' must be a shard file name inside the directory", __LINE__);
    cp_tree(P("shd_fp32", NULL), P("e_meta", NULL));
    edit_file(P("e_meta", MT_HF_INDEX), "\"total_size\": 344", "\"total_size\": \"344\"");
    expect_open_error(P("e_meta", NULL), "\"total_size\" is a byte count", __LINE__);
    /* a damaged shard: the safetensors reader's own message comes through */
    cp_tree(P("shd_fp32", NULL), P("e_trunc", NULL));
    spit(P("e_trunc", "model-00003-of-00004.safetensors"), "\xff\0\0\0\0\0\0\0{}      ", 16);
    expect_open_error(P("e_trunc", NULL), "model-00003-of-00004.safetensors: header length 255 is larger than the rest", __LINE__);

    /* unsupported dtype, wrong element count, absent tensor */
    mkdir(P("e_i64", NULL), 0755);
    spit(P("e_i64", "config.json"), "{}", 2);
    write_i64_file(P("e_i64", "model.safetensors"));
    mt_hf_dir *d;
    CHECK(mt_hf_dir_open(P("e_i64", NULL), &d, &err) == 0, "open e_i64: %s", err.msg);
    int nd;
    int64_t sh[MT_ST_MAX_DIM];
    CHECK(mt_hf_dir_find(d, "ids", &nd, sh, &err) == 0 && nd == 1 && sh[0] == 2, "find ids");
    float buf[4];
    CHECK(mt_hf_dir_read_f32(d, "ids", buf, 2, &err) == -1, "I64 read must fail");
    one_line(err.msg, "tensor 'ids' has dtype I64, which cannot be read as fp32", __LINE__);
    CHECK(mt_hf_dir_read_f32(d, "w", buf, 3, &err) == -1, "wrong count must fail");
    one_line(err.msg, "tensor 'w' has 2 elements but the caller's buffer holds 3", __LINE__);
    CHECK(mt_hf_dir_read_f32(d, "w", buf, 2, &err) == 0 && buf[0] == 1.5f && buf[1] == -1.0f, "read w: %s", err.msg);
    CHECK(mt_hf_dir_find(d, "nope", NULL, NULL, &err) == -1, "absent tensor");
    one_line(err.msg, "no tensor 'nope'", __LINE__);
    CHECK(mt_hf_dir_find(d, "nope", NULL, NULL, NULL) == -1, "absent tensor, no err");
    CHECK(mt_hf_dir_read_f32(d, "nope", buf, 1, &err) == -1, "absent read");
    one_line(err.msg, "no tensor 'nope'", __LINE__);
    mt_hf_dir_close(d);

    /* writer: refused tensors leave the writer usable; a bad config leaves
     * the directory as it was, with no temporaries */
    char before[2048], after[2048];
    listing(P("one_fp32", NULL), before, sizeof before);
    cp_tree(P("one_fp32", NULL), P("one_fp32_copy", NULL));
    mt_hf_writer *w;
    CHECK(mt_hf_writer_open(P("one_fp32", NULL), MT_BF16, 0, &w, &err) == 0, "%s", err.msg);
    const float v[2] = {1, 2};
    const int64_t s2[1] = {2}, sneg[1] = {-1};
    CHECK(mt_hf_writer_add(w, "t", 1, s2, v, &err) == 0, "%s", err.msg);
    CHECK(mt_hf_writer_add(w, "t", 1, s2, v, &err) == -1, "duplicate");
    one_line(err.msg, "tensor 't' was already added", __LINE__);
    CHECK(mt_hf_writer_add(w, "u", 1, sneg, v, &err) == -1, "negative dim");
    one_line(err.msg, "shape[0] = -1 is negative", __LINE__);
    CHECK(mt_hf_writer_add(w, "u", 9, s2, v, &err) == -1, "ndim 9");
    one_line(err.msg, "has ndim 9", __LINE__);
    CHECK(mt_hf_writer_add(w, "__metadata__", 1, s2, v, &err) == -1, "reserved name");
    one_line(err.msg, "is empty, reserved or not printable UTF-8", __LINE__);
    CHECK(mt_hf_writer_add(w, "bad\nname", 1, s2, v, &err) == -1, "control char");
    CHECK(mt_hf_writer_add(w, "u", 1, s2, NULL, &err) == -1, "no data");
    one_line(err.msg, "has 2 elements but no data", __LINE__);
    CHECK(mt_hf_writer_finish(w, "{\"a\": ", &err) == -1, "bad config");
    one_line(err.msg, "config.json text is not valid JSON", __LINE__);
    listing(P("one_fp32", NULL), after, sizeof after);
    CHECK(strcmp(before, after) == 0, "directory changed by a failed export: %s", after);
    CHECK(same_file(P("one_fp32", "model.safetensors"), P("one_fp32_copy", "model.safetensors")), "old weights kept");
    CHECK(mt_hf_writer_open(P("one_fp32", NULL), (mt_dtype)7, 0, &w, &err) == -1, "bad dtype");
    one_line(err.msg, "is not fp32, bf16 or fp16", __LINE__);
    CHECK(mt_hf_writer_open(P("no/such/parent", NULL), MT_FP32, 0, &w, &err) == -1, "no parent");
    one_line(err.msg, "cannot create directory", __LINE__);
    /* abort removes the shards already written */
    CHECK(mt_hf_writer_open(P("aborted", NULL), MT_FP32, 8, &w, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 3; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "t%d", i);
        CHECK(mt_hf_writer_add(w, nm, 1, s2, v, &err) == 0, "%s", err.msg);
    }
    mt_hf_writer_abort(w);
    listing(P("aborted", NULL), after, sizeof after);
    CHECK(after[0] == 0, "abort left: %s", after);
}

int main(void) {
    snprintf(g_root, sizeof g_root, "/tmp/mt_test_hf_dir_XXXXXX");
    tl_mkdtemp(g_root);
    test_round_trips();
    test_exact_bytes();
    test_large();
    test_stale();
    test_errors();
    if (!tl_failed) rm_tree(g_root);
    else fprintf(stderr, "files kept in %s\n", g_root);
    TEST_MAIN_END("test_hf_dir");
}
