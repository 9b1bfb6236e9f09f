/* Flag parsing shared by the subcommands: "--name value" pairs and bare
 * "--flag" switches, strict number parsing, one-line errors. */
#ifndef MT_CLI_ARGS_H
#define MT_CLI_ARGS_H
#include <stdint.h>
#include "core/error.h"

typedef enum { MT_ARG_INT, MT_ARG_I64, MT_ARG_FLOAT, MT_ARG_STR, MT_ARG_FLAG } mt_arg_type;

typedef struct {
    const char *name;  /* without the leading "--" */
    mt_arg_type type;
    void *dst;         /* int*, int64_t*, float*, const char**, int* */
    const char *help;
    int seen;          /* set by the parser */
} mt_arg;

/* Parses argv[1..argc). Non-flag arguments are collected into positional
 * (argv pointers; at most max_pos). Returns 0, or -1 with err. */
int mt_args_parse(int argc, char **argv, mt_arg *spec, int nspec, char **positional, int max_pos, int *npos,
                  mt_error *err);
/* Prints "usage: meshtrain <cmd> ..." and each flag with its help to stdout. */
void mt_args_usage(const char *cmd, const char *synopsis, const mt_arg *spec, int nspec);
int mt_arg_seen(const mt_arg *spec, int nspec, const char *name);
/* Prints "meshtrain <cmd>: error: <msg>" to stderr; returns 1 (the exit status). */
int mt_cli_fail(const char *cmd, const mt_error *err);
/* A library message as the command line says it: its {option} names as --option flags. */
void mt_cli_render(const char *msg, char *out, size_t cap);

#endif
