/* meshtrain: command-line entry point. Subcommands that run the model or
 * talk to other ranks start MPI; file tools (tokenize, export, import) don't. */
#include "cli/cli.h"
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* After a command failed on this rank: did it fail on every rank (an error
 * all of them know -- flags, files, a layout mismatch -- which rank 0 has
 * printed)? The ranks that failed meet in one all-reduce; a rank that did
 * not fail never joins, nor does one still waiting in a collective for a
 * peer, so after a few seconds the answer is no. */
static int failed_on_every_rank(void) {
    int mine = 1, all = 0, done = 0;
    MPI_Request req;
    if (MPI_Iallreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req) != MPI_SUCCESS) return 0;
    double t0 = MPI_Wtime();
    while (!done && MPI_Wtime() - t0 < 5.0) {
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
        if (!done) {
            struct timespec pause = {0, 1000000};
            nanosleep(&pause, NULL);
        }
    }
    return done && all == 1;
}

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
         "  quantize    checkpoint -> Hugging Face directory in bitsandbytes' NF4 / int8 layout\n"
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
        {"merge", mt_cli_merge, 0},       {"quantize", mt_cli_quantize, 0},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(cmd, cmds[i].name)) continue;
        if (cmds[i].needs_mpi) {
            int provided;
            if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
                fprintf(stderr, "meshtrain: error: MPI_Init failed; is the MPI installation working?\n");
                return 1;
            }
        }
        int rc = cmds[i].fn(argc - 1, argv + 1);
        if (cmds[i].needs_mpi) {
            int world = 1;
            MPI_Comm_size(MPI_COMM_WORLD, &world);
            fflush(stdout);
            fflush(stderr);
            if (rc && world > 1 && !failed_on_every_rank()) {
                /* Other ranks may be waiting for this one: end them all.
                 * A rank other than 0 first gives rank 0 two seconds to
                 * print its message; aborting at once could cut it off. */
                int me = 0;
                MPI_Comm_rank(MPI_COMM_WORLD, &me);
                if (me != 0) {
                    struct timespec pause = {2, 0};
                    nanosleep(&pause, NULL);
                }
                MPI_Abort(MPI_COMM_WORLD, rc);
            }
            MPI_Finalize();
        }
        return rc;
    }
    fprintf(stderr, "meshtrain: error: unknown command '%s'\n", cmd);
    usage();
    return 1;
}
