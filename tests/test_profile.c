/* core/profile: a step's categories, "other" as the unclaimed rest, totals
 * over steps, GEMM GFLOP/s, a NULL profile doing nothing, and the JSON line
 * parsing back (core/json) to the same numbers. */
#include "core/json.h"
#include "core/profile.h"
#include "testlib.h"
#include <stdlib.h>

static double member(const mt_json *obj, const char *key) {
    double v = -1.0;
    mt_error err;
    if (mt_json_get_double(obj, key, &v, &err)) fprintf(stderr, "%s\n", err.msg);
    return v;
}

/* Writes the profile's JSON line to a temporary file and parses it back. */
static mt_json_doc *json_of(const mt_profile *p, int summary, char *buf, size_t cap) {
    FILE *f = tmpfile();
    if (!f) {
        fprintf(stderr, "test_profile: tmpfile failed\n");
        exit(2);
    }
    mt_error err;
    CHECK(mt_profile_write_json(p, f, summary, &err) == 0, "write_json: %s", err.msg);
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
    CHECK(n > 0 && buf[n - 1] == '\n', "JSON is one line ending in a newline: '%s'", buf);
    mt_json_doc *d = mt_json_parse(buf, n, 8, &err);
    CHECK(d != NULL, "JSON parses: %s ('%s')", d ? "" : err.msg, buf);
    return d;
}

int main(void) {
    mt_profile p;
    mt_profile_init(&p);
    /* step 1: 10 ms GEMM (2e9 FLOPs), 3 ms attention, 1 ms wait, of a 20 ms step */
    mt_prof_add(&p, MT_PROF_GEMM, 0.010);
    mt_prof_add_gemm_flops(&p, 2e9);
    mt_prof_add(&p, MT_PROF_ATTENTION, 0.003);
    mt_prof_add(&p, MT_PROF_WAIT, 0.001);
    mt_profile_end_step(&p, 7, 0.020);
    CHECK_CLOSE(p.last[MT_PROF_OTHER], 0.006, 1e-12);
    CHECK_CLOSE(p.last[MT_PROF_GEMM], 0.010, 1e-12);
    CHECK(p.sec[MT_PROF_GEMM] == 0.0 && p.gemm_flops == 0.0, "the current row restarts at zero");
    CHECK(p.steps == 1 && p.step_id == 7, "steps %ld id %ld", p.steps, p.step_id);
    /* step 2: categories claim more than the step (timer overlap): other stays 0 */
    mt_prof_add(&p, MT_PROF_OPTIMIZER, 0.030);
    double t0 = mt_prof_begin(&p);
    mt_prof_end(&p, MT_PROF_SOFTMAX_XENT, t0);
    CHECK(p.sec[MT_PROF_SOFTMAX_XENT] >= 0.0 && p.sec[MT_PROF_SOFTMAX_XENT] < 1.0, "a timed region adds its time");
    mt_profile_end_step(&p, 8, 0.025);
    CHECK(p.last[MT_PROF_OTHER] == 0.0, "other %g", p.last[MT_PROF_OTHER]);
    CHECK_CLOSE(p.total[MT_PROF_GEMM], 0.010, 1e-12);
    CHECK_CLOSE(p.total[MT_PROF_OPTIMIZER], 0.030, 1e-12);
    CHECK_CLOSE(p.total_step_s, 0.045, 1e-12);

    char buf[2048];
    mt_json_doc *d = json_of(&p, 0, buf, sizeof buf);
    if (d) {
        const mt_json *r = mt_json_root(d), *cats = mt_json_get(r, "ms_by_category");
        CHECK_CLOSE(member(r, "step"), 8, 0);
        CHECK_CLOSE(member(r, "ms"), 25.0, 1e-9);
        CHECK(cats && cats->count == MT_PROF_NCAT, "every category present (%zu)", cats ? cats->count : 0);
        if (cats) CHECK_CLOSE(member(cats, "optimizer"), 30.0, 1e-9);
        mt_json_free(d);
    }
    d = json_of(&p, 1, buf, sizeof buf);
    if (d) {
        const mt_json *r = mt_json_root(d), *cats = mt_json_get(r, "ms_by_category");
        CHECK_CLOSE(member(r, "steps"), 2, 0);
        CHECK_CLOSE(member(r, "ms_per_step"), 22.5, 1e-9);
        CHECK_CLOSE(member(r, "gemm_gflops"), 200.0, 1e-9); /* 2e9 FLOPs in 10 ms */
        if (cats) {
            CHECK_CLOSE(member(cats, "gemm"), 5.0, 1e-9);
            CHECK_CLOSE(member(cats, "wait"), 0.5, 1e-9);
            CHECK_CLOSE(member(cats, "other"), 3.0, 1e-9);
        }
        mt_json_free(d);
    }
    /* the table names the categories that took time */
    FILE *f = tmpfile();
    if (f) {
        mt_profile_print_summary(&p, f);
        rewind(f);
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
        CHECK(strstr(buf, "mean of 2 steps") && strstr(buf, "gemm") && strstr(buf, "200.0 GFLOP/s") &&
                  strstr(buf, "optimizer") && !strstr(buf, "allreduce"),
              "summary table:\n%s", buf);
    }
    /* NULL: nothing happens, no clock read */
    CHECK(mt_prof_begin(NULL) == 0.0, "a NULL profile reads no clock");
    mt_prof_end(NULL, MT_PROF_GEMM, 0.0);
    mt_prof_add(NULL, MT_PROF_GEMM, 1.0);
    mt_prof_add_gemm_flops(NULL, 1.0);
    mt_profile_end_step(NULL, 1, 1.0);
    mt_error err;
    CHECK(mt_profile_write_json(NULL, stdout, 0, &err) == 0, "NULL profile writes nothing");
    CHECK(!strcmp(mt_prof_cat_name(MT_PROF_SOFTMAX_XENT), "softmax_xent") &&
              !strcmp(mt_prof_cat_name(MT_PROF_NCAT), "?"),
          "category names");
    TEST_MAIN_END("test_profile");
}
