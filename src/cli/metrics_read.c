/* The metrics file plot reads (cli/metrics_read.h), with the project's
 * JSON reader. */
#include "cli/metrics_read.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/json.h"

const char *const mt_metric_key[MT_METRIC_COUNT] = {"loss", "val_loss", "lr", "tokens_per_s", "mfu"};

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
}
