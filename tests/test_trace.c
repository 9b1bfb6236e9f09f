/* core/trace: spans recorded, serialised and parsed back with core/json;
 * buffer-full and nesting behaviour; the busy/idle helper on a known
 * pattern. With `--merge FILE` (under mpirun, see tests/check_trace_merge.sh)
 * it instead records a known pattern on every rank and merges the traces
 * with comm/trace_merge into FILE. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "comm/trace_merge.h"
#include "core/json.h"
#include "core/trace.h"
#include "testlib.h"

static mt_json_doc *parse_file(const char *path) {
    size_t len = 0;
    char *text = slurp(path, &len);
    CHECK(text != NULL, "cannot read %s", path);
    if (!text) return NULL;
    mt_error err = {{0}};
    mt_json_doc *doc = mt_json_parse(text, len, 64, &err);
    CHECK(doc != NULL, "trace is not valid JSON: %s", err.msg);
    free(text);
    return doc;
}

/* The n-th event (0-based) with this "ph" and "pid". */
static const mt_json *nth_event(const mt_json *events, const char *ph, int64_t pid, int n) {
    for (const mt_json *e = events ? events->child : NULL; e; e = e->next) {
        const char *p;
        int64_t id;
        if (mt_json_get_string(e, "ph", &p, NULL) || strcmp(p, ph) || mt_json_get_int64(e, "pid", &id, NULL) ||
            id != pid)
            continue;
        if (n-- == 0) return e;
    }
    return NULL;
}

static int count_events(const mt_json *events, const char *ph) {
    int n = 0;
    for (const mt_json *e = events ? events->child : NULL; e; e = e->next) {
        const char *p;
        if (!mt_json_get_string(e, "ph", &p, NULL) && !strcmp(p, ph)) n++;
    }
    return n;
}

static const char *str_of(const mt_json *obj, const char *key) {
    const char *s = NULL;
    if (obj && mt_json_get_string(obj, key, &s, NULL)) s = NULL;
    return s ? s : "(missing)";
}

static double num_of(const mt_json *obj, const char *key) {
    double d = -1e300;
    if (obj && mt_json_get_double(obj, key, &d, NULL)) d = -1e300;
    return d;
}

static void test_roundtrip(const char *dir) {
    mt_trace t;
    mt_error err = {{0}};
    CHECK(mt_trace_init(&t, 3, 16, &err) == 0, "%s", err.msg);
    t.origin_ns = 1000000;
    mt_trace_name_thread(&t, 0, "compute");
    mt_trace_name_thread(&t, 1, "comm \"p2p\"\n");
    mt_trace_span_args(&t, "forward", "compute", 0, 1001500, 1002500, "mb", 7, "chunk", 1);
    mt_trace_span(&t, "recv_act", "comm", 1, 1002500, 1004000);
    char path[512];
    snprintf(path, sizeof path, "%s/one.json", dir);
    const mt_trace *one[1] = {&t};
    CHECK(mt_trace_write_file(one, 1, path, &err) == 0, "%s", err.msg);
    mt_json_doc *doc = parse_file(path);
    const mt_json *root = doc ? mt_json_root(doc) : NULL;
    const mt_json *ev = mt_json_get(root, "traceEvents");
    CHECK(ev && ev->type == MT_JSON_ARRAY && ev->count == 6, "6 events (2 process, 2 thread metadata, 2 spans)");
    CHECK(!strcmp(str_of(root, "displayTimeUnit"), "ms"), "displayTimeUnit");
    int64_t dropped = -1;
    CHECK(mt_json_get_int64(mt_json_get(root, "otherData"), "dropped_events", &dropped, NULL) == 0 && dropped == 0,
          "dropped_events %lld", (long long)dropped);
    const mt_json *pn = nth_event(ev, "M", 3, 0);
    CHECK(!strcmp(str_of(pn, "name"), "process_name") && !strcmp(str_of(mt_json_get(pn, "args"), "name"), "rank 3"),
          "process name");
    const mt_json *tn = nth_event(ev, "M", 3, 3);
    int64_t tid = -1;
    CHECK(!strcmp(str_of(tn, "name"), "thread_name") && mt_json_get_int64(tn, "tid", &tid, NULL) == 0 && tid == 1 &&
              !strcmp(str_of(mt_json_get(tn, "args"), "name"), "comm \"p2p\"\n"),
          "thread 1 name (escaped and decoded back)");
    const mt_json *f = nth_event(ev, "X", 3, 0), *r = nth_event(ev, "X", 3, 1);
    CHECK(!strcmp(str_of(f, "name"), "forward") && !strcmp(str_of(f, "cat"), "compute"), "forward span");
    CHECK(num_of(f, "ts") == 1.5 && num_of(f, "dur") == 1.0, "forward ts %g dur %g (microseconds)", num_of(f, "ts"),
          num_of(f, "dur"));
    int64_t mb = -1, chunk = -1;
    CHECK(mt_json_get_int64(mt_json_get(f, "args"), "mb", &mb, NULL) == 0 &&
              mt_json_get_int64(mt_json_get(f, "args"), "chunk", &chunk, NULL) == 0 && mb == 7 && chunk == 1,
          "forward args");
    CHECK(!strcmp(str_of(r, "cat"), "comm") && num_of(r, "ts") == 2.5 && num_of(r, "dur") == 1.5 &&
              mt_json_get(r, "args") == NULL,
          "recv span");
    CHECK(mt_json_get_int64(r, "tid", &tid, NULL) == 0 && tid == 1, "recv tid");
    mt_json_free(doc);

    /* snprintf contract: the length needed, a NUL-terminated prefix. */
    size_t need = mt_trace_format_events(&t, NULL, 0);
    char *full = malloc(need + 1), small[40];
    CHECK(full != NULL, "malloc");
    if (full) {
        CHECK(mt_trace_format_events(&t, full, need + 1) == need && strlen(full) == need, "full length %zu", need);
        CHECK(mt_trace_format_events(&t, small, sizeof small) == need && strlen(small) == sizeof small - 1 &&
                  !strncmp(small, full, sizeof small - 1),
              "truncated prefix");
        free(full);
    }
    mt_trace_free(&t);
}

static void test_buffer_full_and_nesting(const char *dir) {
    mt_trace a, b;
    mt_error err = {{0}};
    CHECK(mt_trace_init(&a, 0, 3, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 5; i++) mt_trace_span(&a, "step", "step", 0, a.origin_ns + i * 1000, a.origin_ns + i * 1000 + 500);
    CHECK(a.count == 3 && a.dropped == 2, "count %zu dropped %llu", a.count, (unsigned long long)a.dropped);
    CHECK(a.events[2].t0_ns == a.origin_ns + 2000, "the first events are kept");
    CHECK(mt_trace_init(&b, 1, 64, &err) == 0, "%s", err.msg);
    mt_trace_begin(&b, "outer", "step", 0);
    mt_trace_begin(&b, "inner", "compute", 0);
    mt_trace_end(&b);
    mt_trace_end(&b);
    CHECK(b.count == 2 && !strcmp(b.events[0].name, "inner") && !strcmp(b.events[1].name, "outer"), "inner first");
    CHECK(b.events[1].t0_ns <= b.events[0].t0_ns && b.events[0].t1_ns <= b.events[1].t1_ns, "outer contains inner");
    for (int i = 0; i < MT_TRACE_MAX_DEPTH + 8; i++) mt_trace_begin(&b, "deep", "step", 0);
    for (int i = 0; i < MT_TRACE_MAX_DEPTH + 8; i++) mt_trace_end(&b);
    CHECK(b.count == 2 + MT_TRACE_MAX_DEPTH && b.dropped == 8, "too deep: count %zu dropped %llu", b.count,
          (unsigned long long)b.dropped);
    mt_trace_span(NULL, "x", "y", 0, 0, 1); /* tracing off: no-op */
    mt_trace_begin(NULL, "x", "y", 0);
    mt_trace_end(NULL);

    /* Two ranks in one document; the drops are named. */
    char path[512];
    snprintf(path, sizeof path, "%s/two.json", dir);
    const mt_trace *both[2] = {&a, &b};
    CHECK(mt_trace_write_file(both, 2, path, &err) == 0, "%s", err.msg);
    mt_json_doc *doc = parse_file(path);
    const mt_json *root = doc ? mt_json_root(doc) : NULL, *ev = mt_json_get(root, "traceEvents");
    int64_t dropped = -1;
    CHECK(mt_json_get_int64(mt_json_get(root, "otherData"), "dropped_events", &dropped, NULL) == 0 && dropped == 10,
          "dropped_events %lld", (long long)dropped);
    CHECK(!strcmp(str_of(mt_json_get(nth_event(ev, "M", 0, 0), "args"), "name"),
                  "rank 0 (2 events dropped: trace buffer full)"),
          "rank 0 says it dropped events");
    CHECK(count_events(ev, "X") == 3 + 2 + MT_TRACE_MAX_DEPTH && nth_event(ev, "X", 1, 0) != NULL, "spans of both ranks");
    mt_json_free(doc);
    mt_trace_free(&a);
    mt_trace_free(&b);

    snprintf(path, sizeof path, "%s/no/such/dir/t.json", dir);
    CHECK(mt_trace_write_file(both, 0, path, &err) == -1 && strstr(err.msg, "cannot create trace file"), "%s", err.msg);
    CHECK(mt_trace_init(&a, 0, 0, &err) == -1 && strstr(err.msg, "at least 1 event"), "%s", err.msg);
}

static void test_usage(void) {
    mt_trace t;
    mt_error err = {{0}};
    CHECK(mt_trace_init(&t, 0, 16, &err) == 0, "%s", err.msg);
    mt_trace_usage u;
    const char *compute[] = {"compute"}, *both[] = {"compute", "comm"};
    CHECK(mt_trace_usage_of(&t, compute, 1, &u, &err) == 0 && u.window_s == 0 && u.idle_fraction == 0, "empty");
    /* window [100, 40100] ns: compute [100,10100] and [5100,15100] overlap
     * (15 us), [20100,30100] (10 us); a comm span fills [15100,20100]. */
    int64_t o = 100;
    mt_trace_span(&t, "step", "step", 0, o, o + 40000);
    mt_trace_span(&t, "B", "compute", 0, o + 5000, o + 15000);
    mt_trace_span(&t, "F", "compute", 0, o, o + 10000);
    mt_trace_span(&t, "recv", "comm", 1, o + 15000, o + 20000);
    mt_trace_span(&t, "F", "compute", 0, o + 20000, o + 30000);
    CHECK(mt_trace_usage_of(&t, compute, 1, &u, &err) == 0, "%s", err.msg);
    CHECK_CLOSE(u.window_s, 40e-6, 1e-12);
    CHECK_CLOSE(u.busy_s, 25e-6, 1e-12);
    CHECK_CLOSE(u.idle_s, 15e-6, 1e-12);
    CHECK(u.idle_fraction == 0.375, "idle fraction %.17g", u.idle_fraction);
    CHECK(mt_trace_usage_of(&t, both, 2, &u, &err) == 0 && u.idle_fraction == 0.25, "with comm: %.17g",
          u.idle_fraction);
    CHECK(mt_trace_usage_of(&t, NULL, 0, &u, &err) == 0 && u.idle_fraction == 1.0, "no compute category");
    mt_trace_free(&t);
}

/* Under mpirun: rank 0 records 5 spans into 3 slots (2 dropped), rank 1
 * 20000 spans (a fragment of several pieces), others 4; merged into path. */
static int merge_mode(int argc, char **argv) {
    mt_error err = {{0}};
    if (mt_comm_process_init(&argc, &argv, &err)) {
        fprintf(stderr, "test_trace: %s\n", err.msg);
        return 1;
    }
    mt_comm_ctx *ctx = mt_comm_ctx_create(20, &err);
    if (!ctx) {
        fprintf(stderr, "test_trace: %s\n", err.msg);
        mt_comm_process_finalize();
        return 1;
    }
    mt_comm *w = mt_comm_world(ctx);
    int rank = mt_comm_rank(w);
    int n = rank == 0 ? 5 : rank == 1 ? 20000 : 4;
    mt_trace t;
    int rc = mt_trace_init(&t, rank, rank == 0 ? 3 : (size_t)n, &err);
    if (!rc) {
        mt_trace_name_thread(&t, 0, "compute");
        mt_trace_sync_origin(&t, w);
        for (int i = 0; i < n; i++) {
            int64_t t0 = mt_trace_now_ns();
            mt_trace_span_args(&t, i % 2 ? "backward" : "forward", "compute", 0, t0, t0 + 1000, "rank", rank, "i", i);
        }
        rc = mt_trace_merge_write(&t, w, argv[2], &err);
        mt_trace_free(&t);
    }
    if (rc) fprintf(stderr, "test_trace: rank %d: %s\n", rank, err.msg);
    else printf("test_trace: rank %d: merged into %s\n", rank, argv[2]);
    mt_comm_ctx_free(ctx);
    mt_comm_process_finalize();
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--merge")) return merge_mode(argc, argv);
    char dir[] = "/tmp/test_trace_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_roundtrip(dir);
    test_buffer_full_and_nesting(dir);
    test_usage();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup %s", dir);
    TEST_MAIN_END("test_trace");
}
