/* The metrics file `meshtrain plot` reads (train --metrics: one JSON object
 * per line), as curves over steps; apart from the drawing so that the
 * fuzzer can reach it without PLplot. */
#ifndef MT_CLI_METRICS_READ_H
#define MT_CLI_METRICS_READ_H
#include "core/error.h"

enum { MT_METRIC_LOSS, MT_METRIC_VAL_LOSS, MT_METRIC_LR, MT_METRIC_TPS, MT_METRIC_MFU, MT_METRIC_COUNT };
/* The field of each curve: loss, val_loss, lr, tokens_per_s, mfu. */
extern const char *const mt_metric_key[MT_METRIC_COUNT];

/* Curve k: n[k] points (x[k][i], y[k][i]), x the line's step. */
typedef struct {
    double *x[MT_METRIC_COUNT], *y[MT_METRIC_COUNT];
    int n[MT_METRIC_COUNT], cap[MT_METRIC_COUNT];
} mt_metrics_curves;

/* Every line of path with a numeric "step" adds a point to each curve whose
 * field it has as a finite number; blank lines are skipped. One error line
 * naming the file (and line) for a line that is not JSON or a file without
 * step lines. c starts zeroed; free it with mt_metrics_curves_free even
 * after an error. */
int mt_metrics_read(const char *path, mt_metrics_curves *c, mt_error *err);
void mt_metrics_curves_free(mt_metrics_curves *c);

#endif
