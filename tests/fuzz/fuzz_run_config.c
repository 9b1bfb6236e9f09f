/* train's YAML run config (cli/config_file.c, libyaml): the input read as
 * `train --config FILE` reads it, its settings parsed into a flag table of
 * train's names, types and defaults. When that succeeds, both writers must
 * give it back: --print-config's text and a checkpoint's stored run config,
 * each re-read (the latter as a resume reads it), must set every value to
 * the same int, float (bitwise), string (bytewise, whatever quoting and
 * escaping it took) and switch, bar the checkpoint's settings of one
 * invocation, which must stay unset. The resume's filters on the stored
 * settings (outputs, the parallel section) must leave none behind. A string
 * libyaml hands back is UTF-8, so a writer may not refuse it either. */
#include <string.h>
#include "cli/config_file.h"
#include "cli/model_flags.h"
#include "fuzz_util.h"

/* train's flags of the config sections but the model's (cli/model_flags.c
 * gives those), with train's types and defaults (cli/cmd_train.c) */
static const struct {
    const char *name;
    mt_arg_type type;
    double num;      /* an int, int64, float or switch's default */
    const char *str; /* a string's (NULL: unset) */
} run_flags[] = {
    {"train", MT_ARG_STR, 0, NULL}, {"val", MT_ARG_STR, 0, NULL}, {"data-order", MT_ARG_STR, 0, "shuffled"},
    {"init-from", MT_ARG_STR, 0, NULL}, {"peft", MT_ARG_STR, 0, "none"}, {"lora-r", MT_ARG_INT, 8, NULL},
    {"lora-alpha", MT_ARG_FLOAT, 16, NULL}, {"lora-dropout", MT_ARG_FLOAT, 0, NULL},
    {"lora-targets", MT_ARG_STR, 0, ""}, {"lora-use-rslora", MT_ARG_FLAG, 0, NULL},
    {"ia3-targets", MT_ARG_STR, 0, ""}, {"ia3-feedforward", MT_ARG_STR, 0, ""}, {"peft-train", MT_ARG_STR, 0, ""},
    {"freeze", MT_ARG_STR, 0, ""}, {"quantize-base", MT_ARG_STR, 0, "none"}, {"double-quant", MT_ARG_FLAG, 0, NULL},
    {"optimizer", MT_ARG_STR, 0, "adamw"}, {"lr", MT_ARG_FLOAT, 3e-4, NULL}, {"weight-decay", MT_ARG_FLOAT, 0.1, NULL},
    {"beta1", MT_ARG_FLOAT, 0.9, NULL}, {"beta2", MT_ARG_FLOAT, 0.95, NULL}, {"eps", MT_ARG_FLOAT, 1e-8, NULL},
    {"momentum", MT_ARG_FLOAT, 0.9, NULL}, {"grad-clip", MT_ARG_FLOAT, 1, NULL},
    {"adafactor-beta1", MT_ARG_FLOAT, 0, NULL}, {"adafactor-scale-parameter", MT_ARG_FLAG, 0, NULL},
    {"adafactor-clip", MT_ARG_FLOAT, 1, NULL}, {"offload-optimizer", MT_ARG_STR, 0, NULL},
    {"offload-buffer-mb", MT_ARG_FLOAT, 64, NULL}, {"steps", MT_ARG_I64, 10, NULL}, {"batch", MT_ARG_INT, 8, NULL},
    {"micro-batch", MT_ARG_INT, 0, NULL}, {"warmup", MT_ARG_I64, 0, NULL}, {"lr-schedule", MT_ARG_STR, 0, "constant"},
    {"min-lr", MT_ARG_FLOAT, 0, NULL}, {"seed", MT_ARG_I64, 1337, NULL}, {"dp", MT_ARG_INT, 1, NULL},
    {"tp", MT_ARG_INT, 1, NULL}, {"pp", MT_ARG_INT, 1, NULL}, {"sequence-parallel", MT_ARG_FLAG, 0, NULL},
    {"pp-schedule", MT_ARG_STR, 0, "1f1b"}, {"pp-chunks", MT_ARG_INT, 1, NULL}, {"pp-layers", MT_ARG_STR, 0, NULL},
    {"zero", MT_ARG_INT, 0, NULL}, {"shard-group", MT_ARG_INT, 0, NULL}, {"bucket-mb", MT_ARG_FLOAT, 0, NULL},
    {"zeropp-hpz", MT_ARG_INT, 0, NULL}, {"zeropp-qwz", MT_ARG_FLAG, 0, NULL}, {"zeropp-qgz", MT_ARG_FLAG, 0, NULL},
    {"ranks-per-node", MT_ARG_INT, 0, NULL}, {"timeout", MT_ARG_FLOAT, 60, NULL}, {"recompute", MT_ARG_STR, 0, "none"},
    {"partition-activations", MT_ARG_FLAG, 0, NULL},
    {"no-overlap", MT_ARG_FLAG, 0, NULL}, {"precision", MT_ARG_STR, 0, "fp32"}, {"gemm", MT_ARG_STR, 0, "onednn"},
    {"grad-reduce-dtype", MT_ARG_STR, 0, "fp32"}, {"loss-scale", MT_ARG_FLOAT, 65536, NULL},
    {"loss-scale-window", MT_ARG_I64, 1000, NULL}, {"ckpt-dir", MT_ARG_STR, 0, NULL},
    {"ckpt-every", MT_ARG_I64, 0, NULL}, {"resume", MT_ARG_FLAG, 0, NULL},
    {"allow-schedule-change", MT_ARG_FLAG, 0, NULL}, {"on-nonfinite", MT_ARG_STR, 0, "stop"},
    {"metrics", MT_ARG_STR, 0, NULL}, {"peak-gflops", MT_ARG_FLOAT, 0, NULL}, {"log-file", MT_ARG_STR, 0, NULL},
    {"log-every", MT_ARG_INT, 1, NULL}, {"eval-every", MT_ARG_I64, 0, NULL}, {"eval-batches", MT_ARG_INT, 8, NULL},
    {"eval-batch", MT_ARG_INT, 0, NULL}, {"profile", MT_ARG_FLAG, 0, NULL}, {"trace", MT_ARG_STR, 0, NULL},
    {"report-json", MT_ARG_STR, 0, NULL},
};
#define N_RUN ((int)(sizeof run_flags / sizeof run_flags[0]))
#define N_SPEC (MT_MODEL_FLAG_COUNT + N_RUN)

typedef union {
    int i;
    int64_t l;
    float f;
    const char *s;
} slot;

/* one parse's table: train's model flags, then run_flags bound to v */
typedef struct {
    mt_model_flags mf;
    slot v[N_RUN];
    mt_arg spec[N_SPEC];
} table;

static void table_init(table *t) {
    memset(t, 0, sizeof *t);
    mt_model_flags_spec(&t->mf, t->spec, 1);
    for (int k = 0; k < N_RUN; k++) {
        slot *v = &t->v[k];
        switch (run_flags[k].type) {
        case MT_ARG_INT: case MT_ARG_FLAG: v->i = (int)run_flags[k].num; break;
        case MT_ARG_I64: v->l = (int64_t)run_flags[k].num; break;
        case MT_ARG_FLOAT: v->f = (float)run_flags[k].num; break;
        case MT_ARG_STR: v->s = run_flags[k].str; break;
        }
        t->spec[MT_MODEL_FLAG_COUNT + k] = (mt_arg){run_flags[k].name, run_flags[k].type, v, NULL, 0};
    }
}

/* Parses the settings of a into t (as train parses its argument list). */
static int table_parse(table *t, const mt_config_args *a, mt_error *err) {
    table_init(t);
    char **argv = malloc(((size_t)a->n + 1) * sizeof *argv);
    if (!argv) abort();
    argv[0] = "train";
    if (a->n) memcpy(argv + 1, a->v, (size_t)a->n * sizeof *argv);
    int rc = mt_args_parse(a->n + 1, argv, t->spec, N_SPEC, NULL, 0, NULL, err);
    free(argv);
    return rc;
}

static int same(const mt_arg *a, const mt_arg *b) {
    switch (a->type) {
    case MT_ARG_INT: case MT_ARG_FLAG: return *(const int *)a->dst == *(const int *)b->dst;
    case MT_ARG_I64: return *(const int64_t *)a->dst == *(const int64_t *)b->dst;
    case MT_ARG_FLOAT: return !memcmp(a->dst, b->dst, sizeof(float)); /* -0 is not 0 */
    case MT_ARG_STR: {
        const char *x = *(const char *const *)a->dst, *y = *(const char *const *)b->dst;
        return x == y || (x && y && !strcmp(x, y));
    }
    }
    return 0;
}

static int invocation_only(const char *name) {
    return !strcmp(name, "resume") || !strcmp(name, "allow-schedule-change") || !strcmp(name, "init-from");
}

/* Re-reads text (a writer's output) and checks every value against t. */
static void check_round_trip(const table *t, const char *text, int for_checkpoint) {
    mt_config_args a = {0};
    mt_error err = {{0}};
    table *u = malloc(sizeof *u);
    if (!u) abort();
    if (mt_config_text_read(text, "written", &a, &err) || table_parse(u, &a, &err)) {
        fprintf(stderr, "the written config does not read back: %s\n--- text:\n%s", err.msg, text);
        abort();
    }
    for (int k = 0; k < N_SPEC; k++) {
        const mt_arg *x = &t->spec[k], *y = &u->spec[k];
        if (for_checkpoint && invocation_only(x->name)) {
            if (y->seen) {
                fprintf(stderr, "the checkpoint's run config stores --%s\n", x->name);
                abort();
            }
        } else if (!same(x, y)) {
            fprintf(stderr, "--%s does not survive the %s\n--- text:\n%s", x->name,
                    for_checkpoint ? "checkpoint's run config" : "--print-config text", text);
            abort();
        }
    }
    if (for_checkpoint) { /* what a resume keeps of it: no output path, and no parallel setting when the command line has one */
        char names[256], b[64];
        mt_config_args_drop_outputs(&a, names, sizeof names);
        mt_config_args_drop_section(&a, "parallel");
        if (mt_config_args_set_section(a.v, a.n, "parallel")) abort();
        for (int i = 0; i < a.n; i++) {
            size_t n = strcspn(a.v[i] + 2, "=");
            snprintf(b, sizeof b, "%.*s", (int)n, a.v[i] + 2);
            if (!strcmp(b, "metrics") || !strcmp(b, "log-file") || !strcmp(b, "trace") || !strcmp(b, "report-json") ||
                !strcmp(b, "offload-optimizer") || !strcmp(b, "ckpt-dir")) {
                fprintf(stderr, "--%s survives the resume's filter of output paths\n", b);
                abort();
            }
        }
    }
    mt_config_args_free(&a);
    free(u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("run.yaml", data, size);
    mt_config_args a = {0};
    mt_error err = {{0}};
    table *t = malloc(sizeof *t);
    if (!t) abort();
    if (mt_config_file_read(path, &a, &err) == 0 && table_parse(t, &a, &err) == 0) {
        char *text = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&text, &len);
        if (!m) abort();
        int rc = mt_config_print(m, t->spec, N_SPEC, &err);
        if (fclose(m) || rc) {
            fprintf(stderr, "--print-config refuses a value read from YAML: %s\n", err.msg);
            abort();
        }
        check_round_trip(t, text, 0);
        free(text);
        if (!(text = mt_config_run_text(t->spec, N_SPEC, &err))) {
            fprintf(stderr, "the checkpoint's run config refuses a value read from YAML: %s\n", err.msg);
            abort();
        }
        check_round_trip(t, text, 1);
        free(text);
    }
    mt_config_args_free(&a);
    free(t);
    return 0;
}
