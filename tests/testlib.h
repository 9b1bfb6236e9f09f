/* Minimal test helpers: CHECK records a failure with file:line and goes on;
 * TEST_MAIN_END prints "<name>: N checks, M failed" and sets the exit code. */
#ifndef MT_TESTLIB_H
#define MT_TESTLIB_H
#include <math.h>
#include <stdio.h>
#include <string.h>

static int tl_checks, tl_failed;
#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        tl_checks++;                                                              \
        if (!(cond)) {                                                            \
            tl_failed++;                                                          \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);       \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
        }                                                                         \
    } while (0)
/* |a-b| <= tol * max(1, |b|) */
#define CHECK_CLOSE(a, b, tol) \
    CHECK(fabs((double)(a) - (double)(b)) <= (tol) * fmax(1.0, fabs((double)(b))), "%.9g vs %.9g", (double)(a), (double)(b))
#define TEST_MAIN_END(name)                                                       \
    do {                                                                          \
        printf("%s: %d checks, %d failed\n", name, tl_checks, tl_failed);         \
        return tl_failed ? 1 : 0;                                                 \
    } while (0)
#endif
