/* The straggler report (train/straggler.h). */
#include "train/straggler.h"
#include "core/error.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mt_straggler_init(mt_straggler *s, mt_comm *world, const mt_mesh_shape *shape) {
    memset(s, 0, sizeof *s);
    s->n = mt_comm_size(world);
    s->rank = mt_comm_rank(world);
    size_t n = (size_t)s->n;
    s->vec = mt_xcalloc(MT_STRAGGLER_FLAGS + 2 * n, sizeof(double), "straggler report");
    s->step_ms = s->vec + MT_STRAGGLER_FLAGS;
    s->wait_ms = s->vec + MT_STRAGGLER_FLAGS + n;
    if (s->n == 1) return;
    s->compute_ms = mt_xcalloc(n, sizeof(double), "straggler report");
    s->scratch = mt_xcalloc(n, sizeof(double), "straggler report");
    s->host = mt_xcalloc(n, sizeof *s->host, "straggler report");
    s->group = mt_xcalloc(n, sizeof(int), "straggler report");
    s->group_size = mt_xcalloc(n, sizeof(int), "straggler report");
    s->streak = mt_xcalloc(n, sizeof(int), "straggler report");
    s->warned_at = mt_xcalloc(n, sizeof(int64_t), "straggler report");
    char mine[MT_STRAGGLER_HOST_LEN];
    memset(mine, 0, sizeof mine);
    mt_comm_host_name(mine, sizeof mine);
    mt_comm_allgather(world, mine, s->host, sizeof mine);
    /* the ranks of a pipeline stage hold the same units; with one rank per stage, compare with everyone */
    int by_stage = shape->pp < s->n;
    for (int r = 0; r < s->n; r++) {
        s->group[r] = by_stage ? mt_mesh_coord_of(shape, r).pp : 0;
        s->group_size[r] = by_stage ? s->n / shape->pp : s->n;
        s->warned_at[r] = -1;
        s->host[r][MT_STRAGGLER_HOST_LEN - 1] = 0;
    }
    int shown = s->n <= MT_STRAGGLER_ARRAY_MAX ? s->n : 0;
    s->text_cap = 256 + (size_t)shown * 2 * 24;
    s->text = mt_xcalloc(s->text_cap, 1, "straggler report");
}

void mt_straggler_free(mt_straggler *s) {
    free(s->vec);
    free(s->compute_ms);
    free(s->scratch);
    free(s->host);
    free(s->group);
    free(s->group_size);
    free(s->streak);
    free(s->warned_at);
    free(s->text);
    memset(s, 0, sizeof *s);
}

void mt_straggler_boundary(mt_straggler *s, mt_comm *world, int64_t flags[MT_STRAGGLER_FLAGS], double step_ms, double wait_ms) {
    size_t len = s->n > 1 ? MT_STRAGGLER_FLAGS + 2 * (size_t)s->n : MT_STRAGGLER_FLAGS;
    memset(s->vec, 0, len * sizeof(double));
    for (int i = 0; i < MT_STRAGGLER_FLAGS; i++) s->vec[i] = (double)flags[i];
    if (s->n > 1) {
        s->step_ms[s->rank] = step_ms;
        s->wait_ms[s->rank] = wait_ms;
    }
    mt_comm_allreduce_ctl(world, s->vec, s->vec, len, MT_COMM_F64, MT_COMM_SUM);
    for (int i = 0; i < MT_STRAGGLER_FLAGS; i++) flags[i] = (int64_t)s->vec[i];
    for (int r = 0; r < s->n && s->n > 1; r++) {
        double c = s->step_ms[r] - s->wait_ms[r];
        s->compute_ms[r] = c > 0 ? c : 0;
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The lower median of v[0..k) (reorders v). */
static double lower_median(double *v, int k) {
    qsort(v, (size_t)k, sizeof *v, cmp_double);
    return v[(k - 1) / 2];
}

/* Appends to buf (cap bytes, *k used); a value that does not fit is cut
 * (the buffer holds 24 bytes per number: a step of 1e19 ms would not fit). */
__attribute__((format(printf, 4, 5))) static void append(char *buf, size_t cap, size_t *k, const char *fmt, ...) {
    if (*k + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *k, cap - *k, fmt, ap);
    va_end(ap);
    if (w > 0) *k = *k + (size_t)w < cap ? *k + (size_t)w : cap - 1;
}

/* ,"key":{min, median, max, max_rank} of v[0..n) appended to the metrics text. */
static void stats_json(mt_straggler *s, size_t *k, const char *key, const double *v) {
    int max_rank = 0;
    for (int r = 0; r < s->n; r++) {
        s->scratch[r] = v[r];
        if (v[r] > v[max_rank]) max_rank = r;
    }
    double med = lower_median(s->scratch, s->n);
    append(s->text, s->text_cap, k, ",\"%s\":{\"min\":%.3f,\"median\":%.3f,\"max\":%.3f,\"max_rank\":%d}", key,
           s->scratch[0], med, s->scratch[s->n - 1], max_rank);
}

const char *mt_straggler_metrics(mt_straggler *s) {
    if (s->n == 1) return "";
    size_t k = 0;
    s->text[0] = 0;
    if (s->n <= MT_STRAGGLER_ARRAY_MAX) {
        const double *arr[2] = {s->step_ms, s->wait_ms};
        static const char *const key[2] = {"rank_step_ms", "rank_wait_ms"};
        for (int a = 0; a < 2; a++) {
            append(s->text, s->text_cap, &k, ",\"%s\":[", key[a]);
            for (int r = 0; r < s->n; r++) append(s->text, s->text_cap, &k, "%s%.3f", r ? "," : "", arr[a][r]);
            append(s->text, s->text_cap, &k, "]");
        }
    } else {
        stats_json(s, &k, "rank_compute_ms_stats", s->compute_ms);
        stats_json(s, &k, "rank_wait_ms_stats", s->wait_ms);
    }
    return s->text;
}

int mt_straggler_check(mt_straggler *s, int64_t step, char *msg, size_t cap) {
    if (s->n == 1) return 0;
    double *median = s->scratch; /* one group's compute times, then sorted */
    int worst = -1, others = 0;
    double worst_ratio = 0, worst_median = 0;
    char more[160] = "";
    size_t mk = 0;
    int n = s->n;
    /* the comparison groups are numbered 0, 1, ...: one pass each */
    for (int g = 0;; g++) {
        int k = 0;
        for (int r = 0; r < n; r++)
            if (s->group[r] == g) median[k++] = s->compute_ms[r];
        if (!k) break;
        double med = lower_median(median, k);
        for (int r = 0; r < n; r++) {
            if (s->group[r] != g) continue;
            double c = s->compute_ms[r];
            int slow = c > MT_STRAGGLER_RATIO * med && c - med > MT_STRAGGLER_MIN_MS;
            s->streak[r] = slow ? s->streak[r] + 1 : 0;
            if (s->streak[r] < MT_STRAGGLER_STEPS || (s->warned_at[r] >= 0 && step - s->warned_at[r] < MT_STRAGGLER_REPEAT))
                continue;
            double ratio = c / (med > 1e-3 ? med : 1e-3);
            if (worst >= 0) { /* the rank named so far becomes one of the others */
                int o = ratio > worst_ratio ? worst : r;
                if (others++ < 8 && mk < sizeof more) mk += (size_t)snprintf(more + mk, sizeof more - mk, " %d", o);
            }
            if (worst < 0 || ratio > worst_ratio) worst = r, worst_ratio = ratio, worst_median = med;
            s->warned_at[r] = step;
        }
    }
    if (worst < 0) return 0;
    char peers[64];
    if (s->group_size[worst] < n)
        snprintf(peers, sizeof peers, "the %d ranks of its pipeline stage", s->group_size[worst]);
    else
        snprintf(peers, sizeof peers, "all %d ranks", n);
    snprintf(msg, cap,
             "step %5lld | warning: rank %d (host %s) is persistently slower than the median: compute %.1f ms per step "
             "(%.1fx the median %.1f ms of %s) for %d steps in a row; its step %.1f ms, waiting in communication %.1f ms%s%s%s",
             (long long)step, worst, s->host[worst], s->compute_ms[worst], worst_ratio, worst_median, peers,
             s->streak[worst], s->step_ms[worst], s->wait_ms[worst], others ? "; also slow: rank" : "",
             others > 1 ? "s" : "", more);
    if (others > 8) snprintf(msg + strlen(msg), cap - strlen(msg), " and %d more", others - 8);
    return 1;
}
