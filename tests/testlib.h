/* Minimal test helpers: CHECK records a failure with file:line and goes on;
 * TEST_MAIN_END prints "<name>: N checks, M failed" and sets the exit code.
 * Beside them what the tests share: seeded random numbers (a splitmix64
 * stream; a 64-bit LCG for the kernel tests, which define TL_LCG_SEED before
 * including this), float/double arrays, whole-file reads and writes, and
 * scratch directories. */
#ifndef MT_TESTLIB_H
#define MT_TESTLIB_H
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <omp.h>
#include "device/backend.h"

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

/* BE: the CPU backend the kernel tests run on (the default GEMM library),
 * at the OpenMP thread count current where it is used (tests that vary
 * the count get a backend sized for it). */
static inline mt_backend *tl_backend(void) {
    static mt_backend be;
    be = mt_backend_cpu(MT_GEMM_DEFAULT);
    return &be;
}
#define BE tl_backend()

/* ---- random numbers: a splitmix64 stream over the caller's state */
static inline uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* Uniform in [-1, 1). */
static inline float rng_sym(uint64_t *s) { return (float)((double)(rng_next(s) >> 11) / 4503599627370496.0 - 1.0); }
/* Uniform in [0, n) (0 when n is 0; a number is drawn either way). */
static inline uint32_t rng_below(uint64_t *s, uint32_t n) {
    uint64_t z = rng_next(s);
    return n ? (uint32_t)(z % n) : 0;
}

#ifdef TL_LCG_SEED
/* ---- the kernel tests' stream: one 64-bit LCG (Knuth's MMIX constants)
 * from TL_LCG_SEED; urand uses its top 53 bits. */
static uint64_t tl_lcg_state = TL_LCG_SEED;
static inline uint64_t lcg_next(void) {
    return tl_lcg_state = tl_lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
}
/* [0, 1) */
static inline double urand(void) { return (double)(lcg_next() >> 11) * (1.0 / 9007199254740992.0); }
/* [-a, a) */
static inline float frand(float a) { return (float)((urand() * 2.0 - 1.0) * a); }
static inline void fill(float *x, size_t n, float a) {
    for (size_t i = 0; i < n; i++) x[i] = frand(a);
}
#endif

/* ---- arrays: zeroed, at least one element; out of memory ends the test */
static inline void *tl_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "test: out of memory for %zu elements of %zu bytes\n", n, size);
        exit(2);
    }
    return p;
}
static inline float *falloc(size_t n) { return tl_calloc(n, sizeof(float)); }
static inline double *dalloc(size_t n) { return tl_calloc(n, sizeof(double)); }
static inline float *fdup(const float *x, size_t n) {
    float *y = falloc(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}
/* sum x[i] * w[i] in double */
static inline double dotw(const float *x, const float *w, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * w[i];
    return s;
}

/* ---- files */
/* The whole file, NUL-terminated, in a malloc'd buffer (NULL if it cannot be
 * read); its length in *n unless n is NULL (0 if it cannot be read). */
static inline char *slurp(const char *path, size_t *n) {
    if (n) *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = len < 0 ? NULL : malloc((size_t)len + 1);
    if (!b || fread(b, 1, (size_t)len, f) != (size_t)len) {
        fclose(f);
        free(b);
        return NULL;
    }
    fclose(f);
    b[len] = 0;
    if (n) *n = (size_t)len;
    return b;
}
/* Writes n bytes to path; a failure ends the test. */
static inline void spit(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(d, 1, n, f) != n) {
        perror(path);
        exit(1);
    }
    fclose(f);
}
/* Writes dir/name.ext (the --dump files of the quantizer tests); 0 or -1. */
static inline int write_file(const char *dir, const char *name, const char *ext, const void *p, size_t bytes) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, bytes, f);
    return (fclose(f) != 0 || w != bytes) ? -1 : 0;
}
/* A new directory from a mkdtemp template (changed in place); a failure ends
 * the test. */
static inline char *tl_mkdtemp(char *tmpl) {
    if (!mkdtemp(tmpl)) {
        perror("mkdtemp");
        exit(1);
    }
    return tmpl;
}
/* Removes path: a file, or a directory with everything below it (links are
 * removed, not followed). */
static inline void rm_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        unlink(path);
        return;
    }
    DIR *d = opendir(path);
    struct dirent *e;
    char p[1024];
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            (size_t)snprintf(p, sizeof p, "%s/%s", path, e->d_name) < sizeof p)
            rm_tree(p);
    if (d) closedir(d);
    rmdir(path);
}
#endif
