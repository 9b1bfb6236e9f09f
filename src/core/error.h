/* Error reporting. Recoverable problems (bad input files, bad flags) travel
 * as an mt_error filled by the callee and returned as -1, so the caller (the
 * CLI, on one rank) decides how to report them. Unrecoverable ones (allocation
 * failure, internal invariants) go through mt_die. */
#ifndef MT_CORE_ERROR_H
#define MT_CORE_ERROR_H
#include <stddef.h>

#define MT_ERROR_LEN 512
typedef struct {
    char msg[MT_ERROR_LEN];
} mt_error;

/* Formats the message into e (if non-NULL) and returns -1, so callers can
 * write `return mt_errorf(err, "...", ...);`. */
int mt_errorf(mt_error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "meshtrain: fatal: <msg>" to stderr and exits the process with
 * status 2. Under MPI the launcher then tears the job down. */
#ifdef __cplusplus /* the CUDA sources include this header (cuda/backend.cu) */
[[noreturn]]
#else
_Noreturn
#endif
void mt_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Library messages (and comments) name a run's options in braces,
 * "{micro-batch} 3 must divide {batch} 8", never as one front end's flags:
 * the front end renders them -- the CLI as its flags ({micro-batch}), a
 * program linking the library as it names them. Writes msg into out (cap
 * bytes, truncated) with every {name} (a lower-case letter, then lower-case
 * letters, digits and '-') as prefix followed by the name. */
void mt_render_options(const char *msg, const char *prefix, char *out, size_t cap);

/* malloc/calloc that die with the size and purpose on failure. */
void *mt_xmalloc(size_t bytes, const char *what);
void *mt_xcalloc(size_t n, size_t size, const char *what);

#endif
