/* What rank 0 writes while training: {metrics} lines, progress lines on
 * the terminal and in {log-file} (train/progress.h). */
#include "train/progress.h"
#include "core/error.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One line of {metrics} (rank 0), of any length (the straggler report's
 * per-rank arrays grow with the world). A failed write (a full disk) is
 * remembered and ends the run at the step boundary on every rank. */
void mt_train_metrics_line(mt_trainer *tr, const char *fmt, ...) {
    if (!tr->metrics || tr->metrics_failed) return;
    char small[512], *line = small;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= sizeof small) { /* the trainer's line buffer, grown to the longest line so far */
        if ((size_t)n + 1 > tr->metrics_line_cap) {
            free(tr->metrics_line);
            tr->metrics_line = mt_xmalloc((size_t)n + 1, "a metrics line");
            tr->metrics_line_cap = (size_t)n + 1;
        }
        line = tr->metrics_line;
        va_start(ap, fmt);
        vsnprintf(line, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    if (n < 0) { /* a programming error: a bad format */
        tr->metrics_failed = 1;
        mt_errorf(&tr->metrics_err, "a {metrics} line could not be formatted");
    } else if (fputs(line, tr->metrics) == EOF || fflush(tr->metrics) != 0) {
        tr->metrics_failed = 1;
        mt_errorf(&tr->metrics_err, "writing {metrics} file '%s' failed: %s (is the disk full?)", tr->o.metrics_path,
                  strerror(errno));
    }
}

/* A progress line of rank 0: on a terminal, step lines (step_line 1; 2 for
 * the last, which stays) replace each other in place ('\r'); everything else, and every line in a pipe or
 * file, ends in a newline. {log-file} gets every line plainly; a failed
 * write ends the run at the step boundary, like {metrics}. */
void mt_train_progress(mt_trainer *tr, int step_line, const char *fmt, ...) {
    if (tr->rank != 0) return;
    char text[512], line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    mt_render_options(text, tr->o.option_prefix ? tr->o.option_prefix : "", line, sizeof line);
    if (tr->tty && step_line) { /* 2: the last step line, which stays */
        printf("\r%s\033[K%s", line, step_line == 2 ? "\n" : "");
        fflush(stdout);
        tr->line_open = step_line == 1;
    } else {
        printf("%s%s\n", tr->line_open ? "\n" : "", line);
        tr->line_open = 0;
    }
    if (tr->log_file && !tr->metrics_failed && (fprintf(tr->log_file, "%s\n", line) < 0 || fflush(tr->log_file) != 0)) {
        tr->metrics_failed = 1;
        mt_errorf(&tr->metrics_err, "writing {log-file} '%s' failed: %s (is the disk full?)", tr->o.log_path,
                  strerror(errno));
    }
}

/* "1h02m", "3m05s", "42s" */
const char *mt_duration_text(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e9) snprintf(buf, n, "?");
    else if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, n, "%.0fs", s);
    return buf;
}

/* A JSON number, or null for inf/NaN (which JSON cannot hold). */
const char *mt_json_number_text(char *buf, size_t n, double v) {
    if (isfinite(v)) snprintf(buf, n, "%.17g", v);
    else snprintf(buf, n, "null");
    return buf;
}
