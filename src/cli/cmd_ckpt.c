/* meshtrain ckpt verify|info CKPT: a checkpoint's integrity (every file's
 * and piece's checksum, the run config's, the manifest's own checksum and
 * structure) and what
 * it holds (model, step, the layout that saved it, bytes per file and per
 * tensor group). File tools: no MPI. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt/checkpoint.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "models/config.h"

static void usage(void) {
    puts("usage: meshtrain ckpt verify CKPT   check every checksum and the manifest's consistency\n"
         "       meshtrain ckpt info CKPT     model, step, saving layout, sizes per file and tensor group");
}

static int verify(const char *dir) {
    mt_error err = {{0}};
    mt_ckpt *ck = mt_ckpt_open(dir, &err); /* manifest checksum and structure, whole-file checksums */
    char *conf = NULL;
    if (!ck || mt_ckpt_verify_pieces(ck, &err) || mt_ckpt_read_run_config(ck, &conf, &err) < 0) {
        mt_ckpt_close(ck);
        return mt_cli_fail("ckpt verify", &err);
    }
    free(conf);
    uint64_t total = 0, b;
    for (int i = 0; i < mt_ckpt_n_files(ck); i++)
        if (mt_ckpt_file(ck, i, NULL, &b) == 0) total += b;
    printf("%s: ok (format version %d, step %" PRId64 ", %d files, %" PRIu64 " bytes, %d tensors%s; every checksum "
           "matches)\n", dir, mt_ckpt_version(ck), mt_ckpt_step(ck), mt_ckpt_n_files(ck), total, mt_ckpt_n_tensors(ck),
           mt_ckpt_run_config_file(ck) ? ", the run config" : "");
    mt_ckpt_close(ck);
    return 0;
}

static int64_t get_int(const mt_json *o, const char *key) {
    int64_t v = -1;
    if (o) mt_json_get_int64(o, key, &v, NULL);
    return v;
}

/* "model/..." -> "model", "optim/m/..." -> "optim/m" */
static void group_of(const char *name, char *g, size_t n) {
    const char *s = strchr(name, '/');
    if (s && strncmp(name, "optim/", 6) == 0) s = strchr(s + 1, '/');
    size_t k = s ? (size_t)(s - name) : strlen(name);
    if (k >= n) k = n - 1;
    memcpy(g, name, k);
    g[k] = '\0';
}

static int info(const char *dir) {
    mt_error err = {{0}};
    mt_ckpt *ck = mt_ckpt_open_ex(dir, MT_CKPT_NO_VERIFY, &err);
    if (!ck) return mt_cli_fail("ckpt info", &err);
    printf("checkpoint %s: format version %d, step %" PRId64 "\n", dir, mt_ckpt_version(ck), mt_ckpt_step(ck));
    const mt_json *cj = mt_json_get(mt_ckpt_state(ck), "config");
    mt_model_config cfg;
    if (cj && mt_model_config_read_json(cj, &cfg, &err) == 0)
        printf("model: %s, %d layers, dim %d, %d heads, vocab %d (padded %d), seq-len %d\n", mt_family_name(cfg.family),
               cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab_size, cfg.padded_vocab, cfg.seq_len);
    else
        printf("model: no model config in the state\n");
    const char *opt = NULL;
    if (mt_json_get_string(mt_ckpt_state(ck), "optimizer", &opt, NULL) == 0) printf("optimizer: %s\n", opt);
    const mt_json *sw = mt_ckpt_saved_with(ck);
    if (sw) {
        const char *prec = "?";
        mt_json_get_string(sw, "precision", &prec, NULL);
        const mt_json *off = mt_json_get(sw, "offload");
        char ep[32] = "", cp[32] = ""; /* expert and context parallelism: recorded when used */
        if (mt_json_get(sw, "ep")) snprintf(ep, sizeof ep, ", ep %" PRId64, get_int(sw, "ep"));
        if (mt_json_get(sw, "cp")) snprintf(cp, sizeof cp, ", cp %" PRId64, get_int(sw, "cp"));
        printf("saved with: %" PRId64 " ranks: dp %" PRId64 "%s%s, tp %" PRId64 ", pp %" PRId64 ", ZeRO %" PRId64
               ", shard group %" PRId64 ", precision %s%s\n", get_int(sw, "world"), get_int(sw, "dp"), cp, ep, get_int(sw, "tp"),
               get_int(sw, "pp"), get_int(sw, "zero"), get_int(sw, "shard_group"), prec,
               off && off->type == MT_JSON_BOOL && off->boolean ? ", disk offload" : "");
    } else {
        printf("saved with: (not recorded: format version 1, or a single-writer save)\n");
    }
    uint64_t total = 0, b;
    const char *nm;
    printf("files:\n");
    for (int i = 0; i < mt_ckpt_n_files(ck); i++)
        if (mt_ckpt_file(ck, i, &nm, &b) == 0) {
            printf("  %-36s %14" PRIu64 " bytes\n", nm, b);
            total += b;
        }
    printf("  %-36s %14" PRIu64 " bytes\n", "total", total);
    const char *conf = mt_ckpt_run_config_file(ck);
    if (conf) printf("run config: %s (train --resume %s starts from it)\n", conf, dir);
    else printf("run config: (not stored: saved before meshtrain stored one, or a single-writer save)\n");
    /* tensor groups in order of first appearance */
    enum { MAXG = 32 };
    char groups[MAXG][64];
    uint64_t elems[MAXG];
    int count[MAXG], ng = 0;
    for (int i = 0; i < mt_ckpt_n_tensors(ck); i++) {
        const char *t = mt_ckpt_tensor_name(ck, i);
        char g[64];
        group_of(t, g, sizeof g);
        size_t ne = 0;
        mt_ckpt_has(ck, t, &ne);
        int k = 0;
        while (k < ng && strcmp(groups[k], g)) k++;
        if (k == ng) {
            if (ng == MAXG) k = MAXG - 1; /* the rest is summed into the last group */
            else {
                snprintf(groups[ng], sizeof groups[ng], "%s", g);
                elems[ng] = 0;
                count[ng] = 0;
                ng++;
            }
        }
        elems[k] += ne;
        count[k]++;
    }
    printf("tensor groups:\n");
    for (int k = 0; k < ng; k++)
        printf("  %-20s %6d tensors %14" PRIu64 " elements %14" PRIu64 " bytes (f32)\n", groups[k], count[k], elems[k],
               elems[k] * 4);
    mt_ckpt_close(ck);
    return 0;
}

int mt_cli_ckpt(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage();
        return 0;
    }
    mt_error err = {{0}};
    if (argc != 3 || (strcmp(argv[1], "verify") && strcmp(argv[1], "info"))) {
        usage();
        mt_errorf(&err, "expected 'ckpt verify CKPT' or 'ckpt info CKPT'");
        return mt_cli_fail("ckpt", &err);
    }
    return strcmp(argv[1], "verify") == 0 ? verify(argv[2]) : info(argv[2]);
}
