/* safetensors and llm.c conversion through a tiny random GPT-2: round trips
 * (F32, and BF16/F16/llm.c-bf16 on import), HF Conv1D transposition checked
 * element-wise, vocabulary padding, head-count sources, malformed files, and
 * the export/import subcommands end to end. */
#include "interop/weights.h"
#include "interop/llmc.h"
#include "interop/safetensors.h"
#include "testlib.h"
#include <dirent.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
/* The subcommands live outside libmeshtrain.a: compile them in. */
#include "cli/args.c"
#include "cli/cmd_interop.c"

static char g_root[256];
static char g_path[512];
static const char *P(const char *name) {
    snprintf(g_path, sizeof g_path, "%s/%s", g_root, name);
    return g_path;
}

static mt_model_config tiny(void) {
    mt_model_config c = {.n_layer = 2, .n_embd = 8, .n_head = 2, .vocab_size = 50, .padded_vocab = 128, .seq_len = 16, .dropout = 0};
    return c;
}

/* Values that are exact in bf16 and f16 (k/16 for small k), distinct per
 * (unit, element) pattern; wte padding rows stay zero. */
static void fill(mt_weights *w) {
    uint32_t s = 1;
    for (int u = 0; u < w->layout.n_units; u++)
        for (size_t i = 0; i < w->layout.units[u].numel; i++) {
            s = s * 1664525u + 1013904223u;
            w->unit[u][i] = (float)((int)(s >> 24) - 128) / 16.0f;
        }
    const mt_tensor *t;
    float *wte = mt_weights_tensor(w, "wte.weight", &t);
    for (size_t i = (size_t)w->cfg.vocab_size * 8; i < t->numel; i++) wte[i] = 0.0f;
}

static int same_weights(const mt_weights *a, const mt_weights *b) {
    if (memcmp(&a->cfg, &b->cfg, sizeof a->cfg) != 0) return 0;
    for (int u = 0; u < a->layout.n_units; u++)
        if (memcmp(a->unit[u], b->unit[u], a->layout.units[u].numel * sizeof(float)) != 0) return 0;
    return 1;
}

/* ---- a raw safetensors builder for crafting (malformed) files ---- */
typedef struct {
    char name[96];
    char dtype[12];
    int ndim;
    int64_t shape[4];
    unsigned char *data;
    size_t bytes;
} raw_t;
typedef struct {
    raw_t t[64];
    int n;
} raw_set;

static void raw_from_file(raw_set *rs, const char *path) {
    mt_error e;
    mt_st_file *f = mt_st_open(path, &e);
    if (!f) { fprintf(stderr, "%s\n", e.msg); exit(1); }
    rs->n = 0;
    for (int i = 0; i < mt_st_count(f); i++) {
        const mt_st_entry *x = mt_st_entry_at(f, i);
        raw_t *r = &rs->t[rs->n++];
        snprintf(r->name, sizeof r->name, "%s", x->name);
        snprintf(r->dtype, sizeof r->dtype, "%s", x->dtype);
        r->ndim = x->ndim;
        for (int d = 0; d < x->ndim; d++) r->shape[d] = x->shape[d];
        r->bytes = x->numel * 4;
        r->data = malloc(r->bytes + 1);
        mt_st_read_f32(f, x, (float *)(void *)r->data, &e);
    }
    mt_st_close(f);
}

static void raw_free(raw_set *rs) {
    for (int i = 0; i < rs->n; i++) free(rs->t[i].data);
    rs->n = 0;
}

static raw_t *raw_find(raw_set *rs, const char *name) {
    for (int i = 0; i < rs->n; i++)
        if (!strcmp(rs->t[i].name, name)) return &rs->t[i];
    fprintf(stderr, "raw_find: no %s\n", name);
    exit(1);
}

static void raw_remove(raw_set *rs, const char *name) {
    raw_t *r = raw_find(rs, name);
    free(r->data);
    *r = rs->t[--rs->n];
}

/* Converts every F32 tensor to BF16 or F16 (values are exact in both). */
static void raw_to_half(raw_set *rs, int bf16) {
    for (int i = 0; i < rs->n; i++) {
        raw_t *r = &rs->t[i];
        size_t n = r->bytes / 4;
        uint16_t *h = malloc(n * 2 + 1);
        for (size_t k = 0; k < n; k++) {
            float v;
            memcpy(&v, r->data + 4 * k, 4);
            uint32_t b;
            memcpy(&b, &v, 4);
            if (bf16) h[k] = (uint16_t)(b >> 16);
            else { /* exact normal/zero values only */
                uint32_t sign = (b >> 16) & 0x8000, ex = (b >> 23) & 0xFF, man = b & 0x7FFFFF;
                h[k] = (uint16_t)(ex == 0 ? sign : sign | ((ex - 112) << 10) | (man >> 13));
            }
        }
        free(r->data);
        r->data = (unsigned char *)h;
        r->bytes = n * 2;
        snprintf(r->dtype, sizeof r->dtype, bf16 ? "BF16" : "F16");
    }
}

/* Writes rs as a safetensors file; `extra_header` (if non-NULL) replaces the
 * generated header text entirely, `hlen_override` > 0 replaces the length. */
static void raw_write(const raw_set *rs, const char *path, const char *extra_header, uint64_t hlen_override, const char *meta) {
    char *hdr = malloc(1 << 16);
    size_t k = 0;
    uint64_t pos = 0;
    k += (size_t)sprintf(hdr + k, "{");
    if (meta) k += (size_t)sprintf(hdr + k, "\"__metadata__\":%s,", meta);
    for (int i = 0; i < rs->n; i++) {
        const raw_t *r = &rs->t[i];
        k += (size_t)sprintf(hdr + k, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", r->name, r->dtype);
        for (int d = 0; d < r->ndim; d++) k += (size_t)sprintf(hdr + k, d ? ",%" PRId64 : "%" PRId64, r->shape[d]);
        k += (size_t)sprintf(hdr + k, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", pos, pos + r->bytes);
        pos += r->bytes;
    }
    k += (size_t)sprintf(hdr + k, "}");
    const char *h = extra_header ? extra_header : hdr;
    size_t hl = strlen(h);
    uint64_t L = hlen_override ? hlen_override : hl;
    FILE *f = fopen(path, "wb");
    fwrite(&L, 8, 1, f);
    fwrite(h, 1, hl, f);
    for (int i = 0; i < rs->n; i++) fwrite(rs->t[i].data, 1, rs->t[i].bytes, f);
    fclose(f);
    free(hdr);
}

static void expect_st_import_error(const char *path, int heads, const char *want, int line) {
    mt_error e = {{0}};
    mt_weights w;
    int rc = mt_safetensors_import_gpt2(path, heads, &w, &e);
    CHECK(rc == -1, "line %d: accepted a bad file", line);
    if (rc == 0) mt_weights_free(&w);
    CHECK(strstr(e.msg, want) != NULL, "line %d: message '%s' lacks '%s'", line, e.msg, want);
    CHECK(strchr(e.msg, '\n') == NULL, "line %d: multi-line message", line);
}
#define ST_BAD(path, heads, want) expect_st_import_error(path, heads, want, __LINE__)

static void test_safetensors(const mt_weights *src) {
    mt_error e = {{0}};
    const char *f = strdup(P("model.safetensors"));
    CHECK(mt_safetensors_export_gpt2(f, src, &e) == 0, "%s", e.msg);
    /* Header: HF names and shapes, metadata, 8-byte aligned data. */
    mt_st_file *sf = mt_st_open(f, &e);
    CHECK(sf != NULL, "%s", e.msg);
    if (!sf) return;
    CHECK(mt_st_count(sf) == 4 + 12 * 2, "count %d", mt_st_count(sf));
    const mt_st_entry *x = mt_st_find(sf, "wte.weight");
    CHECK(x && x->ndim == 2 && x->shape[0] == 50 && x->shape[1] == 8, "wte unpadded [V, C]");
    x = mt_st_find(sf, "h.1.attn.c_attn.weight");
    CHECK(x && x->shape[0] == 8 && x->shape[1] == 24, "c_attn [C, 3C]");
    x = mt_st_find(sf, "h.1.mlp.c_proj.weight");
    CHECK(x && x->shape[0] == 32 && x->shape[1] == 8, "mlp.c_proj [4C, C]");
    const mt_json *meta = mt_st_metadata(sf);
    CHECK(meta && mt_json_get(meta, "format") && !strcmp(mt_json_get(meta, "format")->str, "pt"), "format=pt");
    size_t n;
    char *bytes = slurp(f, &n);
    uint64_t hl;
    memcpy(&hl, bytes, 8);
    CHECK((8 + hl) % 8 == 0, "data section aligned");
    free(bytes);
    /* Conv1D transposition, element-wise, for every block weight. */
    static const char *conv[] = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"};
    int ok = 1;
    for (int l = 0; l < 2; l++)
        for (int k = 0; k < 4; k++) {
            char name[64];
            snprintf(name, sizeof name, "h.%d.%s", l, conv[k]);
            const mt_tensor *t;
            const float *ours = mt_weights_tensor(src, name, &t);
            x = mt_st_find(sf, name);
            float *hf = malloc(x->numel * 4);
            mt_st_read_f32(sf, x, hf, &e);
            int64_t out = t->shape[0], in = t->shape[1];
            if (x->shape[0] != in || x->shape[1] != out) ok = 0;
            for (int64_t o = 0; o < out; o++)
                for (int64_t i = 0; i < in; i++)
                    if (hf[i * out + o] != ours[o * in + i]) ok = 0;
            free(hf);
        }
    CHECK(ok, "HF Conv1D weights are the transpose of ours");
    float ln[8];
    x = mt_st_find(sf, "h.0.ln_1.bias");
    CHECK(mt_st_read_f32(sf, x, ln, &e) == 0 && !memcmp(ln, mt_weights_tensor(src, "h.0.ln_1.bias", NULL), 32), "1-D copy");
    mt_st_close(sf);

    /* Round trip (heads from the file's metadata, or given). */
    mt_weights w;
    CHECK(mt_safetensors_import_gpt2(f, 0, &w, &e) == 0, "%s", e.msg);
    CHECK(same_weights(src, &w), "safetensors round trip is exact (wte re-padded with zeros)");
    mt_weights_free(&w);

    /* An HF-style file: transformer. prefix, tied lm_head, mask buffers, no
     * metadata; heads come from --heads or config.json only. */
    raw_set rs;
    raw_from_file(&rs, f);
    for (int i = 0; i < rs.n; i++) {
        char tmp[96];
        snprintf(tmp, sizeof tmp, "transformer.%s", rs.t[i].name);
        snprintf(rs.t[i].name, sizeof rs.t[i].name, "%s", tmp);
    }
    raw_t *lm = &rs.t[rs.n++];
    *lm = *raw_find(&rs, "transformer.wte.weight");
    lm->data = malloc(lm->bytes);
    memcpy(lm->data, raw_find(&rs, "transformer.wte.weight")->data, lm->bytes);
    snprintf(lm->name, sizeof lm->name, "lm_head.weight");
    raw_t *mask = &rs.t[rs.n++];
    *mask = (raw_t){.name = "transformer.h.0.attn.bias", .dtype = "BOOL", .ndim = 4, .shape = {1, 1, 16, 16}, .bytes = 256};
    mask->data = calloc(1, 256);
    mkdir(P("hf"), 0755);
    const char *hf = strdup(P("hf/model.safetensors"));
    raw_write(&rs, hf, NULL, 0, NULL);
    ST_BAD(hf, 0, "number of attention heads is unknown");
    CHECK(mt_safetensors_import_gpt2(hf, 2, &w, &e) == 0 && same_weights(src, &w), "HF layout with --heads: %s", e.msg);
    mt_weights_free(&w);
    spit(P("hf/config.json"), "{\"n_head\": 2, \"n_embd\": 8, \"n_layer\": 2, \"vocab_size\": 50}", 58);
    CHECK(mt_safetensors_import_gpt2(hf, 0, &w, &e) == 0 && same_weights(src, &w), "heads from config.json: %s", e.msg);
    mt_weights_free(&w);
    spit(P("hf/config.json"), "{\"n_head\": 2, \"n_embd\": 16}", 27);
    ST_BAD(hf, 0, "n_embd = 16 but the tensors imply 8");
    spit(P("hf/config.json"), "{\"n_head\": 2,", 13);
    ST_BAD(hf, 0, "config.json is not valid JSON");
    unlink(P("hf/config.json"));
    ST_BAD(hf, 3, "n_head 3 does not divide n_embd 8");

    /* BF16 and F16 files convert exactly. */
    raw_to_half(&rs, 1);
    raw_find(&rs, "transformer.h.0.attn.bias")->bytes = 256 * 2; /* keep mask consistent: declare it BF16 too */
    free(raw_find(&rs, "transformer.h.0.attn.bias")->data);
    raw_find(&rs, "transformer.h.0.attn.bias")->data = calloc(1, 512);
    raw_write(&rs, hf, NULL, 0, NULL);
    CHECK(mt_safetensors_import_gpt2(hf, 2, &w, &e) == 0 && same_weights(src, &w), "BF16 import: %s", e.msg);
    mt_weights_free(&w);
    raw_free(&rs);
    raw_from_file(&rs, f);
    raw_to_half(&rs, 0);
    raw_write(&rs, hf, NULL, 0, NULL);
    CHECK(mt_safetensors_import_gpt2(hf, 2, &w, &e) == 0 && same_weights(src, &w), "F16 import: %s", e.msg);
    mt_weights_free(&w);
    raw_free(&rs);

    /* Malformed files. */
    const char *bad = strdup(P("bad.safetensors"));
    spit(bad, "\x10\x00\x00", 3);
    ST_BAD(bad, 2, "too short for a safetensors header length");
    raw_from_file(&rs, f);
    raw_write(&rs, bad, NULL, 1000000, NULL);
    ST_BAD(bad, 2, "header length 1000000 is larger than the rest of the file");
    raw_write(&rs, bad, "{\"wte.weight\":{\"dtype\":\"F32\",", 0, NULL);
    ST_BAD(bad, 2, "header is not valid JSON: JSON parse error at byte");
    /* truncated data section: the last tensor's offsets fall outside */
    raw_write(&rs, bad, NULL, 0, NULL);
    bytes = slurp(bad, &n);
    spit(bad, bytes, n - 8);
    free(bytes);
    ST_BAD(bad, 2, "are out of range");
    /* hand-made headers for offset errors */
    {
        raw_set two = {.n = 0};
        float d[4] = {1, 2, 3, 4};
        for (int i = 0; i < 2; i++) {
            raw_t *r = &two.t[two.n++];
            *r = (raw_t){.dtype = "F32", .ndim = 1, .shape = {2}, .bytes = 8};
            snprintf(r->name, sizeof r->name, "t%d", i);
            r->data = malloc(8);
            memcpy(r->data, d + 2 * i, 8);
        }
        mt_error e2;
        raw_write(&two, bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 0, NULL);
        CHECK(!mt_st_open(bad, &e2) && strstr(e2.msg, "overlap"), "%s", e2.msg);
        raw_write(&two, bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 0, NULL);
        CHECK(!mt_st_open(bad, &e2) && strstr(e2.msg, "gap in the data section: bytes [4, 8)"), "%s", e2.msg);
        raw_write(&two, bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, NULL);
        CHECK(!mt_st_open(bad, &e2) && strstr(e2.msg, "trailing bytes"), "%s", e2.msg);
        raw_write(&two, bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", 0, NULL);
        CHECK(!mt_st_open(bad, &e2) && strstr(e2.msg, "span 16 bytes but shape x dtype F32 needs 12"), "%s", e2.msg);
        raw_write(&two, bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 0, NULL);
        CHECK(!mt_st_open(bad, &e2) && strstr(e2.msg, "begin <= end"), "%s", e2.msg);
        raw_write(&two, bad, "{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, NULL);
        CHECK(!mt_st_open(bad, &e2) && strstr(e2.msg, "unknown dtype 'Q4'"), "%s", e2.msg);
        raw_write(&two, bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 0, NULL);
        CHECK(!mt_st_open(bad, &e2) && strstr(e2.msg, "shape[0] is not a valid dimension"), "%s", e2.msg);
        raw_write(&two, bad, "{\"__metadata__\":{\"x\":1},\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 0, NULL);
        CHECK(!mt_st_open(bad, &e2) && strstr(e2.msg, "__metadata__ value of 'x' is not a string"), "%s", e2.msg);
        raw_write(&two, bad, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 0, NULL);
        CHECK(!mt_st_open(bad, &e2) && strstr(e2.msg, "'a' appears twice"), "%s", e2.msg);
        raw_write(&two, bad, "[]", 0, NULL);
        CHECK(!mt_st_open(bad, &e2) && strstr(e2.msg, "not a JSON object"), "%s", e2.msg);
        raw_free(&two);
    }
    /* GPT-2-level errors. */
    raw_t *ca = raw_find(&rs, "h.1.attn.c_attn.weight");
    ca->shape[0] = 24; ca->shape[1] = 8; /* our layout instead of HF's */
    raw_write(&rs, bad, NULL, 0, NULL);
    ST_BAD(bad, 2, "tensor 'h.1.attn.c_attn.weight' has wrong shape [24, 8], expected [8, 24]");
    ca->shape[0] = 8; ca->shape[1] = 24;
    raw_find(&rs, "wpe.weight")->shape[1] = 4;
    raw_find(&rs, "wpe.weight")->shape[0] = 32;
    raw_write(&rs, bad, NULL, 0, NULL);
    ST_BAD(bad, 2, "wrong shapes: wte.weight and wpe.weight");
    raw_find(&rs, "wpe.weight")->shape[1] = 8;
    raw_find(&rs, "wpe.weight")->shape[0] = 16;
    raw_t *lb = raw_find(&rs, "ln_f.bias");
    snprintf(lb->dtype, sizeof lb->dtype, "I32");
    raw_write(&rs, bad, NULL, 0, NULL);
    ST_BAD(bad, 2, "tensor 'ln_f.bias' has dtype I32; expected F32, F16 or BF16");
    snprintf(lb->dtype, sizeof lb->dtype, "F32");
    snprintf(lb->name, sizeof lb->name, "ln_f.bias_typo");
    raw_write(&rs, bad, NULL, 0, NULL);
    ST_BAD(bad, 2, "missing tensor 'ln_f.bias'");
    snprintf(lb->name, sizeof lb->name, "ln_f.bias");
    raw_remove(&rs, "h.1.ln_2.bias");
    raw_write(&rs, bad, NULL, 0, NULL);
    ST_BAD(bad, 2, "missing tensor 'h.1.ln_2.bias'");
    raw_free(&rs);
    raw_from_file(&rs, f);
    snprintf(raw_find(&rs, "ln_f.bias")->name, 96, "extra.bias");
    raw_t *extra = &rs.t[rs.n++];
    *extra = *raw_find(&rs, "h.0.ln_1.bias");
    extra->data = malloc(extra->bytes);
    memcpy(extra->data, raw_find(&rs, "h.0.ln_1.bias")->data, extra->bytes);
    snprintf(extra->name, sizeof extra->name, "ln_f.bias");
    raw_write(&rs, bad, NULL, 0, NULL);
    ST_BAD(bad, 2, "unexpected tensor 'extra.bias'");
    raw_free(&rs);
    raw_from_file(&rs, f);
    raw_t *dupw = &rs.t[rs.n++];
    *dupw = *raw_find(&rs, "wpe.weight");
    dupw->data = malloc(dupw->bytes);
    memcpy(dupw->data, raw_find(&rs, "wpe.weight")->data, dupw->bytes);
    snprintf(dupw->name, sizeof dupw->name, "transformer.wpe.weight");
    raw_write(&rs, bad, NULL, 0, NULL);
    ST_BAD(bad, 2, "appears both as");
    raw_free(&rs);
    ST_BAD(P("nonexistent.safetensors"), 2, "cannot open");
    free((void *)f);
    free((void *)hf);
    free((void *)bad);
}

static void expect_llmc_error(const char *path, int heads, const char *want, int line) {
    mt_error e = {{0}};
    mt_weights w;
    int rc = mt_llmc_import(path, heads, &w, &e);
    CHECK(rc == -1, "line %d: accepted a bad file", line);
    if (rc == 0) mt_weights_free(&w);
    char shown[MT_ERROR_LEN]; /* as the CLI says it: {option} names as --option */
    mt_render_options(e.msg, "--", shown, sizeof shown);
    CHECK(strstr(shown, want) != NULL, "line %d: message '%s' lacks '%s'", line, shown, want);
}
#define LL_BAD(path, heads, want) expect_llmc_error(path, heads, want, __LINE__)

static void test_llmc(const mt_weights *src) {
    mt_error e = {{0}};
    const char *f = strdup(P("model.bin"));
    CHECK(mt_llmc_export(f, src, &e) == 0, "%s", e.msg);
    size_t n;
    char *b = slurp(f, &n);
    CHECK(n == 1024 + src->layout.total_params * 4, "size %zu", n);
    int32_t h[8];
    memcpy(h, b, sizeof h);
    CHECK(h[0] == 20240326 && h[1] == 3 && h[2] == 16 && h[3] == 50 && h[4] == 2 && h[5] == 2 && h[6] == 8 && h[7] == 128,
          "header");
    /* llm.c order: layer 1's qkvw sits after wte, wpe, ln1w[L], ln1b[L], qkvw[layer 0]. */
    size_t C = 8, Vp = 128, T = 16, L = 2;
    size_t off = 1024 + 4 * (Vp * C + T * C + 2 * L * C + 3 * C * C);
    CHECK(!memcmp(b + off, mt_weights_tensor(src, "h.1.attn.c_attn.weight", NULL), 3 * C * C * 4), "qkvw[1] placement");
    off = n - 4 * C;
    CHECK(!memcmp(b + off, mt_weights_tensor(src, "ln_f.bias", NULL), C * 4), "lnfb last");
    mt_weights w;
    CHECK(mt_llmc_import(f, 0, &w, &e) == 0 && same_weights(src, &w), "llm.c round trip: %s", e.msg);
    mt_weights_free(&w);
    CHECK(mt_llmc_import(f, 2, &w, &e) == 0, "matching --heads: %s", e.msg);
    mt_weights_free(&w);
    LL_BAD(f, 4, "--heads 4 disagrees with the file's header (n_head 2)");

    /* A file with Vp = V (unpadded, as older exports): re-padded with zeros. */
    const char *g = strdup(P("model_vp.bin"));
    {
        size_t wte_real = 50 * C * 4, wte_file = Vp * C * 4;
        char *o = malloc(n);
        memcpy(o, b, 1024);
        int32_t vp = 50;
        memcpy(o + 28, &vp, 4);
        memcpy(o + 1024, b + 1024, wte_real);
        memcpy(o + 1024 + wte_real, b + 1024 + wte_file, n - 1024 - wte_file);
        spit(g, o, n - (wte_file - wte_real));
        CHECK(mt_llmc_import(g, 0, &w, &e) == 0 && same_weights(src, &w), "Vp = V file: %s", e.msg);
        mt_weights_free(&w);
        /* bf16 (version 5) */
        size_t np = (n - 1024) / 4;
        memcpy(o, b, 1024);
        int32_t v5 = 5;
        memcpy(o + 4, &v5, 4);
        for (size_t i = 0; i < np; i++) {
            uint32_t x;
            memcpy(&x, b + 1024 + 4 * i, 4);
            uint16_t hb = (uint16_t)(x >> 16);
            memcpy(o + 1024 + 2 * i, &hb, 2);
        }
        spit(g, o, 1024 + 2 * np);
        CHECK(mt_llmc_import(g, 0, &w, &e) == 0 && same_weights(src, &w), "bf16 llm.c file: %s", e.msg);
        mt_weights_free(&w);
        free(o);
    }
    /* Malformed. */
    spit(g, b, n - 4);
    LL_BAD(g, 0, "implies");
    LL_BAD(g, 0, "(truncated?)");
    char *o = malloc(n + 4);
    memcpy(o, b, n);
    memset(o + n, 0, 4);
    spit(g, o, n + 4);
    LL_BAD(g, 0, "trailing bytes");
    spit(g, b, 100);
    LL_BAD(g, 0, "shorter than the 1024-byte llm.c header");
    /* a header claiming 4095 layers in a small file: refused by the size bound before the layout is built */
    memcpy(o, b, n);
    int32_t many = 4095;
    memcpy(o + 4 * 4, &many, 4);
    spit(g, o, n);
    LL_BAD(g, 0, "implies at least");
    int32_t bad_vals[][2] = {{0, 12345}, {1, 2}, {5, 3}, {7, 40}, {3, 0}};
    const char *wants[] = {"bad magic 12345", "unsupported llm.c model version 2", "n_head 3 does not divide channels 8",
                           "header values out of range", "header values out of range"};
    for (int i = 0; i < 5; i++) {
        memcpy(o, b, n);
        memcpy(o + 4 * bad_vals[i][0], &bad_vals[i][1], 4);
        spit(g, o, n);
        LL_BAD(g, 0, wants[i]);
    }
    free(o);
    free(b);
    free((void *)f);
    free((void *)g);
}

static int run_cli(int (*fn)(int, char **), const char *const *args, int n) {
    char *argv[16];
    for (int i = 0; i < n; i++) argv[i] = (char *)args[i];
    argv[n] = NULL;
    return fn(n, argv);
}

static void test_cli(const mt_weights *src) {
    mt_error e = {{0}};
    char ck[300], st[300], bin[300], ck2[300], ck3[300];
    snprintf(ck, sizeof ck, "%s/ck", g_root);
    snprintf(st, sizeof st, "%s/cli.safetensors", g_root);
    snprintf(bin, sizeof bin, "%s/cli.bin", g_root);
    snprintf(ck2, sizeof ck2, "%s/ck2", g_root);
    snprintf(ck3, sizeof ck3, "%s/ck3", g_root);
    CHECK(mt_weights_to_ckpt(ck, src, 7, &e) == 0, "%s", e.msg);
    const char *a1[] = {"export", "--ckpt", ck, "--format", "safetensors", "--out", st};
    CHECK(run_cli(mt_cli_export, a1, 7) == 0, "export safetensors");
    const char *a2[] = {"export", "--ckpt", ck, "--format", "llmc", "--out", bin};
    CHECK(run_cli(mt_cli_export, a2, 7) == 0, "export llmc");
    const char *a3[] = {"import", "--format", "safetensors", "--in", st, "--heads", "2", "--out", ck2};
    CHECK(run_cli(mt_cli_import, a3, 9) == 0, "import safetensors");
    const char *a4[] = {"import", "--format", "llmc", "--in", bin, "--out", ck3};
    CHECK(run_cli(mt_cli_import, a4, 7) == 0, "import llmc");
    const char *dirs[2] = {ck2, ck3};
    for (int i = 0; i < 2; i++) {
        mt_ckpt *c = mt_ckpt_open(dirs[i], &e);
        CHECK(c != NULL, "%s", e.msg);
        if (!c) continue;
        mt_weights w;
        CHECK(mt_ckpt_step(c) == 0, "imported step is 0");
        int64_t s = -1;
        CHECK(mt_json_get_int64(mt_ckpt_state(c), "step", &s, &e) == 0 && s == 0, "state.step");
        CHECK(mt_weights_from_ckpt(c, &w, &e) == 0 && same_weights(src, &w), "CLI round trip %d: %s", i, e.msg);
        if (mt_ckpt_n_tensors(c) != 4 + 12 * 2) CHECK(0, "only model/* tensors");
        mt_weights_free(&w);
        mt_ckpt_close(c);
    }
    fprintf(stderr, "(the following 'error:' lines are expected)\n");
    CHECK(run_cli(mt_cli_import, a4, 7) == 1, "import refuses to overwrite a checkpoint");
    const char *b1[] = {"export", "--ckpt", ck, "--format", "onnx", "--out", st};
    CHECK(run_cli(mt_cli_export, b1, 7) == 1, "bad format");
    const char *b2[] = {"export", "--ckpt", ck, "--format", "llmc"};
    CHECK(run_cli(mt_cli_export, b2, 5) == 1, "missing --out");
    const char *b3[] = {"export", "--ckpt", ck2, "--format", "llmc", "--out", P("nodir/x.bin")};
    CHECK(run_cli(mt_cli_export, b3, 7) == 1, "unwritable output");
    const char *b4[] = {"import", "--format", "safetensors", "--in", bin, "--out", P("ck4")};
    CHECK(run_cli(mt_cli_import, b4, 7) == 1, "llm.c file is not safetensors");
    const char *b5[] = {"import", "--format", "llmc", "--in", bin, "--heads", "0", "--out", P("ck5")};
    CHECK(run_cli(mt_cli_import, b5, 9) == 1, "--heads 0");
    /* A checkpoint without a config cannot be exported. */
    float x = 1;
    mt_ckpt_tensor t = {"model/x", &x, 1, 1, {1}};
    CHECK(mt_ckpt_save(P("noconf"), 1, "{}", &t, 1, &e) == 0, "%s", e.msg);
    mt_ckpt *c = mt_ckpt_open(P("noconf"), &e);
    mt_weights w;
    CHECK(c && mt_weights_from_ckpt(c, &w, &e) == -1 && strstr(e.msg, "no \"config\""), "%s", e.msg);
    mt_ckpt_close(c);
}

int main(void) {
    snprintf(g_root, sizeof g_root, "/tmp/mt_test_interop_XXXXXX");
    tl_mkdtemp(g_root);
    mt_model_config cfg = tiny();
    mt_weights src;
    mt_weights_alloc(&src, &cfg);
    fill(&src);
    test_safetensors(&src);
    test_llmc(&src);
    test_cli(&src);
    mt_weights_free(&src);
    rm_tree(g_root);
    TEST_MAIN_END("test_interop");
}
