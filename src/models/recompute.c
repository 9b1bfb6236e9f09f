/* Names of the recomputation modes (see mt_recompute in model.h; the
 * recompute itself, mt_block_recompute, lives beside the block forward in
 * forward_backward.c). */
#include "models/model.h"
#include <string.h>

static const char *const recompute_names[] = {"none", "selective", "full"};

const char *mt_recompute_name(mt_recompute r) {
    return (unsigned)r < 3 ? recompute_names[r] : "?";
}

int mt_recompute_parse(const char *s, mt_recompute *out, mt_error *err) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, recompute_names[i])) {
            *out = (mt_recompute)i;
            return 0;
        }
    return mt_errorf(err, "{recompute} must be none, selective or full, got '%s'", s);
}
