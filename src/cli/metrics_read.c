/* The metrics file plot reads (cli/metrics_read.h), with the project's
 * JSON reader. */
#include "cli/metrics_read.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/json.h"

const char *const mt_metric_key[MT_METRIC_COUNT] = {"loss", "val_loss", "lr", "tokens_per_s", "mfu", "moe_aux"};

static int push(mt_metrics_curves *c, int k, double x, double y, mt_error *err) {
    if (c->n[k] == c->cap[k]) {
        if (c->cap[k] > (1 << 29)) return mt_errorf(err, "out of memory reading metrics (%d points)", c->n[k]);
        int cap = c->cap[k] ? 2 * c->cap[k] : 256;
        double *nx = realloc(c->x[k], (size_t)cap * sizeof *nx);
        if (nx) c->x[k] = nx; /* kept even if y fails: the free below owns it */
        double *ny = nx ? realloc(c->y[k], (size_t)cap * sizeof *ny) : NULL;
        if (!ny) return mt_errorf(err, "out of memory reading metrics (%d points)", cap);
        c->y[k] = ny;
        c->cap[k] = cap;
    }
    c->x[k][c->n[k]] = x;
    c->y[k][c->n[k]] = y;
    c->n[k]++;
    return 0;
}

/* the layers x experts of a moe_load: an array of equally long arrays of non-negative row counts */
#define MOE_MAX_CELLS (1 << 20)
static int moe_shape(const mt_json *a, int *layers, int *experts) {
    if (!a || a->type != MT_JSON_ARRAY || a->count < 1 || a->count > MOE_MAX_CELLS) return -1;
    const mt_json *l0 = a->child;
    if (l0->type != MT_JSON_ARRAY || l0->count < 1 || l0->count * a->count > MOE_MAX_CELLS) return -1;
    for (const mt_json *l = a->child; l; l = l->next) {
        if (l->type != MT_JSON_ARRAY || l->count != l0->count) return -1;
        for (const mt_json *v = l->child; v; v = v->next)
            if (v->type != MT_JSON_NUMBER || !isfinite(v->number) || v->number < 0) return -1;
    }
    *layers = (int)a->count;
    *experts = (int)l0->count;
    return 0;
}

/* One line's moe_load into the load balance (shape checked by moe_shape). */
static int push_moe(mt_metrics_curves *c, const char *path, int lineno, const mt_json *a, double step, mt_error *err) {
    int L, E;
    if (moe_shape(a, &L, &E))
        return mt_errorf(err, "%s line %d: moe_load is not a list of layers' row counts per expert ([[e0, e1, ...], "
                              "...], every layer as long); is it a train --metrics file?", path, lineno);
    if (!c->moe_layers) {
        c->moe_tokens = calloc((size_t)L * (size_t)E, sizeof *c->moe_tokens);
        if (!c->moe_tokens) return mt_errorf(err, "out of memory reading metrics (%d x %d expert loads)", L, E);
        c->moe_layers = L, c->moe_experts = E, c->moe_line = lineno;
    } else if (L != c->moe_layers || E != c->moe_experts)
        return mt_errorf(err, "%s line %d: moe_load has %d layers x %d experts, but line %d had %d x %d; one run's "
                              "metrics per file (plot the runs as separate files)",
                         path, lineno, L, E, c->moe_line, c->moe_layers, c->moe_experts);
    if (c->moe_n == c->moe_cap) {
        if (c->moe_cap > (1 << 26) / L) return mt_errorf(err, "out of memory reading metrics (%d load points)", c->moe_n);
        int cap = c->moe_cap ? 2 * c->moe_cap : 256;
        double *nx = realloc(c->moe_x, (size_t)cap * sizeof *nx);
        if (nx) c->moe_x = nx;
        double *nr = nx ? realloc(c->moe_ratio, (size_t)cap * (size_t)L * sizeof *nr) : NULL;
        if (!nr) return mt_errorf(err, "out of memory reading metrics (%d load points)", cap);
        c->moe_ratio = nr;
        c->moe_cap = cap;
    }
    double *ratio = c->moe_ratio + (size_t)c->moe_n * L;
    int all = 1; /* a point only when every layer got rows (max/mean of nothing is no number) */
    int l = 0;
    for (const mt_json *lay = a->child; lay; lay = lay->next, l++) {
        double sum = 0, mx = 0;
        int e = 0;
        for (const mt_json *v = lay->child; v; v = v->next, e++) {
            sum += v->number;
            mx = fmax(mx, v->number);
            c->moe_tokens[(size_t)l * E + e] += v->number; /* plot skips a layer whose sum overflowed */
        }
        ratio[l] = sum > 0 ? mx / (sum / E) : 0;
        all &= sum > 0 && isfinite(ratio[l]);
    }
    if (all && isfinite(step)) c->moe_x[c->moe_n++] = step;
    return 0;
}

int mt_metrics_read(const char *path, mt_metrics_curves *c, mt_error *err) {
    FILE *f = fopen(path, "r");
    if (!f) return mt_errorf(err, "cannot open %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, rc = 0, steps = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        if (len == 0) continue;
        mt_error e = {{0}};
        mt_json_doc *d = mt_json_parse(line, (size_t)len, 16, &e);
        if (!d) {
            rc = mt_errorf(err, "%s line %d is not JSON (%s); is it a --metrics file?", path, lineno, e.msg);
            break;
        }
        const mt_json *o = mt_json_root(d);
        double step, v;
        if (mt_json_get_double(o, "step", &step, NULL) == 0) {
            for (int k = 0; k < MT_METRIC_COUNT && !rc; k++)
                if (mt_json_get_double(o, mt_metric_key[k], &v, NULL) == 0 && isfinite(v)) rc = push(c, k, step, v, err);
            const mt_json *load = mt_json_get(o, "moe_load");
            if (!rc && load) rc = push_moe(c, path, lineno, load, step, err);
            steps++;
        }
        mt_json_free(d);
    }
    free(line);
    if (!rc && ferror(f)) rc = mt_errorf(err, "reading %s failed: %s", path, strerror(errno));
    fclose(f);
    if (!rc && steps == 0) rc = mt_errorf(err, "%s has no step lines (no \"step\" field): nothing to plot", path);
    return rc;
}

void mt_metrics_curves_free(mt_metrics_curves *c) {
    for (int k = 0; k < MT_METRIC_COUNT; k++) {
        free(c->x[k]);
        free(c->y[k]);
        c->x[k] = c->y[k] = NULL;
        c->n[k] = c->cap[k] = 0;
    }
    free(c->moe_x);
    free(c->moe_ratio);
    free(c->moe_tokens);
    c->moe_x = c->moe_ratio = c->moe_tokens = NULL;
    c->moe_layers = c->moe_experts = c->moe_line = c->moe_n = c->moe_cap = 0;
}
