#include "core/error.h"
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mt_errorf(mt_error *e, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void mt_render_options(const char *msg, const char *prefix, char *out, size_t cap) {
    if (!cap) return;
    size_t o = 0, plen = strlen(prefix);
    for (const char *p = msg; *p && o + 1 < cap;) {
        size_t n = 0;
        if (*p == '{' && islower((unsigned char)p[1])) {
            n = 1;
            while (islower((unsigned char)p[1 + n]) || isdigit((unsigned char)p[1 + n]) || p[1 + n] == '-') n++;
            if (p[1 + n] != '}') n = 0;
        }
        if (n) { /* {name} -> prefix name */
            for (size_t i = 0; i < plen && o + 1 < cap; i++) out[o++] = prefix[i];
            for (size_t i = 0; i < n && o + 1 < cap; i++) out[o++] = p[1 + i];
            p += n + 2;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
}

void mt_die(const char *fmt, ...) {
    char msg[MT_ERROR_LEN], shown[MT_ERROR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mt_render_options(msg, "", shown, sizeof shown); /* no front end to ask: options by their names */
    fprintf(stderr, "meshtrain: fatal: %s\n", shown);
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
