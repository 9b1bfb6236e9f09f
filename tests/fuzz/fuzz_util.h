/* Shared by the libFuzzer targets: each target puts the input where a
 * user's file would be and calls the same entry point the CLI calls, so the
 * fuzzer exercises the real parser, not a second one. Files go under one
 * per-process directory in $MT_FUZZ_TMP (or /tmp). */
#ifndef MT_FUZZ_UTIL_H
#define MT_FUZZ_UTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *fuzz_dir(void) {
    static char dir[256];
    if (!dir[0]) {
        const char *base = getenv("MT_FUZZ_TMP"); /* run.sh: one directory per target run */
        snprintf(dir, sizeof dir, "%s/mt_fuzz_%d", base ? base : "/tmp", (int)getpid());
        if (mkdir(dir, 0700) != 0 && access(dir, W_OK) != 0) abort();
    }
    return dir;
}

/* Writes data to <fuzz_dir>/<name> and returns the path (static buffer per name slot). */
static const char *fuzz_file(const char *name, const void *data, size_t n) {
    static char path[4][512];
    static int slot;
    char *p = path[slot++ & 3];
    snprintf(p, 512, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(p, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    if (fclose(f) != 0) abort();
    return p;
}
#endif
