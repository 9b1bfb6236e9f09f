/* llm.c model files: see llmc.h. */
#include "core/fileio.h"
#include "interop/llmc.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the llm.c converter assumes a little-endian host"
#endif

#define HEADER_INTS 256
#define HEADER_BYTES (HEADER_INTS * 4)

/* llm.c's 16 parameter tensors in file order, by our (Hugging Face GPT-2)
 * tensor names; a block's name takes its layer. */
static const struct { const char *name; int per_layer; const char *ours; } KINDS[16] = {
    {"wte", 0, "wte.weight"},                 {"wpe", 0, "wpe.weight"},
    {"ln1w", 1, "h.%d.ln_1.weight"},          {"ln1b", 1, "h.%d.ln_1.bias"},
    {"qkvw", 1, "h.%d.attn.c_attn.weight"},   {"qkvb", 1, "h.%d.attn.c_attn.bias"},
    {"attprojw", 1, "h.%d.attn.c_proj.weight"}, {"attprojb", 1, "h.%d.attn.c_proj.bias"},
    {"ln2w", 1, "h.%d.ln_2.weight"},          {"ln2b", 1, "h.%d.ln_2.bias"},
    {"fcw", 1, "h.%d.mlp.c_fc.weight"},       {"fcb", 1, "h.%d.mlp.c_fc.bias"},
    {"fcprojw", 1, "h.%d.mlp.c_proj.weight"}, {"fcprojb", 1, "h.%d.mlp.c_proj.bias"},
    {"lnfw", 0, "ln_f.weight"},               {"lnfb", 0, "ln_f.bias"},
};

/* Tensor k of llm.c's list at layer `layer`, and its unit. */
static const mt_tensor *tensor_of(const mt_layout *L, int k, int layer, int *u) {
    char name[MT_TENSOR_NAME_LEN];
    snprintf(name, sizeof name, KINDS[k].ours, layer);
    const mt_tensor *t = mt_layout_find_tensor(L, name, u);
    if (!t) mt_die("the GPT-2 layout has no tensor %s (llm.c's %s)", name, KINDS[k].name);
    return t;
}

int mt_llmc_export(const char *path, const mt_weights *w, mt_error *err) {
    const mt_model_config *c = &w->cfg;
    int32_t hdr[HEADER_INTS];
    memset(hdr, 0, sizeof hdr);
    hdr[0] = MT_LLMC_MAGIC;
    hdr[1] = 3;
    hdr[2] = c->seq_len;
    hdr[3] = c->vocab_size;
    hdr[4] = c->n_layer;
    hdr[5] = c->n_head;
    hdr[6] = c->n_embd;
    hdr[7] = c->padded_vocab;
    size_t pl = strlen(path);
    char *tmp = mt_xmalloc(pl + 8, "path");
    snprintf(tmp, pl + 8, "%s.tmp", path);
    int fd = mt_create_temp(tmp, err); /* O_EXCL | O_NOFOLLOW: a planted link cannot redirect it */
    if (fd < 0) {
        free(tmp);
        return -1;
    }
    int rc = mt_write_all(fd, hdr, sizeof hdr, tmp, err);
    for (int k = 0; k < 16 && !rc; k++) {
        int nl = KINDS[k].per_layer ? c->n_layer : 1;
        for (int l = 0; l < nl && !rc; l++) {
            int u;
            const mt_tensor *t = tensor_of(&w->layout, k, l, &u);
            rc = mt_write_all(fd, w->unit[u] + t->offset, t->numel * sizeof(float), tmp, err);
        }
    }
    if (!rc && fsync(fd) != 0) rc = mt_errorf(err, "fsync of %s failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !rc) rc = mt_errorf(err, "closing %s failed: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0) rc = mt_errorf(err, "renaming %s to %s failed: %s", tmp, path, strerror(errno));
    if (rc) unlink(tmp);
    free(tmp);
    return rc;
}

/* Reads n elements (fp32 or bf16 per esz) at off into dst as fp32. */
static int read_elems(int fd, float *dst, size_t n, uint64_t off, int esz, const char *path, mt_error *err) {
    if (esz == 4) return mt_pread_all(fd, dst, n * 4, off, path, err);
    uint16_t *h = (uint16_t *)(void *)((char *)dst + 2 * n); /* see mt_st_read_f32 */
    if (mt_pread_all(fd, h, n * 2, off, path, err)) return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)h[i] << 16;
        memcpy(&dst[i], &bits, 4);
    }
    return 0;
}

int mt_llmc_import(const char *path, int n_head, mt_weights *out, mt_error *err) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mt_errorf(err, "cannot open %s: %s", path, strerror(errno));
    int rc = -1;
    struct stat st;
    if (fstat(fd, &st) != 0) { mt_errorf(err, "cannot stat %s: %s", path, strerror(errno)); goto out; }
    uint64_t size = (uint64_t)st.st_size;
    if (size < HEADER_BYTES) {
        mt_errorf(err, "%s: file is %" PRIu64 " bytes, shorter than the %d-byte llm.c header (truncated?)", path, size, HEADER_BYTES);
        goto out;
    }
    int32_t h[HEADER_INTS];
    if (mt_pread_all(fd, h, sizeof h, 0, path, err)) goto out;
    if (h[0] != MT_LLMC_MAGIC) {
        mt_errorf(err, "%s: bad magic %d (expected %d): not an llm.c model file", path, h[0], MT_LLMC_MAGIC);
        goto out;
    }
    if (h[1] != 3 && h[1] != 5) {
        mt_errorf(err, "%s: unsupported llm.c model version %d (expected 3 = fp32 or 5 = bf16)", path, h[1]);
        goto out;
    }
    int esz = h[1] == 3 ? 4 : 2;
    int T = h[2], V = h[3], L = h[4], NH = h[5], C = h[6], Vp = h[7];
    if (T < 1 || T > 65535 || V < 2 || V > (1 << 24) || L < 1 || L > 4095 || NH < 1 || C < 1 || C > 65536 || Vp < V ||
        Vp > (1 << 24)) {
        mt_errorf(err, "%s: header values out of range: maxT=%d V=%d L=%d NH=%d C=%d Vp=%d", path, T, V, L, NH, C, Vp);
        goto out;
    }
    if (C % NH != 0) { mt_errorf(err, "%s: n_head %d does not divide channels %d", path, NH, C); goto out; }
    if (n_head > 0 && n_head != NH) {
        mt_errorf(err, "%s: {heads} %d disagrees with the file's header (n_head %d)", path, n_head, NH);
        goto out;
    }
    uint64_t c = (uint64_t)C;
    /* a cheap lower bound first: wte and every layer's four matrices (12 C^2) alone must fit in the file,
     * before the exact count below builds the model's layout (65k tensors for 4095 layers) */
    uint64_t least = HEADER_BYTES + ((uint64_t)Vp * c + (uint64_t)L * 12 * c * c) * (uint64_t)esz;
    if (size < least) {
        mt_errorf(err, "%s: file is %" PRIu64 " bytes but its header (V=%d Vp=%d maxT=%d L=%d C=%d, %s) implies at least %" PRIu64
                  " (truncated?)", path, size, V, Vp, T, L, C, esz == 4 ? "fp32" : "bf16", least);
        goto out;
    }
    mt_model_config cfg = {.n_layer = L, .n_embd = C, .n_head = NH, .vocab_size = V, .padded_vocab = mt_pad_vocab(V),
                         .seq_len = T, .dropout = 0.0f};
    mt_error e2;
    if (mt_model_config_validate(&cfg, &e2)) { mt_errorf(err, "%s: %s", path, e2.msg); goto out; }
    /* Parameters in the file: ours, with wte at the file's Vp rows. The
     * header must match the file's size before anything is allocated (a
     * 1 KB file may claim billions of elements). */
    mt_layout sizing;
    mt_model_layout_build(&cfg, 1, 0, &sizing);
    uint64_t numel = (uint64_t)sizing.total_params - (uint64_t)cfg.padded_vocab * c + (uint64_t)Vp * c;
    mt_layout_free(&sizing);
    uint64_t want = HEADER_BYTES + numel * (uint64_t)esz;
    if (size != want) {
        mt_errorf(err, "%s: file is %" PRIu64 " bytes but its header (V=%d Vp=%d maxT=%d L=%d C=%d, %s) implies %" PRIu64 "%s", path, size, V,
                  Vp, T, L, C, esz == 4 ? "fp32" : "bf16", want, size < want ? " (truncated?)" : " (trailing bytes)");
        goto out;
    }
    mt_weights_alloc(out, &cfg);
    uint64_t off = HEADER_BYTES;
    for (int k = 0; k < 16; k++) {
        int nl = KINDS[k].per_layer ? L : 1;
        for (int li = 0; li < nl; li++) {
            int u;
            const mt_tensor *t = tensor_of(&out->layout, k, li, &u);
            size_t n = t->numel;
            uint64_t file_n = n;
            if (k == 0) { /* wte: V real rows; the file has Vp rows, ours padded_vocab */
                n = (size_t)V * (size_t)C;
                file_n = (uint64_t)Vp * c;
            }
            if (read_elems(fd, out->unit[u] + t->offset, n, off, esz, path, err)) goto out;
            off += file_n * (uint64_t)esz;
        }
    }
    rc = 0;
out:
    close(fd);
    if (rc) mt_weights_free(out);
    return rc;
}
