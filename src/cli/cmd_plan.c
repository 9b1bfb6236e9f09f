/* meshtrain plan: enumerates the layouts of a model on a cluster and prints
 * per layout the bytes per rank by category, whether it fits, the pipeline
 * bubble, bytes sent per step per link level and the predicted step time
 * (plan/plan.h holds every formula; this file maps flags to configs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/model_flags.h"
#include "interop/hf_model.h"
#include "core/fileio.h"
#include "core/json.h"
#include "models/family.h"
#include "plan/plan.h"
#include "models/family.h"
#include "quant/qweight.h"

#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct {
    mt_plan_layout y;
    mt_plan_result r;
} plan_row;

static int by_time(const void *a, const void *b) {
    const plan_row *x = a, *y = b;
    if (x->r.fits != y->r.fits) return y->r.fits - x->r.fits;
    if (x->r.t_step != y->r.t_step) return x->r.t_step < y->r.t_step ? -1 : 1;
    /* equally fast: less inter-node traffic, then less memory */
    if (x->r.comm_inter != y->r.comm_inter) return x->r.comm_inter < y->r.comm_inter ? -1 : 1;
    return x->r.total < y->r.total ? -1 : x->r.total > y->r.total;
}

static const char *rc_name(mt_plan_recompute r) {
    return r == MT_PLAN_RC_NONE ? "none" : r == MT_PLAN_RC_SELECTIVE ? "selective" : "full";
}

/* -1: any value; else the one value the user fixed. */
static int allowed(int fixed, int v) { return fixed < 0 || fixed == v; }

static void print_json(const mt_model_config *cfg, const mt_plan_cluster *c, const plan_row *rows, int n, int gb) {
    printf("{\"params\":%.0f,\"gpus\":%d,\"gpus_per_node\":%d,\"device\":\"%s\",\"global_batch\":%d,\"seq_len\":%d,"
           "\"layouts\":[",
           mt_plan_param_count(cfg), c->gpus, c->per_node, c->name, gb, cfg->seq_len);
    for (int i = 0; i < n; i++) {
        const mt_plan_layout *y = &rows[i].y;
        const mt_plan_result *r = &rows[i].r;
        printf("%s\n{\"dp\":%d,\"cp\":%d,\"tp\":%d,\"pp\":%d,\"zero\":%d,\"shard_group\":%d,\"micro_batch\":%d,\"chunks\":%d,"
               "\"sequence_parallel\":%d,\"recompute\":\"%s\",\"precision\":\"%s\",\"microbatches\":%d,"
               "\"zeropp\":{\"qwz\":%d,\"hpz\":%d,\"qgz\":%d},"
               "\"bytes\":{\"params\":%.0f,\"grads\":%.0f,\"optimizer\":%.0f,\"activations\":%.0f,\"frozen\":%.0f,\"total\":%.0f},"
               "\"fits\":%s,\"params_rank\":%.0f,\"bubble\":%.6f,\"comm_intra\":%.0f,\"comm_inter\":%.0f,"
               "\"comm_tp\":%.0f,\"comm_pp\":%.0f,\"comm_dp\":%.0f,\"comm_cp\":%.0f,\"calls\":%.0f,"
               "\"flops_step\":%.6g,\"t_compute\":%.6g,\"t_bubble\":%.6g,\"t_comm_exposed\":%.6g,\"t_step\":%.6g,"
               "\"tflops_per_gpu\":%.4f,\"mfu\":%.5f,\"ep\":%d,\"expert_params_rank\":%.0f,\"comm_ep\":%.0f,"
               "\"t_alltoall\":%.6g}",
               i ? "," : "", y->dp, y->cp, y->tp, y->pp, y->zero, y->shard, y->micro_batch, y->chunks, y->sequence_parallel,
               rc_name(y->recompute), y->bf16 ? "bf16" : "fp32", r->microbatches, y->qwz, y->hpz, y->qgz, r->bytes[MT_PLAN_PARAMS],
               r->bytes[MT_PLAN_GRADS], r->bytes[MT_PLAN_OPTIM], r->bytes[MT_PLAN_ACTS], r->bytes[MT_PLAN_FROZEN], r->total,
               r->fits ? "true" : "false", r->params_rank, r->bubble, r->comm_intra, r->comm_inter, r->comm_tp, r->comm_pp,
               r->comm_dp, r->comm_cp, r->calls, r->flops_step,
               r->t_compute, r->t_bubble, r->t_comm_exposed, r->t_step, r->tflops_per_gpu, r->mfu, y->ep > 1 ? y->ep : 1,
               r->expert_params_rank, r->comm_ep, r->t_alltoall);
    }
    printf("]}\n");
}

static void print_table(const mt_model_config *cfg, const mt_plan_cluster *c, const plan_row *rows, int n, int total,
                        int gb) {
    printf("model %s: %.4g B parameters, L=%d h=%d heads=%d s=%d V=%d | %d x %s (%d per node) | global batch %d\n",
           mt_family_name(cfg->family), mt_plan_param_count(cfg) / 1e9, cfg->n_layer, cfg->n_embd, cfg->n_head,
           cfg->seq_len, cfg->padded_vocab, c->gpus, c->name, c->per_node, gb);
    printf("%d layouts evaluated; fastest fitting first (GB = 1e9 bytes per rank; comm GB sent per step per rank)\n",
           total);
    if (!c->engine_exact) printf("%s\n", mt_plan_gpu_provenance());
    if (n > 0 && rows[0].y.cp > 1)
        printf("context parallelism: cp %d (ring) in every layout; dp x cp ranks hold the same parameters (G, zero's "
               "group, counts them); acts are a rank's s / cp rows; ring bytes in intra/inter\n", rows[0].y.cp);
    printf("%3s %3s %3s %3s %2s %4s %3s %2s %2s %-9s %-4s | %8s %8s %8s %8s %8s %8s %3s | %6s | %8s %8s | %8s %7s %5s\n",
           "dp", "tp", "pp", "v", "sp", "zero", "G", "mb", "m", "recompute", "prec", "params", "grads", "optim", "acts",
           "frozen", "total", "fit", "bubble", "intra", "inter", "step_s", "TFLOP/s", "MFU");
    for (int i = 0; i < n; i++) {
        const mt_plan_layout *y = &rows[i].y;
        const mt_plan_result *r = &rows[i].r;
        char zero[8]; /* the stage, then w h g for ZeRO++'s qwZ, hpZ, qgZ */
        snprintf(zero, sizeof zero, "%d%s%s%s", y->zero, y->qwz ? "w" : "", y->hpz ? "h" : "", y->qgz ? "g" : "");
        printf("%3d %3d %3d %3d %2d %4s %3d %2d %2d %-9s %-4s | %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %3s | %6.3f | %8.3f "
               "%8.3f | %8.4g %7.1f %5.3f\n",
               y->dp, y->tp, y->pp, y->chunks, y->sequence_parallel, zero, y->shard, y->micro_batch, r->microbatches,
               rc_name(y->recompute), y->bf16 ? "bf16" : "fp32", r->bytes[MT_PLAN_PARAMS] / 1e9,
               r->bytes[MT_PLAN_GRADS] / 1e9, r->bytes[MT_PLAN_OPTIM] / 1e9, r->bytes[MT_PLAN_ACTS] / 1e9,
               r->bytes[MT_PLAN_FROZEN] / 1e9, r->total / 1e9, r->fits ? "yes" : "no", r->bubble, r->comm_intra / 1e9, r->comm_inter / 1e9, r->t_step,
               r->tflops_per_gpu, r->mfu);
        if (y->ep > 1) /* expert parallelism: what it adds to the layout's line */
            printf("    ep %d: expert parameters per rank %.4g (of %.4g held), token all-to-alls %.4g GB per step "
                   "(%.4g s, in step_s)\n", y->ep, r->expert_params_rank, r->params_rank, r->comm_ep / 1e9,
                   r->t_alltoall);
    }
}

/* A Hugging Face config.json into cfg through the family's reader
 * (model_type gpt2, llama or qwen2). */
static int read_hf_config(const char *path, mt_model_config *cfg, mt_error *err) {
    char *text = NULL;
    size_t len = 0;
    mt_error e1 = {{0}};
    if (mt_read_file(path, (size_t)64 << 20, &text, &len, &e1)) return mt_errorf(err, "--hf-config: %s", e1.msg);
    mt_error e2 = {{0}};
    mt_json_doc *doc = mt_json_parse(text, len, 64, &e2);
    free(text);
    if (!doc) return mt_errorf(err, "--hf-config '%s' is not valid JSON: %s", path, e2.msg);
    int rc = mt_hf_config_read(mt_json_root(doc), cfg, &e2);
    mt_json_free(doc);
    if (rc) return mt_errorf(err, "--hf-config '%s': %s", path, e2.msg);
    return 0;
}

int mt_cli_plan(int argc, char **argv) {
    const char *hf_config = NULL, *gpu = NULL, *recompute = NULL, *precision = NULL;
    mt_model_flags mf;
    memset(&mf, 0, sizeof mf);
    mt_arg model_spec[MT_MODEL_FLAG_COUNT];
    mt_model_flags_spec(&mf, model_spec, 0);
    int gpus = 0, per_node = 8, cpu = 0, global_batch = 0, top = 10, json = 0, help = 0, all = 0;
    int f_dp = -1, f_tp = -1, f_pp = -1, f_zero = -1, f_shard = -1, f_mb = -1, f_chunks = -1, f_sp = -1, f_cp = 1;
    int cpu_cores = 0, zpp_qwz = 0, zpp_hpz = 0, zpp_qgz = 0, ep = 1;
    float cpu_gflops = 0, cpu_gflops_bf16 = 0, cpu_mb_ms = 0, cpu_mb_ms_bf16 = -1, cpu_bw_gbs = 0, cpu_latency_us = 0, mem_gb = 0, efficiency = 0;
    const char *peft = "none", *targets = "", *qbase = "none";
    mt_adapter_spec ad = {.r = 8, .alpha = 16.0f, .gptq_bits = 4, .gptq_group_size = 128};
    mt_arg hf_spec[] = {
        {"hf-config", MT_ARG_STR, &hf_config, "a Hugging Face config.json (gpt2, llama, qwen2, falcon); the model flags given override it", 0},
    };
    mt_arg plan_spec[] = {
        {"global-batch", MT_ARG_INT, &global_batch, "sequences per optimizer step (required)", 0},
        {"gpus", MT_ARG_INT, &gpus, "devices (ranks) in all (required)", 0},
        {"gpus-per-node", MT_ARG_INT, &per_node, "devices per node (default 8); tp stays inside a node", 0},
        {"gpu", MT_ARG_STR, &gpu, "device table: a100 | h100 | h200", 0},
        {"cpu", MT_ARG_FLAG, &cpu, "plan for this CPU engine (fp32 activations, exact buffer sizes); rates from --cpu-gflops/--cpu-bw", 0},
        {"cpu-gflops", MT_ARG_FLOAT, &cpu_gflops, "--cpu: fp32 GFLOP/s of one rank on a core to itself (a one-process run's model FLOPs / step time)", 0},
        {"cpu-gflops-bf16", MT_ARG_FLOAT, &cpu_gflops_bf16, "--cpu: the same under --precision bf16 (default --cpu-gflops)", 0},
        {"cpu-microbatch-ms", MT_ARG_FLOAT, &cpu_mb_ms, "--cpu: fp32 milliseconds a microbatch costs beyond its FLOPs through the whole model (two one-process runs: (t(mb 1) - t(mb 2)) / (B / 2); default 0)", 0},
        {"cpu-microbatch-ms-bf16", MT_ARG_FLOAT, &cpu_mb_ms_bf16, "--cpu: the same under --precision bf16 (default --cpu-microbatch-ms)", 0},
        {"cpu-latency-us", MT_ARG_FLOAT, &cpu_latency_us, "--cpu: microseconds a collective costs beyond its bytes (bench-comm's smallest all-reduce with the node's ranks; default 0)", 0},
        {"cpu-bw", MT_ARG_FLOAT, &cpu_bw_gbs, "--cpu: collective bandwidth GB/s per rank (measure with bench-comm)", 0},
        {"cpu-cores", MT_ARG_INT, &cpu_cores, "--cpu: cores the ranks of a node share (default: one per rank)", 0},
        {"mem-gb", MT_ARG_FLOAT, &mem_gb, "memory per device in GB (default: the device table's; --cpu 1)", 0},
        {"efficiency", MT_ARG_FLOAT, &efficiency, "fraction of peak the GEMMs reach (default 0.5 GPU, 1 --cpu)", 0},
        {"peft", MT_ARG_STR, &peft, "none | lora | ia3: plan a fine-tune whose base is frozen (as train's --peft)", 0},
        {"lora-r", MT_ARG_INT, &ad.r, "LoRA rank (default 8)", 0},
        {"lora-targets", MT_ARG_STR, &targets, "LoRA/IA3 targets (as train's --lora-targets; default the family's)", 0},
        {"quantize-base", MT_ARG_STR, &qbase, "none | nf4 | int8 | gptq: the frozen base's linear weights quantized", 0},
        {"double-quant", MT_ARG_FLAG, &ad.double_quant, "nf4: 8-bit absmaxes", 0},
        {"gptq-bits", MT_ARG_INT, &ad.gptq_bits, "gptq: the base's bits, 4 or 8 (default 4)", 0},
        {"gptq-group-size", MT_ARG_INT, &ad.gptq_group_size, "gptq: the base's group size, -1 for one group (default 128)", 0},
        {"zeropp-qwz", MT_ARG_FLAG, &zpp_qwz, "ZeRO++ qwZ on the ZeRO-3 layouts: int8 parameter gathers", 0},
        {"zeropp-hpz", MT_ARG_FLAG, &zpp_hpz, "ZeRO++ hpZ on the ZeRO-3 layouts: backward gathers inside the node (train's --zeropp-hpz with the group's ranks per node)", 0},
        {"zeropp-qgz", MT_ARG_FLAG, &zpp_qgz, "ZeRO++ qgZ on the ZeRO-2/3 layouts: int4 two-hop gradient reduce-scatter", 0},
        {"dp", MT_ARG_INT, &f_dp, "only this data-parallel size", 0},
        {"cp", MT_ARG_INT, &f_cp, "context-parallel size of every layout (train's --cp N, ring attention; default 1): a sequence's rows split over N ranks, gradients over dp x cp", 0},
        {"tp", MT_ARG_INT, &f_tp, "only this tensor-parallel size", 0},
        {"pp", MT_ARG_INT, &f_pp, "only this pipeline size", 0},
        {"zero", MT_ARG_INT, &f_zero, "only this ZeRO stage", 0},
        {"shard-group", MT_ARG_INT, &f_shard, "only this ZeRO shard group", 0},
        {"ep", MT_ARG_INT, &ep, "expert parallelism (a --moe-experts model): the experts spread over N of the dp ranks as train's --ep (only dp that N divides; ZeRO's shard group dp/N); adds the expert parameters per rank and the token all-to-alls' bytes and time (default 1)", 0},
        {"micro-batch", MT_ARG_INT, &f_mb, "only this micro-batch", 0},
        {"pp-chunks", MT_ARG_INT, &f_chunks, "only this number of interleaved chunks per rank", 0},
        {"sequence-parallel", MT_ARG_INT, &f_sp, "only 0 | 1", 0},
        {"recompute", MT_ARG_STR, &recompute, "only none | selective | full", 0},
        {"precision", MT_ARG_STR, &precision, "only fp32 | bf16 (default bf16 on GPUs, both with --cpu)", 0},
        {"top", MT_ARG_INT, &top, "layouts printed (default 10; 0: all)", 0},
        {"all", MT_ARG_FLAG, &all, "also layouts that do not fit", 0},
        {"json", MT_ARG_FLAG, &json, "print JSON for tools", 0},
        {"help", MT_ARG_FLAG, &help, "show this help", 0},
    };
    mt_arg spec[NARGS(hf_spec) + MT_MODEL_FLAG_COUNT + NARGS(plan_spec)]; /* the model flags are train's */
    memcpy(spec, hf_spec, sizeof hf_spec);
    memcpy(spec + NARGS(hf_spec), model_spec, sizeof model_spec);
    memcpy(spec + NARGS(hf_spec) + MT_MODEL_FLAG_COUNT, plan_spec, sizeof plan_spec);
    mt_error err = {{0}};
    if (mt_args_parse(argc, argv, spec, NARGS(spec), NULL, 0, NULL, &err)) return mt_cli_fail("plan", &err);
    if (help) {
        mt_args_usage("plan", "--gpus N (--gpu NAME | --cpu) --global-batch B [model flags] [flags]", spec, NARGS(spec));
        return 0;
    }
    mt_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (hf_config && (mf.preset || mf.family)) {
        mt_errorf(&err, "give one of --hf-config, --preset and --family");
        return mt_cli_fail("plan", &err);
    }
    if (hf_config && read_hf_config(hf_config, &cfg, &err)) return mt_cli_fail("plan", &err);
    if (!hf_config && !mf.preset) mt_model_config_defaults(&cfg, MT_FAMILY_GPT2);
    if (mt_model_flags_apply(&mf, spec, NARGS(spec), hf_config != NULL, &cfg, &err)) return mt_cli_fail("plan", &err);
    if (mt_arg_seen(spec, NARGS(spec), "vocab")) {
        cfg.vocab_size = mf.vocab;
        cfg.padded_vocab = mt_pad_vocab(mf.vocab);
    }
    cfg.dropout = mf.dropout;
    mt_quant_kind qk;
    if (mt_peft_kind_parse(peft, &ad.kind, &err) || mt_quant_kind_parse(qbase, &qk, &err)) return mt_cli_fail("plan", &err);
    ad.quant = (int)qk;
    if (qk != MT_QUANT_GPTQ) ad.gptq_bits = ad.gptq_group_size = 0;
    if (qk == MT_QUANT_GPTQ && ad.gptq_bits != 4 && ad.gptq_bits != 8) {
        mt_errorf(&err, "--gptq-bits must be 4 or 8, got %d", ad.gptq_bits);
        return mt_cli_fail("plan", &err);
    }
    snprintf(ad.targets, sizeof ad.targets, "%s", targets);
    if (ad.kind != MT_PEFT_LORA) ad.r = 0, ad.alpha = 0;
    cfg.adapters = ad; /* the layouts are the fine-tune's: adapters trained, the base frozen at its storage */
    if (mt_model_config_validate(&cfg, &err) || mt_model_adapters_check(&cfg, &err)) return mt_cli_fail("plan", &err);
    if (ep < 1 || (ep > 1 && (!cfg.num_experts || cfg.num_experts % ep))) {
        mt_errorf(&err, "--ep %d must be >= 1 and divide the model's experts (--moe-experts %d)", ep, cfg.num_experts);
        return mt_cli_fail("plan", &err);
    }
    if (gpus < 1 || global_batch < 1) {
        mt_errorf(&err, "--gpus N and --global-batch B are required (got %d and %d)", gpus, global_batch);
        return mt_cli_fail("plan", &err);
    }
    if (per_node < 1) {
        mt_errorf(&err, "--gpus-per-node must be >= 1, got %d", per_node);
        return mt_cli_fail("plan", &err);
    }
    mt_plan_cluster c;
    memset(&c, 0, sizeof c);
    if (cpu == !!gpu) {
        mt_errorf(&err, "give exactly one of --gpu a100|h100|h200 and --cpu");
        return mt_cli_fail("plan", &err);
    }
    if (gpu && mt_plan_cluster_gpu(gpu, &c)) {
        mt_errorf(&err, "--gpu must be a100, h100 or h200, got '%s'", gpu);
        return mt_cli_fail("plan", &err);
    }
    if (cpu) {
        if (cpu_gflops <= 0 || cpu_bw_gbs <= 0) {
            mt_errorf(&err, "--cpu needs --cpu-gflops (bench/gemm_rate) and --cpu-bw (meshtrain bench-comm), got %g and %g",
                      (double)cpu_gflops, (double)cpu_bw_gbs);
            return mt_cli_fail("plan", &err);
        }
        if (cpu_mb_ms < 0 || cpu_latency_us < 0) {
            mt_errorf(&err, "--cpu-microbatch-ms and --cpu-latency-us must be >= 0, got %g and %g", (double)cpu_mb_ms,
                      (double)cpu_latency_us);
            return mt_cli_fail("plan", &err);
        }
        c.name = "cpu";
        c.peak_flops_fp32 = cpu_gflops * 1e9;
        c.peak_flops = (cpu_gflops_bf16 > 0 ? cpu_gflops_bf16 : cpu_gflops) * 1e9;
        c.latency = cpu_latency_us * 1e-6;
        c.mb_cost_fp32 = cpu_mb_ms * 1e-3;
        c.mb_cost = (cpu_mb_ms_bf16 >= 0 ? cpu_mb_ms_bf16 : cpu_mb_ms) * 1e-3;
        c.bw_intra = c.bw_inter = cpu_bw_gbs * 1e9;
        c.mem_bytes = 1e9;
        c.efficiency = 1.0;
        c.act_bytes = 4;
        c.engine_exact = 1;
        c.cores = cpu_cores;
    }
    if (mem_gb > 0) c.mem_bytes = mem_gb * 1e9;
    if (efficiency > 0) c.efficiency = efficiency;
    c.gpus = gpus;
    c.per_node = per_node;
    int rc_only = -1, prec_only = cpu ? -1 : 1;
    if (recompute) {
        rc_only = !strcmp(recompute, "none") ? 0 : !strcmp(recompute, "selective") ? 1 : !strcmp(recompute, "full") ? 2 : -2;
        if (rc_only == -2) {
            mt_errorf(&err, "--recompute must be none, selective or full, got '%s'", recompute);
            return mt_cli_fail("plan", &err);
        }
    }
    if (precision) {
        prec_only = !strcmp(precision, "fp32") ? 0 : !strcmp(precision, "bf16") ? 1 : -2;
        if (prec_only == -2) {
            mt_errorf(&err, "--precision must be fp32 or bf16, got '%s'", precision);
            return mt_cli_fail("plan", &err);
        }
    }
    if (f_cp < 1 || gpus % f_cp) {
        mt_errorf(&err, "--cp must be >= 1 and divide --gpus %d, got %d", gpus, f_cp);
        return mt_cli_fail("plan", &err);
    }
    if (ep > 1 && f_cp > 1) {
        mt_errorf(&err, "--ep %d with --cp %d: expert and context parallelism do not combine (train's --cp refuses "
                        "MoE models); drop one of them", ep, f_cp);
        return mt_cli_fail("plan", &err);
    }
    size_t cap = 1024, n = 0;
    plan_row *rows = mt_xmalloc(cap * sizeof *rows, "plan rows");
    int evaluated = 0;
    for (int tp = 1; tp <= per_node && tp <= gpus; tp++) {
        if (gpus % tp || !allowed(f_tp, tp)) continue;
        for (int pp = 1; pp <= cfg.n_layer && tp * pp * f_cp <= gpus; pp++) {
            if ((gpus / tp) % pp || (gpus / (tp * pp)) % f_cp || !allowed(f_pp, pp)) continue;
            int dp = gpus / (tp * pp * f_cp), D = dp * f_cp; /* D: the ranks holding the same parameters */
            if (!allowed(f_dp, dp)) continue;
            for (int v = 1; v <= (pp > 1 ? cfg.n_layer / pp : 1); v++) /* interleaved chunks: each a whole number of layers */
                for (int sp = 0; sp <= (tp > 1); sp++)
                    for (int z = 0; z <= 3; z++)
                        for (int G = 1; G <= D; G++) {
                            /* shard groups: the whole dp (x cp) group, or one node's worth (hybrid) */
                            int node_group = G * tp == per_node || G == f_shard;
                            if (ep > 1 ? dp % ep || G != dp / ep : D % G || (G != D && (z == 0 || !node_group)))
                                continue; /* {ep}: the shard group is the dp / ep expert-data-parallel ranks (cp 1) */
                            if (!allowed(f_chunks, v) || !allowed(f_sp, sp) || !allowed(f_zero, z) || !allowed(f_shard, G))
                                continue;
                            for (int mb = 1; mb <= global_batch / dp; mb *= 2)
                                for (int rcm = 0; rcm < 3; rcm++)
                                    for (int bf = 0; bf < 2; bf++) {
                                        if (!allowed(f_mb, mb) || !allowed(rc_only, rcm) || !allowed(prec_only, bf)) continue;
                                        mt_plan_layout y = {dp, tp, pp, z, G, mb, v, sp, (mt_plan_recompute)rcm, bf, 0, 0, 0, ep, f_cp};
                                        mt_plan_set_zeropp(&y, per_node, zpp_qwz, zpp_hpz, zpp_qgz);
                                        mt_error e2 = {{0}};
                                        if (mt_plan_check(&cfg, &c, &y, global_batch, &e2)) continue;
                                        if (n == cap) {
                                            cap *= 2;
                                            plan_row *nr = realloc(rows, cap * sizeof *rows);
                                            if (!nr) {
                                                free(rows);
                                                mt_errorf(&err, "out of memory listing %zu layouts; fix more of "
                                                                "--tp/--pp/--zero/--micro-batch", n);
                                                return mt_cli_fail("plan", &err);
                                            }
                                            rows = nr;
                                        }
                                        rows[n].y = y;
                                        mt_plan_eval(&cfg, &c, &y, global_batch, &rows[n].r);
                                        evaluated++;
                                        if (rows[n].r.fits || all) n++;
                                    }
                        }
        }
    }
    if (!n) {
        free(rows);
        mt_errorf(&err, "no layout %s (%d evaluated): add devices, memory (--mem-gb), or relax the fixed flags",
                  evaluated ? "fits" : "is possible", evaluated);
        return mt_cli_fail("plan", &err);
    }
    qsort(rows, n, sizeof *rows, by_time);
    int shown = top > 0 && (size_t)top < n ? top : (int)n;
    if (json) print_json(&cfg, &c, rows, shown, global_batch);
    else print_table(&cfg, &c, rows, shown, evaluated, global_batch);
    free(rows);
    return 0;
}
