/* optim/loss_scaler: the state machine (growth after exactly `window` clean
 * steps, halving and skip on overflow, counter reset, min/max caps), the
 * checkpoint state (struct and JSON round trips; a resumed scaler follows the
 * uninterrupted one), the non-finite scan (a single NaN/+inf/-inf at every
 * position of odd-length arrays, aligned or not, on both the one-thread and
 * the OpenMP path; no false positives; no floating-point exception raised),
 * and the agreement over the world communicator. Run alone it is a world of
 * one; under `mpirun -np N` (N >= 2) it also checks that a flag raised on one
 * rank only makes every rank skip, with equal scales everywhere. */
#include <fenv.h>
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include "comm/comm.h"
#include "optim/loss_scaler.h"
#include "testlib.h"

static float from_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static mt_loss_scaler make(float initial, int64_t window, float lo, float hi) {
    mt_loss_scaler s;
    mt_error err = {{0}};
    int rc = mt_loss_scaler_init(&s, initial, window, lo, hi, &err);
    CHECK(rc == 0, "init(%g, %lld, %g, %g): %s", (double)initial, (long long)window, (double)lo, (double)hi, err.msg);
    return s;
}

static void test_init_errors(void) {
    mt_loss_scaler s;
    mt_error err = {{0}};
    struct { float init; int64_t window; float lo, hi; } bad[] = {
        {8, 0, 1, 64},        /* window < 1 */
        {8, -3, 1, 64},
        {0.5f, 4, 1, 64},     /* initial below min */
        {128, 4, 1, 64},      /* initial above max */
        {8, 4, 0, 64},        /* min not positive */
        {8, 4, 1e-40f, 64},   /* min subnormal */
        {8, 4, 16, 4},        /* min > max */
        {NAN, 4, 1, 64},
        {8, 4, 1, INFINITY},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = 0;
        CHECK(mt_loss_scaler_init(&s, bad[i].init, bad[i].window, bad[i].lo, bad[i].hi, &err) == -1,
              "bad init #%zu accepted", i);
        CHECK(strstr(err.msg, "loss scaler") != NULL, "bad init #%zu: message '%s'", i, err.msg);
    }
}

static void test_growth(void) {
    for (int64_t window = 1; window <= 5; window++) {
        mt_loss_scaler s = make(8, window, 1, 1024);
        for (int round = 0; round < 3; round++) {
            float before = s.st.scale;
            for (int64_t k = 1; k < window; k++) {
                CHECK(mt_loss_scaler_update(&s, 0) == MT_LOSS_SCALE_APPLY, "clean step must apply");
                CHECK(s.st.scale == before, "window %lld: grew after %lld of the clean steps", (long long)window,
                      (long long)k);
                CHECK(s.st.clean_steps == k, "clean count %lld, want %lld", (long long)s.st.clean_steps, (long long)k);
            }
            CHECK(mt_loss_scaler_update(&s, 0) == MT_LOSS_SCALE_APPLY, "clean step must apply");
            CHECK(s.st.scale == 2 * before, "window %lld: scale %g after a full window, want %g", (long long)window,
                  (double)s.st.scale, 2.0 * before);
            CHECK(s.st.clean_steps == 0, "count not reset after growth: %lld", (long long)s.st.clean_steps);
        }
        CHECK(s.st.skipped == 0, "skips counted without overflow");
    }
}

static void test_overflow(void) {
    mt_loss_scaler s = make(64, 3, 1, 1024);
    mt_loss_scaler_update(&s, 0);
    mt_loss_scaler_update(&s, 0);
    CHECK(s.st.clean_steps == 2, "count %lld", (long long)s.st.clean_steps);
    CHECK(mt_loss_scaler_update(&s, 1) == MT_LOSS_SCALE_SKIP, "overflow must skip");
    CHECK(s.st.scale == 32, "scale %g after overflow, want 32", (double)s.st.scale);
    CHECK(s.st.clean_steps == 0, "count not reset by overflow: %lld", (long long)s.st.clean_steps);
    CHECK(s.st.skipped == 1, "skipped %lld", (long long)s.st.skipped);
    /* the reset means a full window again before growth: 2 clean steps do not grow */
    mt_loss_scaler_update(&s, 0);
    mt_loss_scaler_update(&s, 0);
    CHECK(s.st.scale == 32, "grew %g before a full window after the overflow", (double)s.st.scale);
    mt_loss_scaler_update(&s, 0);
    CHECK(s.st.scale == 64, "scale %g, want 64 after a full window", (double)s.st.scale);
    /* consecutive overflows halve each time and count each skip */
    for (int k = 0; k < 3; k++) CHECK(mt_loss_scaler_update(&s, 7) == MT_LOSS_SCALE_SKIP, "nonzero flag must skip");
    CHECK(s.st.scale == 8, "scale %g after three overflows from 64", (double)s.st.scale);
    CHECK(s.st.skipped == 4, "skipped %lld", (long long)s.st.skipped);
}

static void test_caps(void) {
    mt_loss_scaler s = make(16, 2, 4, 16);
    for (int k = 0; k < 6; k++) mt_loss_scaler_update(&s, 0);
    CHECK(s.st.scale == 16, "max cap: scale %g", (double)s.st.scale);
    CHECK(s.st.clean_steps == 0, "count not reset at the cap: %lld", (long long)s.st.clean_steps);
    for (int k = 0; k < 5; k++) CHECK(mt_loss_scaler_update(&s, 1) == MT_LOSS_SCALE_SKIP, "at min: still skips");
    CHECK(s.st.scale == 4, "min cap: scale %g", (double)s.st.scale);
    CHECK(s.st.skipped == 5, "skipped %lld", (long long)s.st.skipped);
    /* caps that are not reached by an exact doubling/halving */
    s = make(12, 1, 5, 20);
    mt_loss_scaler_update(&s, 0);
    CHECK(s.st.scale == 20, "12 doubled under a cap of 20: %g", (double)s.st.scale);
    mt_loss_scaler_update(&s, 1);
    mt_loss_scaler_update(&s, 1);
    CHECK(s.st.scale == 5, "20 halved twice over a floor of 5: %g", (double)s.st.scale);
    /* the largest float as cap: doubling must land on it, never on inf */
    s = make(FLT_MAX, 1, 1, FLT_MAX);
    mt_loss_scaler_update(&s, 0);
    CHECK(s.st.scale == FLT_MAX, "cap FLT_MAX: %g", (double)s.st.scale);
    s = make(FLT_MAX / 1.5f, 1, 1, FLT_MAX);
    mt_loss_scaler_update(&s, 0);
    CHECK(s.st.scale == FLT_MAX, "cap FLT_MAX from FLT_MAX/1.5: %g", (double)s.st.scale);
}

static void test_state(void) {
    /* a random overflow pattern, with a save/restore in the middle (struct
     * and JSON) must give the same states as an uninterrupted run */
    uint64_t r = 12345;
    mt_loss_scaler a = make(1024, 4, 1, 65536), b = a;
    for (int step = 0; step < 400; step++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int ov = (r >> 33) % 7 == 0;
        mt_loss_scale_action x = mt_loss_scaler_update(&a, ov), y = mt_loss_scaler_update(&b, ov);
        CHECK(x == y, "step %d: actions differ", step);
        if (step % 37 == 5) { /* struct round trip into a fresh scaler */
            mt_loss_scaler_state st;
            mt_loss_scaler_get_state(&b, &st);
            mt_loss_scaler c = make(1024, 4, 1, 65536);
            mt_error err = {{0}};
            CHECK(mt_loss_scaler_set_state(&c, &st, &err) == 0, "%s", err.msg);
            b = c;
        }
        if (step % 53 == 11) { /* JSON round trip */
            mt_json_writer w;
            mt_jw_init(&w);
            mt_loss_scaler_write_json(&w, &b);
            mt_error err = {{0}};
            mt_json_doc *d = mt_json_parse(w.buf, w.len, 8, &err);
            CHECK(d != NULL, "state JSON does not parse: %s", err.msg);
            mt_loss_scaler c = make(1024, 4, 1, 65536);
            if (d) CHECK(mt_loss_scaler_read_json(mt_json_root(d), &c, &err) == 0, "%s", err.msg);
            b = c;
            mt_json_free(d);
            mt_jw_free(&w);
        }
        CHECK(a.st.scale == b.st.scale && a.st.clean_steps == b.st.clean_steps && a.st.skipped == b.st.skipped,
              "step %d: resumed state differs (scale %g vs %g)", step, (double)a.st.scale, (double)b.st.scale);
    }
    CHECK(a.st.skipped > 10, "pattern had only %lld overflows", (long long)a.st.skipped);
    /* a non-power-of-two scale survives the JSON text exactly */
    mt_loss_scaler s = make(3.3f, 4, 1, 65536), t = make(1, 4, 1, 65536);
    mt_json_writer w;
    mt_jw_init(&w);
    mt_loss_scaler_write_json(&w, &s);
    mt_error err = {{0}};
    mt_json_doc *d = mt_json_parse(w.buf, w.len, 8, &err);
    CHECK(d && mt_loss_scaler_read_json(mt_json_root(d), &t, &err) == 0, "%s", err.msg);
    CHECK(t.st.scale == 3.3f, "scale %.9g after JSON round trip", (double)t.st.scale);
    mt_json_free(d);
    mt_jw_free(&w);
    /* clamped into this run's range; refused when corrupt */
    mt_loss_scaler_state st = {1e6f, 2, 0};
    CHECK(mt_loss_scaler_set_state(&t, &st, &err) == 0 && t.st.scale == 65536, "clamp to max: %g", (double)t.st.scale);
    mt_loss_scaler_state bad[] = {{NAN, 0, 0}, {INFINITY, 0, 0}, {0, 0, 0}, {-4, 0, 0}, {8, -1, 0}, {8, 0, -2}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(mt_loss_scaler_set_state(&t, &bad[i], &err) == -1, "bad state #%zu accepted", i);
    const char *bad_json[] = {"{\"scale\":null,\"clean_steps\":0,\"skipped\":0}",
                              "{\"scale\":1e300,\"clean_steps\":0,\"skipped\":0}",
                              "{\"scale\":8,\"clean_steps\":1.5,\"skipped\":0}", "{\"scale\":8,\"skipped\":0}", "[8]"};
    for (size_t i = 0; i < sizeof bad_json / sizeof bad_json[0]; i++) {
        mt_json_doc *e = mt_json_parse(bad_json[i], strlen(bad_json[i]), 8, &err);
        CHECK(e && mt_loss_scaler_read_json(mt_json_root(e), &t, &err) == -1, "bad JSON %s accepted", bad_json[i]);
        mt_json_free(e);
    }
}

static const uint32_t nonfinite_bits[] = {0x7fc00000u /* qNaN */, 0x7f800000u /* +inf */, 0xff800000u /* -inf */,
                                          0xffc00000u /* -qNaN */, 0x7f800001u /* sNaN */, 0xff800001u,
                                          0x7fffffffu /* NaN, all payload bits */};

/* Position i of x[0..n) holding each of the first n_bits non-finite patterns
 * must be found. */
static void scan_at(float *x, size_t n, size_t i, size_t n_bits, const char *what) {
    float keep = x[i];
    for (size_t k = 0; k < n_bits; k++) {
        x[i] = from_bits(nonfinite_bits[k]);
        if (!mt_found_nonfinite(x, n)) {
            CHECK(0, "%s n=%zu: 0x%08x at position %zu not found", what, n, nonfinite_bits[k], i);
            break;
        }
    }
    x[i] = keep;
}

/* Every position, every pattern; the clean array before and after must not report. */
static void scan_all_positions(float *x, size_t n, const char *what) {
    CHECK(mt_found_nonfinite(x, n) == 0, "%s n=%zu: false positive on finite data", what, n);
    for (size_t i = 0; i < n; i++) scan_at(x, n, i, sizeof nonfinite_bits / sizeof nonfinite_bits[0], what);
    CHECK(mt_found_nonfinite(x, n) == 0, "%s n=%zu: restored array reported non-finite", what, n);
}

static void test_scan(void) {
    /* odd, over the parallel threshold, not a whole number of blocks */
    size_t big = MT_NONFINITE_PARALLEL_MIN + 3 * MT_NONFINITE_BLOCK + 4097;
    float *buf = malloc((big + 1) * sizeof(float));
    CHECK(buf != NULL, "cannot allocate %zu floats for the scan test", big + 1);
    if (!buf) return;
    /* large finite values of both signs, the extremes, zeros and subnormals */
    const float fill[] = {FLT_MAX, -FLT_MAX, 3.0e38f, -1.0e38f, 0.0f, -0.0f, FLT_MIN, 1e-45f, -1e-45f, 65504.0f, 1.0f};
    for (size_t i = 0; i <= big; i++) buf[i] = fill[i % (sizeof fill / sizeof fill[0])];
    for (size_t n = 1; n <= 161; n += 2) { /* every odd length through the vector loops and tails */
        scan_all_positions(buf, n, "aligned");
        scan_all_positions(buf + 1, n, "offset by one float");
    }
    scan_all_positions(buf, 1023, "aligned");
    scan_all_positions(buf + 1, 4097, "offset by one float");
    /* the OpenMP path (offset by one float): every position would take
     * minutes, so both ends, both sides of every block edge, and every
     * 40009th position, with NaN, +inf and -inf */
    float *x = buf + 1;
    CHECK(mt_found_nonfinite(x, big) == 0, "OpenMP path: false positive on finite data");
    for (size_t i = 0; i < big; i++) {
        size_t r = i % MT_NONFINITE_BLOCK;
        if (i < 3 || i + 3 >= big || r < 2 || r + 2 >= MT_NONFINITE_BLOCK || i % 40009 == 17)
            scan_at(x, big, i, 3, "OpenMP path");
    }
    CHECK(mt_found_nonfinite(buf, 0) == 0, "empty array reported non-finite");

    /* signalling NaNs and infinities raise no floating-point exception */
    buf[77] = from_bits(0x7f800001u);
    buf[big - 3] = from_bits(0xff800000u);
    feclearexcept(FE_ALL_EXCEPT);
    int f1 = mt_found_nonfinite(buf, 101), f2 = mt_found_nonfinite(buf, big);
    int raised = fetestexcept(FE_ALL_EXCEPT);
    CHECK(f1 && f2, "not found (%d %d)", f1, f2);
    CHECK(raised == 0, "the scan raised floating-point exceptions 0x%x", raised);
    free(buf);
}

static void test_agree(mt_comm *w) {
    int n = mt_comm_size(w), me = mt_comm_rank(w), first = 99;
    CHECK(mt_loss_scaler_agree(w, 0, &first) == 0 && first == -1, "no rank found one: agreed %d", first);
    CHECK(mt_loss_scaler_agree(w, me == n - 1, &first) == 1 && first == n - 1, "last rank found one: first %d",
          first);
    CHECK(mt_loss_scaler_agree(w, 1, &first) == 1 && first == 0, "every rank found one: first %d", first);
    CHECK(mt_loss_scaler_agree(w, me == 0, NULL) == 1, "rank 0 found one");

    /* every rank makes the same decisions from different local flags */
    mt_loss_scaler s = make(256, 2, 1, 1 << 20);
    FILE *log = tmpfile();
    CHECK(log != NULL, "tmpfile failed: cannot capture the skip log");
    int pattern[] = {0, 0, 1, 0, 0, 0, 1, 1, 0, 0};
    for (int step = 0; step < 10; step++) {
        int local = pattern[step] && me == (step % n); /* one rank sees the overflow */
        mt_loss_scale_action a = mt_loss_scaler_decide(&s, w, local, step, me == 0 ? log : NULL);
        CHECK((int)a == pattern[step], "step %d: action %d, want %d", step, (int)a, pattern[step]);
        double v[2] = {s.st.scale, s.st.scale};
        mt_comm_allreduce_ctl(w, &v[0], &v[0], 1, MT_COMM_F64, MT_COMM_MIN);
        mt_comm_allreduce_ctl(w, &v[1], &v[1], 1, MT_COMM_F64, MT_COMM_MAX);
        CHECK(v[0] == v[1], "step %d: scales differ across ranks (%g .. %g)", step, v[0], v[1]);
    }
    /* 256 -> 512 (steps 0, 1) -> 256 (skip 2) -> 512 (3, 4) -> 256, 128 (skips 6, 7) -> 256 (8, 9) */
    CHECK(s.st.skipped == 3 && s.st.scale == 256, "skipped %lld, scale %g", (long long)s.st.skipped,
          (double)s.st.scale);
    if (me == 0 && log) {
        char line[512];
        int lines = 0, has6 = 0;
        rewind(log);
        while (fgets(line, sizeof line, log)) {
            lines++;
            if (strstr(line, "step 6: inf/NaN gradient (found first on rank") && strstr(line, "512 -> 256")) has6 = 1;
        }
        CHECK(lines == 3, "%d skip lines logged, want 3", lines);
        CHECK(has6, "no log line for the skip of step 6 (512 -> 256)");
    }
    if (log) fclose(log);
    /* the hint when the scale cannot go lower */
    mt_loss_scaler m = make(1, 2, 1, 4);
    log = tmpfile();
    CHECK(log != NULL, "tmpfile failed: cannot capture the skip log");
    mt_loss_scaler_decide(&m, w, 1, 42, me == 0 ? log : NULL);
    if (me == 0 && log) {
        char line[512] = "";
        rewind(log);
        CHECK(fgets(line, sizeof line, log) && strstr(line, "minimum"), "no minimum hint: '%s'", line);
    }
    if (log) fclose(log);
}

int main(int argc, char **argv) {
    test_init_errors();
    test_growth();
    test_overflow();
    test_caps();
    test_state();
    test_scan();

    mt_error err = {{0}};
    if (mt_comm_process_init(&argc, &argv, &err)) {
        fprintf(stderr, "test_loss_scaler: %s (is Open MPI installed? see scripts/setup.sh)\n", err.msg);
        return 1;
    }
    mt_comm_ctx *ctx = mt_comm_ctx_create(30, &err);
    CHECK(ctx != NULL, "communicator context: %s", err.msg);
    int rank = 0;
    if (ctx) {
        test_agree(mt_comm_world(ctx));
        rank = mt_comm_rank(mt_comm_world(ctx));
        mt_comm_ctx_free(ctx);
    }
    mt_comm_process_finalize();
    if (rank != 0 && !tl_failed) return 0; /* one summary line per run */
    TEST_MAIN_END("test_loss_scaler");
}
