/* meshtrain train: flags -> mt_train_opts -> trainer. */
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/config_file.h"
#include "cli/model_flags.h"
#include "train/trainer.h"
#include "train/train_io.h"
#include "comm/comm.h"
#include "ckpt/checkpoint.h"
#include "models/family.h"
#include "models/llama/llama.h"
#include "quant/qweight.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))


static int resolve_model(const mt_model_flags *mf, const mt_arg *spec, int nspec, const char *train_path,
                         mt_model_config *cfg, mt_error *err) {
    if (mt_model_flags_apply(mf, spec, nspec, 0, cfg, err)) return -1;
    if (mt_arg_seen(spec, nspec, "vocab")) {
        cfg->vocab_size = mf->vocab;
    } else if (!mf->preset && train_path) {
        /* Infer from the data: byte-level shards hold ids < 256, GPT-2's < 50257 */
        uint32_t *tok = NULL, mx = 0;
        size_t n = 0;
        if (mt_train_read_tokens(train_path, 0, &tok, &n, err)) return -1;
        for (size_t i = 0; i < n; i++) mx = tok[i] > mx ? tok[i] : mx;
        free(tok);
        if (mx >= 50257)
            return mt_errorf(err, "%s holds ids up to %u, beyond GPT-2's vocabulary: give --vocab (the tokenizer's "
                                  "size) or a --preset", train_path, mx);
        cfg->vocab_size = mx < 256 ? 256 : 50257;
    }
    if (cfg->vocab_size > 0) cfg->padded_vocab = mt_pad_vocab(cfg->vocab_size);
    cfg->dropout = mf->dropout;
    return mt_model_config_validate(cfg, err);
}

/* --resume / --init-from take the model from the checkpoint: a model flag
 * given explicitly must agree with it (else the run would silently train
 * another model than asked for). Identical on every rank. */
static int check_flags_match_checkpoint(const mt_arg *spec, int nspec, const mt_model_flags *mf,
                                        const mt_model_config *asked, const mt_model_config *ck, const char *from,
                                        int init, mt_error *err) {
    struct {
        const char *flag;
        double want, have;
    } f[] = {
        {"layers", asked->n_layer, ck->n_layer},
        {"dim", asked->n_embd, ck->n_embd},
        {"heads", asked->n_head, ck->n_head},
        {"vocab", asked->vocab_size, ck->vocab_size},
        {"seq-len", asked->seq_len, ck->seq_len},
        {"kv-heads", asked->n_kv_head, ck->n_kv_head},
        {"head-dim", asked->head_dim, ck->head_dim},
        {"ffn-dim", asked->ffn_dim, ck->ffn_dim},
        {"tie-embeddings", asked->tie_embeddings, ck->tie_embeddings},
        {"qkv-bias", asked->qkv_bias, ck->qkv_bias},
        {"rope-theta", asked->rope_theta, ck->rope_theta},
        {"norm-eps", asked->norm_eps, ck->norm_eps},
        {"moe-experts", asked->num_experts, ck->num_experts},
        {"moe-top-k", asked->moe_top_k, ck->moe_top_k},
        {"moe-ffn-dim", asked->moe_ffn_dim, ck->moe_ffn_dim},
        {"moe-shared-ffn-dim", asked->moe_shared_ffn_dim, ck->moe_shared_ffn_dim},
        {"qk-norm", asked->qk_norm, ck->qk_norm},
    };
    if ((mt_arg_seen(spec, nspec, "family") || mf->preset) && asked->family != ck->family)
        return mt_errorf(err, "%s%s selects the %s family, but the checkpoint %s holds a %s model: drop the flag (the "
                              "checkpoint decides the model) or start a new run",
                         mf->preset ? "--model " : "--family ", mf->preset ? mf->preset : mf->family,
                         mt_family_name(asked->family), from, mt_family_name(ck->family));
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        /* a preset names the model shape as a whole: its main dimensions count as given */
        int given = mt_arg_seen(spec, nspec, f[i].flag) || (mf->preset && i < 4);
        if (!strcmp(f[i].flag, "seq-len") && init && !mt_family_get(ck->family)->position_table)
            continue; /* a rotary model trains from its weights at any context */
        if (given && f[i].want != f[i].have)
            return mt_errorf(err, "--%s %g differs from the checkpoint %s, whose model has --%s %g: drop the flag "
                                  "(the checkpoint decides the model) or start a new run",
                             f[i].flag, f[i].want, from, f[i].flag, f[i].have);
    }
    return 0;
}

/* Before anything is loaded: the model flags given explicitly agree with the
 * checkpoint's model, and a resumed run uses the optimizer whose state the
 * checkpoint holds (else the load would stop at a missing tensor). A
 * checkpoint that cannot be read is left to the trainer's own message. */
static int check_against_checkpoint(const mt_arg *spec, int nspec, const mt_model_flags *mf, const mt_train_opts *o,
                                    mt_error *err) {
    const char *from = o->init_from ? o->init_from : o->resume ? o->ckpt_dir : NULL;
    if (!from) return 0;
    mt_error ignored = {{0}};
    mt_ckpt_info info;
    if (mt_train_ckpt_peek(from, &info, &ignored)) return 0;
    if (check_flags_match_checkpoint(spec, nspec, mf, &o->cfg, &info.cfg, from, o->init_from != NULL, err)) return -1;
    if (!o->resume) return 0;
    mt_ckpt *ck = mt_ckpt_open_ex(from, MT_CKPT_NO_VERIFY, &ignored);
    if (!ck) return 0;
    const char *opt = NULL;
    int rc = 0;
    if (mt_json_get_string(mt_ckpt_state(ck), "optimizer", &opt, &ignored) == 0 &&
        strcmp(opt, mt_opt_kind_name(o->opt.kind)))
        rc = mt_errorf(err, "checkpoint %s was trained with --optimizer %s, this run uses %s: resume with --optimizer "
                            "%s, or start from its weights with --init-from",
                       from, opt, mt_opt_kind_name(o->opt.kind), opt);
    mt_ckpt_close(ck);
    return rc;
}

static int train_command(int argc, char **argv, const char *stored_from);

/* A stored "--name=N" setting, or 1 if absent. */
static long stored_size(const mt_config_args *conf, const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < conf->n; i++)
        if (!strncmp(conf->v[i], "--", 2) && !strncmp(conf->v[i] + 2, name, n) && conf->v[i][2 + n] == '=')
            return strtol(conf->v[i] + 3 + n, NULL, 10);
    return 1;
}

/* --resume: the checkpoint's stored run config (if any) goes first in the
 * argument list, so that --config's settings and the flags override it, and
 * train runs with that list; its output paths are left out (only the
 * command line and --config say where the run writes). The layout (the
 * parallel section) is taken whole: the stored one when no parallel flag is
 * given and it fits this job's processes, else the one the flags give
 * (their defaults for the rest), as on any resume before. A checkpoint that cannot be opened is left
 * to the trainer's own message; one saved before run configs were stored
 * resumes with the flags given, as it always did. */
static int train_with_stored_config(int argc, char **argv, const char *dir, int resume_auto, int quiet, int rank) {
    mt_error err = {{0}};
    char *man = mt_xmalloc(strlen(dir) + 16, "manifest path");
    sprintf(man, "%s/manifest.json", dir);
    int have = access(man, F_OK) == 0;
    free(man);
    mt_ckpt *ck = have || !resume_auto ? mt_ckpt_open_ex(dir, MT_CKPT_NO_VERIFY, &err) : NULL;
    if (!ck) return train_command(argc, argv, "");
    char *text = NULL;
    int r = mt_ckpt_read_run_config(ck, &text, &err);
    char *path = NULL;
    if (r == 0) {
        const char *name = mt_ckpt_run_config_file(ck);
        path = mt_xmalloc(strlen(dir) + strlen(name) + 2, "run config path");
        sprintf(path, "%s/%s", dir, name);
    }
    mt_ckpt_close(ck);
    if (r < 0) return rank ? 1 : mt_cli_fail("train", &err);
    if (r == 1) {
        if (rank == 0 && !quiet)
            printf("checkpoint %s stores no run config (saved by an older meshtrain): the flags given decide the run\n",
                   dir);
        return train_command(argc, argv, "");
    }
    mt_config_args conf = {0};
    if (mt_config_text_read(text, path, &conf, &err)) {
        char msg[MT_ERROR_LEN];
        snprintf(msg, sizeof msg, "%s", err.msg);
        mt_errorf(&err, "%s (the run config stored in the checkpoint; resume with --ignore-stored-config and the "
                        "run's flags)", msg);
        free(text);
        free(path);
        mt_config_args_free(&conf);
        return rank ? 1 : mt_cli_fail("train", &err);
    }
    free(text);
    int world = mt_comm_process_size();
    long dp = stored_size(&conf, "dp") * stored_size(&conf, "cp"), tp = stored_size(&conf, "tp"), pp = stored_size(&conf, "pp");
    char line[MT_ERROR_LEN + 256], outputs[160];
    int n = snprintf(line, sizeof line, "settings from %s, the run config stored in the checkpoint (--config and flags "
                                        "given override them", path);
#define CLAMP_N() (n = n < (int)sizeof line ? n : (int)sizeof line - 1) /* a long path: keep what fits */
    CLAMP_N();
    if (mt_config_args_set_section(argv + 1, argc - 1, "parallel")) {
        mt_config_args_drop_section(&conf, "parallel");
        n += snprintf(line + n, sizeof line - (size_t)n, "; the layout is the one the flags give");
    } else if (dp * tp * pp != world) {
        mt_config_args_drop_section(&conf, "parallel");
        n += snprintf(line + n, sizeof line - (size_t)n, "; its layout dp %ld x tp %ld x pp %ld does not fit %d "
                      "process%s: the default layout, or the one the flags give", dp, tp, pp, world, world > 1 ? "es" : "");
    }
    CLAMP_N();
    if (mt_config_args_drop_outputs(&conf, outputs, sizeof outputs) && outputs[0])
        n += snprintf(line + n, sizeof line - (size_t)n, "; its output paths (%s) are not used: give them again to "
                      "write there", outputs);
    CLAMP_N();
#undef CLAMP_N
    snprintf(line + n, sizeof line - (size_t)n, ")");
    char **args = mt_xcalloc((size_t)argc + (size_t)conf.n + 1, sizeof *args, "argument list");
    int nargs = 0;
    args[nargs++] = argv[0];
    for (int i = 0; i < conf.n; i++) args[nargs++] = conf.v[i];
    for (int i = 1; i < argc; i++) args[nargs++] = argv[i];
    int rc = train_command(nargs, args, line);
    free(args);
    free(path);
    mt_config_args_free(&conf);
    return rc;
}

/* stored_from: NULL before the checkpoint's run config was looked for; then
 * the line that says where the settings came from, or "" for none. */
static int train_command(int argc, char **argv, const char *stored_from) {
    mt_train_opts o;
    mt_train_opts_defaults(&o);
    mt_model_flags mf;
    memset(&mf, 0, sizeof mf);
    const char *on_nonfinite = "stop", *slow_rank = NULL;
    const char *optimizer = "adamw", *schedule = "constant", *order = "shuffled", *pp_schedule = "1f1b", *recompute = "none", *compress_acts = "off", *offload = NULL, *precision = "fp32", *grad_reduce = "fp32", *gemm = "onednn", *device = "cpu", *comm = "mpi";
    int64_t seed = (int64_t)o.seed;
    int help = 0;
    float timeout = (float)MT_COMM_DEFAULT_TIMEOUT_S;
    int ranks_per_node = 0, resume_auto = 0, print_config = 0, ignore_stored = 0;
    const char *config_path = NULL; /* handled before parsing; the entry documents it */
    const char *peft = "none", *lora_targets = "", *freeze = "", *quantize_base = "none", *ia3_targets = "", *ia3_ff = "", *peft_train = "";
    mt_adapter_spec ad = {.r = 8, .alpha = 16.0f};
    o.mesh = (mt_mesh_shape){1, 1, 1, 0, 1, 1};
    const char *cp_mode = "ring";
    mt_arg data_spec[] = {
        {"train", MT_ARG_STR, &o.train_path, "training token shard (llm.c format, from `meshtrain tokenize`)", 0},
        {"val", MT_ARG_STR, &o.val_path, "validation token shard", 0},
    };
    mt_arg model_spec[MT_MODEL_FLAG_COUNT];
    mt_model_flags_spec(&mf, model_spec, 1);
    mt_arg run_spec[] = {
        {"peft", MT_ARG_STR, &peft, "parameter-efficient fine-tuning: none | lora | ia3 (adapters on a frozen base; default none)", 0},
        {"ia3-targets", MT_ARG_STR, &ia3_targets, "comma-separated Hugging Face module names IA3 scales (default: gpt2 c_attn,mlp.c_proj; llama k_proj,v_proj,down_proj; falcon query_key_value,dense_4h_to_h)", 0},
        {"ia3-feedforward", MT_ARG_STR, &ia3_ff, "the IA3 targets scaled on their input, not their output (default: gpt2 mlp.c_proj; llama down_proj)", 0},
        {"lora-r", MT_ARG_INT, &ad.r, "LoRA rank r (default 8)", 0},
        {"lora-alpha", MT_ARG_FLOAT, &ad.alpha, "LoRA alpha: the update is scaled by alpha / r (default 16)", 0},
        {"lora-dropout", MT_ARG_FLOAT, &ad.dropout, "dropout on the LoRA input (default 0)", 0},
        {"lora-targets", MT_ARG_STR, &lora_targets, "comma-separated Hugging Face module names LoRA adapts (e.g. q_proj,v_proj; c_attn), or all-linear (default: gpt2 c_attn, llama q_proj,v_proj, falcon query_key_value)", 0},
        {"lora-use-rslora", MT_ARG_FLAG, &ad.rslora, "scale by alpha / sqrt(r) (rank-stabilised LoRA)", 0},
        {"quantize-base", MT_ARG_STR, &quantize_base, "store the frozen base's linear weights quantized: none | nf4 (QLoRA: bitsandbytes' NormalFloat4, blocks of 64) | int8 (per output row) | gptq (the codes of the GPTQ directory --init-from's checkpoint was imported from, kept as they are); needs --peft lora or --freeze (default none)", 0},
        {"int8-threshold", MT_ARG_FLOAT, &ad.int8_threshold, "with --quantize-base int8: LLM.int8()'s decomposition, input columns with |x| >= T (6.0 in the paper) in fp32 and the rest as int8 x int8 products with per-row activation scales (default 0: the dequantized weights in an fp32 GEMM)", 0},
        {"double-quant", MT_ARG_FLAG, &ad.double_quant, "with --quantize-base nf4: quantize the block absmaxes to 8 bits too (about 4.127 bits per weight instead of 4.5)", 0},
        {"peft-train", MT_ARG_STR, &peft_train, "with --peft: base tensors also trained in full, a PCRE2 pattern over Hugging Face names (peft's modules_to_save; e.g. '^wte' for GPT-2's tied embedding and head)", 0},
        {"freeze", MT_ARG_STR, &freeze, "freeze the tensors whose Hugging Face name matches this regular expression (PCRE2; without --peft): no gradient, no optimizer state", 0},
        {"batch", MT_ARG_INT, &o.batch, "sequences per optimizer step B (default 8)", 0},
        {"micro-batch", MT_ARG_INT, &o.micro_batch, "sequences per forward/backward b; B/b accumulation steps (default B)", 0},
        {"steps", MT_ARG_I64, &o.steps, "optimizer steps (default 10)", 0},
        {"seed", MT_ARG_I64, &seed, "seed of init, dropout and data order (default 1337)", 0},
        {"optimizer", MT_ARG_STR, &optimizer, "adamw | adam | sgd | adafactor | adamw8bit | adagrad (default adamw)", 0},
        {"lr", MT_ARG_FLOAT, &o.opt.lr, "peak learning rate (default 3e-4)", 0},
        {"warmup", MT_ARG_I64, &o.lr.warmup, "linear warmup steps (default 0)", 0},
        {"lr-schedule", MT_ARG_STR, &schedule, "constant | cosine (default constant)", 0},
        {"min-lr", MT_ARG_FLOAT, &o.lr.min_lr, "final learning rate of the cosine schedule (default 0)", 0},
        {"weight-decay", MT_ARG_FLOAT, &o.opt.weight_decay, "weight decay on 2-D weights (default 0.1)", 0},
        {"beta1", MT_ARG_FLOAT, &o.opt.beta1, "Adam beta1 (default 0.9)", 0},
        {"adafactor-beta1", MT_ARG_FLOAT, &o.adafactor_beta1, "Adafactor momentum on the clipped update (default 0: none, the memory saving; > 0 adds 4 bytes per parameter)", 0},
        {"adafactor-scale-parameter", MT_ARG_FLAG, &o.adafactor_scale_parameter, "Adafactor: --lr is a step relative to each tensor's RMS, max(1e-3, RMS(W)) (the paper's relative step; try --lr 3e-2)", 0},
        {"adafactor-clip", MT_ARG_FLOAT, &o.adafactor_clip, "Adafactor update clipping threshold d: RMS(update) <= d per tensor (default 1)", 0},
        {"beta2", MT_ARG_FLOAT, &o.opt.beta2, "Adam beta2 (default 0.95)", 0},
        {"eps", MT_ARG_FLOAT, &o.opt.eps, "Adam epsilon (default 1e-8)", 0},
        {"momentum", MT_ARG_FLOAT, &o.opt.momentum, "SGD momentum (default 0.9)", 0},
        {"adagrad-lr-decay", MT_ARG_FLOAT, &o.opt.lr_decay, "AdaGrad: step t uses lr / (1 + (t - 1) * this) (default 0)", 0},
        {"adagrad-initial-accumulator", MT_ARG_FLOAT, &o.opt.initial_accumulator, "AdaGrad: the sum of squared gradients starts here (default 0; PyTorch's eps default is 1e-10, set --eps to match)", 0},
        {"grad-clip", MT_ARG_FLOAT, &o.grad_clip, "clip the global gradient L2 norm to this (0 = off, default 1)", 0},
        {"moe-aux-coef", MT_ARG_FLOAT, &o.moe_aux_coef, "mixture of experts: load-balancing loss coefficient (default 0)", 0},
        {"moe-z-coef", MT_ARG_FLOAT, &o.moe_z_coef, "mixture of experts: router z-loss coefficient (default 0)", 0},
        {"moe-capacity-factor", MT_ARG_FLOAT, &o.moe_capacity,
         "mixture of experts: an expert takes at most ceil(factor N k / E) of a microbatch's N tokens' k choices, the "
         "rest are dropped and counted (default: dropless)", 0},
        {"data-order", MT_ARG_STR, &order, "shuffled | sequential (default shuffled)", 0},
        {"eval-every", MT_ARG_I64, &o.eval_every, "evaluate on --val every K steps (0 = only never)", 0},
        {"eval-batches", MT_ARG_INT, &o.eval_batches, "validation batches (default 8)", 0},
        {"log-file", MT_ARG_STR, &o.log_path, "rank 0 also writes its progress lines to FILE (appended on --resume)", 0},
        {"eval-batch", MT_ARG_INT, &o.eval_batch, "sequences per validation batch, a multiple of --micro-batch (default: --batch); val_loss is the mean token loss of the first eval-batches x eval-batch sequences of --val, whatever the layout", 0},
        {"metrics", MT_ARG_STR, &o.metrics_path, "append one JSON object per step/eval to this file", 0},
        {"ckpt-dir", MT_ARG_STR, &o.ckpt_dir, "checkpoint directory", 0},
        {"ckpt-every", MT_ARG_I64, &o.ckpt_every, "save a checkpoint every K steps (and at the end)", 0},
        {"ckpt-async", MT_ARG_FLAG, &o.ckpt_async, "the --ckpt-every saves: snapshot the state at the step, write it from a thread while training goes on (the manifest follows at a later step boundary; the final save stays synchronous)", 0},
        {"resume", MT_ARG_FLAG, &o.resume, "continue from the checkpoint in --ckpt-dir, whose stored settings are the defaults (--config and flags override them); `--resume DIR`: the same with --ckpt-dir DIR; `--resume auto`: if there is one, else start fresh", 0},
        {"ignore-stored-config", MT_ARG_FLAG, &ignore_stored, "resume without the settings stored in the checkpoint (the flags and --config decide, as for checkpoints saved before they were stored)", 0},
        {"resume-auto", MT_ARG_FLAG, &resume_auto, "the same as --resume auto", 0},
        {"config", MT_ARG_STR, &config_path, "a YAML file of sections (model, data, optimizer, schedule, parallel, precision, checkpoint, logging) whose keys are these flags; flags given here win", 0},
        {"print-config", MT_ARG_FLAG, &print_config, "print the effective configuration as YAML (for --config) and exit", 0},
        {"allow-schedule-change", MT_ARG_FLAG, &o.allow_schedule_change, "let a resumed run change --lr, --min-lr, --warmup, --lr-schedule (and --steps under cosine decay)", 0},
        {"init-from", MT_ARG_STR, &o.init_from, "start from the weights of this checkpoint (e.g. imported GPT-2)", 0},
        {"log-every", MT_ARG_INT, &o.log_every, "print a line every K steps (default 1)", 0},
        {"dump-grads", MT_ARG_STR, &o.dump_grads, "test aid: write step 1's gradients (raw fp32) to FILE", 0},
        {"dp", MT_ARG_INT, &o.mesh.dp, "data-parallel size (default 1; dp x cp x tp x pp = number of processes)", 0},
        {"cp", MT_ARG_INT, &o.mesh.cp, "context-parallel size (default 1): each sequence cut into 2 cp chunks, rank i of the cp group holding chunks i and 2cp-1-i (causal load balancing); --seq-len must be a multiple of 2 cp", 0},
        {"cp-mode", MT_ARG_STR, &cp_mode, "how attention spans the cp ranks' chunks: ring (K/V passed around the cp group, merged by log-sum-exp; default) | alltoall (DeepSpeed Ulysses: all-to-all to 1/cp of the heads over the whole sequence and back; heads and kv heads divisible by cp)", 0},
        {"tp", MT_ARG_INT, &o.mesh.tp, "tensor-parallel size (default 1): heads, MLP columns and vocabulary split over tp ranks (Megatron-LM)", 0},
        {"sequence-parallel", MT_ARG_FLAG, &o.sequence_parallel, "with --tp > 1: split LayerNorm/dropout regions along the tokens (all-gather / reduce-scatter instead of all-reduce)", 0},
        {"pp", MT_ARG_INT, &o.mesh.pp, "pipeline-parallel stages (default 1)", 0},
        {"pp-schedule", MT_ARG_STR, &pp_schedule, "pipeline schedule: gpipe | 1f1b | interleaved (default 1f1b)", 0},
        {"pp-chunks", MT_ARG_INT, &o.pp_chunks, "model chunks per pipeline rank for --pp-schedule interleaved (default 1)", 0},
        {"pp-layers", MT_ARG_STR, &o.pp_layers, "blocks per virtual pipeline stage, e.g. 3,1 (default: even split)", 0},
        {"zero", MT_ARG_INT, &o.zero, "ZeRO stage 0 | 1 | 2 | 3 (default 0)", 0},
        {"shard-group", MT_ARG_INT, &o.mesh.shard, "hybrid sharding: shard over groups of G dp ranks, replicate across (default dp)", 0},
        {"ep", MT_ARG_INT, &o.mesh.ep, "expert parallelism (--moe-experts models): spread the experts over N of the dp ranks, E/N each, tokens exchanged by all-to-all; N must divide --dp and the experts; dense parameters reduce over all dp, expert parameters over the dp/N ranks holding the same experts; ZeRO 1-3 shard the dense parameters over all dp and the experts over those dp/N (fp32; under bf16/fp16 or ZeRO++ both over the dp/N); with --peft lora|ia3, --freeze or --quantize-base nf4|int8 an expert's adapters and (quantized) frozen weights live on its rank only (not with --quantize-base gptq or --int8-threshold > 0) (default 1)", 0},
        {"timeout", MT_ARG_FLOAT, &timeout, "communication timeout in seconds (default 60)", 0},
        {"zeropp-hpz", MT_ARG_INT, &o.zeropp_hpz, "ZeRO++ hpZ with --zero 3: keep a copy of the parameters split over groups of G consecutive ranks (a node) from the forward all-gather, so the backward all-gather stays inside the group; bitwise the same training (default 0: off)", 0},
        {"zeropp-qwz", MT_ARG_FLAG, &o.zeropp_qwz, "ZeRO++ qwZ with --zero 3: all-gather parameters as int8 with an fp32 scale per block of 256, dequantized on arrival (lossy: the model computes with the dequantized weights)", 0},
        {"zeropp-qgz", MT_ARG_FLAG, &o.zeropp_qgz, "ZeRO++ qgZ with --zero 2|3: reduce-scatter gradients as int4 blocks in two all-to-alls (inside the node, then across nodes; lossy)", 0},
        {"ranks-per-node", MT_ARG_INT, &ranks_per_node, "nodes of N consecutive ranks for the inter-node byte counts (default: the ranks that share memory)", 0},
        {"recompute", MT_ARG_STR, &recompute, "activation recomputation: none | selective (attention core) | full (whole blocks) (default none)", 0},
        {"compress-activations", MT_ARG_STR, &compress_acts, "the activations blocks keep for backward: off | lossless (the linear layers' inputs in the 16 bits of --precision bf16/fp16: exact) | bf16 | int8 (one scale per row or head); decoded before backward (default off; docs/usage.md)", 0},
        {"partition-activations", MT_ARG_FLAG, &o.partition_activations, "with --tp > 1 and --recompute full: each tp rank keeps 1/tp of every block's input, all-gathered before the block's recomputation (ZeRO-R; bitwise the same training; a no-op with --sequence-parallel, whose inputs are split already)", 0},
        {"offload-optimizer", MT_ARG_STR, &offload, "disk:DIR: keep the optimizer state in a file in DIR, streamed through the update", 0},
        {"offload-buffer-mb", MT_ARG_FLOAT, &o.offload_buffer_mb, "resident memory for the streamed optimizer state (default 64)", 0},
        {"peak-gflops", MT_ARG_FLOAT, &o.peak_gflops, "a rank's peak GFLOP/s (e.g. from bench/gemm_rate): --metrics gets mfu, the model FLOP/s of all ranks over their peak (plot draws it)", 0},
        {"profile", MT_ARG_FLAG, &o.profile, "time per step by category (GEMM, attention, layernorm, GELU, softmax+xent, optimizer, collectives, wait); summary at the end, per step in --metrics", 0},
        {"trace", MT_ARG_STR, &o.trace_path, "write every rank's forward/backward/send/recv/collective/optimizer spans as Chrome trace JSON (Perfetto)", 0},
        {"report-json", MT_ARG_STR, &o.report_json, "write bytes per memory category and bytes sent per collective per step", 0},
        {"bucket-mb", MT_ARG_FLOAT, &o.bucket_mb, "zero 0: all-reduce the gradients in place as messages of MB each, in backward order, whatever the units' sizes (constant-size buffers; default 0 = one all-reduce per unit)", 0},
        {"no-overlap", MT_ARG_FLAG, &o.no_overlap, "measurement aid: wait for each unit's gradient reduction at once (no overlap with backward)", 0},
        {"precision", MT_ARG_STR, &precision, "fp32 | bf16 | fp16: parameters, gradients and GEMM operands in 16 bits; fp32 master weights (owned ZeRO shard), optimizer state and accumulation (default fp32)", 0},
        {"device", MT_ARG_STR, &device, "cpu | cuda: where the kernels run (default cpu; cuda needs a `make gpu` or `make gpu-emu` build; docs/usage.md, \"Training on a GPU\")", 0},
        {"comm", MT_ARG_STR, &comm, "mpi | nccl: how --device cuda reduces device buffers (default mpi: host-staged MPI, which also serves ranks sharing a GPU; nccl: an NCCL communicator per group, a GPU per rank, build-gpu/meshtrain-mpi only; not yet run on a GPU)", 0},
        {"gpus-per-node", MT_ARG_INT, &o.gpus_per_node, "with --device cuda: the GPUs of a node its ranks spread over, local rank modulo this (default: every GPU a process sees; ranks beyond share them)", 0},
        {"gemm", MT_ARG_STR, &gemm, "onednn | openblas: the library of the fp32 GEMMs in the linear layers (default onednn, the faster here; docs/usage.md)", 0},
        {"grad-reduce-dtype", MT_ARG_STR, &grad_reduce, "fp32 | bf16 (with --precision bf16): dtype of the gradient collectives (default fp32)", 0},
        {"loss-scale", MT_ARG_FLOAT, &o.loss_scale, "fp16: initial dynamic loss scale (default 65536)", 0},
        {"loss-scale-window", MT_ARG_I64, &o.loss_scale_window, "fp16: double the loss scale after this many steps without overflow (default 1000)", 0},
        {"test-overflow-step", MT_ARG_I64, &o.test_overflow_step, "test aid (fp16): the last rank finds an inf gradient at step K", 0},
        {"on-nonfinite", MT_ARG_STR, &on_nonfinite, "stop | skip: a step whose loss or gradient is inf/NaN ends the run "
                                                    "with its step number, or is left out and counted in --metrics "
                                                    "skipped_steps (default stop; fp32/bf16 -- fp16 skips by its loss scaler)", 0},
        {"test-nonfinite-step", MT_ARG_I64, &o.test_nonfinite_step, "test aid (fp32/bf16): the last rank finds an inf gradient at step K", 0},
        {"test-slow-rank", MT_ARG_STR, &slow_rank, "test aid: R:MS makes rank R sleep MS milliseconds at the start of every step, outside communication (a straggler)", 0},
        {"help", MT_ARG_FLAG, &help, "show this help", 0},
    };
    /* one table, in the order of the help and of the stored run config */
    mt_arg spec[NARGS(data_spec) + MT_MODEL_FLAG_COUNT + NARGS(run_spec)];
    memcpy(spec, data_spec, sizeof data_spec);
    memcpy(spec + NARGS(data_spec), model_spec, sizeof model_spec);
    memcpy(spec + NARGS(data_spec) + MT_MODEL_FLAG_COUNT, run_spec, sizeof run_spec);
    mt_error err = {{0}};
    /* Flag errors are the same on every rank: rank 0 prints, all exit non-zero. */
    int rank = mt_comm_process_rank();
    int prc = mt_args_parse(argc, argv, spec, NARGS(spec), NULL, 0, NULL, &err);
    if (prc) goto fail;
    if (!stored_from && !help && !ignore_stored && (o.resume || resume_auto) && o.ckpt_dir)
        return train_with_stored_config(argc, argv, o.ckpt_dir, resume_auto, print_config, rank);
    if (print_config) {
        if (mt_config_print(rank == 0 ? stdout : NULL, spec, NARGS(spec), &err))
            goto fail;
        return 0;
    }
    if (resume_auto) {
        if (!o.ckpt_dir) {
            mt_errorf(&err, "--resume auto needs --ckpt-dir");
            goto fail;
        }
        /* the newest checkpoint is the directory's manifest (saves replace it atomically) */
        char *man = mt_xmalloc(strlen(o.ckpt_dir) + 16, "manifest path");
        sprintf(man, "%s/manifest.json", o.ckpt_dir);
        o.resume = access(man, F_OK) == 0;
        free(man);
        if (rank == 0 && !o.resume) printf("no checkpoint in %s: starting fresh\n", o.ckpt_dir);
        mt_ckpt_info info;
        if (o.resume && mt_train_ckpt_peek(o.ckpt_dir, &info, &err) == 0 && info.step >= o.steps) {
            /* a restart of a finished run: done, not an error */
            if (rank == 0)
                printf("the checkpoint in %s is at step %lld: --steps %lld is done, nothing left to train\n",
                       o.ckpt_dir, (long long)info.step, (long long)o.steps);
            return 0;
        }
    }
    if (help) {
        if (rank == 0) mt_args_usage("train", "--train FILE [--val FILE] [flags]", spec, NARGS(spec));
        return 0;
    }
    if (rank == 0 && stored_from && *stored_from) printf("%s\n", stored_from);
    o.seed = (uint64_t)seed;
    if (mt_opt_kind_parse(optimizer, &o.opt.kind, &err) || mt_lr_kind_parse(schedule, &o.lr.kind, &err) ||
        mt_data_order_parse(order, &o.order, &err) || mt_pp_kind_parse(pp_schedule, &o.pp_schedule, &err) ||
        mt_recompute_parse(recompute, &o.recompute, &err) || mt_act_compress_parse(compress_acts, &o.compress_acts, &err) ||
        mt_cp_mode_parse(cp_mode, &o.cp_mode, &err))
        goto fail;
    if (mt_dtype_parse(precision, &o.precision)) {
        mt_errorf(&err, "--precision must be fp32, bf16 or fp16, got '%s'", precision);
        goto fail;
    }
    if (mt_device_kind_parse(device, &o.device)) {
        mt_errorf(&err, "--device must be cpu or cuda, got '%s'", device);
        goto fail;
    }
    if (strcmp(comm, "mpi") && strcmp(comm, "nccl")) {
        mt_errorf(&err, "--comm must be mpi or nccl, got '%s'", comm);
        goto fail;
    }
    o.comm_nccl = !strcmp(comm, "nccl");
    if (mt_gemm_lib_parse(gemm, &o.gemm)) {
        mt_errorf(&err, "--gemm must be onednn or openblas, got '%s'", gemm);
        goto fail;
    }
    if (mt_dtype_parse(grad_reduce, &o.grad_reduce) || o.grad_reduce == MT_FP16) {
        mt_errorf(&err, "--grad-reduce-dtype must be fp32 or bf16, got '%s'", grad_reduce);
        goto fail;
    }
    if (offload) {
        if (strncmp(offload, "disk:", 5) || !offload[5]) {
            mt_errorf(&err, "--offload-optimizer must be disk:DIR (a directory for the state file), got '%s'", offload);
            goto fail;
        }
        o.offload_dir = offload + 5;
    }
    if (!o.train_path) {
        mt_errorf(&err, "--train FILE is required (make one with `meshtrain tokenize`)");
        goto fail;
    }
    if (strcmp(on_nonfinite, "stop") && strcmp(on_nonfinite, "skip")) {
        mt_errorf(&err, "--on-nonfinite must be stop or skip, got '%s'", on_nonfinite);
        goto fail;
    }
    o.on_nonfinite_skip = !strcmp(on_nonfinite, "skip");
    if (slow_rank) {
        int used = 0;
        if (sscanf(slow_rank, "%d:%d%n", &o.test_slow_rank, &o.test_slow_ms, &used) != 2 || slow_rank[used] ||
            o.test_slow_rank < 0 || o.test_slow_ms < 0) {
            mt_errorf(&err, "--test-slow-rank must be R:MS (a rank and milliseconds per step, both >= 0), got '%s'", slow_rank);
            goto fail;
        }
    }
    if (!(o.peak_gflops >= 0) || !isfinite(o.peak_gflops)) {
        mt_errorf(&err, "--peak-gflops must be a number >= 0 (0: no MFU), got %g", (double)o.peak_gflops);
        goto fail;
    }
    if (!(timeout > 0)) {
        mt_errorf(&err, "--timeout must be > 0 seconds, got %g", (double)timeout);
        goto fail;
    }
    /* capacity 0 stands for "dropless": given explicitly, it or a negative is a mistake */
    if (mt_arg_seen(spec, NARGS(spec), "moe-capacity-factor") && !(o.moe_capacity > 0.0f)) {
        mt_errorf(&err, "--moe-capacity-factor must be > 0, got %g (leave it out for dropless routing)",
                  (double)o.moe_capacity);
        goto fail;
    }
    /* micro-batch 0 stands for "unset" (--batch / --dp): given explicitly, it or a negative is a mistake */
    if (mt_arg_seen(spec, NARGS(spec), "micro-batch") && o.micro_batch < 1) {
        mt_errorf(&err, "--micro-batch must be >= 1, got %d (leave it out for --batch / --dp)", o.micro_batch);
        goto fail;
    }
    if (o.pp_chunks < 1) {
        mt_errorf(&err, "--pp-chunks must be >= 1, got %d", o.pp_chunks);
        goto fail;
    }
    if (ranks_per_node < 0) {
        mt_errorf(&err, "--ranks-per-node must be >= 1, got %d", ranks_per_node);
        goto fail;
    }
    mt_quant_kind qk;
    if (mt_peft_kind_parse(peft, &ad.kind, &err) || mt_quant_kind_parse(quantize_base, &qk, &err))
        goto fail;
    ad.quant = (int)qk;
    if (strlen(lora_targets) >= MT_ADAPTER_TEXT || strlen(freeze) >= MT_ADAPTER_TEXT) {
        mt_errorf(&err, "--lora-targets / --freeze: longer than %d characters", MT_ADAPTER_TEXT - 1);
        goto fail;
    }
    if (strlen(ia3_targets) >= MT_ADAPTER_TEXT || strlen(ia3_ff) >= MT_ADAPTER_TEXT) {
        mt_errorf(&err, "--ia3-targets / --ia3-feedforward: longer than %d characters", MT_ADAPTER_TEXT - 1);
        goto fail;
    }
    if (ad.kind != MT_PEFT_IA3 && (ia3_targets[0] || ia3_ff[0])) {
        mt_errorf(&err, "--%s needs --peft ia3", ia3_targets[0] ? "ia3-targets" : "ia3-feedforward");
        goto fail;
    }
    if (ad.kind == MT_PEFT_IA3) { /* IA3 has no rank, scale or dropout: keep the config canonical */
        const char *set = ad.r != 8 ? "lora-r" : ad.alpha != 16.0f ? "lora-alpha" : ad.dropout != 0.0f ? "lora-dropout"
                        : lora_targets[0] ? "lora-targets" : ad.rslora ? "lora-use-rslora" : NULL;
        if (set) {
            mt_errorf(&err, "--%s is a LoRA setting; this run is --peft ia3", set);
            goto fail;
        }
    }
    snprintf(ad.targets, sizeof ad.targets, "%s", ad.kind == MT_PEFT_IA3 ? ia3_targets : lora_targets);
    snprintf(ad.feedforward, sizeof ad.feedforward, "%s", ia3_ff);
    if (strlen(peft_train) >= MT_ADAPTER_TEXT) {
        mt_errorf(&err, "--peft-train: longer than %d characters", MT_ADAPTER_TEXT - 1);
        goto fail;
    }
    snprintf(ad.train_also, sizeof ad.train_also, "%s", peft_train);
    snprintf(ad.freeze, sizeof ad.freeze, "%s", freeze);
    if (ad.kind == MT_PEFT_NONE) { /* LoRA settings without --peft lora are a mistake (defaults are fine) */
        const char *set = ad.r != 8 ? "lora-r" : ad.alpha != 16.0f ? "lora-alpha" : ad.dropout != 0.0f ? "lora-dropout"
                        : ad.targets[0] ? "lora-targets" : ad.rslora ? "lora-use-rslora" : NULL;
        if (set) {
            mt_errorf(&err, "--%s needs --peft lora", set);
            goto fail;
        }
    } else if (ad.freeze[0]) {
        mt_errorf(&err, "--freeze and --peft %s: --peft already freezes the whole base", peft);
        goto fail;
    }
    if (mt_adapter_spec_validate(&ad, &err)) goto fail;
    /* the settings every checkpoint stores, so that --resume DIR needs nothing else */
    char *run_config = o.ckpt_dir ? mt_config_run_text(spec, NARGS(spec), &err) : NULL;
    if (o.ckpt_dir && !run_config) goto fail;
    o.run_config = run_config;
    o.option_prefix = "--"; /* the library names options {name}: here they are flags */
    mt_comm_ctx *ctx = mt_comm_ctx_create(timeout, &err);
    if (!ctx) {
        free(run_config);
        goto fail;
    }
    if (ranks_per_node > 0) mt_comm_ctx_set_ranks_per_node(ctx, ranks_per_node, &err); /* >= 1: cannot fail */
    mt_comm *world = mt_comm_world(ctx);
    /* The model flags may read the data (vocab inference). */
    int rc = resolve_model(&mf, spec, NARGS(spec), o.train_path, &o.cfg, &err);
    o.cfg.adapters = ad;
    if (ad.kind != MT_PEFT_LORA) o.cfg.adapters.r = 0, o.cfg.adapters.alpha = 0; /* the model config's canonical form */
    if (!rc) rc = check_against_checkpoint(spec, NARGS(spec), &mf, &o, &err);
    if (o.init_from && mt_arg_seen(spec, NARGS(spec), "seq-len")) o.init_seq_len = o.cfg.seq_len;
    mt_trainer tr;
    memset(&tr, 0, sizeof tr);
    /* reading the data or the checkpoint may fail on one rank only: the ranks agree, so all
     * of them free the communication context below */
    int64_t failed = rc != 0;
    mt_comm_allreduce_ctl(world, &failed, &failed, 1, MT_COMM_I64, MT_COMM_SUM);
    if (failed) {
        if (rc && rank && failed < mt_comm_size(world)) { /* an error of every rank: rank 0 says it once */
            char msg[MT_ERROR_LEN];
            mt_cli_render(err.msg, msg, sizeof msg);
            fprintf(stderr, "meshtrain train: error: rank %d: %s\n", rank, msg);
        } else if (rc && rank == 0) mt_cli_fail("train", &err);
        mt_comm_ctx_free(ctx);
        free(run_config);
        return 1;
    }
    rc = mt_trainer_init(&tr, &o, world, &err);
    if (!rc) {
        const mt_model_config *c = &tr.o.cfg;
        if (rank == 0) {
            if (c->family != MT_FAMILY_GPT2)
                printf("family %s: kv heads %d, head dim %d, ffn %d, rope theta %g%s%s%s, %s head%s\n",
                       mt_family_name(c->family), mt_model_kv_heads(c), mt_model_head_dim(c), c->ffn_dim,
                       (double)c->rope_theta, c->rope_scaling ? " (" : "",
                       c->rope_scaling ? mt_llama_rope_type_name(c->rope_scaling) : "", c->rope_scaling ? " scaling)" : "",
                       c->tie_embeddings ? "tied" : "untied", c->qkv_bias ? ", q/k/v biases" : "");
            char cpl[48] = "";
            if (tr.cp.size > 1) snprintf(cpl, sizeof cpl, " | cp %d (%s)", tr.cp.size, mt_cp_mode_name(tr.cp.mode));
            printf("model: L=%d C=%d H=%d V=%d (padded %d) T=%d, %zu parameters | batch %d = %d x %d x dp %d%s | tp %d%s | pp %d (%s) | zero %d | recompute %s%s | %s lr %.3g | precision %s | %s %s\n",
                   c->n_layer, c->n_embd, c->n_head, c->vocab_size, c->padded_vocab, c->seq_len,
                   tr.model.layout.gtotal_params, tr.o.batch, tr.o.batch / (tr.o.micro_batch * tr.dp), tr.o.micro_batch,
                   tr.dp, cpl, tr.tp.size, tr.o.sequence_parallel ? " + sp" : "", tr.pp, mt_pp_kind_name(tr.o.pp_schedule), tr.o.zero, mt_recompute_name(tr.o.recompute),
                   tr.model.partition ? ", partitioned over tp" : tr.o.partition_activations ? ", split by sp already" : "", mt_opt_kind_name(tr.o.opt.kind), (double)tr.o.opt.lr,
                   mt_dtype_name(tr.o.precision), tr.o.device == MT_DEVICE_CUDA ? "device" : "fp32 gemm",
                   tr.o.device == MT_DEVICE_CUDA ? "cuda" : mt_gemm_lib_name(tr.o.gemm));
            if (tr.ep_comm)
                printf("expert parallelism: ep %d x expert-data-parallel %d (dp %d), %d of the %d experts per rank; "
                       "parameters held per rank before ZeRO: %zu of %zu\n", tr.o.mesh.ep, tr.dp / tr.o.mesh.ep, tr.dp,
                       c->num_experts / tr.o.mesh.ep, c->num_experts, tr.model.layout.total_params,
                       tr.model.layout.gtotal_params);
            if (mt_adapter_spec_active(&c->adapters))
                printf("trained: %zu parameters (%s%s%s); frozen: %zu%s%s\n", tr.model.layout.gtotal_params,
                       c->adapters.kind == MT_PEFT_NONE ? "--freeze '" : mt_peft_kind_name(c->adapters.kind),
                       c->adapters.kind == MT_PEFT_NONE ? c->adapters.freeze : " adapters",
                       c->adapters.kind == MT_PEFT_NONE ? "'" : "", tr.model.layout.gtotal_frozen,
                       tr.base_dir[0] ? ", read from " : " (initialised from the seed)", tr.base_dir);
            if (tr.step > 0) printf("resumed from %s at step %lld\n", tr.o.ckpt_dir, (long long)tr.step);
        }
        mt_trainer_report_start(&tr);
        rc = mt_trainer_run(&tr, &err);
        if (!rc && rank == 0 && tr.dp > 1 && tr.steps_run > 0)
            printf("gradient communication not hidden by backward: %.2f ms/step (backward %.2f ms/step)\n",
                   1e3 * tr.zero.exposed_s / (double)tr.steps_run, 1e3 * tr.backward_s / (double)tr.steps_run);
        if (!rc) rc = mt_trainer_write_trace(&tr, &err);
        if (!rc) rc = mt_trainer_report_end(&tr, &err);
    }
    mt_trainer_free(&tr);
    if (rc && rank == 0) mt_cli_fail("train", &err);
    mt_comm_ctx_free(ctx); /* every error above is agreed by all ranks */
    free(run_config);
    return rc ? 1 : 0;
fail: /* a flag or setup error: the same on every rank, so rank 0 says it and every rank exits 1 */
    return rank ? 1 : mt_cli_fail("train", &err);
}

/* `--resume X` / `--resume=X`: the directory X, or NULL when X is no
 * directory (a switch's true/false, the next flag, or auto). */
static const char *resume_dir(int argc, char **argv, int *i) {
    if (!strncmp(argv[*i], "--resume=", 9)) {
        const char *v = argv[*i] + 9;
        return strcmp(v, "auto") && strcmp(v, "true") && strcmp(v, "false") && strcmp(v, "0") && strcmp(v, "1") ? v : NULL;
    }
    if (strcmp(argv[*i], "--resume") || *i + 1 >= argc || argv[*i + 1][0] == '-' || !strcmp(argv[*i + 1], "auto"))
        return NULL;
    return argv[++*i];
}

/* train's argument list: --config FILE's settings first (so the command
 * line's own flags win), `--resume auto` as --resume-auto (switches take
 * no value) and `--resume DIR` as --resume --ckpt-dir=DIR; the strings live
 * until the command returns. */
int mt_cli_train(int argc, char **argv) {
    mt_config_args conf = {0};
    mt_error err = {{0}};
    int rank = mt_comm_process_rank();
    for (int i = 1; i < argc; i++) {
        const char *path = !strcmp(argv[i], "--config") && i + 1 < argc ? argv[i + 1]
                           : !strncmp(argv[i], "--config=", 9)       ? argv[i] + 9
                                                                       : NULL;
        if (path && mt_config_file_read(path, &conf, &err)) {
            mt_config_args_free(&conf);
            return rank ? 1 : mt_cli_fail("train", &err);
        }
    }
    char **args = mt_xcalloc((size_t)argc * 2 + (size_t)conf.n + 1, sizeof *args, "argument list");
    char **dirs = mt_xcalloc((size_t)argc + 1, sizeof *dirs, "argument list");
    int nargs = 0, ndirs = 0;
    const char *from = NULL, *to = NULL; /* --resume DIR, the last --ckpt-dir on the command line */
    args[nargs++] = argv[0];
    for (int i = 0; i < conf.n; i++) args[nargs++] = conf.v[i];
    for (int i = 1; i < argc; i++) {
        const char *dir = resume_dir(argc, argv, &i);
        if (!strcmp(argv[i], "--ckpt-dir") && i + 1 < argc) to = argv[i + 1];
        else if (!strncmp(argv[i], "--ckpt-dir=", 11)) to = argv[i] + 11;
        if (dir) {
            from = dir;
            args[nargs++] = "--resume";
            dirs[ndirs] = mt_xmalloc(strlen(dir) + 12, "argument");
            sprintf(dirs[ndirs], "--ckpt-dir=%s", dir);
            args[nargs++] = dirs[ndirs++];
        } else if ((!strcmp(argv[i], "--resume") && i + 1 < argc && !strcmp(argv[i + 1], "auto")) ||
                   !strcmp(argv[i], "--resume=auto")) {
            args[nargs++] = "--resume-auto";
            i += argv[i][8] != '=';
        } else if (!strcmp(argv[i], "--config")) {
            i++; /* read above */
        } else if (strncmp(argv[i], "--config=", 9)) {
            args[nargs++] = argv[i];
        }
    }
    int rc = 1;
    if (from && to && strcmp(from, to)) {
        /* a resumed run saves where it resumed from */
        mt_errorf(&err, "--resume %s and --ckpt-dir %s name different directories: give one of them", from, to);
        if (rank == 0) mt_cli_fail("train", &err);
    } else {
        rc = train_command(nargs, args, NULL);
    }
    for (int i = 0; i < ndirs; i++) free(dirs[i]);
    free(dirs);
    free(args);
    mt_config_args_free(&conf);
    return rc;
}
