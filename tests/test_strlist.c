/* core/strlist: the comma-list walker every list flag uses. */
#include <stdio.h>
#include <string.h>
#include "core/strlist.h"

static int fails = 0;

/* Walks list and compares the items, joined by '|', with want. */
static void expect(const char *list, const char *want) {
    char got[256] = "";
    size_t n = 0;
    const char *cur = list, *item;
    size_t len;
    int first = 1;
    while (mt_strlist_next(&cur, &item, &len)) {
        n += (size_t)snprintf(got + n, sizeof got - n, "%s%.*s", first ? "" : "|", (int)len, item);
        first = 0;
    }
    if (strcmp(got, want)) {
        printf("FAIL '%s': items '%s', expected '%s'\n", list ? list : "(null)", got, want);
        fails++;
    }
}

int main(void) {
    expect("q_proj,v_proj", "q_proj|v_proj");
    expect("c_attn", "c_attn");
    expect("", "");
    expect(NULL, "");
    expect("a,,b", "a||b");        /* an empty item is an item (the checks reject it by its length) */
    expect("a,b,", "a|b");         /* a trailing comma ends the list */
    expect(",a", "|a");
    if (fails) return 1;
    printf("strlist: all cases ok\n");
    return 0;
}
