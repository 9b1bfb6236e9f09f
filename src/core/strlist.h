/* Comma-separated lists ("q_proj,v_proj", "allreduce,allgather"): one
 * walker for every flag and config key that takes one. */
#ifndef MT_CORE_STRLIST_H
#define MT_CORE_STRLIST_H
#include <stddef.h>

/* The next item of the list at *cursor: 1 with *item and *len set (an
 * empty item between two commas has len 0) and *cursor moved past it, 0
 * when the list is done (a trailing comma ends it). */
int mt_strlist_next(const char **cursor, const char **item, size_t *len);

#endif
