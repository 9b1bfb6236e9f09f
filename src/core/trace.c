/* Chrome trace-event recorder and writer; format in trace.h. */
#include "core/trace.h"
#include "core/clock.h"
#include "core/fileio.h"
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t mt_trace_now_ns(void) { return mt_clock_ns(); }

int mt_trace_init(mt_trace *t, int rank, size_t capacity, mt_error *err) {
    memset(t, 0, sizeof *t);
    if (capacity < 1 || capacity > SIZE_MAX / sizeof *t->events)
        return mt_errorf(err, "trace capacity must be at least 1 event, got %zu", capacity);
    t->events = malloc(capacity * sizeof *t->events);
    if (!t->events)
        return mt_errorf(err, "cannot allocate the trace buffer of %zu events (%zu bytes): use a smaller capacity",
                         capacity, capacity * sizeof *t->events);
    /* Touch the pages now, not while recording. */
    memset(t->events, 0, capacity * sizeof *t->events);
    t->capacity = capacity;
    t->rank = rank;
    t->origin_ns = mt_trace_now_ns();
    return 0;
}

void mt_trace_free(mt_trace *t) {
    if (!t) return;
    free(t->events);
    memset(t, 0, sizeof *t);
}

void mt_trace_name_thread(mt_trace *t, int tid, const char *name) {
    if (!t) return;
    if (tid < 0 || tid >= MT_TRACE_MAX_THREADS)
        mt_die("trace thread id %d out of range 0..%d", tid, MT_TRACE_MAX_THREADS - 1);
    t->thread_name[tid] = name;
}

void mt_trace_span_args(mt_trace *t, const char *name, const char *cat, int tid, int64_t t0_ns, int64_t t1_ns,
                        const char *key0, int64_t val0, const char *key1, int64_t val1) {
    if (!t) return;
    if (t->count == t->capacity) {
        t->dropped++;
        return;
    }
    mt_trace_event *e = &t->events[t->count++];
    e->name = name;
    e->cat = cat;
    e->tid = tid;
    e->t0_ns = t0_ns;
    e->t1_ns = t1_ns < t0_ns ? t0_ns : t1_ns;
    e->nargs = key0 ? (key1 ? 2 : 1) : 0;
    e->arg_key[0] = key0;
    e->arg_val[0] = val0;
    e->arg_key[1] = key1;
    e->arg_val[1] = val1;
}

void mt_trace_span(mt_trace *t, const char *name, const char *cat, int tid, int64_t t0_ns, int64_t t1_ns) {
    mt_trace_span_args(t, name, cat, tid, t0_ns, t1_ns, NULL, 0, NULL, 0);
}

void mt_trace_begin(mt_trace *t, const char *name, const char *cat, int tid) {
    if (!t) return;
    if (t->depth < MT_TRACE_MAX_DEPTH) {
        t->open[t->depth].name = name;
        t->open[t->depth].cat = cat;
        t->open[t->depth].tid = tid;
        t->open[t->depth].t0_ns = mt_trace_now_ns();
    }
    t->depth++;
}

void mt_trace_end(mt_trace *t) {
    if (!t) return;
    int64_t now = mt_trace_now_ns();
    if (t->depth == 0) mt_die("mt_trace_end without a matching mt_trace_begin (rank %d)", t->rank);
    t->depth--;
    if (t->depth >= MT_TRACE_MAX_DEPTH) {
        t->dropped++; /* nested deeper than the stack: not recorded */
        return;
    }
    mt_trace_span(t, t->open[t->depth].name, t->open[t->depth].cat, t->open[t->depth].tid, t->open[t->depth].t0_ns,
                  now);
}

/* ---- formatting (snprintf-style appender) ---- */

typedef struct {
    char *buf;
    size_t cap, len;
} out_text;

static void put(out_text *o, const char *s, size_t n) {
    if (o->len < o->cap) {
        size_t room = o->cap - o->len;
        memcpy(o->buf + o->len, s, n < room ? n : room);
    }
    o->len += n;
}

static void putf(out_text *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(out_text *o, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) put(o, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void put_string(out_text *o, const char *s) {
    put(o, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            put(o, e, 2);
        } else if (*p < 0x20) {
            putf(o, "\\u%04x", *p);
        } else {
            put(o, (const char *)p, 1);
        }
    }
    put(o, "\"", 1);
}

/* Nanoseconds as microseconds with 3 decimals, exactly (no rounding). */
static void put_us(out_text *o, int64_t ns) {
    const char *sign = ns < 0 ? "-" : "";
    uint64_t a = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    putf(o, "%s%" PRIu64 ".%03u", sign, a / 1000, (unsigned)(a % 1000));
}

size_t mt_trace_format_events(const mt_trace *t, char *buf, size_t cap) {
    out_text o = {buf, cap ? cap - 1 : 0, 0};
    putf(&o, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":", t->rank);
    char pname[96];
    if (t->dropped)
        snprintf(pname, sizeof pname, "rank %d (%" PRIu64 " events dropped: trace buffer full)", t->rank, t->dropped);
    else
        snprintf(pname, sizeof pname, "rank %d", t->rank);
    put_string(&o, pname);
    putf(&o, "}},{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", t->rank,
         t->rank);
    for (int tid = 0; tid < MT_TRACE_MAX_THREADS; tid++) {
        if (!t->thread_name[tid]) continue;
        putf(&o, ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", t->rank, tid);
        put_string(&o, t->thread_name[tid]);
        put(&o, "}}", 2);
    }
    for (size_t i = 0; i < t->count; i++) {
        const mt_trace_event *e = &t->events[i];
        put(&o, ",{\"name\":", 9);
        put_string(&o, e->name);
        put(&o, ",\"cat\":", 7);
        put_string(&o, e->cat);
        put(&o, ",\"ph\":\"X\",\"ts\":", 15);
        put_us(&o, e->t0_ns - t->origin_ns);
        put(&o, ",\"dur\":", 7);
        put_us(&o, e->t1_ns - e->t0_ns);
        putf(&o, ",\"pid\":%d,\"tid\":%d", t->rank, e->tid);
        if (e->nargs) {
            put(&o, ",\"args\":{", 9);
            for (int a = 0; a < e->nargs; a++) {
                if (a) put(&o, ",", 1);
                put_string(&o, e->arg_key[a]);
                putf(&o, ":%" PRId64, e->arg_val[a]);
            }
            put(&o, "}", 1);
        }
        put(&o, "}", 1);
    }
    if (cap) buf[o.len < cap - 1 ? o.len : cap - 1] = '\0';
    return o.len;
}

/* ---- document ---- */

static int doc_write(mt_trace_doc *d, const char *s, size_t n, mt_error *err) {
    if (d->failed) return mt_errorf(err, "writing trace file %s failed earlier", d->path);
    if (n && fwrite(s, 1, n, d->f) != n) {
        d->failed = 1;
        return mt_errorf(err, "cannot write trace file %s: %s (is the disk full?)", d->path, strerror(errno));
    }
    return 0;
}

int mt_trace_doc_begin(mt_trace_doc *d, FILE *f, const char *path, mt_error *err) {
    memset(d, 0, sizeof *d);
    d->f = f;
    d->path = path ? path : "(stream)";
    static const char head[] = "{\"traceEvents\":[\n";
    return doc_write(d, head, sizeof head - 1, err);
}

int mt_trace_doc_add(mt_trace_doc *d, const char *events, size_t len, uint64_t dropped, mt_error *err) {
    d->dropped += dropped;
    if (len == 0) return d->failed ? mt_errorf(err, "writing trace file %s failed earlier", d->path) : 0;
    if (d->fragments++ && doc_write(d, ",\n", 2, err)) return -1;
    return doc_write(d, events, len, err);
}

int mt_trace_doc_end(mt_trace_doc *d, mt_error *err) {
    char tail[128];
    int n = snprintf(tail, sizeof tail, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped_events\":%" PRIu64 "}}\n",
                     d->dropped);
    if (doc_write(d, tail, (size_t)n, err)) return -1;
    if (fflush(d->f)) {
        d->failed = 1;
        return mt_errorf(err, "cannot write trace file %s: %s (is the disk full?)", d->path, strerror(errno));
    }
    return 0;
}

int mt_trace_write_file(const mt_trace *const *traces, int n, const char *path, mt_error *err) {
    char *tmp = NULL; /* written to a temporary, renamed when whole */
    FILE *f = mt_fopen_temp(path, &tmp, err);
    if (!f) return mt_errorf(err, "cannot create trace file %s: %s", path, strerror(errno));
    mt_trace_doc d;
    int rc = mt_trace_doc_begin(&d, f, path, err);
    for (int i = 0; i < n && !rc; i++) {
        size_t len = mt_trace_format_events(traces[i], NULL, 0);
        char *buf = malloc(len + 1);
        if (!buf) {
            rc = mt_errorf(err, "cannot allocate %zu bytes to format the trace of rank %d", len + 1, traces[i]->rank);
            break;
        }
        mt_trace_format_events(traces[i], buf, len + 1);
        rc = mt_trace_doc_add(&d, buf, len, traces[i]->dropped, err);
        free(buf);
    }
    if (!rc) rc = mt_trace_doc_end(&d, err);
    mt_error e;
    if (mt_fcommit_temp(f, tmp, path, rc != 0, &e) && !rc) rc = mt_errorf(err, "cannot write trace file %s: %s", path, e.msg);
    return rc;
}

/* ---- busy / idle ---- */

typedef struct {
    int64_t t0, t1;
} interval;

static int by_start(const void *a, const void *b) {
    const interval *x = a, *y = b;
    return (x->t0 > y->t0) - (x->t0 < y->t0);
}

int mt_trace_usage_of(const mt_trace *t, const char *const *compute_cats, int ncats, mt_trace_usage *out,
                      mt_error *err) {
    memset(out, 0, sizeof *out);
    if (t->count == 0) return 0;
    int64_t lo = t->events[0].t0_ns, hi = t->events[0].t1_ns;
    size_t n = 0;
    for (size_t i = 0; i < t->count; i++) {
        const mt_trace_event *e = &t->events[i];
        if (e->t0_ns < lo) lo = e->t0_ns;
        if (e->t1_ns > hi) hi = e->t1_ns;
        for (int c = 0; c < ncats; c++)
            if (e->cat && !strcmp(e->cat, compute_cats[c])) {
                n++;
                break;
            }
    }
    interval *iv = malloc((n ? n : 1) * sizeof *iv);
    if (!iv) return mt_errorf(err, "cannot allocate %zu intervals to measure the idle time of rank %d", n, t->rank);
    n = 0;
    for (size_t i = 0; i < t->count; i++) {
        const mt_trace_event *e = &t->events[i];
        for (int c = 0; c < ncats; c++)
            if (e->cat && !strcmp(e->cat, compute_cats[c])) {
                iv[n].t0 = e->t0_ns;
                iv[n++].t1 = e->t1_ns;
                break;
            }
    }
    qsort(iv, n, sizeof *iv, by_start);
    /* Length of the union: sweep the sorted intervals, merging overlaps. */
    int64_t busy = 0, cur0 = 0, cur1 = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || iv[i].t0 > cur1) {
            busy += cur1 - cur0;
            cur0 = iv[i].t0;
            cur1 = iv[i].t1;
        } else if (iv[i].t1 > cur1) {
            cur1 = iv[i].t1;
        }
    }
    busy += cur1 - cur0;
    free(iv);
    out->window_s = (double)(hi - lo) * 1e-9;
    out->busy_s = (double)busy * 1e-9;
    out->idle_s = (double)(hi - lo - busy) * 1e-9;
    out->idle_fraction = hi > lo ? (double)(hi - lo - busy) / (double)(hi - lo) : 0.0;
    return 0;
}
