"""`make bench`: meshtrain against a PyTorch reference of the same model.

For each config it runs meshtrain (`meshtrain train` on a random-token shard,
step times from its --metrics lines) and bench/torch_gpt.py ALTERNATELY for
several rounds, drops each run's warm-up steps, and prints the median
tokens/s of each, their ratio, the MFU of each (model FLOP/s over the sgemm
rate that build/bench/gemm_rate measures in the same round on the model's
own GEMM shapes, with meshtrain's default fp32 GEMM library -- oneDNN's
sgemm -- and the same thread count; OpenBLAS's sgemm rate is printed beside
it) and the peak resident memory of each process; beside it, the bf16 GEMM
rate on the same shapes (oneDNN, fp32 accumulation) and its ratio to the
fp32 rate (docs/precision.md).

bf16 (configs BENCH_BF16, 1 thread): each round also runs `meshtrain train
--precision bf16` and bench/torch_gpt.py --dtype bf16 (torch.autocast("cpu",
bfloat16), fp32 parameters and AdamW) right after the fp32 pair; printed:
their tokens/s, meshtrain bf16 over meshtrain fp32, meshtrain bf16 over
PyTorch bf16, and MFU over the bf16 GEMM rate of the same rounds.

With 2 threads (BENCH_THREADS2) PyTorch runs with OMP_WAIT_POLICY=passive
and meshtrain with BENCH_MT_OMP (libgomp's defaults unless set); OpenMP
wait/binding variables of the calling shell are not passed on.

Then the data-parallel efficiency on config B (`mpirun -np 2 meshtrain train
--dp 2`, 1 thread each, against two independent single-process runs started
at the same moment), and a table of issue 6's acceptance figures as
measured in this run, each beside its threshold (fp32 ratios on A, B, C and
MFU on A; bf16 over fp32 on A and over PyTorch bf16 on B; the 2-thread
ratio on A; dp efficiency on B; peak RSS on A against PyTorch's).

Environment: BENCH_QUICK=1 (a smoke test: fewer steps and rounds, one GEMM
repetition; its figures are not measurements), BENCH_ROUNDS, BENCH_CONFIGS
(default "A,B,C,L"; L is a ~100M Llama against bench/torch_llama.py),
BENCH_THREADS2 ("A" by default: configs also measured with 2
threads; "" for none), BENCH_BF16 ("A,B,L" by default: configs of
BENCH_CONFIGS that also get the bf16 runs; "" for none), BENCH_MT_OMP (e.g.
"OMP_WAIT_POLICY=passive": meshtrain's OpenMP settings with 2 threads),
BENCH_DP (0 skips the data-parallel measurement), BENCH_JSON (also write
every figure there: one object per config and thread count with every
round's median step time, the dp object, and last the acceptance table)."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MESHTRAIN = os.path.join(ROOT, "build", "meshtrain")
GEMM_RATE = os.path.join(ROOT, "build", "bench", "gemm_rate")
TORCH_GPT = os.path.join(ROOT, "bench", "torch_gpt.py")
TORCH_LLAMA = os.path.join(ROOT, "bench", "torch_llama.py")
PYTHON = "/usr/bin/python3"

# name: layers, dim, heads, vocab (real), batch, seq_len; Llama configs also
# kv heads KV and SwiGLU width F (untied head)
CONFIGS = {
    "A": dict(L=12, C=768, H=12, V=50257, B=4, T=64),
    "B": dict(L=6, C=384, H=6, V=50304, B=8, T=256),
    "C": dict(L=4, C=128, H=4, V=256, B=32, T=128),
    "L": dict(L=8, C=768, H=12, KV=4, F=2048, V=32000, B=4, T=64),  # a ~100M Llama
}
MT_OMP_DEFAULT = ""
QUICK = os.environ.get("BENCH_QUICK", "0") not in ("", "0")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1" if QUICK else "3"))
# (warm-up steps dropped, measured steps) per run
STEPS = {"A": (2, 3), "B": (2, 3), "C": (3, 8), "L": (2, 3)} if not QUICK else {"A": (1, 2), "B": (1, 2), "C": (2, 3), "L": (1, 2)}


def padded_vocab(v):
    return (v + 127) // 128 * 128


def flops_per_token(cfg):
    """6 N + 12 L C T, N without wpe, the tied embedding once (its Vp rows),
    as mt_model_flops_per_token; Llama: N the matrices and norms without the
    embedding lookup, with the untied head."""
    L, C, Vp, T = cfg["L"], cfg["C"], padded_vocab(cfg["V"]), cfg["T"]
    if "KV" in cfg:
        kw = cfg["KV"] * (C // cfg["H"])
        n = Vp * C + L * (C * (C + 2 * kw) + C * C + 3 * C * cfg["F"] + 2 * C) + C
        return 6.0 * n + 12.0 * L * C * T
    n = Vp * C + L * (12 * C * C + 13 * C) + 2 * C
    return 6.0 * n + 12.0 * L * C * T


# OpenMP settings of meshtrain's runs with more than one thread: BENCH_MT_OMP,
# e.g. "OMP_WAIT_POLICY=active OMP_PROC_BIND=close"; "" = libgomp's defaults
MT_OMP = dict(kv.split("=", 1) for kv in os.environ.get("BENCH_MT_OMP", MT_OMP_DEFAULT).split() if "=" in kv)
OMP_KNOBS = ("OMP_WAIT_POLICY", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_SPINCOUNT")


def thread_env(threads, passive, meshtrain=False):
    """The environment of a run: the thread count, PyTorch's runs with more
    than one thread OMP_WAIT_POLICY=passive (passive), meshtrain's MT_OMP;
    OpenMP wait/binding settings of the calling shell are not inherited."""
    env = {k: v for k, v in os.environ.items() if k not in OMP_KNOBS}
    env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    if passive:
        env["OMP_WAIT_POLICY"] = "passive"
    if meshtrain and threads > 1:
        env.update(MT_OMP)
    return env


def omp_desc(threads, passive, meshtrain=False):
    env = thread_env(threads, passive, meshtrain)
    return " ".join(f"{k}={env[k]}" for k in OMP_KNOBS if k in env) or "libgomp's defaults"


def run(cmd, env, what):
    """Runs cmd under /usr/bin/time; returns (stdout, peak RSS in KB)."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name] + cmd, env=env, cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            sys.exit(f"bench: {what} failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
        lines = rss.read().strip().splitlines()
        return p.stdout, int(lines[-1]) if lines and lines[-1].isdigit() else 0


def meshtrain_cmd(cfg, shard, steps, metrics, extra=()):
    if "KV" in cfg:
        extra = ["--family", "llama", "--kv-heads", str(cfg["KV"]), "--ffn-dim", str(cfg["F"])] + list(extra)
    return [MESHTRAIN, "train", "--train", shard, "--layers", str(cfg["L"]), "--dim", str(cfg["C"]),
            "--heads", str(cfg["H"]), "--vocab", str(cfg["V"]), "--seq-len", str(cfg["T"]),
            "--batch", str(cfg["B"]), "--steps", str(steps), "--lr", "3e-4", "--weight-decay", "0.1",
            "--grad-clip", "1", "--log-every", "1000000", "--metrics", metrics] + list(extra)


def metrics_ms(path, warm):
    with open(path) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    ms = [r["ms"] for r in rows if "ms" in r]
    return ms[warm:]


def run_meshtrain(cfg, shard, warm, steps, threads, passive, precision="fp32"):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        _, rss = run(meshtrain_cmd(cfg, shard, warm + steps, m.name, ["--precision", precision]),
                     thread_env(threads, passive, meshtrain=True), f"meshtrain train --precision {precision}")
        return metrics_ms(m.name, warm), rss


def run_torch(cfg, warm, steps, threads, passive, dtype="fp32"):
    cmd = [PYTHON, TORCH_LLAMA if "KV" in cfg else TORCH_GPT, "--layers", str(cfg["L"]), "--dim", str(cfg["C"]),
           "--heads", str(cfg["H"]), "--vocab", str(padded_vocab(cfg["V"])), "--seq-len", str(cfg["T"]),
           "--batch", str(cfg["B"]), "--steps", str(warm + steps), "--threads", str(threads), "--dtype", dtype]
    if "KV" in cfg:
        cmd += ["--kv-heads", str(cfg["KV"]), "--ffn", str(cfg["F"])]
    out, rss = run(cmd, thread_env(threads, passive), f"torch_gpt.py --dtype {dtype}")
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    return [r["ms"] for r in rows if "ms" in r][warm:], rss


def gemm_rate(cfg, threads):
    """The step's GEMM rates: gemm_gflops (fp32 sgemm), gemm_bf16_gflops,
    gemm_bf16_conv_gflops (with the fp32 -> bf16 activation conversions) and
    their ratios over fp32, measured in one run (see bench/gemm_rate.c)."""
    llama = ["--llama", str(cfg["KV"] * (cfg["C"] // cfg["H"])), str(cfg["F"])] if "KV" in cfg else []
    out, _ = run([GEMM_RATE] + llama + [str(cfg["L"]), str(cfg["C"]), str(padded_vocab(cfg["V"])),
                                        str(cfg["B"] * cfg["T"]), "1" if QUICK else "3"],
                 thread_env(threads, False), "gemm_rate")
    return {k: float(v) for k, v in (l.split() for l in out.splitlines() if l.strip())}


def load():
    return os.getloadavg()[0]


def bench_config(name, cfg, shard, threads, results, bf16=False):
    """ROUNDS rounds, each: gemm_rate, meshtrain fp32, PyTorch fp32 and, with
    bf16, meshtrain --precision bf16 and PyTorch under bf16 autocast, one
    after the other, so every program sees the same load over the run."""
    warm, steps = STEPS[name]
    tokens = cfg["B"] * cfg["T"]
    fpt = flops_per_token(cfg)
    rates, rates_ob, gemms = [], [], []
    ms = {k: [] for k in ("mt", "pt", "mt16", "pt16")}
    rss = {k: 0 for k in ms}
    runs = [("mt", lambda: run_meshtrain(cfg, shard, warm, steps, threads, passive=False)),
            ("pt", lambda: run_torch(cfg, warm, steps, threads, passive=threads > 1))]
    if bf16:
        runs += [("mt16", lambda: run_meshtrain(cfg, shard, warm, steps, threads, passive=False, precision="bf16")),
                 ("pt16", lambda: run_torch(cfg, warm, steps, threads, passive=threads > 1, dtype="bf16"))]
    for r in range(ROUNDS):
        g = gemm_rate(cfg, threads)  # each round: the ceiling under the same load as the runs
        rates.append(g["gemm_gflops"])
        rates_ob.append(g["gemm_openblas_gflops"])
        gemms.append(g)
        for key, fn in runs:
            step_ms, peak = fn()
            ms[key].append(statistics.median(step_ms))
            rss[key] = max(rss[key], peak)
    rate = statistics.median(rates)
    tps = {k: tokens / (statistics.median(v) * 1e-3) for k, v in ms.items() if v}
    mt_tps, pt_tps = tps["mt"], tps["pt"]
    row = dict(config=name, threads=threads, meshtrain_tok_s=mt_tps, torch_tok_s=pt_tps, ratio=mt_tps / pt_tps,
               gemm_gflops=rate, gemm_openblas_gflops=statistics.median(rates_ob), mfu_meshtrain=fpt * mt_tps * 1e-9 / rate, mfu_torch=fpt * pt_tps * 1e-9 / rate,
               meshtrain_rss_mb=rss["mt"] / 1024, torch_rss_mb=rss["pt"] / 1024,
               meshtrain_ms=ms["mt"], torch_ms=ms["pt"], gemm_rates=rates,
               meshtrain_env=omp_desc(threads, False, meshtrain=True), torch_env=omp_desc(threads, threads > 1),
               load=load())
    # bf16 GEMMs: rates are medians of the rounds; the ratios medians of each
    # round's ratio (both rates of a round come from one gemm_rate run)
    for k in ("gemm_bf16_gflops", "gemm_bf16_conv_gflops", "gemm_bf16_ratio", "gemm_bf16_conv_ratio"):
        row[k] = statistics.median(g[k] for g in gemms)
    row["gemm_bf16_rounds"] = gemms
    if bf16:
        # MFU of the bf16 runs: over the bf16 GEMM rate (operands already bf16)
        # of the same rounds
        rate16 = row["gemm_bf16_gflops"]
        row.update(meshtrain_bf16_tok_s=tps["mt16"], torch_bf16_tok_s=tps["pt16"],
                   bf16_over_fp32=tps["mt16"] / mt_tps, ratio_bf16=tps["mt16"] / tps["pt16"],
                   torch_bf16_over_fp32=tps["pt16"] / pt_tps,
                   mfu_meshtrain_bf16=fpt * tps["mt16"] * 1e-9 / rate16,
                   mfu_torch_bf16=fpt * tps["pt16"] * 1e-9 / rate16,
                   meshtrain_bf16_rss_mb=rss["mt16"] / 1024, torch_bf16_rss_mb=rss["pt16"] / 1024,
                   meshtrain_bf16_ms=ms["mt16"], torch_bf16_ms=ms["pt16"],
                   # back-to-back pairs of one round, for a look at the spread
                   round_bf16_over_fp32=[a / b for a, b in zip(ms["mt"], ms["mt16"])],
                   round_ratio_bf16=[a / b for a, b in zip(ms["pt16"], ms["mt16"])])
    results.append(row)
    print(f"{name:>3} {threads:>2}t {mt_tps:>10.0f} {pt_tps:>10.0f} {row['ratio']:>6.2f}x {rate:>8.1f} "
          f"{row['mfu_meshtrain']:>6.2f} {row['mfu_torch']:>6.2f} {row['meshtrain_rss_mb']:>7.0f} "
          f"{row['torch_rss_mb']:>7.0f}   (load {row['load']:.1f})", flush=True)


def print_bf16_runs(results):
    """The bf16 training rows (bench_config with bf16)."""
    rows = [r for r in results if "meshtrain_bf16_tok_s" in r]
    if not rows:
        return
    print("\nbf16: meshtrain --precision bf16 (bf16 GEMM operands, fp32 master weights and AdamW) and PyTorch under "
          "torch.autocast('cpu', bfloat16) (fp32 parameters and AdamW), in the same rounds as the fp32 rows; "
          "MFU over the bf16 GEMM rate")
    print("cfg thr  mesh-bf16 tok/s  mesh-fp32 tok/s  bf16/fp32  torch-bf16 tok/s  mesh/torch(bf16)  bf16 GF/s  "
          "MFU-m  MFU-t  RSS-m MB RSS-t MB")
    for r in rows:
        print(f"{r['config']:>3} {r['threads']:>2}t {r['meshtrain_bf16_tok_s']:>16.0f} {r['meshtrain_tok_s']:>16.0f} "
              f"{r['bf16_over_fp32']:>9.2f}x {r['torch_bf16_tok_s']:>17.0f} {r['ratio_bf16']:>16.2f}x "
              f"{r['gemm_bf16_gflops']:>10.1f} {r['mfu_meshtrain_bf16']:>6.2f} {r['mfu_torch_bf16']:>6.2f} "
              f"{r['meshtrain_bf16_rss_mb']:>8.0f} {r['torch_bf16_rss_mb']:>8.0f}", flush=True)
    for r in rows:
        print(f"    {r['config']}: PyTorch autocast bf16 / PyTorch fp32 {r['torch_bf16_over_fp32']:.2f}x; per-round "
              f"bf16/fp32 {', '.join(f'{x:.2f}' for x in r['round_bf16_over_fp32'])}; per-round mesh/torch(bf16) "
              f"{', '.join(f'{x:.2f}' for x in r['round_ratio_bf16'])}")


def print_bf16_gemms(results):
    """The bf16 GEMM rate beside the fp32 sgemm rate on each config's shapes
    (the gemm_rate runs of bench_config)."""
    print("\nGEMMs of one step on the config's shapes (build/bench/gemm_rate): fp32 = oneDNN sgemm (meshtrain's "
          "default; OpenBLAS sgemm beside it), bf16 = oneDNN bf16 inputs with fp32 accumulation; +cvt adds converting "
          "the fp32 activations to bf16; medians of the rounds")
    print("cfg thr  fp32 GF/s  OpenBLAS GF/s  bf16 GF/s  bf16/fp32  bf16+cvt GF/s  (bf16+cvt)/fp32")
    for r in results:
        if "gemm_bf16_gflops" in r:
            print(f"{r['config']:>3} {r['threads']:>2}t {r['gemm_gflops']:>10.1f} {r['gemm_openblas_gflops']:>14.1f} "
                  f"{r['gemm_bf16_gflops']:>10.1f} "
                  f"{r['gemm_bf16_ratio']:>9.2f}x {r['gemm_bf16_conv_gflops']:>14.1f} "
                  f"{r['gemm_bf16_conv_ratio']:>15.2f}x", flush=True)


def bench_dp(cfg, shard, results):
    """--dp 2 with 1 thread per rank (each rank the config's batch) against two
    independent single-process runs of the config started together."""
    warm, steps = STEPS["B"]
    env = thread_env(1, False)
    dp_tps, solo_tps = [], []
    for r in range(ROUNDS):
        with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
            cmd = ["mpirun", "-np", "2", "--bind-to", "core"] + meshtrain_cmd(
                dict(cfg, B=2 * cfg["B"]), shard, warm + steps, m.name, ["--dp", "2"])
            run(cmd, env, "mpirun meshtrain --dp 2")
            dp_tps.append(2 * cfg["B"] * cfg["T"] / (statistics.median(metrics_ms(m.name, warm)) * 1e-3))
        files = [tempfile.NamedTemporaryFile(suffix=".jsonl") for _ in range(2)]
        procs = [subprocess.Popen(["taskset", "-c", str(i)] + meshtrain_cmd(cfg, shard, warm + steps, f.name),
                                  env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for i, f in enumerate(files)]
        for p in procs:
            _, err = p.communicate()
            if p.returncode != 0:
                sys.exit(f"bench: independent meshtrain run failed (exit {p.returncode})\n{err[-2000:]}")
        solo_tps.append(sum(cfg["B"] * cfg["T"] / (statistics.median(metrics_ms(f.name, warm)) * 1e-3)
                            for f in files))
        for f in files:
            f.close()
    # each round's pair ran back to back under the same outside load: the
    # efficiency is the median of the per-round ratios
    ratios = [x / y for x, y in zip(dp_tps, solo_tps)]
    d, s, e = statistics.median(dp_tps), statistics.median(solo_tps), statistics.median(ratios)
    results.append(dict(config="B", dp_tok_s=d, independent_tok_s=s, dp_efficiency=e, dp_runs=dp_tps,
                        independent_runs=solo_tps, round_ratios=ratios, load=load()))
    print(f"\ndata parallel, config B, 1 thread per process: --dp 2 {d:.0f} tok/s, two independent runs "
          f"{s:.0f} tok/s (medians); efficiency {e:.3f} (median of the rounds' "
          f"{', '.join(f'{r:.3f}' for r in ratios)})", flush=True)


# Issue 6's acceptance figures: (number, what, how to find the value, op, threshold)
ACCEPTANCE = [
    (1, "fp32 1t A: meshtrain/PyTorch tok/s", lambda r: r.get(("A", 1), {}).get("ratio"), ">=", 1.5),
    (1, "fp32 1t B: meshtrain/PyTorch tok/s", lambda r: r.get(("B", 1), {}).get("ratio"), ">=", 1.5),
    (1, "fp32 1t C: meshtrain/PyTorch tok/s", lambda r: r.get(("C", 1), {}).get("ratio"), ">=", 1.3),
    (1, "fp32 1t A: meshtrain MFU (over sgemm rate)", lambda r: r.get(("A", 1), {}).get("mfu_meshtrain"), ">=", 0.80),
    (2, "bf16 1t A: meshtrain bf16/meshtrain fp32 tok/s", lambda r: r.get(("A", 1), {}).get("bf16_over_fp32"),
     ">=", 1.7),
    (2, "bf16 1t B: meshtrain bf16/PyTorch autocast bf16", lambda r: r.get(("B", 1), {}).get("ratio_bf16"),
     ">=", 1.5),
    (3, "fp32 2t A: meshtrain/PyTorch (passive) tok/s", lambda r: r.get(("A", 2), {}).get("ratio"), ">=", 1.5),
    (4, "dp 2 B: efficiency vs 2 independent runs", lambda r: r.get("dp", {}).get("dp_efficiency"), ">=", 0.90),
    (5, "peak RSS A 1t: meshtrain/PyTorch", lambda r: (r[("A", 1)]["meshtrain_rss_mb"] / r[("A", 1)]["torch_rss_mb"]
                                                       if ("A", 1) in r else None), "<=", 1.0),
]


def acceptance(results):
    """Prints each acceptance figure that this run measured beside its
    threshold; returns them as dicts."""
    by = {}
    for r in results:
        if "threads" in r:
            by[(r["config"], r["threads"])] = r
        elif "dp_efficiency" in r:
            by["dp"] = r
    checks = []
    for num, what, get, op, thr in ACCEPTANCE:
        v = get(by)
        if v is None:
            continue
        ok = v >= thr if op == ">=" else v <= thr
        checks.append(dict(acceptance=num, what=what, value=v, op=op, threshold=thr, ok=ok))
    if checks:
        print(f"\nissue 6 acceptance, as measured in this run{' (QUICK mode: a smoke test, not a measurement)' if QUICK else ''}:")
        for c in checks:
            print(f"  {c['acceptance']}. {c['what']:<48} {c['value']:>6.2f}  (need {c['op']} {c['threshold']:.2f})  "
                  f"{'ok' if c['ok'] else 'FAILS'}")
    return checks


def main():
    for path in (MESHTRAIN, GEMM_RATE):
        if not os.access(path, os.X_OK):
            sys.exit(f"bench: {path} is missing; run `make bench` (it builds it)")
    names = [n.strip() for n in os.environ.get("BENCH_CONFIGS", "A,B,C,L").split(",") if n.strip()]
    two = [n.strip() for n in os.environ.get("BENCH_THREADS2", "A").split(",") if n.strip()]
    bf16 = [n.strip() for n in os.environ.get("BENCH_BF16", "A,B,L").split(",") if n.strip()]
    for n in names + two + bf16:
        if n not in CONFIGS:
            sys.exit(f"bench: unknown config '{n}' (expected A, B, C or L)")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        shards = {}
        for v in sorted({c["V"] for c in CONFIGS.values()}):
            shards[v] = os.path.join(tmp, f"random_v{v}.bin")
            subprocess.run([PYTHON, os.path.join(ROOT, "bench", "make_shard.py"), shards[v], str(v), "300000"],
                           check=True)
        print(f"meshtrain vs PyTorch {__import__('torch').__version__} (fp32, AdamW, clip 1), {ROUNDS} rounds "
              f"alternating, medians; load {load():.1f}; {'QUICK mode' if QUICK else ''}\n"
              f"2 threads: meshtrain with {omp_desc(2, False, meshtrain=True)}, PyTorch with {omp_desc(2, True)}")
        print("cfg thr  mesh tok/s torch tok/s  ratio  gemm GF/s  MFU-m  MFU-t  RSS-m MB RSS-t MB")
        t0 = time.time()
        for n in names:
            bench_config(n, CONFIGS[n], shards[CONFIGS[n]["V"]], 1, results, bf16=n in bf16)
        for n in two:
            bench_config(n, CONFIGS[n], shards[CONFIGS[n]["V"]], 2, results)
        print_bf16_gemms(results)
        print_bf16_runs(results)
        if os.environ.get("BENCH_DP", "1") != "0":
            bench_dp(CONFIGS["B"], shards[CONFIGS["B"]["V"]], results)
        checks = acceptance(results)
        print(f"\n({time.time() - t0:.0f} s; MFU = model FLOP/s (6N + 12LCT per token) / measured sgemm rate "
              f"(oneDNN, meshtrain's fp32 GEMM) "
              f"(bf16 rows: / bf16 GEMM rate); RSS = peak resident set of the process)")
    if os.environ.get("BENCH_JSON"):
        with open(os.environ["BENCH_JSON"], "w") as f:
            json.dump(results + [dict(acceptance=checks, quick=QUICK, rounds=ROUNDS)], f, indent=1)


if __name__ == "__main__":
    main()
