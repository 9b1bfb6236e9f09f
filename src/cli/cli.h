/* Subcommands of the meshtrain binary. Each takes argv with argv[0] = the
 * subcommand name and returns the process exit status. */
#ifndef MT_CLI_CLI_H
#define MT_CLI_CLI_H
int mt_cli_train(int argc, char **argv);
int mt_cli_eval(int argc, char **argv);
int mt_cli_generate(int argc, char **argv);
int mt_cli_tokenize(int argc, char **argv);
int mt_cli_export(int argc, char **argv);
int mt_cli_import(int argc, char **argv);
int mt_cli_bench_comm(int argc, char **argv);
int mt_cli_schedule(int argc, char **argv);
int mt_cli_plan(int argc, char **argv);
int mt_cli_ckpt(int argc, char **argv);
int mt_cli_plot(int argc, char **argv);
int mt_cli_merge(int argc, char **argv);
int mt_cli_quantize(int argc, char **argv);
#endif
