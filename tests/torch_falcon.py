#!/usr/bin/python3
"""PyTorch reference Falcon for the Falcon tests (test-only; never a runtime
dependency). Plain torch (Debian's python3-torch, CPU, fp32), no
transformers: the model follows transformers' FalconForCausalLM:
  word_embeddings; per block, with parallel_attn:
    a = ln_attn(x), m = ln_mlp(x) with new_decoder_architecture (and
    num_ln_in_parallel_attn 2), else a = m = input_layernorm(x);
    fused = query_key_value(a) split as FalconAttention._split_heads does:
      new_decoder_architecture: view [.., KV, H/KV + 2, hd], q = [:, :, :-2],
        k = [:, :, [-2]], v = [:, :, [-1]] (each group: its query heads, k, v);
      multi_query: view [.., H + 2, hd], q = [:-2], k = [-2], v = [-1];
      else: view [.., H, 3, hd] (per head q, k, v);
    rotary embeddings (rotate_half, inv_freq 1/theta^(arange(0,hd,2)/hd)) on
    q and k; causal softmax attention, scale 1/sqrt(hd), query head h with
    kv head h // (H/KV); dense; MLP dense_4h_to_h(gelu(dense_h_to_4h(m)))
    with exact (erf) GELU; out = (mlp + attn) + x;
  ln_f; lm_head tied to word_embeddings (or its own); mean cross-entropy.
LayerNorms with bias, eps layer_norm_epsilon; the four linears with biases when bias: true.

Subcommands:
  init --out DIR --layers L --dim C --heads H --kv-heads KV --form mq|gqa|mha
       --ffn F --vocab V --max-pos T --tie 0|1 [--bias 0|1] [--norms 1|2] --seed S
      config.json (the real Falcon form: mq = multi_query, one LayerNorm, as
      Falcon-7B; gqa = new_decoder_architecture with KV groups and two
      LayerNorms, as Falcon-40B, or one with --norms 1 (num_ln_in_parallel_attn);
      mha = neither) and model.safetensors (fp32):
      matrices N(0, std) (--std, default 0.02), LayerNorm weights 1 + 0.1 N(0,1), biases 0.1 N(0,1),
      drawn in the order below.
  train --model DIR --data SHARD ... [--lora ADAPTER_DIR] --out-json F --out-grads G
      as tests/torch_llama.py train (meshtrain's batches, AdamW, clipping, schedule;
      an extended shard's loss mask and packed documents as there).
  generate --model DIR --prompt-ids 1,2,3 [--tokens N]
      greedy decoding, the full forward recomputed for every new token (no
      cache); prints the generated ids, comma-separated.

Gradient dump order = meshtrain's layout (models/falcon/layout.c):
  transformer.word_embeddings.weight [V, C]
  per layer i (transformer.h.i.): input_layernorm.weight/.bias [C] (or
    ln_attn.weight/.bias, ln_mlp.weight/.bias), self_attention.query_key_value.weight
    [(H + 2 KV) hd, C], self_attention.dense.weight [C, H hd],
    mlp.dense_h_to_4h.weight [F, C], mlp.dense_4h_to_h.weight [C, F], each
    followed by its bias with bias: true
  transformer.ln_f.weight, transformer.ln_f.bias [C]
  lm_head.weight [V, C] (untied only)
"""
import argparse, json, math, os, sys
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import doc_layout, doc_mask, lr_at, read_shard_mask  # noqa: E402
from torch_llama import write_safetensors, read_safetensors, rope_cos_sin, rotate_half  # noqa: E402


class Cfg:
    def __init__(self, j):
        g = lambda *ks, d=None: next((j[k] for k in ks if j.get(k) is not None), d)
        self.C = g("hidden_size", "n_embed")
        self.H = g("num_attention_heads", "n_head")
        self.L = g("num_hidden_layers", "n_layer")
        self.V = j["vocab_size"]
        self.new_arch = bool(j.get("new_decoder_architecture", False))
        self.multi_query = bool(j.get("multi_query", True))
        if j.get("alibi") or not j.get("parallel_attn", True):
            raise SystemExit("alibi and sequential blocks are not modelled here")
        self.bias = bool(j.get("bias", False))
        if self.new_arch:
            self.KV = g("num_kv_heads", "n_head_kv", d=self.H)
        else:
            self.KV = 1 if self.multi_query else self.H
        self.norms = (j.get("num_ln_in_parallel_attn") or 2) if self.new_arch else 1
        self.hd = self.C // self.H
        self.F = g("ffn_hidden_size", d=4 * self.C)
        self.eps = float(j.get("layer_norm_epsilon", 1e-5))
        self.theta = float(j.get("rope_theta", 10000.0))
        self.tie = bool(j.get("tie_word_embeddings", True))


def tensor_specs(c):
    C, hd = c.C, c.hd
    out = [("transformer.word_embeddings.weight", [c.V, C])]
    for i in range(c.L):
        p = f"transformer.h.{i}."
        lns = ["ln_attn", "ln_mlp"] if c.norms == 2 else ["input_layernorm"]
        for ln in lns:
            out += [(p + ln + ".weight", [C]), (p + ln + ".bias", [C])]
        for mod, rows, cols in [("self_attention.query_key_value", (c.H + 2 * c.KV) * hd, C),
                                ("self_attention.dense", C, c.H * hd), ("mlp.dense_h_to_4h", c.F, C),
                                ("mlp.dense_4h_to_h", C, c.F)]:
            out.append((p + mod + ".weight", [rows, cols]))
            if c.bias:
                out.append((p + mod + ".bias", [rows]))
    out += [("transformer.ln_f.weight", [C]), ("transformer.ln_f.bias", [C])]
    if not c.tie:
        out.append(("lm_head.weight", [c.V, C]))
    return out


class Falcon(torch.nn.Module):
    MODS = ["self_attention.query_key_value", "self_attention.dense", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h"]

    def __init__(self, cfg, weights):
        super().__init__()
        self.cfg = cfg
        self.names = [n for n, _ in tensor_specs(cfg)]
        extra = set(weights) - set(self.names) - ({"lm_head.weight"} if cfg.tie else set())
        missing = set(self.names) - set(weights)
        if missing or extra:
            raise SystemExit(f"tensors missing {sorted(missing)} / unexpected {sorted(extra)}")
        self.p = torch.nn.ParameterDict()
        for n, shape in tensor_specs(cfg):
            assert list(weights[n].shape) == shape, (n, weights[n].shape, shape)
            self.p[n.replace(".", "/")] = torch.nn.Parameter(weights[n].clone())
        self.lora, self.lora_scale = {}, 0.0

    def w(self, n):
        return self.p[n.replace(".", "/")]

    def params(self):
        return [self.w(n) for n in self.names]

    def add_lora(self, adapter, acfg):
        r, alpha = acfg["r"], acfg["lora_alpha"]
        self.lora_scale = alpha / math.sqrt(r) if acfg.get("use_rslora") else alpha / r
        for p in self.p.values():
            p.requires_grad_(False)
        self.lora_params = []
        for i in range(self.cfg.L):
            for mod in self.MODS:  # meshtrain's declaration order
                key = f"base_model.model.transformer.h.{i}.{mod}"
                if key + ".lora_A.weight" in adapter:
                    A = torch.nn.Parameter(adapter[key + ".lora_A.weight"].clone())
                    B = torch.nn.Parameter(adapter[key + ".lora_B.weight"].clone())
                    self.lora[f"{i}.{mod}"] = (A, B)
                    self.lora_params += [A, B]

    def lin(self, x, i, mod):
        y = F.linear(x, self.w(f"transformer.h.{i}.{mod}.weight"),
                     self.w(f"transformer.h.{i}.{mod}.bias") if self.cfg.bias else None)  # FalconLinear: x W^T + b
        ab = self.lora.get(f"{i}.{mod}")
        if ab is not None:
            y = y + self.lora_scale * F.linear(F.linear(x, ab[0]), ab[1])
        return y

    def split_heads(self, fused):
        """transformers' FalconAttention._split_heads: q [B,T,H,hd], k/v [B,T,KV,hd]."""
        c = self.cfg
        B, T, _ = fused.shape
        if c.new_arch:
            f = fused.view(B, T, -1, c.H // c.KV + 2, c.hd)
            q = f[:, :, :, :-2].reshape(B, T, c.H, c.hd)
            return q, f[:, :, :, -2], f[:, :, :, -1]
        if not c.multi_query:
            f = fused.view(B, T, c.H, 3, c.hd)
            return f[..., 0, :], f[..., 1, :], f[..., 2, :]
        f = fused.view(B, T, c.H + 2, c.hd)
        return f[..., :-2, :], f[..., [-2], :], f[..., [-1], :]

    def logits(self, idx, docs=None):
        c = self.cfg
        B, T = idx.shape
        cos, sin = rope_cos_sin(T, c.hd, c.theta)
        x = F.embedding(idx, self.w("transformer.word_embeddings.weight"))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        if docs is not None:  # packed: positions restart at each document, attention stays inside it
            cos, sin = cos[docs[1]].unsqueeze(1), sin[docs[1]].unsqueeze(1)
            mask = doc_mask(docs[0])
        for i in range(c.L):
            g = lambda s: self.w(f"transformer.h.{i}.{s}")
            ln = lambda name: F.layer_norm(x, (c.C,), g(name + ".weight"), g(name + ".bias"), c.eps)
            if c.norms == 2:
                a, m = ln("ln_attn"), ln("ln_mlp")
            else:
                a = m = ln("input_layernorm")
            q, k, v = self.split_heads(self.lin(a, i, "self_attention.query_key_value"))
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, hd]
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            rep = c.H // c.KV  # query head h reads kv head h // rep (HF broadcasts each group's k, v)
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(c.hd)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, c.H * c.hd)
            attn = self.lin(y, i, "self_attention.dense")
            mlp = self.lin(F.gelu(self.lin(m, i, "mlp.dense_h_to_4h")), i, "mlp.dense_4h_to_h")
            mlp = mlp + attn
            x = mlp + x
        x = F.layer_norm(x, (c.C,), self.w("transformer.ln_f.weight"), self.w("transformer.ln_f.bias"), c.eps)
        head = self.w("transformer.word_embeddings.weight" if c.tie else "lm_head.weight")
        return F.linear(x, head)

    def forward(self, idx, targets, docs=None):
        return F.cross_entropy(self.logits(idx, docs).reshape(-1, self.cfg.V), targets.reshape(-1))


def load(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = Cfg(json.load(f))
    return Falcon(cfg, read_safetensors(os.path.join(d, "model.safetensors")))


def cmd_init(a):
    j = {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "activation": "gelu", "alibi": False,
         "bias": bool(a.bias), "parallel_attn": True, "hidden_size": a.dim, "num_attention_heads": a.heads,
         "num_hidden_layers": a.layers, "layer_norm_epsilon": 1e-5, "rope_theta": 10000.0,
         "vocab_size": a.vocab, "max_position_embeddings": a.max_pos, "tie_word_embeddings": bool(a.tie),
         "attention_dropout": 0.0, "hidden_dropout": 0.0, "torch_dtype": "float32"}
    if a.form == "mq":
        j.update(multi_query=True, new_decoder_architecture=False)
    elif a.form == "gqa":
        j.update(multi_query=False, new_decoder_architecture=True, num_kv_heads=a.kv_heads)
        if a.norms:
            j["num_ln_in_parallel_attn"] = a.norms
    else:
        j.update(multi_query=False, new_decoder_architecture=False)
    if a.ffn:
        j["ffn_hidden_size"] = a.ffn
    cfg = Cfg(j)
    g = torch.Generator().manual_seed(a.seed)
    tensors = []
    for name, shape in tensor_specs(cfg):
        r = torch.randn(shape, generator=g, dtype=torch.float32)
        if name.endswith("layernorm.weight") or ".ln_" in name and name.endswith(".weight"):
            t = 1.0 + 0.1 * r
        elif name.endswith(".bias"):
            t = 0.1 * r
        else:
            t = a.std * r
        tensors.append((name, t))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(j, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)


def cmd_train(a):
    model = load(a.model)
    tokens, counted, starts = read_shard_mask(a.data, docs=True)
    if tokens.size and tokens.max() >= model.cfg.V:
        raise SystemExit(f"token {tokens.max()} is outside the vocabulary of {model.cfg.V}")
    params = model.params()
    if a.lora:
        model.add_lora(read_safetensors(os.path.join(a.lora, "adapter_model.safetensors")),
                       json.load(open(os.path.join(a.lora, "adapter_config.json"))))
        params = model.lora_params
    decay = [p for p in params if p.dim() == 2]
    nodecay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": a.weight_decay}] + ([{"params": nodecay, "weight_decay": 0.0}] if nodecay else [])
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    B, T = a.batch, a.seq_len
    nb = (len(tokens) - 1) // (B * T)
    losses, norms = [], []
    for step in range(a.steps):
        start = (step % nb) * B * T
        buf = torch.tensor(tokens[start:start + B * T + 1])
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T).clone()
        if counted is not None:  # the loss mask: ignore_index targets, the mean over the counted ones
            y[~torch.tensor(counted[start + 1:start + B * T + 1]).view(B, T)] = -100
        opt.zero_grad(set_to_none=True)
        loss = model(x, y, doc_layout(starts[start:start + B * T], B, T) if starts is not None else None)
        loss.backward()
        if step == 0 and a.out_grads:
            parts = []
            for p, n in zip(params, model.names if not a.lora else [None] * len(params)):
                gr = p.grad if p.grad is not None else torch.zeros_like(p)
                if n in ("transformer.word_embeddings.weight", "lm_head.weight") and a.grad_vocab_rows > gr.shape[0]:
                    gr = torch.cat([gr, torch.zeros(a.grad_vocab_rows - gr.shape[0], gr.shape[1])])
                parts.append(gr.reshape(-1))
            torch.cat(parts).detach().numpy().astype("<f4").tofile(a.out_grads)
        norm = torch.nn.utils.clip_grad_norm_(params, a.grad_clip) if a.grad_clip > 0 else \
            torch.sqrt(sum((p.grad ** 2).sum() for p in params))
        for grp in opt.param_groups:
            grp["lr"] = lr_at(a, step)
        opt.step()
        losses.append(loss.item())
        norms.append(float(norm))
    with open(a.out_json, "w") as f:
        json.dump({"losses": losses, "grad_norms": norms}, f)


@torch.no_grad()
def cmd_generate(a):
    model = load(a.model)
    seq = [int(t) for t in a.prompt_ids.split(",") if t.strip()]
    out = []
    for _ in range(a.tokens):
        t = int(model.logits(torch.tensor([seq]))[0, -1].argmax())
        seq.append(t)
        out.append(t)
    print(",".join(map(str, out)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("init")
    p.add_argument("--out", required=True)
    p.add_argument("--form", default="mq", choices=["mq", "gqa", "mha"])
    for k, t, d in [("layers", int, 2), ("dim", int, 64), ("heads", int, 4), ("kv_heads", int, 2), ("ffn", int, 0),
                    ("vocab", int, 256), ("max_pos", int, 64), ("tie", int, 1), ("seed", int, 1337),
                    ("std", float, 0.02), ("bias", int, 0), ("norms", int, 0)]:
        p.add_argument("--" + k.replace("_", "-"), type=t, default=d)
    p = sub.add_parser("train")
    for k in ["model", "data", "out_json"]:
        p.add_argument("--" + k.replace("_", "-"), required=True)
    p.add_argument("--out-grads", default=None)
    p.add_argument("--lora", default=None)
    for k, t, d in [("seq_len", int, 32), ("batch", int, 4), ("steps", int, 10), ("lr", float, 1e-3),
                    ("warmup", int, 0), ("min_lr", float, 0.0), ("weight_decay", float, 0.1),
                    ("beta1", float, 0.9), ("beta2", float, 0.95), ("eps", float, 1e-8),
                    ("grad_clip", float, 1.0), ("grad_vocab_rows", int, 0)]:
        p.add_argument("--" + k.replace("_", "-"), type=t, default=d)
    p.add_argument("--lr-schedule", default="constant", choices=["constant", "cosine"])
    p = sub.add_parser("generate")
    p.add_argument("--model", required=True)
    p.add_argument("--prompt-ids", required=True)
    p.add_argument("--tokens", type=int, default=16)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    {"init": cmd_init, "train": cmd_train, "generate": cmd_generate}[a.cmd](a)


if __name__ == "__main__":
    main()
