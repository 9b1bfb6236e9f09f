/* Checkpoints: round trip, element-range reads across pieces (resharding),
 * crash simulation at every phase of an atomic save, and rejection of
 * corrupted, truncated and malformed checkpoints with specific messages;
 * the run config saved beside a checkpoint (named per save, checked on read). */
#include "ckpt/checkpoint.h"
#include "testlib.h"
#include <dirent.h>
#include <inttypes.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_root[256];

static int count_files(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' && strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    if (d) closedir(d);
    return n;
}

/* A small model-like set of tensors whose values encode (tensor, index). */
#define NT 4
static float *g_data[NT];
static mt_ckpt_tensor g_t[NT];
static void make_tensors(float salt) {
    static const char *names[NT] = {"model/wte.weight", "model/h.0.ln_1.bias", "optim/m/wte.weight", "scalar"};
    static const int64_t shapes[NT][2] = {{7, 5}, {13, 1}, {7, 5}, {1, 1}};
    static const int ndims[NT] = {2, 1, 2, 0};
    for (int i = 0; i < NT; i++) {
        size_t n = (size_t)(shapes[i][0] * shapes[i][1]);
        free(g_data[i]);
        g_data[i] = malloc(n * sizeof(float));
        for (size_t j = 0; j < n; j++) g_data[i][j] = salt + (float)i * 1000.0f + (float)j * 0.5f;
        g_t[i] = (mt_ckpt_tensor){names[i], g_data[i], n, ndims[i], {shapes[i][0], shapes[i][1], 0, 0}};
    }
}

static int tensors_match(const mt_ckpt *ck) {
    int ok = 1;
    for (int i = 0; i < NT; i++) {
        size_t n = 0;
        if (!mt_ckpt_has(ck, g_t[i].name, &n) || n != g_t[i].numel) return 0;
        float *buf = malloc(n * sizeof(float));
        mt_error e;
        if (mt_ckpt_read(ck, g_t[i].name, 0, n, buf, &e)) ok = 0;
        else if (memcmp(buf, g_t[i].data, n * sizeof(float)) != 0) ok = 0;
        free(buf);
    }
    return ok;
}

static void expect_open_error(const char *dir, const char *want, int line) {
    mt_error e = {{0}};
    mt_ckpt *ck = mt_ckpt_open(dir, &e);
    CHECK(ck == NULL, "line %d: opened a bad checkpoint", line);
    CHECK(strstr(e.msg, want) != NULL, "line %d: message '%s' lacks '%s'", line, e.msg, want);
    CHECK(strchr(e.msg, '\n') == NULL, "line %d: multi-line message", line);
    mt_ckpt_close(ck);
}

static const char *STATE = "{ \"config\": {\"n_layer\": 1, \"dropout\": 0.1}, \"step\": 10, \"data\": {\"pos\": 12345678901234},"
                           " \"name\": \"caf\\u00e9\", \"list\": [1, 2.5e-3, true, null] }";

static void test_round_trip(void) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/a/b", g_root); /* parents are created */
    make_tensors(0.0f);
    mt_error e = {{0}};
    CHECK(mt_ckpt_save(dir, 10, STATE, g_t, NT, &e) == 0, "%s", e.msg);
    mt_ckpt *ck = mt_ckpt_open(dir, &e);
    CHECK(ck != NULL, "%s", e.msg);
    if (!ck) return;
    CHECK(mt_ckpt_step(ck) == 10, "step");
    CHECK(strcmp(mt_ckpt_state_json(ck),
                 "{\"config\":{\"n_layer\":1,\"dropout\":0.1},\"step\":10,\"data\":{\"pos\":12345678901234},"
                 "\"name\":\"caf\xc3\xa9\",\"list\":[1,2.5e-3,true,null]}") == 0, "state: %s", mt_ckpt_state_json(ck));
    int64_t pos = 0;
    CHECK(mt_json_get_int64(mt_json_get(mt_ckpt_state(ck), "data"), "pos", &pos, &e) == 0 && pos == 12345678901234LL, "pos");
    CHECK(mt_ckpt_n_tensors(ck) == NT && strcmp(mt_ckpt_tensor_name(ck, 0), "model/wte.weight") == 0, "names");
    CHECK(mt_ckpt_tensor_name(ck, NT) == NULL, "name out of range");
    CHECK(tensors_match(ck), "data");
    int64_t sh[MT_CKPT_MAX_DIM];
    CHECK(mt_ckpt_shape(ck, "model/wte.weight", sh) == 2 && sh[0] == 7 && sh[1] == 5, "shape");
    CHECK(mt_ckpt_shape(ck, "scalar", sh) == 0, "0-d");
    CHECK(mt_ckpt_shape(ck, "nope", sh) == -1 && !mt_ckpt_has(ck, "nope", NULL), "absent");
    /* every range of the 35-element tensor */
    int ok = 1;
    float buf[64];
    for (size_t a = 0; a <= 35; a++)
        for (size_t n = 0; a + n <= 35; n++) {
            if (mt_ckpt_read(ck, "optim/m/wte.weight", a, n, buf, &e)) ok = 0;
            else if (n && memcmp(buf, g_data[2] + a, n * sizeof(float))) ok = 0;
        }
    CHECK(ok, "range reads");
    CHECK(mt_ckpt_read(ck, "optim/m/wte.weight", 30, 6, buf, &e) == -1 && strstr(e.msg, "[30, 36)") &&
              strstr(e.msg, "35 elements"), "%s", e.msg);
    CHECK(mt_ckpt_read(ck, "nope", 0, 1, buf, &e) == -1 && strstr(e.msg, "no tensor 'nope'"), "%s", e.msg);
    mt_ckpt_close(ck);

    /* A newer step replaces the old data file. */
    make_tensors(1.0f);
    CHECK(mt_ckpt_save(dir, 20, "{\"step\":20}", g_t, NT, &e) == 0, "%s", e.msg);
    char p[400];
    snprintf(p, sizeof p, "%s/tensors-000010.bin", dir);
    CHECK(access(p, F_OK) != 0, "old data file deleted");
    CHECK(count_files(dir, "") == 2 && count_files(dir, "tensors-000020.bin") == 1, "dir holds manifest + 1 file");
    /* Re-saving the same step must not overwrite the live data file. */
    make_tensors(2.0f);
    CHECK(mt_ckpt_save(dir, 20, "{\"step\":20}", g_t, NT, &e) == 0, "%s", e.msg);
    CHECK(count_files(dir, "") == 2 && count_files(dir, "tensors-000020.1.bin") == 1, "same-step re-save uses a new name");
    ck = mt_ckpt_open(dir, &e);
    CHECK(ck && mt_ckpt_step(ck) == 20 && tensors_match(ck), "re-saved: %s", e.msg);
    mt_ckpt_close(ck);

    /* Empty checkpoint (no tensors) is fine. */
    snprintf(p, sizeof p, "%s/empty", g_root);
    CHECK(mt_ckpt_save(p, 0, NULL, NULL, 0, &e) == 0, "%s", e.msg);
    ck = mt_ckpt_open(p, &e);
    CHECK(ck && mt_ckpt_n_tensors(ck) == 0 && strcmp(mt_ckpt_state_json(ck), "{}") == 0, "empty: %s", e.msg);
    mt_ckpt_close(ck);
}

static void test_save_validation(void) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/val", g_root);
    make_tensors(0.0f);
    mt_error e = {{0}};
    CHECK(mt_ckpt_save(dir, 1, "{\"a\":", g_t, NT, &e) == -1 && strstr(e.msg, "state is not valid JSON") &&
              strstr(e.msg, "byte 5"), "%s", e.msg);
    CHECK(mt_ckpt_save(dir, 1, "[1]", g_t, NT, &e) == -1 && strstr(e.msg, "must be a JSON object"), "%s", e.msg);
    CHECK(mt_ckpt_save(dir, -1, "{}", g_t, NT, &e) == -1 && strstr(e.msg, "negative"), "%s", e.msg);
    mt_ckpt_tensor t2[2] = {g_t[0], g_t[0]};
    CHECK(mt_ckpt_save(dir, 1, "{}", t2, 2, &e) == -1 && strstr(e.msg, "'model/wte.weight' appears more than once"), "%s", e.msg);
    t2[1].name = "x";
    t2[1].shape[0] = 6;
    CHECK(mt_ckpt_save(dir, 1, "{}", t2, 2, &e) == -1 && strstr(e.msg, "'x' has numel 35 but its shape holds 30"), "%s", e.msg);
    t2[1].shape[0] = 7;
    t2[1].ndim = 5;
    CHECK(mt_ckpt_save(dir, 1, "{}", t2, 2, &e) == -1 && strstr(e.msg, "ndim 5"), "%s", e.msg);
    CHECK(mt_ckpt_save(dir, 1, "{\"s\":\"a\\u0000b\"}", g_t, NT, &e) == -1 && strstr(e.msg, "NUL"), "%s", e.msg);
    CHECK(count_files(dir, "") == 0, "failed saves leave nothing behind");
    expect_open_error(dir, "does not exist", __LINE__);
    char f[400];
    snprintf(f, sizeof f, "%s/file", g_root);
    spit(f, "x", 1);
    CHECK(mt_ckpt_save(f, 1, "{}", g_t, NT, &e) == -1 && strstr(e.msg, "not a directory"), "%s", e.msg);
}

static void test_crash_phases(void) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/crash", g_root);
    mt_error e = {{0}};
    make_tensors(5.0f);
    CHECK(mt_ckpt_save(dir, 100, "{\"step\":100}", g_t, NT, &e) == 0, "%s", e.msg);
    for (int phase = 1; phase <= 4; phase++) {
        /* the live checkpoint is step 100 + 10*(phase-1) with salt 5 */
        int64_t live = 100 + 10 * (phase - 1);
        mt_ckpt_test_crash_after = phase;
        float salt = 5.0f;
        make_tensors(7.0f);
        CHECK(mt_ckpt_save(dir, live + 10, "{}", g_t, NT, &e) == -1 && strstr(e.msg, "simulated crash"), "phase %d", phase);
        mt_ckpt_test_crash_after = 0;
        mt_ckpt *ck = mt_ckpt_open(dir, &e);
        CHECK(ck != NULL, "phase %d: not loadable after crash: %s", phase, e.msg);
        if (ck) {
            int64_t expect = phase == 4 ? live + 10 : live;
            CHECK(mt_ckpt_step(ck) == expect, "phase %d: step %lld", phase, (long long)mt_ckpt_step(ck));
            make_tensors(phase == 4 ? 7.0f : salt);
            CHECK(tensors_match(ck), "phase %d: data", phase);
            mt_ckpt_close(ck);
        }
        /* The next save succeeds and cleans up every leftover. */
        make_tensors(5.0f);
        CHECK(mt_ckpt_save(dir, live + 10, "{}", g_t, NT, &e) == 0, "phase %d: resave: %s", phase, e.msg);
        CHECK(count_files(dir, "") == 2, "phase %d: leftovers remain (%d files)", phase, count_files(dir, ""));
    }
    /* Leftover temp files from some earlier crash do not disturb loading. */
    char p[400];
    snprintf(p, sizeof p, "%s/manifest.json.tmp", dir);
    spit(p, "{garbage", 8);
    snprintf(p, sizeof p, "%s/tensors-000999.bin.tmp", dir);
    spit(p, "junk", 4);
    mt_ckpt *ck = mt_ckpt_open(dir, &e);
    CHECK(ck && mt_ckpt_step(ck) == 140 && tensors_match(ck), "leftover temps: %s", e.msg);
    mt_ckpt_close(ck);
}

/* The manifest text with its own checksum recomputed (what an attacker who
 * knows the format does: the structural checks must still catch the edit). */
static void reseal(char *m) {
    char *k = strstr(m, ",\"manifest_checksum\":\"");
    if (!k) return;
    char sum[40];
    snprintf(sum, sizeof sum, "fnv1a64x4:%016" PRIx64, mt_ckpt_checksum(m, (size_t)(k - m)));
    memcpy(k + strlen(",\"manifest_checksum\":\""), sum, strlen(sum));
}

static int g_reseal = 1;

/* Copies the good checkpoint at src into dst with the manifest text edited
 * (replace `from` by `to`, which must occur) and, unless g_reseal is 0, its
 * checksum recomputed. */
static void edited_copy(const char *src, const char *dst, const char *from, const char *to) {
    rm_tree(dst);
    mkdir(dst, 0755);
    char p[400], q[400];
    size_t n;
    snprintf(p, sizeof p, "%s/tensors-000001.bin", src);
    char *data = slurp(p, &n);
    snprintf(q, sizeof q, "%s/tensors-000001.bin", dst);
    spit(q, data, n);
    free(data);
    snprintf(p, sizeof p, "%s/manifest.json", src);
    char *m = slurp(p, &n);
    char *hit = from ? strstr(m, from) : NULL;
    if (from && !hit) { fprintf(stderr, "edit target '%s' not in manifest\n", from); exit(1); }
    snprintf(q, sizeof q, "%s/manifest.json", dst);
    char *out = malloc(n + (to ? strlen(to) : 0) + 1);
    if (hit) {
        size_t a = (size_t)(hit - m);
        memcpy(out, m, a);
        strcpy(out + a, to);
        strcat(out, hit + strlen(from));
    } else strcpy(out, m);
    if (g_reseal) reseal(out);
    spit(q, out, strlen(out));
    free(out);
    free(m);
}

static void test_corruption(void) {
    char good[300], bad[300], p[400];
    snprintf(good, sizeof good, "%s/good", g_root);
    snprintf(bad, sizeof bad, "%s/bad", g_root);
    make_tensors(3.0f);
    mt_error e = {{0}};
    CHECK(mt_ckpt_save(good, 1, "{\"step\":1}", g_t, NT, &e) == 0, "%s", e.msg);

    /* Flipped bit in the data. */
    edited_copy(good, bad, NULL, NULL);
    snprintf(p, sizeof p, "%s/tensors-000001.bin", bad);
    size_t n;
    char *d = slurp(p, &n);
    d[n / 2] ^= 0x10;
    spit(p, d, n);
    expect_open_error(bad, "checksum mismatch", __LINE__);
    mt_ckpt *ck = mt_ckpt_open_ex(bad, MT_CKPT_NO_VERIFY, &e);
    CHECK(ck != NULL, "NO_VERIFY skips checksums: %s", e.msg);
    mt_ckpt_close(ck);
    /* Truncated data file. */
    spit(p, d, n - 4);
    expect_open_error(bad, "truncated or replaced", __LINE__);
    free(d);
    /* Missing data file. */
    unlink(p);
    expect_open_error(bad, "missing", __LINE__);
    /* Truncated / invalid manifest. */
    edited_copy(good, bad, NULL, NULL);
    snprintf(p, sizeof p, "%s/manifest.json", bad);
    char *m = slurp(p, &n);
    spit(p, m, n / 2);
    expect_open_error(bad, "is not valid JSON: JSON parse error at byte", __LINE__);
    free(m);
    spit(p, "[]", 2);
    expect_open_error(bad, "not a JSON object", __LINE__);

    struct { const char *from, *to, *want; } edits[] = {
        {"\"meshtrain-checkpoint\"", "\"other\"", "format is 'other'"},
        {"\"version\":2", "\"version\":3", "version 3 is not supported"},
        {"\"version\":2", "\"version\":\"2\"", "'version' is a string"},
        {"\"step\":1,", "\"step\":-1,", "step -1 is negative"},
        {"\"state\":{", "\"stat\":{", "'state' is missing"},
        {"\"dtype\":\"f32\"", "\"dtype\":\"f16\"", "dtype 'f16'"},
        {"\"shape\":[7,5],\"numel\":35", "\"shape\":[7,6],\"numel\":35", "numel 35 does not match its shape (42 elements)"},
        {"\"shape\":[7,5]", "\"shape\":[7,5,1,1,1]", "at most 4"},
        {"\"shape\":[7,5]", "\"shape\":[7,-5]", "shape[1] is not a valid dimension"},
        {"\"offset\":0,\"start\":0,\"numel\":35", "\"offset\":0,\"start\":1,\"numel\":35", "sorted and contiguous"},
        {"\"offset\":0,\"start\":0,\"numel\":35", "\"offset\":0,\"start\":0,\"numel\":34", "pieces cover 34 of 35"},
        {"\"offset\":0,", "\"offset\":100032,", "lie outside"},
        {"\"offset\":0,", "\"offset\":1,", "offset 1 is not a multiple of 64"},
        {"\"offset\":0,", "\"offset\":64,", "overlap in tensors-000001.bin"},
        {"\"start\":0,\"numel\":35,\"checksum\"", "\"start\":0,\"numel\":35,\"check\"", "has no checksum"},
        {"\"offset\":0,", "\"offset\":1e30,", "not an exact integer"},
        {"\"file\":0", "\"file\":1", "only 1 files are listed"},
        {"\"name\":\"tensors-000001.bin\"", "\"name\":\"../x.bin\"", "not a plain file name"},
        {"\"checksum\":\"fnv1a64x4:", "\"checksum\":\"crc:", "not of the form"},
        {"\"name\":\"model/h.0.ln_1.bias\"", "\"name\":\"model/wte.weight\"", "'model/wte.weight' is listed twice"},
        {"\"bytes\":", "\"bytes\":1", "bytes but the manifest says"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        edited_copy(good, bad, edits[i].from, edits[i].to);
        expect_open_error(bad, edits[i].want, __LINE__ * 1000 + (int)i);
    }
    /* Without resealing, any changed byte of the manifest is caught by its
     * own checksum first: an offset moved by one, a digit of a shape. */
    g_reseal = 0;
    edited_copy(good, bad, "\"offset\":0,", "\"offset\":1,");
    expect_open_error(bad, "manifest checksum mismatch", __LINE__);
    edited_copy(good, bad, "\"shape\":[7,5]", "\"shape\":[5,7]");
    expect_open_error(bad, "manifest checksum mismatch", __LINE__);
    edited_copy(good, bad, ",\"manifest_checksum\"", ",\"manifest_checksun\"");
    expect_open_error(bad, "does not end in its \"manifest_checksum\"", __LINE__);
    g_reseal = 1;
    /* A flipped data byte with whole-file checks skipped: the read of the
     * piece that holds it fails on the piece's checksum (never a silent
     * wrong value). */
    edited_copy(good, bad, NULL, NULL);
    snprintf(p, sizeof p, "%s/tensors-000001.bin", bad);
    d = slurp(p, &n);
    d[4 * 3 + 1] ^= 0x01; /* element 3 of the first tensor */
    spit(p, d, n);
    free(d);
    ck = mt_ckpt_open_ex(bad, MT_CKPT_NO_VERIFY, &e);
    CHECK(ck != NULL, "%s", e.msg);
    if (ck) {
        float v[35];
        CHECK(mt_ckpt_read(ck, "model/wte.weight", 10, 2, v, &e) == -1 && strstr(e.msg, "checksum mismatch") &&
                  strstr(e.msg, "'model/wte.weight' elements [0, 35)"), "%s", e.msg);
        CHECK(mt_ckpt_read(ck, "model/h.0.ln_1.bias", 0, 13, v, &e) == 0, "an intact piece still reads: %s", e.msg);
        CHECK(mt_ckpt_verify_pieces(ck, &e) == -1 && strstr(e.msg, "checksum mismatch"), "%s", e.msg);
        mt_ckpt_close(ck);
    }
}

/* A hand-made manifest with a tensor split in 3 pieces over 2 files (the
 * layout a multi-rank save will write): reads of any range stitch them. */
static void test_multi_piece(void) {
    char dir[300], p[400];
    snprintf(dir, sizeof dir, "%s/multi", g_root);
    mkdir(dir, 0755);
    float full[100];
    for (int i = 0; i < 100; i++) full[i] = (float)i * 1.25f;
    /* file A: [pad 8 bytes][elements 0..40) ; file B: [elements 70..100)[elements 40..70) */
    char a[8 + 160], b[240];
    memset(a, 0, 8);
    memcpy(a + 8, full, 160);
    memcpy(b, full + 70, 120);
    memcpy(b + 120, full + 40, 120);
    snprintf(p, sizeof p, "%s/tensors-000005-r00000.bin", dir);
    spit(p, a, sizeof a);
    snprintf(p, sizeof p, "%s/tensors-000005-r00001.bin", dir);
    spit(p, b, sizeof b);
    char man[2048];
    snprintf(man, sizeof man,
             "{\"format\":\"meshtrain-checkpoint\",\"version\":1,\"step\":5,\"state\":{},"
             "\"files\":[{\"name\":\"tensors-000005-r00000.bin\",\"bytes\":168,\"checksum\":\"fnv1a64x4:%016" PRIx64 "\"},"
             "{\"name\":\"tensors-000005-r00001.bin\",\"bytes\":240,\"checksum\":\"fnv1a64x4:%016" PRIx64 "\"}],"
             "\"tensors\":[{\"name\":\"w\",\"dtype\":\"f32\",\"shape\":[10,10],\"numel\":100,\"pieces\":["
             "{\"file\":0,\"offset\":8,\"start\":0,\"numel\":40},"
             "{\"file\":1,\"offset\":120,\"start\":40,\"numel\":30},"
             "{\"file\":1,\"offset\":0,\"start\":70,\"numel\":30}]}]}",
             mt_ckpt_checksum(a, sizeof a), mt_ckpt_checksum(b, sizeof b));
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    spit(p, man, strlen(man));
    mt_error e = {{0}};
    mt_ckpt *ck = mt_ckpt_open(dir, &e);
    CHECK(ck != NULL, "%s", e.msg);
    if (!ck) return;
    int ok = 1;
    float buf[100];
    for (size_t s = 0; s < 100; s += 3)
        for (size_t n = 0; s + n <= 100; n += 7) {
            memset(buf, 0xff, sizeof buf);
            if (mt_ckpt_read(ck, "w", s, n, buf, &e) || (n && memcmp(buf, full + s, n * 4))) ok = 0;
        }
    CHECK(ok, "multi-piece reads: %s", e.msg);
    /* "reshard" into 3 ranks of a ZeRO-style flat split */
    size_t per = 34;
    for (int r = 0; r < 3; r++) {
        size_t s = (size_t)r * per, n = s + per > 100 ? 100 - s : per;
        CHECK(mt_ckpt_read(ck, "w", s, n, buf, &e) == 0 && memcmp(buf, full + s, n * 4) == 0, "rank %d", r);
    }
    mt_ckpt_close(ck);
}

/* One multi-writer save of step `step` holding tensor "w" (4 floats) and,
 * when conf is given, a run config. */
static int save_with_config(const char *dir, int64_t step, const char *conf, mt_error *e) {
    char base[96], name[128];
    float w[4] = {1, 2, 3, 4};
    if (mt_ckpt_data_base(dir, step, base, sizeof base, e)) return -1;
    snprintf(name, sizeof name, "%s-r00000.bin", base);
    mt_ckpt_file_writer *fw = mt_ckpt_file_begin(dir, name, e);
    mt_ckpt_file_entry fe;
    int rc = fw && !mt_ckpt_file_put(fw, 0, 0, w, 4, e) && !mt_ckpt_file_finish(fw, &fe, e) ? 0 : -1;
    mt_ckpt_text_entry te;
    if (!rc && conf) {
        mt_ckpt_run_config_name(base, name, sizeof name);
        rc = mt_ckpt_write_text(dir, name, conf, &te, e);
    }
    mt_ckpt_decl d = {"w", 1, {4, 1, 1, 1}};
    if (!rc) rc = mt_ckpt_write_manifest(dir, step, "{}", NULL, &d, 1, &fe, 1, conf ? &te : NULL, e);
    mt_ckpt_file_free(fw);
    return rc;
}

/* The run config beside a checkpoint: named after the data stem, read back
 * exactly, the previous save's removed with its data, a changed or missing
 * file refused on read, none listed = 1. */
static void test_run_config(void) {
    char dir[300], p[400];
    snprintf(dir, sizeof dir, "%s/conf", g_root);
    mt_error e = {{0}};
    const char *c3 = "schedule:\n  steps: 3\n", *c4 = "schedule:\n  steps: 4\n";
    CHECK(save_with_config(dir, 3, c3, &e) == 0, "%s", e.msg);
    snprintf(p, sizeof p, "%s/config-000099.yaml.tmp.123", dir); /* a crashed save's leftover */
    spit(p, "x", 1);
    snprintf(p, sizeof p, "%s/config-notes.yaml", dir); /* not a name the writer uses: kept */
    spit(p, "x", 1);
    CHECK(save_with_config(dir, 4, c4, &e) == 0, "%s", e.msg);
    CHECK(count_files(dir, "config-0") == 1, "old run configs removed (%d left)", count_files(dir, "config-0"));
    CHECK(count_files(dir, "config-notes") == 1, "a user's file is kept");
    mt_ckpt *ck = mt_ckpt_open(dir, &e);
    CHECK(ck != NULL, "%s", e.msg);
    if (!ck) return;
    char *text = NULL;
    CHECK(!strcmp(mt_ckpt_run_config_file(ck), "config-000004.yaml"), "name %s", mt_ckpt_run_config_file(ck));
    CHECK(mt_ckpt_read_run_config(ck, &text, &e) == 0 && text && !strcmp(text, c4), "read back: %s", e.msg);
    free(text);
    snprintf(p, sizeof p, "%s/config-000004.yaml", dir);
    spit(p, "schedule:\n  steps: 5\n", strlen(c4)); /* same size, other bytes */
    CHECK(mt_ckpt_read_run_config(ck, &text, &e) == -1 && strstr(e.msg, "was changed after the save") && !text,
          "changed: %s", e.msg);
    unlink(p);
    CHECK(mt_ckpt_read_run_config(ck, &text, &e) == -1 && strstr(e.msg, "missing"), "missing: %s", e.msg);
    mt_ckpt_close(ck);
    CHECK(save_with_config(dir, 5, NULL, &e) == 0, "%s", e.msg);
    ck = mt_ckpt_open(dir, &e);
    CHECK(ck && !mt_ckpt_run_config_file(ck) && mt_ckpt_read_run_config(ck, &text, &e) == 1 && !text, "none listed");
    mt_ckpt_close(ck);
}

/* A checksum change confined to one word is always seen; the checksum
 * depends on length and position. */
static void test_checksum(void) {
    unsigned char buf[101];
    for (int i = 0; i < 101; i++) buf[i] = (unsigned char)(i * 7);
    uint64_t h = mt_ckpt_checksum(buf, 101);
    int distinct = 1;
    for (int i = 0; i < 101; i++)
        for (int bit = 0; bit < 8; bit++) {
            buf[i] ^= (unsigned char)(1 << bit);
            if (mt_ckpt_checksum(buf, 101) == h) distinct = 0;
            buf[i] ^= (unsigned char)(1 << bit);
        }
    CHECK(distinct, "every single-bit flip changes the checksum");
    CHECK(mt_ckpt_checksum(buf, 100) != h && mt_ckpt_checksum(buf, 0) != mt_ckpt_checksum(buf, 1), "length matters");
    unsigned char zero[64] = {0};
    CHECK(mt_ckpt_checksum(zero, 32) != mt_ckpt_checksum(zero, 64), "zero runs of different length differ");
}

int main(void) {
    snprintf(g_root, sizeof g_root, "/tmp/mt_test_ckpt_XXXXXX");
    tl_mkdtemp(g_root);
    test_checksum();
    test_round_trip();
    test_save_validation();
    test_crash_phases();
    test_corruption();
    test_multi_piece();
    test_run_config();
    for (int i = 0; i < NT; i++) free(g_data[i]);
    /* clean up the scratch tree (two levels are enough) */
    const char *subs[] = {"a/b", "a", "empty", "val", "crash", "good", "bad", "multi", "conf"};
    char p[400];
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", g_root, subs[i]);
        rm_tree(p);
    }
    snprintf(p, sizeof p, "%s/file", g_root);
    unlink(p);
    rmdir(g_root);
    TEST_MAIN_END("test_ckpt");
}
