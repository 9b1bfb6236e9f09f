/* Activation compression's int8 row codec (op_act_int8_encode/decode):
 * codes and scales against a scalar reference (absmax / 127, nearbyintf of
 * x * (127 / absmax): half to even), exact ties, an all-zero row, a
 * non-finite row, the round trip's error bound (half a scale), and the same
 * bytes at 1 and 4 threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ops/ops.h"
#include "testlib.h"

static void reference(int8_t *codes, float *scales, const float *x, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++) {
        float amax = 0.0f;
        for (size_t i = 0; i < cols; i++) amax = fmaxf(amax, fabsf(x[r * cols + i]));
        scales[r] = amax / 127.0f;
        float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (size_t i = 0; i < cols; i++) codes[r * cols + i] = (int8_t)nearbyintf(x[r * cols + i] * inv);
    }
}

static void one_case(size_t rows, size_t cols, uint64_t seed) {
    size_t n = rows * cols;
    float *x = malloc(n * sizeof(float)), *s = malloc(rows * sizeof(float)), *rs = malloc(rows * sizeof(float));
    float *y = malloc(n * sizeof(float));
    int8_t *c = malloc(n), *rc = malloc(n), *c4 = malloc(n);
    float *s4 = malloc(rows * sizeof(float));
    uint64_t st = seed;
    for (size_t i = 0; i < n; i++) x[i] = powf(10.0f, 2.0f * rng_sym(&st)) * rng_sym(&st);
    /* row 0: exact ties (absmax 127: scale 1, every value halfway); row 1 zeros */
    for (size_t i = 0; i < cols; i++) x[i] = (float)((int)(i % 200) - 100) + 0.5f;
    x[0] = 127.0f;
    if (rows > 1) memset(x + cols, 0, cols * sizeof(float));
    op_act_int8_encode(BE, c, s, x, rows, cols);
    reference(rc, rs, x, rows, cols);
    CHECK(!memcmp(c, rc, n), "codes differ from the reference (%zu x %zu)", rows, cols);
    CHECK(!memcmp(s, rs, rows * sizeof(float)), "scales differ from the reference");
    CHECK(s[0] == 1.0f && c[1] == -98 && c[2] == -98 && c[3] == -96, "ties: scale %g, codes %d %d %d (half to even of -98.5, -97.5, -96.5: -98, -98, -96)",
          (double)s[0], c[1], c[2], c[3]);
    if (rows > 1) CHECK(s[1] == 0.0f, "zero row: scale %g", (double)s[1]);
    op_act_int8_decode(BE, y, c, s, rows, cols);
    double worst = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < cols; i++) {
            double e = fabs((double)y[r * cols + i] - x[r * cols + i]);
            CHECK(y[r * cols + i] == (float)c[r * cols + i] * s[r], "decode is code * scale");
            if (s[r] > 0) worst = fmax(worst, e / s[r]);
        }
    CHECK(worst <= 0.5 + 1e-5, "round trip error %.6f scales (bound 0.5)", worst);
    int threads = omp_get_max_threads();
    omp_set_num_threads(4);
    op_act_int8_encode(BE, c4, s4, x, rows, cols);
    omp_set_num_threads(threads);
    CHECK(!memcmp(c, c4, n) && !memcmp(s, s4, rows * sizeof(float)), "4 threads differ from 1");
    /* a non-finite row decodes to NaN */
    x[cols - 1] = INFINITY;
    op_act_int8_encode(BE, c, s, x, rows, cols);
    op_act_int8_decode(BE, y, c, s, rows, cols);
    CHECK(isnan(s[0]) && isnan(y[0]) && isnan(y[cols - 1]), "non-finite row: scale %g, decoded %g", (double)s[0],
          (double)y[0]);
    printf("rows %zu x cols %zu: codes and scales equal the reference; round trip within %.4f scales\n", rows, cols,
           worst);
    free(x); free(s); free(rs); free(y); free(c); free(rc); free(c4); free(s4);
}

int main(void) {
    one_case(37, 48, 1);
    one_case(9, 5, 2);
    one_case(128, 256, 3);
    TEST_MAIN_END("test_act_compress");
}
