/* train's YAML configuration files (cli/config_file.c). */
#ifndef MT_CLI_CONFIG_FILE_H
#define MT_CLI_CONFIG_FILE_H
#include <stdio.h>
#include "cli/args.h"

/* Arguments made from a file: "--key" [value] strings, v[n] unused. */
typedef struct {
    char **v;
    int n, cap;
} mt_config_args;

/* Appends the file's settings to out as "--key=value" flags; one error line
 * naming the file, line and key for an unknown section or key. */
int mt_config_file_read(const char *path, mt_config_args *out, mt_error *err);
/* The same for a YAML text in memory (a checkpoint's run config); name
 * stands for the file in errors. */
int mt_config_text_read(const char *text, const char *name, mt_config_args *out, mt_error *err);
void mt_config_args_free(mt_config_args *a);
/* 1 if args[0..n) ("--key[=value]" strings) set a flag of `section`. */
int mt_config_args_set_section(char *const *args, int n, const char *section);
/* Removes the settings of `section` from a. */
void mt_config_args_drop_section(mt_config_args *a, const char *section);
/* Removes the settings that name a file or directory the run writes
 * (metrics, log-file, trace, report-json, dump-grads, offload-optimizer,
 * ckpt-dir); names gets those removed but ckpt-dir, comma-separated. Returns
 * their number. */
int mt_config_args_drop_outputs(mt_config_args *a, char *names, size_t cap);
/* The effective value of every flag that has a section, as YAML that
 * mt_config_file_read reads back to the same values (strings exactly: quoted
 * and escaped where needed); -1 with err, printing nothing, for a string
 * that is not UTF-8. f NULL: only the check (the ranks that print nothing). */
int mt_config_print(FILE *f, const mt_arg *spec, int nspec, mt_error *err);
/* The text a checkpoint stores (malloc'd; NULL with err): the same YAML
 * without the settings of one invocation (resume, allow-schedule-change,
 * init-from) and with a header naming it. */
char *mt_config_run_text(const mt_arg *spec, int nspec, mt_error *err);

#endif
