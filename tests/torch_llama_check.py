#!/usr/bin/python3
"""Self-check of tests/torch_llama.py against independent formulations
(test-only; run by hand, ~10 s on one core):
  1. RoPE rotate_half convention on a hand-computed 4-dim head;
  2. llama3 rope scaling on Llama 3.1 8B's numbers (theta 500000, factor 8,
     low 1, high 4, original 8192, head_dim 128) against a float64 scalar
     transcription of Meta's apply_scaling;
  3. grouped-query attention by kv-group views vs transformers' repeat_kv
     (explicit repeat_interleave of the kv heads);
  4. the whole forward (GQA, q/k/v biases, llama3 rope, tied and untied)
     against a float64 NumPy per-token, per-head loop;
  5. autograd gradients of the fp64 model against central differences;
  6. greedy generation (full recompute) against the per-position argmax of
     one forward over the generated sequence.
With --meshtrain BIN it also converts a fresh meshtrain Llama checkpoint
into a Hugging Face directory and trains both (tests/check_torch_parity.sh's
settings), printing the step-0 loss, worst loss and gradient differences.
usage: torch_llama_check.py [--meshtrain build/meshtrain --data SHARD]"""
import argparse, json, math, os, subprocess, sys, tempfile
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_llama as tl  # noqa: E402


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    if not ok:
        check.failed = True


check.failed = False


def rope_by_hand():
    # hd 4: pairs (0,2) and (1,3) rotate by pos*inv[0], pos*inv[1]; inv = [1, theta^-1/2]
    theta, pos = 100.0, 3
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    cos, sin = tl.rope_cos_sin(pos + 1, 4, theta)
    y = x * cos[pos] + tl.rotate_half(x) * sin[pos]
    a0, a1 = pos * 1.0, pos * 0.1
    want = [1 * math.cos(a0) - 3 * math.sin(a0), 2 * math.cos(a1) - 4 * math.sin(a1),
            3 * math.cos(a0) + 1 * math.sin(a0), 4 * math.cos(a1) + 2 * math.sin(a1)]
    err = max(abs(float(y[i]) - want[i]) for i in range(4))
    check("rope rotate_half on [1,2,3,4] at pos 3, theta 100", err < 1e-6, f"max err {err:.1e}; got "
          + " ".join(f"{float(v):.6f}" for v in y))


def llama3_scaling():
    hd, theta = 128, 500000.0
    rope = dict(type="llama3", factor=8.0, low=1.0, high=4.0, orig=8192)
    base = tl.rope_inv_freq(hd, theta)[0]
    got = tl.rope_inv_freq(hd, theta, rope)[0]
    # Meta's llama3 apply_scaling, scalar by scalar in float64
    want = []
    for f in (1.0 / theta ** (np.arange(0, hd, 2) / hd)):
        wl = 2 * math.pi / f
        if wl < 8192 / 4.0:
            want.append(f)
        elif wl > 8192 / 1.0:
            want.append(f / 8.0)
        else:
            s = (8192 / wl - 1.0) / (4.0 - 1.0)
            want.append((1 - s) * f / 8.0 + s * f)
    want = np.array(want)
    rel = np.abs(got.double().numpy() - want) / want
    ratio = (base / got).numpy()
    kept = int((ratio == 1.0).sum())
    div8 = int((np.abs(ratio - 8.0) < 1e-6).sum())
    mid = len(ratio) - kept - div8
    check("llama3 scaling (Llama 3.1 8B) vs float64 apply_scaling", rel.max() < 1e-6,
          f"max rel err {rel.max():.1e}; {kept} kept, {mid} interpolated, {div8} divided by 8; "
          f"inv_freq[0]={float(got[0]):.6g} (unchanged {float(base[0]):.6g}), "
          f"inv_freq[63]={float(got[63]):.6e} = {float(base[63]):.6e}/8")
    check("llama3 bands as Llama 3.1 8B's (first entries kept, last divided by 8)",
          ratio[0] == 1.0 and abs(ratio[-1] - 8.0) < 1e-6 and kept == 29 and div8 == 29 and mid == 6,
          f"kept {kept}, interpolated {mid}, divided {div8}")


def attention_repeat_kv(q, k, v):
    """transformers' eager path: repeat_kv then plain attention with an additive causal mask."""
    B, H, T, hd = q.shape
    rep = H // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    att = q @ k.transpose(-2, -1) / math.sqrt(hd)
    mask = torch.full((T, T), torch.finfo(att.dtype).min).triu(1)
    return torch.softmax(att + mask, dim=-1) @ v


def tiny_model(tmp, tie, qkv_bias, rope, kv=2, seed=1, dtype=torch.float32):
    d = os.path.join(tmp, f"m{tie}{qkv_bias}{int(bool(rope))}{kv}")
    argv = ["init", "--out", d, "--layers", "2", "--dim", "32", "--heads", "4", "--kv-heads", str(kv),
            "--ffn", "48", "--vocab", "50", "--max-pos", "16", "--rope-theta", "10000", "--norm-eps", "1e-5",
            "--tie", str(tie), "--qkv-bias", str(qkv_bias), "--seed", str(seed)]
    if rope:
        argv += ["--rope-scaling", "llama3", "--rope-factor", "8", "--rope-low", "1", "--rope-high", "4",
                 "--rope-orig", "32"]
    tl.main(argv)
    m = tl.load(d)
    if dtype != torch.float32:
        m = m.to(dtype)
    return d, m


def numpy_forward(m, idx):
    """Float64 per-token, per-head transcription of LlamaForCausalLM."""
    c = m.cfg
    W = {n: p.detach().double().numpy() for n, p in zip(m.names, m.params())}
    T = len(idx)
    inv = 1.0 / c.theta ** (np.arange(0, c.hd, 2) / c.hd)
    if c.rope:
        r = c.rope
        out = []
        for f in inv:
            wl = 2 * math.pi / f
            if wl < r["orig"] / r["high"]:
                out.append(f)
            elif wl > r["orig"] / r["low"]:
                out.append(f / r["factor"])
            else:
                s = (r["orig"] / wl - r["low"]) / (r["high"] - r["low"])
                out.append((1 - s) * f / r["factor"] + s * f)
        inv = np.array(out)

    def norm(x, w):
        return x / math.sqrt(np.mean(x * x) + c.eps) * w

    def rope(vec, pos):  # rotate pairs (j, j + hd/2) by pos * inv[j]
        h = c.hd // 2
        o = vec.copy()
        for j in range(h):
            a = pos * inv[j]
            o[j] = vec[j] * math.cos(a) - vec[j + h] * math.sin(a)
            o[j + h] = vec[j + h] * math.cos(a) + vec[j] * math.sin(a)
        return o

    x = np.stack([W["model.embed_tokens.weight"][t] for t in idx])
    for i in range(c.L):
        p = f"model.layers.{i}."
        bias = lambda n: W.get(p + f"self_attn.{n}.bias", 0.0)
        h = np.stack([norm(x[t], W[p + "input_layernorm.weight"]) for t in range(T)])
        q = h @ W[p + "self_attn.q_proj.weight"].T + bias("q_proj")
        k = h @ W[p + "self_attn.k_proj.weight"].T + bias("k_proj")
        v = h @ W[p + "self_attn.v_proj.weight"].T + bias("v_proj")
        y = np.zeros((T, c.H * c.hd))
        for hh in range(c.H):
            g = hh // (c.H // c.KV)
            for t in range(T):
                qt = rope(q[t, hh * c.hd:(hh + 1) * c.hd], t)
                s = np.array([qt @ rope(k[u, g * c.hd:(g + 1) * c.hd], u) for u in range(t + 1)]) / math.sqrt(c.hd)
                pr = np.exp(s - s.max())
                pr /= pr.sum()
                y[t, hh * c.hd:(hh + 1) * c.hd] = sum(pr[u] * v[u, g * c.hd:(g + 1) * c.hd] for u in range(t + 1))
        x = x + y @ W[p + "self_attn.o_proj.weight"].T
        h = np.stack([norm(x[t], W[p + "post_attention_layernorm.weight"]) for t in range(T)])
        gt = h @ W[p + "mlp.gate_proj.weight"].T
        x = x + ((gt / (1 + np.exp(-gt))) * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
    x = np.stack([norm(x[t], W["model.norm.weight"]) for t in range(T)])
    return x @ W["model.embed_tokens.weight" if c.tie else "lm_head.weight"].T


def forward_checks(tmp):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 6, 9, 8), torch.randn(2, 3, 9, 8), torch.randn(2, 3, 9, 8)
    d = (tl.attention_gqa(q, k, v) - attention_repeat_kv(q, k, v)).abs().max().item()
    check("GQA kv-group views vs repeat_kv (H 6, KV 3)", d < 1e-6, f"max diff {d:.1e}")
    idx = [3, 17, 42, 8, 8, 0, 49, 23, 11, 5, 30, 2]
    for tie, qb, rope, kv in [(0, 0, 0, 2), (1, 1, 1, 2), (0, 1, 1, 1), (1, 0, 0, 4)]:
        _, m = tiny_model(tmp, tie, qb, rope, kv)
        with torch.no_grad():
            a = m.logits(torch.tensor([idx]))[0].double().numpy()
            b = m.logits(torch.tensor([idx]), attention=attention_repeat_kv)[0].double().numpy()
        ref = numpy_forward(m, idx)
        r = np.abs(a - ref).max() / np.abs(ref).max()
        r2 = np.abs(b - ref).max() / np.abs(ref).max()
        check(f"forward vs float64 NumPy loops (tie {tie}, qkv bias {qb}, llama3 rope {rope}, KV {kv})",
              r < 1e-5 and r2 < 1e-5, f"max|diff|/max|ref| {r:.1e} (repeat_kv path {r2:.1e})")


def grad_check(tmp):
    _, m = tiny_model(tmp, 0, 1, 1, kv=2, dtype=torch.float64)
    tied_d, mt = tiny_model(tmp, 1, 0, 0, kv=1, seed=2, dtype=torch.float64)
    g = torch.Generator().manual_seed(7)
    for model, what in [(m, "untied, qkv bias, llama3 rope, KV 2"), (mt, "tied, KV 1")]:
        x = torch.randint(0, 50, (2, 8), generator=g)
        y = torch.randint(0, 50, (2, 8), generator=g)
        model.zero_grad()
        model(x, y).backward()
        worst = 0.0
        for n, p in zip(model.names, model.params()):
            flat = p.data.view(-1)
            for j in torch.randint(0, flat.numel(), (3,), generator=g).tolist():
                old = flat[j].item()
                flat[j] = old + 1e-6
                lp = model(x, y).item()
                flat[j] = old - 1e-6
                lm = model(x, y).item()
                flat[j] = old
                num = (lp - lm) / 2e-6
                worst = max(worst, abs(num - p.grad.view(-1)[j].item()) / max(abs(num), 1e-4))
        check(f"fp64 autograd vs central differences ({what}; 3 entries per tensor)", worst < 1e-5,
              f"worst rel err {worst:.1e}")


def generate_check(tmp):
    d, m = tiny_model(tmp, 0, 1, 1, kv=2, seed=4)
    import io, contextlib
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        tl.main(["generate", "--model", d, "--prompt-ids", "1,2,3", "--tokens", "12"])
    gen = [int(t) for t in buf.getvalue().strip().split(",")]
    seq = [1, 2, 3] + gen
    with torch.no_grad():
        am = m.logits(torch.tensor([seq]))[0].argmax(-1).tolist()
    check("generate (full recompute) == per-position argmax of one forward", am[2:-1] == gen and len(gen) == 12,
          ",".join(map(str, gen)))


def ckpt_to_hf(ck, out):
    """A meshtrain checkpoint's model/ tensors (first V rows of the vocabulary tensors) and config."""
    man = json.load(open(os.path.join(ck, "manifest.json")))
    c = man["state"]["config"]
    j = {"architectures": ["Qwen2ForCausalLM" if c["qkv_bias"] else "LlamaForCausalLM"],
         "model_type": "qwen2" if c["qkv_bias"] else "llama", "hidden_act": "silu",
         "hidden_size": c["n_embd"], "intermediate_size": c["ffn_dim"], "num_attention_heads": c["n_head"],
         "num_key_value_heads": c["n_kv_head"], "head_dim": c["head_dim"], "num_hidden_layers": c["n_layer"],
         "rms_norm_eps": c["norm_eps"], "rope_theta": c["rope_theta"], "rope_scaling": None,
         "tie_word_embeddings": bool(c["tie_embeddings"]), "vocab_size": c["vocab_size"],
         "max_position_embeddings": max(c["max_pos"], c["seq_len"]), "torch_dtype": "float32"}
    if c.get("rope_scaling"):
        j["rope_scaling"] = c["rope_scaling"]  # already in transformers' form
    files = [np.fromfile(os.path.join(ck, f["name"]), dtype="<f4") for f in man["files"]]
    tensors = []
    for t in man["tensors"]:
        if not t["name"].startswith("model/"):
            continue
        a = np.empty(t["numel"], dtype=np.float32)
        for pc in t["pieces"]:
            o = pc["offset"] // 4
            a[pc["start"]:pc["start"] + pc["numel"]] = files[pc["file"]][o:o + pc["numel"]]
        a = a.reshape(t["shape"])
        name = t["name"][len("model/"):]
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            a = a[:c["vocab_size"]]
        tensors.append((name, torch.from_numpy(a.copy())))
    os.makedirs(out, exist_ok=True)
    json.dump(j, open(os.path.join(out, "config.json"), "w"), indent=2)
    tl.write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    return c["padded_vocab"]


def meshtrain_parity(tmp, mt, data, extra, label):
    opt = ["--batch", "4", "--steps", "10", "--lr", "1e-3", "--warmup", "3", "--lr-schedule", "cosine",
           "--min-lr", "1e-4", "--grad-clip", "0.5", "--weight-decay", "0.1", "--beta1", "0.9",
           "--beta2", "0.95", "--eps", "1e-8"]
    w = tempfile.mkdtemp(dir=tmp)
    q = dict(stdout=subprocess.DEVNULL, check=True)
    subprocess.run([mt, "train", "--train", data, "--family", "llama", "--layers", "2", "--dim", "64",
                    "--heads", "4", "--vocab", "300", "--seq-len", "32", "--steps", "0", "--seed", "5",
                    "--ckpt-dir", f"{w}/init", "--log-every", "0"] + extra, **q)
    Vp = ckpt_to_hf(f"{w}/init", f"{w}/hf")
    subprocess.run([mt, "train", "--train", data, "--init-from", f"{w}/init", "--data-order", "sequential",
                    "--dump-grads", f"{w}/mt.bin", "--metrics", f"{w}/mt.jsonl", "--log-every", "0"] + opt, **q)
    tl.main(["train", "--model", f"{w}/hf", "--data", data, "--seq-len", "32", "--out-json", f"{w}/ref.json",
             "--out-grads", f"{w}/ref.bin", "--grad-vocab-rows", str(Vp)] + opt)
    mtl = [json.loads(l)["loss"] for l in open(f"{w}/mt.jsonl") if '"loss"' in l]
    ref = json.load(open(f"{w}/ref.json"))["losses"]
    r0 = abs(mtl[0] - ref[0]) / ref[0]
    worst = max(abs(a - b) / abs(b) for a, b in zip(mtl, ref))
    g1, g2 = np.fromfile(f"{w}/mt.bin", dtype="<f4"), np.fromfile(f"{w}/ref.bin", dtype="<f4")
    if g1.size != g2.size:
        check(f"meshtrain parity ({label})", False, f"gradient sizes {g1.size} vs {g2.size}")
        return
    m = tl.load(f"{w}/hf")
    off, wg = 0, (0.0, "")
    for n, _ in tl.tensor_specs(m.cfg, m.qkv_bias, m.o_bias):
        p = m.w(n)
        k = p.numel() if n not in ("model.embed_tokens.weight", "lm_head.weight") else Vp * p.shape[1]
        a, b = g1[off:off + k].astype(np.float64), g2[off:off + k].astype(np.float64)
        off += k
        wg = max(wg, (np.abs(a - b).max() / max(np.abs(b).max(), 1e-30), n))
    check(f"meshtrain parity ({label})", r0 <= 1e-5 and worst <= 1e-4 and wg[0] <= 1e-4,
          f"step-0 loss {mtl[0]:.7f} vs {ref[0]:.7f} (rel {r0:.1e}); worst of 10 losses {worst:.1e}; "
          f"worst gradient {wg[0]:.1e} ({wg[1]})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshtrain")
    ap.add_argument("--data")
    a = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        rope_by_hand()
        llama3_scaling()
        forward_checks(tmp)
        grad_check(tmp)
        generate_check(tmp)
        if a.meshtrain:
            meshtrain_parity(tmp, a.meshtrain, a.data, ["--kv-heads", "2", "--ffn-dim", "96"], "untied, KV 2")
            meshtrain_parity(tmp, a.meshtrain, a.data,
                             ["--kv-heads", "1", "--ffn-dim", "96", "--tie-embeddings", "1", "--qkv-bias", "1",
                              "--rope-scaling", "llama3", "--rope-original-max-pos", "32", "--rope-theta", "50000",
                              "--norm-eps", "1e-6"], "tied, KV 1, qkv bias, llama3 rope")
    print("self-check FAILED" if check.failed else "self-check OK")
    sys.exit(1 if check.failed else 0)


if __name__ == "__main__":
    main()
