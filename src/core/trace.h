/* Timeline recorder: spans of one process in the Chrome trace-event format
 * (loadable in Perfetto / chrome://tracing).
 *
 * Recording. mt_trace_init allocates a fixed buffer of `capacity` events;
 * recording never allocates and never copies strings: names, categories and
 * argument keys are stored as pointers and must outlive the trace (string
 * literals). When the buffer is full further events are counted as dropped
 * and the output says so (in the process name and in otherData). Every
 * recording call accepts t == NULL and does nothing, so callers can record
 * unconditionally and pass NULL when tracing is off. Times are
 * CLOCK_MONOTONIC nanoseconds (mt_trace_now_ns) and are written relative to
 * the trace's origin (set at init; mt_trace_sync_origin in
 * comm/trace_merge.h aligns the origins of all ranks after a barrier).
 *
 * Output. A document is {"traceEvents":[...], "displayTimeUnit":"ms",
 * "otherData":{"dropped_events":N}} where the events of rank R are
 *   {"name":"process_name","ph":"M","pid":R,"args":{"name":"rank R"}}
 *   {"name":"process_sort_index","ph":"M","pid":R,"args":{"sort_index":R}}
 *   {"name":"thread_name","ph":"M","pid":R,"tid":T,"args":{"name":...}}  (named threads)
 *   {"name":...,"cat":...,"ph":"X","ts":us,"dur":us,"pid":R,"tid":T,"args":{...}}
 * with ts and dur in microseconds (3 decimals: nanosecond resolution). A
 * document can hold any number of ranks: the fragment of each rank is
 * formatted on its own (mt_trace_format_events) and the document writer
 * (mt_trace_doc_*) joins them, which is how comm/trace_merge.c merges ranks
 * on rank 0. */
#ifndef MT_CORE_TRACE_H
#define MT_CORE_TRACE_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "core/error.h"

#define MT_TRACE_MAX_THREADS 16 /* tids 0..15 */
#define MT_TRACE_MAX_DEPTH 32   /* nesting of mt_trace_begin */

typedef struct {
    const char *name, *cat;
    int64_t t0_ns, t1_ns;
    int tid;
    int nargs; /* 0..2 integer arguments shown by the viewer */
    const char *arg_key[2];
    int64_t arg_val[2];
} mt_trace_event;

typedef struct {
    int rank;          /* pid in the output */
    int64_t origin_ns; /* time 0 of the output */
    mt_trace_event *events;
    size_t capacity, count;
    uint64_t dropped; /* events not recorded because the buffer was full */
    const char *thread_name[MT_TRACE_MAX_THREADS];
    struct {
        const char *name, *cat;
        int tid;
        int64_t t0_ns;
    } open[MT_TRACE_MAX_DEPTH];
    int depth; /* open mt_trace_begin spans (may exceed MT_TRACE_MAX_DEPTH: those are dropped) */
} mt_trace;

/* Allocates (and touches) the event buffer; origin = now. capacity >= 1. */
int mt_trace_init(mt_trace *t, int rank, size_t capacity, mt_error *err);
void mt_trace_free(mt_trace *t);
int64_t mt_trace_now_ns(void);
/* Names a thread row (tid < MT_TRACE_MAX_THREADS) of this process. */
void mt_trace_name_thread(mt_trace *t, int tid, const char *name);

/* A complete span [t0_ns, t1_ns] (times from mt_trace_now_ns). */
void mt_trace_span(mt_trace *t, const char *name, const char *cat, int tid, int64_t t0_ns, int64_t t1_ns);
/* The same with up to two integer arguments (key1 NULL for one). */
void mt_trace_span_args(mt_trace *t, const char *name, const char *cat, int tid, int64_t t0_ns, int64_t t1_ns,
                        const char *key0, int64_t val0, const char *key1, int64_t val1);
/* Nested spans: begin pushes, end records the innermost open span. An end
 * without a begin is a programming error (mt_die). */
void mt_trace_begin(mt_trace *t, const char *name, const char *cat, int tid);
void mt_trace_end(mt_trace *t);

/* Formats this rank's events (metadata first) as comma-separated JSON
 * objects, without brackets, into buf like snprintf: writes at most cap
 * bytes including a terminating NUL and returns the length the full text
 * needs (call with cap = 0 to size the buffer). */
size_t mt_trace_format_events(const mt_trace *t, char *buf, size_t cap);

/* Streams a document: begin, add each rank's fragment, end. Write errors
 * are reported by the call that hit them (and by every later one). */
typedef struct {
    FILE *f;
    const char *path; /* for messages */
    size_t fragments;
    uint64_t dropped;
    int failed;
} mt_trace_doc;
int mt_trace_doc_begin(mt_trace_doc *d, FILE *f, const char *path, mt_error *err);
int mt_trace_doc_add(mt_trace_doc *d, const char *events, size_t len, uint64_t dropped, mt_error *err);
int mt_trace_doc_end(mt_trace_doc *d, mt_error *err);

/* Writes the n traces of this process (e.g. one per simulated rank, or
 * just one) as one document to path. */
int mt_trace_write_file(const mt_trace *const *traces, int n, const char *path, mt_error *err);

/* Busy and idle time of one rank over its window [earliest span start,
 * latest span end] (spans of every category; record one span around the
 * whole step so that all ranks share the same window). Busy is the time
 * covered by at least one span whose category is one of compute_cats
 * (overlapping spans count once); idle = window - busy. Only recorded
 * events count (see dropped). */
typedef struct {
    double window_s, busy_s, idle_s;
    double idle_fraction; /* idle / window; 0 for an empty trace */
} mt_trace_usage;
int mt_trace_usage_of(const mt_trace *t, const char *const *compute_cats, int ncats, mt_trace_usage *out,
                      mt_error *err);

#endif
