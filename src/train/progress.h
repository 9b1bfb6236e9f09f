/* Rank 0's output during a run: the metrics file (JSON lines) and the
 * progress lines (terminal and log file). A failed write is remembered in
 * the state (metrics_failed, metrics_err) and ends the run at the step
 * boundary on every rank. */
#ifndef MT_TRAIN_PROGRESS_H
#define MT_TRAIN_PROGRESS_H
#include <stddef.h>
#include "train/state.h"

/* One metrics line (printf-style, with its newline). */
void mt_train_metrics_line(mt_trainer *tr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A progress line: step_line 1 replaces the previous one on a terminal, 2
 * the last step line (stays), 0 any other line. */
void mt_train_progress(mt_trainer *tr, int step_line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "1h02m", "3m05s", "42s" */
const char *mt_duration_text(char *buf, size_t n, double s);
/* A JSON number, or null for inf/NaN (which JSON cannot hold). */
const char *mt_json_number_text(char *buf, size_t n, double v);

#endif
