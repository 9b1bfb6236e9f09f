#include "cli/args.h"
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_i64(const char *name, const char *s, int64_t lo, int64_t hi, int64_t *out, mt_error *err) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return mt_errorf(err, "--%s expects an integer, got '%s'", name, s);
    if (v < lo || v > hi) return mt_errorf(err, "--%s must be in %lld..%lld, got %lld", name, (long long)lo, (long long)hi, v);
    *out = v;
    return 0;
}

int mt_args_parse(int argc, char **argv, mt_arg *spec, int nspec, char **positional, int max_pos, int *npos,
                  mt_error *err) {
    int np = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || a[2] == 0) {
            if (np >= max_pos) return mt_errorf(err, "unexpected argument '%s' (flags start with --)", a);
            positional[np++] = argv[i];
            continue;
        }
        /* --name value, or --name=value */
        char name[64];
        const char *eq = strchr(a + 2, '='), *v = NULL;
        size_t nl = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
        if (nl >= sizeof name) return mt_errorf(err, "unknown flag '%s' (see --help)", a);
        memcpy(name, a + 2, nl);
        name[nl] = '\0';
        mt_arg *s = NULL;
        for (int k = 0; k < nspec; k++)
            if (!strcmp(spec[k].name, name)) s = &spec[k];
        if (!s) return mt_errorf(err, "unknown flag '--%s' (see --help)", name);
        s->seen = 1;
        if (s->type == MT_ARG_FLAG) {
            if (eq && strcmp(eq + 1, "true") && strcmp(eq + 1, "1") && strcmp(eq + 1, "false") && strcmp(eq + 1, "0"))
                return mt_errorf(err, "--%s is a switch: give it alone, or as --%s=true / --%s=false", name, name, name);
            *(int *)s->dst = !(eq && (!strcmp(eq + 1, "false") || !strcmp(eq + 1, "0")));
            continue;
        }
        if (eq) {
            v = eq + 1;
        } else {
            if (i + 1 >= argc) return mt_errorf(err, "flag '--%s' needs a value", name);
            v = argv[++i];
        }
        int64_t x;
        switch (s->type) {
        case MT_ARG_INT:
            if (parse_i64(name, v, -2147483647LL, 2147483647LL, &x, err)) return -1;
            *(int *)s->dst = (int)x;
            break;
        case MT_ARG_I64:
            if (parse_i64(name, v, INT64_MIN, INT64_MAX, &x, err)) return -1;
            *(int64_t *)s->dst = x;
            break;
        case MT_ARG_FLOAT: {
            char *end;
            errno = 0;
            double d = strtod(v, &end);
            if (errno || end == v || *end || !isfinite(d)) return mt_errorf(err, "--%s expects a number, got '%s'", name, v);
            /* the value is kept as a float: one finite as a double may be inf (or 0) as a float */
            if (!isfinite((float)d))
                return mt_errorf(err, "--%s is not finite as a 32-bit float, the type that holds it (got %s; at most "
                                      "%.2g)", name, v, (double)FLT_MAX);
            if ((float)d == 0.0f && d != 0.0)
                return mt_errorf(err, "--%s is 0 as a 32-bit float, the type that holds it (got %s; nonzero from "
                                      "%.2g)", name, v, (double)FLT_TRUE_MIN);
            *(float *)s->dst = (float)d;
            break;
        }
        case MT_ARG_STR:
            *(const char **)s->dst = v;
            break;
        case MT_ARG_FLAG:
            break;
        }
    }
    if (npos) *npos = np;
    return 0;
}

void mt_args_usage(const char *cmd, const char *synopsis, const mt_arg *spec, int nspec) {
    printf("usage: meshtrain %s %s\n", cmd, synopsis);
    for (int k = 0; k < nspec; k++) printf("  --%-20s %s\n", spec[k].name, spec[k].help ? spec[k].help : "");
}

int mt_arg_seen(const mt_arg *spec, int nspec, const char *name) {
    for (int k = 0; k < nspec; k++)
        if (!strcmp(spec[k].name, name)) return spec[k].seen;
    return 0;
}

void mt_cli_render(const char *msg, char *out, size_t cap) { mt_render_options(msg, "--", out, cap); }

int mt_cli_fail(const char *cmd, const mt_error *err) {
    char msg[MT_ERROR_LEN];
    mt_cli_render(err->msg, msg, sizeof msg);
    fprintf(stderr, "meshtrain %s: error: %s\n", cmd, msg);
    return 1;
}
