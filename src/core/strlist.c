#include "core/strlist.h"
#include <string.h>

int mt_strlist_next(const char **cursor, const char **item, size_t *len) {
    const char *p = *cursor;
    if (!p || !*p) return 0;
    size_t n = strcspn(p, ",");
    *item = p;
    *len = n;
    *cursor = p[n] == ',' ? p + n + 1 : p + n;
    return 1;
}
