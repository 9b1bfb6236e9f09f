/* `train --config run.yaml` and `--print-config`: a YAML file of sections
 * whose keys are the flag names (no second vocabulary), read with libyaml.
 *
 *   model:     {layers: 6, dim: 384, heads: 6, seq-len: 256}
 *   optimizer: {lr: 6e-4, weight-decay: 0.1}
 *
 * The file becomes "--key=value" arguments placed before the command line's
 * own, so a flag given on the command line wins. A key must be a flag of its
 * section; a switch takes true or false; the flag parser checks each value. --print-config writes every
 * effective value back in the same form, which --config reads identically. */
#include "cli/config_file.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

/* Which section each train flag belongs to (print order). Flags not named
 * here (test aids) may appear in any section. */
static const struct {
    const char *section;
    const char *flags[36];
} sections[] = {
    {"model", {"model", "preset", "family", "layers", "dim", "heads", "kv-heads", "head-dim", "ffn-dim", "vocab",
               "seq-len", "dropout", "rope-theta", "norm-eps", "tie-embeddings", "qkv-bias", "rope-scaling",
               "rope-factor", "rope-low-freq-factor", "rope-high-freq-factor", "rope-original-max-pos", "moe-experts",
               "moe-top-k", "moe-ffn-dim", "moe-router", "moe-norm-topk", "moe-shared-ffn-dim", "qk-norm", "init-from"}},
    {"data", {"train", "val", "data-order"}},
    {"peft", {"peft", "lora-r", "lora-alpha", "lora-dropout", "lora-targets", "lora-use-rslora", "ia3-targets", "ia3-feedforward", "peft-train", "freeze", "quantize-base", "double-quant", "int8-threshold"}},
    {"optimizer", {"optimizer", "lr", "weight-decay", "beta1", "beta2", "eps", "momentum", "grad-clip",
                   "adafactor-beta1", "adafactor-scale-parameter", "adafactor-clip", "adagrad-lr-decay",
                   "adagrad-initial-accumulator", "offload-optimizer",
                   "offload-buffer-mb"}},
    {"moe", {"moe-aux-coef", "moe-z-coef", "moe-capacity-factor"}},
    {"schedule", {"steps", "batch", "micro-batch", "warmup", "lr-schedule", "min-lr", "seed"}},
    {"parallel", {"dp", "cp", "cp-mode", "tp", "pp", "sequence-parallel", "pp-schedule", "pp-chunks", "pp-layers", "zero", "shard-group",
                  "ep", "bucket-mb", "zeropp-hpz", "zeropp-qwz", "zeropp-qgz", "ranks-per-node", "timeout", "recompute",
                  "compress-activations", "partition-activations", "no-overlap"}},
    {"precision", {"precision", "device", "gpus-per-node", "comm", "gemm", "grad-reduce-dtype", "loss-scale", "loss-scale-window"}},
    {"checkpoint", {"ckpt-dir", "ckpt-every", "ckpt-async", "resume", "allow-schedule-change", "on-nonfinite"}},
    {"logging", {"metrics", "peak-gflops", "log-file", "log-every", "eval-every", "eval-batches", "eval-batch", "profile", "trace",
                 "report-json"}},
};
#define N_SECTIONS ((int)(sizeof sections / sizeof sections[0]))

static int section_of(const char *flag) {
    for (int s = 0; s < N_SECTIONS; s++)
        for (int i = 0; sections[s].flags[i]; i++)
            if (!strcmp(sections[s].flags[i], flag)) return s;
    return -1;
}

static const mt_arg *find(const mt_arg *spec, int nspec, const char *name) {
    for (int k = 0; k < nspec; k++)
        if (!strcmp(spec[k].name, name)) return &spec[k];
    return NULL;
}

static int push(mt_config_args *a, const char *s, mt_error *err) {
    if (a->n + 1 >= a->cap) {
        int cap = a->cap ? 2 * a->cap : 32;
        char **v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) return mt_errorf(err, "out of memory reading the config file");
        a->v = v;
        a->cap = cap;
    }
    if (!(a->v[a->n] = strdup(s))) return mt_errorf(err, "out of memory reading the config file");
    a->n++;
    return 0;
}

void mt_config_args_free(mt_config_args *a) {
    for (int i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

static const char *scalar(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

/* The settings of the YAML text the parser p reads (its input set); path
 * names it in errors. */
static int read_yaml(yaml_parser_t *p, const char *path, mt_config_args *out, mt_error *err) {
    yaml_document_t doc;
    int rc = 0;
    if (!yaml_parser_load(p, &doc))
        return mt_errorf(err, "%s line %zu: not valid YAML: %s", path, p->problem_mark.line + 1,
                         p->problem ? p->problem : "parse error");
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && root->type != YAML_MAPPING_NODE)
        rc = mt_errorf(err, "%s line %zu: expected sections (model:, data:, optimizer:, schedule:, parallel:, "
                            "precision:, checkpoint:, logging:)", path, root->start_mark.line + 1);
    for (yaml_node_pair_t *sp = root && !rc ? root->data.mapping.pairs.start : NULL;
         sp && sp < root->data.mapping.pairs.top && !rc; sp++) {
        yaml_node_t *sk = yaml_document_get_node(&doc, sp->key), *sv = yaml_document_get_node(&doc, sp->value);
        int sec = -1;
        for (int s = 0; sk->type == YAML_SCALAR_NODE && s < N_SECTIONS; s++)
            if (!strcmp(scalar(sk), sections[s].section)) sec = s;
        if (sec < 0) {
            rc = mt_errorf(err, "%s line %zu: unknown section '%s' (model, data, optimizer, schedule, parallel, precision, "
                                "checkpoint or logging)", path, sk->start_mark.line + 1,
                           sk->type == YAML_SCALAR_NODE ? scalar(sk) : "?");
            break;
        }
        for (yaml_node_pair_t *q = root->data.mapping.pairs.start; q < sp && !rc; q++) {
            yaml_node_t *qk = yaml_document_get_node(&doc, q->key);
            if (qk->type == YAML_SCALAR_NODE && !strcmp(scalar(qk), scalar(sk)))
                rc = mt_errorf(err, "%s line %zu: section '%s' is given twice (also line %zu): merge them into one "
                                    "(a repeated section would silently override the first)", path,
                               sk->start_mark.line + 1, scalar(sk), qk->start_mark.line + 1);
        }
        if (rc) break;
        if (sv->type == YAML_SCALAR_NODE && !*scalar(sv)) continue; /* an empty section */
        if (sv->type != YAML_MAPPING_NODE) {
            rc = mt_errorf(err, "%s line %zu: section '%s' must hold key: value lines", path, sv->start_mark.line + 1,
                           sections[sec].section);
            break;
        }
        for (yaml_node_pair_t *kp = sv->data.mapping.pairs.start; kp < sv->data.mapping.pairs.top && !rc; kp++) {
            yaml_node_t *k = yaml_document_get_node(&doc, kp->key), *v = yaml_document_get_node(&doc, kp->value);
            size_t line = k->start_mark.line + 1;
            const char *key = k->type == YAML_SCALAR_NODE ? scalar(k) : "?";
            int home = section_of(key);
            if (home < 0)
                rc = mt_errorf(err, "%s line %zu: unknown key '%s' in section '%s' (keys are train's flag names)", path,
                               line, key, sections[sec].section);
            else if (home != sec)
                rc = mt_errorf(err, "%s line %zu: key '%s' belongs in section '%s', not '%s'", path, line, key,
                               sections[home].section, sections[sec].section);
            else if (v->type != YAML_SCALAR_NODE)
                rc = mt_errorf(err, "%s line %zu: key '%s' needs a single value", path, line, key);
            for (yaml_node_pair_t *q = sv->data.mapping.pairs.start; q < kp && !rc; q++) {
                yaml_node_t *qk = yaml_document_get_node(&doc, q->key);
                if (qk->type == YAML_SCALAR_NODE && !strcmp(scalar(qk), key))
                    rc = mt_errorf(err, "%s line %zu: key '%s' is given twice in section '%s' (also line %zu): keep "
                                        "one", path, line, key, sections[sec].section, qk->start_mark.line + 1);
            }
            if (rc) break;
            const char *val = scalar(v);
            /* an escaped NUL ("\0") would silently cut the value short */
            if (strlen(val) != v->data.scalar.length) {
                rc = mt_errorf(err, "%s line %zu: the value of key '%s' holds a NUL character", path, line, key);
                break;
            }
            /* unset (the default): an empty or null value, unless quoted -- "" and "null" are strings */
            if (v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && (!*val || !strcmp(val, "~") || !strcmp(val, "null")))
                continue;
            /* --key=value: a switch takes true/false there, any other flag's parser checks the value */
            size_t n = strlen(key) + strlen(val) + 4;
            char *arg = malloc(n);
            if (!arg) {
                rc = mt_errorf(err, "out of memory reading the config file");
                break;
            }
            snprintf(arg, n, "--%s=%s", key, val);
            rc = push(out, arg, err);
            free(arg);
        }
    }
    yaml_document_delete(&doc);
    /* the loader stops after one document: what follows a "---" would be silently ignored, valid or not */
    if (!rc && !yaml_parser_load(p, &doc))
        return mt_errorf(err, "%s line %zu: not valid YAML: %s", path, p->problem_mark.line + 1,
                         p->problem ? p->problem : "parse error");
    if (!rc) {
        if (yaml_document_get_root_node(&doc))
            rc = mt_errorf(err, "%s line %zu: a second YAML document: a config file holds one (the settings after "
                                "the '---' would be ignored)", path, doc.start_mark.line + 1);
        yaml_document_delete(&doc);
    }
    return rc;
}

int mt_config_file_read(const char *path, mt_config_args *out, mt_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return mt_errorf(err, "cannot open --config file %s: %s", path, strerror(errno));
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) {
        fclose(f);
        return mt_errorf(err, "out of memory starting the YAML parser");
    }
    yaml_parser_set_input_file(&p, f);
    int rc = read_yaml(&p, path, out, err);
    yaml_parser_delete(&p);
    fclose(f);
    return rc;
}

/* The flag name of "--name[=value]", in buf. */
static const char *arg_name(const char *arg, char *buf, size_t cap) {
    if (strncmp(arg, "--", 2)) return NULL;
    size_t n = strcspn(arg + 2, "=");
    if (n >= cap) return NULL;
    memcpy(buf, arg + 2, n);
    buf[n] = '\0';
    return buf;
}

static int section_index(const char *section) {
    for (int s = 0; s < N_SECTIONS; s++)
        if (!strcmp(sections[s].section, section)) return s;
    return -1;
}

int mt_config_args_set_section(char *const *args, int n, const char *section) {
    int sec = section_index(section);
    char b[64];
    for (int i = 0; i < n && sec >= 0; i++) {
        const char *name = arg_name(args[i], b, sizeof b);
        if (name && section_of(name) == sec) return 1;
    }
    return 0;
}

void mt_config_args_drop_section(mt_config_args *a, const char *section) {
    int sec = section_index(section), k = 0;
    char b[64];
    for (int i = 0; i < a->n; i++) {
        const char *name = arg_name(a->v[i], b, sizeof b);
        if (sec >= 0 && name && section_of(name) == sec) free(a->v[i]);
        else a->v[k++] = a->v[i];
    }
    a->n = k;
}

/* Settings that name a file or directory the run writes. A resumed run
 * takes them from its own command line or --config only: a checkpoint
 * (perhaps someone else's) must not decide where output goes. */
static const char *const output_flags[] = {"metrics", "log-file", "trace", "report-json", "dump-grads",
                                           "offload-optimizer", "ckpt-dir"};

int mt_config_args_drop_outputs(mt_config_args *a, char *names, size_t cap) {
    char b[64];
    int k = 0, dropped = 0;
    size_t len = 0;
    if (cap) names[0] = '\0';
    for (int i = 0; i < a->n; i++) {
        const char *name = arg_name(a->v[i], b, sizeof b);
        int out = 0;
        for (size_t j = 0; name && j < sizeof output_flags / sizeof output_flags[0]; j++) out |= !strcmp(name, output_flags[j]);
        if (!out) {
            a->v[k++] = a->v[i];
            continue;
        }
        /* ckpt-dir goes unnamed: a resume always names the directory itself */
        if (strcmp(name, "ckpt-dir") && len + strlen(name) + 3 < cap)
            len += (size_t)snprintf(names + len, cap - len, "%s%s", dropped++ ? ", " : "", name);
        free(a->v[i]);
    }
    a->n = k;
    return dropped;
}

int mt_config_text_read(const char *text, const char *name, mt_config_args *out, mt_error *err) {
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) return mt_errorf(err, "out of memory starting the YAML parser");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, strlen(text));
    int rc = read_yaml(&p, name, out, err);
    yaml_parser_delete(&p);
    return rc;
}

/* The code point of the UTF-8 sequence at s, its length in *len; -1 when it
 * is not well-formed (cut short, overlong, a surrogate, beyond U+10FFFF). */
static long utf8_next(const unsigned char *s, int *len) {
    static const long least[5] = {0, 0, 0x80, 0x800, 0x10000};
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n) return -1;
    long cp = n == 1 ? (long)c : (long)(c & (0x7Fu >> n));
    for (int i = 1; i < n; i++) { /* a NUL ends the loop: it is no continuation byte */
        if ((s[i] & 0xC0) != 0x80) return -1;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    *len = n;
    return cp;
}

/* A character libyaml reads as itself inside double quotes: printable
 * (its reader refuses the rest) and no line break (folded to a space). */
static int yaml_raw(long cp) {
    return (cp >= 0x20 && cp <= 0x7E && cp != '"' && cp != '\\') || (cp >= 0xA0 && cp <= 0xD7FF && cp != 0x2028 && cp != 0x2029) ||
           (cp >= 0xE000 && cp <= 0xFFFD && cp != 0xFEFF) || cp >= 0x10000;
}

/* (isalnum follows the locale: a Latin-1 byte may count) */
static int ascii_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

/* A YAML scalar that reads back as exactly s: plain when every character
 * is one a plain scalar keeps as it is, else double-quoted with every other
 * character escaped (a newline or a tab would otherwise be folded or
 * stripped). -1 when s is not UTF-8, which YAML text cannot hold. */
static int put_string(FILE *f, const char *s) {
    static const char *const words[] = {"true", "false", "null", "yes", "no", "on", "off"};
    int plain = ascii_alnum(s[0]) || s[0] == '_' || s[0] == '.' || s[0] == '/';
    for (const char *c = s; *c && plain; c++) plain = ascii_alnum(*c) || strchr("_-./+=", *c);
    for (size_t i = 0; i < sizeof words / sizeof words[0] && plain; i++) plain = strcasecmp(s, words[i]) != 0;
    if (plain) {
        fputs(s, f);
        return 0;
    }
    for (const unsigned char *c = (const unsigned char *)s; *c;) { /* whole before any of it is written */
        int n;
        if (utf8_next(c, &n) < 0) return -1;
        c += n;
    }
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c;) {
        int n;
        long cp = utf8_next(c, &n);
        if (yaml_raw(cp)) fwrite(c, 1, (size_t)n, f);
        else if (cp == '"' || cp == '\\') fprintf(f, "\\%c", (int)cp);
        else if (cp == '\n') fputs("\\n", f);
        else if (cp == '\t') fputs("\\t", f);
        else if (cp < 0x100) fprintf(f, "\\x%02lX", cp);
        else if (cp < 0x10000) fprintf(f, "\\u%04lX", cp);
        else fprintf(f, "\\U%08lX", cp);
        c += n;
    }
    fputc('"', f);
    return 0;
}

/* Settings of one invocation rather than of the run: a checkpoint's copy
 * leaves them out (a resumed run must not inherit --allow-schedule-change,
 * and --init-from cannot be combined with --resume). */
static const char *const invocation_only[] = {"resume", "allow-schedule-change", "init-from"};

static int is_invocation_only(const char *flag) {
    for (size_t i = 0; i < sizeof invocation_only / sizeof invocation_only[0]; i++)
        if (!strcmp(flag, invocation_only[i])) return 1;
    return 0;
}

static int print_config(FILE *f, const mt_arg *spec, int nspec, int for_checkpoint, mt_error *err) {
    fputs(for_checkpoint ? "# meshtrain: the settings of the run that saved this checkpoint (train --resume DIR "
                           "starts from them; flags given then override them)\n"
                         : "# meshtrain train --print-config: the effective configuration (read back with --config)\n",
          f);
    for (int s = 0; s < N_SECTIONS; s++) {
        fprintf(f, "%s:\n", sections[s].section);
        for (int i = 0; sections[s].flags[i]; i++) {
            const mt_arg *a = find(spec, nspec, sections[s].flags[i]);
            if (!a || (for_checkpoint && is_invocation_only(a->name))) continue;
            if (a->type == MT_ARG_STR && !*(const char *const *)a->dst) continue; /* unset */
            /* a 0 nobody gave is a default or "the family's default" (kv-heads, rope-theta): leave it out */
            int zero = (a->type == MT_ARG_INT && !*(const int *)a->dst) || (a->type == MT_ARG_I64 && !*(const int64_t *)a->dst) ||
                       (a->type == MT_ARG_FLOAT && *(const float *)a->dst == 0.0f);
            if (zero && !a->seen) continue;
            fprintf(f, "  %s: ", a->name);
            switch (a->type) {
            case MT_ARG_INT: fprintf(f, "%d", *(const int *)a->dst); break;
            case MT_ARG_I64: fprintf(f, "%lld", (long long)*(const int64_t *)a->dst); break;
            case MT_ARG_FLOAT: { /* the shortest decimal that reads back as the same float */
                float x = *(const float *)a->dst;
                char b[32];
                for (int d = 6; d <= 9; d++) {
                    snprintf(b, sizeof b, "%.*g", d, (double)x);
                    if ((float)strtod(b, NULL) == x) break;
                }
                fputs(b, f);
                break;
            }
            case MT_ARG_STR:
                if (put_string(f, *(const char *const *)a->dst))
                    return mt_errorf(err, "the value of --%s is not UTF-8 text, which a YAML run config cannot hold: "
                                          "give a name in UTF-8 (e.g. rename the file)", a->name);
                break;
            case MT_ARG_FLAG: fputs(*(const int *)a->dst ? "true" : "false", f); break;
            }
            fputc('\n', f);
        }
    }
    return 0;
}

int mt_config_print(FILE *f, const mt_arg *spec, int nspec, mt_error *err) {
    /* into memory first: a refused value leaves no half-printed configuration */
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) return mt_errorf(err, "cannot open a memory stream for the configuration: %s", strerror(errno));
    int rc = print_config(m, spec, nspec, 0, err);
    if ((ferror(m) | fclose(m)) && !rc) rc = mt_errorf(err, "out of memory printing the configuration");
    if (!rc && f) fwrite(text, 1, len, f);
    free(text);
    return rc;
}

char *mt_config_run_text(const mt_arg *spec, int nspec, mt_error *err) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        mt_errorf(err, "cannot open a memory stream for the run config: %s", strerror(errno));
        return NULL;
    }
    int rc = print_config(f, spec, nspec, 1, err);
    if ((ferror(f) | fclose(f)) || rc) {
        free(buf);
        if (!rc) mt_errorf(err, "out of memory writing the run config");
        return NULL;
    }
    return buf;
}
