/* A small JSON reader and writer: enough for checkpoint manifests,
 * safetensors headers, Hugging Face config.json and GPT-2's encoder.json.
 * Parsing builds a tree in one allocation arena; every error names the byte
 * offset and what was expected. Numbers keep their text so int64 offsets
 * survive exactly. */
#ifndef MT_CORE_JSON_H
#define MT_CORE_JSON_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

typedef enum { MT_JSON_NULL, MT_JSON_BOOL, MT_JSON_NUMBER, MT_JSON_STRING, MT_JSON_ARRAY, MT_JSON_OBJECT } mt_json_type;

typedef struct mt_json mt_json;
struct mt_json {
    mt_json_type type;
    int boolean;
    double number;
    const char *num_text;  /* NUMBER: the literal text (NUL-terminated) */
    const char *str;       /* STRING: decoded UTF-8, NUL-terminated (may hold embedded NULs: use str_len) */
    size_t str_len;
    const char *key;       /* when a member of an object: its key (decoded, NUL-terminated) */
    size_t key_len;
    mt_json *child;        /* ARRAY/OBJECT: first element/member */
    mt_json *next;         /* next sibling */
    size_t count;          /* ARRAY/OBJECT: number of children */
};

typedef struct mt_json_doc mt_json_doc;

/* Parses text[0..len). max_depth guards against stack exhaustion (use 64).
 * Returns NULL and fills err on malformed input (with the byte offset). */
mt_json_doc *mt_json_parse(const char *text, size_t len, int max_depth, mt_error *err);
const mt_json *mt_json_root(const mt_json_doc *doc);
void mt_json_free(mt_json_doc *doc);

/* Lookups; NULL when absent or of another type. */
const mt_json *mt_json_get(const mt_json *obj, const char *key);
const mt_json *mt_json_at(const mt_json *arr, size_t i);
/* Typed getters returning 0 on success, -1 (with err naming `key`) if the
 * member is missing, of the wrong type, or (for ints) not an exact integer
 * within range. */
int mt_json_get_int64(const mt_json *obj, const char *key, int64_t *out, mt_error *err);
int mt_json_get_double(const mt_json *obj, const char *key, double *out, mt_error *err);
int mt_json_get_string(const mt_json *obj, const char *key, const char **out, mt_error *err);
/* Exact int64 value of a NUMBER node; -1 if not an integer in range. */
int mt_json_int64(const mt_json *node, int64_t *out);

/* Writer into a growable buffer; produces compact, valid JSON. */
typedef struct {
    char *buf;
    size_t len, cap;
    int need_comma[64];
    int depth;
} mt_json_writer;

void mt_jw_init(mt_json_writer *w);
void mt_jw_free(mt_json_writer *w);
void mt_jw_begin_object(mt_json_writer *w);
void mt_jw_end_object(mt_json_writer *w);
void mt_jw_begin_array(mt_json_writer *w);
void mt_jw_end_array(mt_json_writer *w);
void mt_jw_key(mt_json_writer *w, const char *key);      /* inside an object, before its value */
void mt_jw_string(mt_json_writer *w, const char *s);     /* escapes as needed */
void mt_jw_int(mt_json_writer *w, int64_t v);
void mt_jw_double(mt_json_writer *w, double v);          /* %.17g, round-trips exactly; NaN/inf as null */
void mt_jw_float(mt_json_writer *w, float v);           /* shortest text reading back as the same float */
void mt_jw_bool(mt_json_writer *w, int v);
void mt_jw_null(mt_json_writer *w);
/* A parsed value written back as compact JSON (numbers as their literal
 * text). Fails on strings or keys holding NUL (the writer takes C strings)
 * and on nesting deeper than 48 levels. */
int mt_jw_value(mt_json_writer *w, const mt_json *v, mt_error *err);

#endif
