/* meshtrain: command-line entry point. Subcommands that run the model or
 * talk to other ranks start the process's communication (MPI, or the
 * one-process local backend); file tools (tokenize, export, import) don't. */
#include "cli/cli.h"
#include "comm/comm.h"
#include <stdio.h>
#include <string.h>
#include <time.h>

static void usage(void) {
    puts("usage: meshtrain <command> [flags]   (meshtrain <command> --help for flags)\n"
         "commands:\n"
         "  train       train or fine-tune a model (GPT-2, Llama; LoRA with --peft lora) on token shards\n"
         "  eval        validation loss of a checkpoint\n"
         "  generate    sample text from a checkpoint\n"
         "  tokenize    text files -> llm.c token shards (byte or GPT-2 BPE)\n"
         "  export      checkpoint -> Hugging Face directory, safetensors, llm.c model file, or PEFT adapter\n"
         "  import      Hugging Face directory / safetensors / llm.c file / PEFT adapter (onto --base) -> checkpoint\n"
         "  merge       fold a LoRA (or --freeze) checkpoint into its base: a checkpoint of the whole model\n"
         "  quantize    checkpoint -> Hugging Face directory in bitsandbytes' NF4 / int8 layout, or by GPTQ in the GPTQ layout\n"
         "  ckpt        verify a checkpoint's checksums, or print what it holds (ckpt verify|info CKPT)\n"
         "  bench-comm  collective bandwidth (run under mpirun)\n"
         "  schedule    print and check a pipeline schedule (timeline, bubble, activation peaks)\n"
         "  plot        --metrics files -> a PNG of loss, validation loss, learning rate and tokens/s\n"
         "  plan        choose a layout: bytes per rank, bubble, traffic and step time of every dp x tp x pp x ZeRO layout");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage();
        return argc < 2 ? 1 : 0;
    }
    const char *cmd = argv[1];
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines show up at once, also through pipes */
    static const struct {
        const char *name;
        int (*fn)(int, char **);
        int needs_mpi;
    } cmds[] = {
        {"train", mt_cli_train, 1},       {"eval", mt_cli_eval, 1},     {"generate", mt_cli_generate, 1},
        {"tokenize", mt_cli_tokenize, 0}, {"export", mt_cli_export, 0}, {"import", mt_cli_import, 0},
        {"bench-comm", mt_cli_bench_comm, 1},      {"schedule", mt_cli_schedule, 0},
        {"ckpt", mt_cli_ckpt, 0},         {"plot", mt_cli_plot, 0},         {"plan", mt_cli_plan, 0},
        {"merge", mt_cli_merge, 0},       {"quantize", mt_cli_quantize, 1},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(cmd, cmds[i].name)) continue;
        if (cmds[i].needs_mpi) {
            mt_error err = {{0}};
            if (mt_comm_process_init(&argc, &argv, &err)) { /* refused on every rank: rank 0 says why */
                if (mt_comm_process_rank() == 0) fprintf(stderr, "meshtrain: error: %s\n", err.msg);
                return 1;
            }
        }
        int rc = cmds[i].fn(argc - 1, argv + 1);
        if (cmds[i].needs_mpi) {
            fflush(stdout);
            fflush(stderr);
            /* after a failure here: did it fail on every rank (an error all of them know -- flags, files, a
             * layout mismatch -- which rank 0 has printed)? */
            if (rc && mt_comm_process_size() > 1 && !mt_comm_process_all_failed(5.0)) {
                /* Other ranks may be waiting for this one: end them all.
                 * A rank other than 0 first gives rank 0 two seconds to
                 * print its message; aborting at once could cut it off. */
                if (mt_comm_process_rank() != 0) {
                    struct timespec pause = {2, 0};
                    nanosleep(&pause, NULL);
                }
                mt_comm_process_abort(rc);
            }
            mt_comm_process_finalize();
        }
        return rc;
    }
    fprintf(stderr, "meshtrain: error: unknown command '%s'\n", cmd);
    usage();
    return 1;
}
