#include "core/error.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int mt_errorf(mt_error *e, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void mt_die(const char *fmt, ...) {
    va_list ap;
    fputs("meshtrain: fatal: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    exit(2);
}

void *mt_xmalloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) mt_die("out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

void *mt_xcalloc(size_t n, size_t size, const char *what) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) mt_die("out of memory allocating %zu x %zu bytes for %s", n, size, what);
    return p;
}
