#!/usr/bin/python3
"""PyTorch reference of the Llama family's mixture-of-experts variant for
tests/check_moe_parity.sh (test-only; plain torch 1.13, no transformers).
The attention half of a block is tests/torch_llama.py's; the MLP is E SwiGLU
experts behind a linear router (no bias), as transformers' Mixtral,
Qwen2-MoE and OLMoE blocks compute it:
  logits = x W_r^T,  probs = softmax(logits)
  the k largest logits per token (ties: the lower expert index first)
  mixtral:       weights = softmax over the k chosen logits
  softmax_topk:  weights = probs of the k chosen, / their sum with norm_topk_prob
                 (Qwen2-MoE, OLMoE)
OLMoE (model_type olmoe) also normalises q and k before RoPE, as
transformers' OlmoeAttention: q = q_norm(q_proj(x)), k = k_norm(k_proj(x)),
RMSNorms over the whole projection outputs (widths H hd and KV hd, eps
rms_norm_eps); it has no shared expert and q/k/v biases only with
attention_bias.
  out[n] = sum_k weight[n,k] * down(silu(gate(x)) * up(x)) of expert sel[n,k]
With a shared expert (Qwen2-MoE's shared_expert_intermediate_size > 0), as
transformers' Qwen2MoeSparseMoeBlock adds it:
  out[n] += sigmoid(x W_sg^T) * down_s(silu(gate_s(x)) * up_s(x))
A capacity factor keeps, per expert, the first ceil(factor N k / E) tokens
(in token order) that chose it; the others contribute nothing.
Auxiliary losses per block (meshtrain's definition, Megatron-LM's
normalisation of the Switch/GShard loss):
  aux = E * sum_e f_e P_e, f_e = (choices of e) / (N k), P_e = mean_n probs[n,e]
  z   = mean_n logsumexp(logits[n])^2
  loss = cross-entropy + sum over blocks (aux_coef aux + z_coef z)
(transformers' Mixtral instead pools every layer's router logits into one
aux loss and scales f by k; this reference follows meshtrain's per-block
form, which is what pipeline stages can compute on their own.)

Subcommands:
  init --out DIR --type mixtral|qwen2_moe|olmoe --layers L --dim C --heads H
       --kv-heads KV --experts E --top-k K --moe-ffn F --vocab V --max-pos T
       [--norm-topk 0|1] [--shared-ffn FS] --seed S
      writes config.json and model.safetensors (fp32, the type's tensor names;
      qwen2_moe with q/k/v biases as Qwen2-MoE has them, and a shared expert
      of width FS when FS > 0; olmoe with q_norm and k_norm).
  train --model DIR --data SHARD ... (tests/torch_llama.py's train options)
        [--aux-coef A] [--z-coef Z] [--capacity-factor CF]
      writes {"losses", "grad_norms", "aux"} and the first step's gradients in
      meshtrain's layout order (embed, per layer: input norm, q, k, v, [q/k/v
      biases], [q_norm, k_norm], o, post norm, router, [shared expert gate, up, down, its sigmoid
      gate], per expert gate, up, down; norm, lm_head).
  generate --model DIR --prompt-ids 1,2,3 [--tokens N]
      greedy decoding, the full forward for every new token (no cache); prints
      the new ids, comma-separated.
"""
import argparse, json, math, os, sys
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import lr_at, read_shard  # noqa: E402
from torch_llama import write_safetensors, read_safetensors, rope_cos_sin, rotate_half, rms_norm, attention_gqa  # noqa: E402


class Cfg:
    def __init__(self, j):
        self.type = j["model_type"]
        assert self.type in ("mixtral", "qwen2_moe", "olmoe"), self.type
        self.mixtral = self.type == "mixtral"
        self.olmoe = self.type == "olmoe"
        self.C, self.H, self.L, self.V = j["hidden_size"], j["num_attention_heads"], j["num_hidden_layers"], j["vocab_size"]
        self.KV = j.get("num_key_value_heads") or self.H
        self.hd = j.get("head_dim") or self.C // self.H
        self.eps = float(j.get("rms_norm_eps", 1e-6))
        self.theta = float(j.get("rope_theta", 10000.0))
        self.tie = bool(j.get("tie_word_embeddings", False))
        self.E = j["num_local_experts"] if self.mixtral else j["num_experts"]
        self.K = j["num_experts_per_tok"]
        self.F = j["intermediate_size"] if self.mixtral or self.olmoe else j["moe_intermediate_size"]
        self.norm_topk = True if self.mixtral else bool(j.get("norm_topk_prob", False))
        self.bias = bool(j.get("attention_bias", False)) if self.olmoe else not self.mixtral
        self.Fs = 0 if self.mixtral or self.olmoe else int(j.get("shared_expert_intermediate_size") or 0)
        self.qk_norm = self.olmoe
        assert not (self.olmoe and j.get("clip_qkv") is not None), "clip_qkv is not modelled"


def specs(cfg):
    """(our name, HF name, shape) in meshtrain's layout order."""
    C, hd, V, E, Fe = cfg.C, cfg.hd, cfg.V, cfg.E, cfg.F
    QW, KW = cfg.H * hd, cfg.KV * hd
    out = [("model.embed_tokens.weight", None, [V, C])]
    for i in range(cfg.L):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", None, [C]), (p + "self_attn.q_proj.weight", None, [QW, C]),
                (p + "self_attn.k_proj.weight", None, [KW, C]), (p + "self_attn.v_proj.weight", None, [KW, C])]
        if cfg.bias:
            out += [(p + "self_attn.q_proj.bias", None, [QW]), (p + "self_attn.k_proj.bias", None, [KW]),
                    (p + "self_attn.v_proj.bias", None, [KW])]
        if cfg.qk_norm:
            out += [(p + "self_attn.q_norm.weight", None, [QW]), (p + "self_attn.k_norm.weight", None, [KW])]
        out += [(p + "self_attn.o_proj.weight", None, [C, QW]), (p + "post_attention_layernorm.weight", None, [C])]
        mp = p + ("block_sparse_moe." if cfg.mixtral else "mlp.")
        out.append((p + "mlp.gate.weight", mp + "gate.weight", [E, C]))
        if cfg.Fs:
            Fs = cfg.Fs
            out += [(p + "mlp.shared_expert.gate_proj.weight", None, [Fs, C]),
                    (p + "mlp.shared_expert.up_proj.weight", None, [Fs, C]),
                    (p + "mlp.shared_expert.down_proj.weight", None, [C, Fs]),
                    (p + "mlp.shared_expert_gate.weight", None, [1, C])]
        for e in range(E):
            names = ("w1", "w3", "w2") if cfg.mixtral else ("gate_proj", "up_proj", "down_proj")
            for ours, hf, shape in zip(("gate_proj", "up_proj", "down_proj"), names, ([Fe, C], [Fe, C], [C, Fe])):
                out.append((p + f"mlp.experts.{e}.{ours}.weight", mp + f"experts.{e}.{hf}.weight", shape))
    out.append(("model.norm.weight", None, [C]))
    if not cfg.tie:
        out.append(("lm_head.weight", None, [V, C]))
    return [(a, b or a, s) for a, b, s in out]


class MoeLlama(torch.nn.Module):
    def __init__(self, cfg, weights):
        super().__init__()
        self.cfg = cfg
        self.names = specs(cfg)
        missing = {h for _, h, _ in self.names} - set(weights)
        if missing:
            raise SystemExit(f"tensors missing: {sorted(missing)}")
        self.p = torch.nn.ParameterDict()
        for ours, hf, shape in self.names:
            assert list(weights[hf].shape) == shape, (hf, weights[hf].shape, shape)
            self.p[ours.replace(".", "/")] = torch.nn.Parameter(weights[hf].clone())
        self.aux_coef = self.z_coef = 0.0
        self.capacity = 0.0

    def w(self, n):
        return self.p[n.replace(".", "/")]

    def params(self):
        return [self.w(n) for n, _, _ in self.names]

    def moe(self, x, i):
        c = self.cfg
        N, E, K = x.shape[0], c.E, c.K
        g = lambda s: self.w(f"model.layers.{i}.mlp.{s}.weight")
        logits = F.linear(x, g("gate"))
        probs = logits.softmax(-1)
        sel = torch.sort(logits.detach(), dim=-1, descending=True, stable=True).indices[:, :K]  # ties: lower index
        if c.mixtral:
            w = logits.gather(1, sel).softmax(-1)
        else:
            w = probs.gather(1, sel)
            if c.norm_topk:
                w = w / w.sum(-1, keepdim=True)
        cap = math.ceil(self.capacity * N * K / E) if self.capacity > 0 else N
        out = torch.zeros_like(x)
        dropped = 0
        for e in range(E):
            tok, kk = (sel == e).nonzero(as_tuple=True)  # in token order
            dropped += max(0, len(tok) - cap)
            tok, kk = tok[:cap], kk[:cap]
            if len(tok) == 0:
                continue
            xe = x[tok]
            y = F.linear(F.silu(F.linear(xe, g(f"experts.{e}.gate_proj"))) * F.linear(xe, g(f"experts.{e}.up_proj")),
                         g(f"experts.{e}.down_proj"))
            out = out.index_add(0, tok, w[tok, kk].unsqueeze(1) * y)
        if c.Fs:
            ys = F.linear(F.silu(F.linear(x, g("shared_expert.gate_proj"))) * F.linear(x, g("shared_expert.up_proj")),
                          g("shared_expert.down_proj"))
            out = out + torch.sigmoid(F.linear(x, g("shared_expert_gate"))) * ys
        count = torch.stack([(sel == e).sum() for e in range(E)]).float()
        aux = E * ((count / (N * K)) * probs.mean(0)).sum()
        z = (torch.logsumexp(logits, -1) ** 2).mean()
        return out, aux, z, dropped

    def forward(self, idx, targets):
        c = self.cfg
        B, T = idx.shape
        cos, sin = rope_cos_sin(T, c.hd, c.theta)
        x = F.embedding(idx, self.w("model.embed_tokens.weight"))
        extra, auxes = 0.0, []
        self.dropped = 0
        for i in range(c.L):
            g = lambda s: self.w(f"model.layers.{i}.{s}")
            b = lambda s: g(f"self_attn.{s}.bias") if c.bias else None
            h = rms_norm(x, g("input_layernorm.weight"), c.eps)
            q, k = F.linear(h, g("self_attn.q_proj.weight"), b("q_proj")), F.linear(h, g("self_attn.k_proj.weight"), b("k_proj"))
            if c.qk_norm:  # OLMoE: over the whole projections, before RoPE
                q, k = rms_norm(q, g("self_attn.q_norm.weight"), c.eps), rms_norm(k, g("self_attn.k_norm.weight"), c.eps)
            q = q.view(B, T, c.H, c.hd).transpose(1, 2)
            k = k.view(B, T, c.KV, c.hd).transpose(1, 2)
            v = F.linear(h, g("self_attn.v_proj.weight"), b("v_proj")).view(B, T, c.KV, c.hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            y = attention_gqa(q, k, v).transpose(1, 2).reshape(B, T, c.H * c.hd)
            x = x + F.linear(y, g("self_attn.o_proj.weight"))
            h = rms_norm(x, g("post_attention_layernorm.weight"), c.eps)
            m, aux, z, dropped = self.moe(h.reshape(B * T, c.C), i)
            x = x + m.view(B, T, c.C)
            extra = extra + self.aux_coef * aux + self.z_coef * z
            auxes.append(float(aux))
            self.dropped += dropped
        x = rms_norm(x, self.w("model.norm.weight"), c.eps)
        lg = F.linear(x, self.w("model.embed_tokens.weight" if c.tie else "lm_head.weight"))
        self.last_logits = lg
        self.aux = sum(auxes) / len(auxes)
        return F.cross_entropy(lg.reshape(-1, c.V), targets.reshape(-1)) + extra


def load(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = Cfg(json.load(f))
    return MoeLlama(cfg, read_safetensors(os.path.join(d, "model.safetensors")))


def cmd_init(a):
    mix, olmoe = a.type == "mixtral", a.type == "olmoe"
    if (mix or olmoe) and a.shared_ffn:
        raise SystemExit(f"--shared-ffn: {a.type} has no shared expert (use --type qwen2_moe)")
    arch = {"mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM", "olmoe": "OlmoeForCausalLM"}[a.type]
    j = {"architectures": [arch], "model_type": a.type,
         "hidden_act": "silu", "hidden_size": a.dim, "num_attention_heads": a.heads,
         "num_key_value_heads": a.kv_heads or a.heads, "head_dim": a.dim // a.heads, "num_hidden_layers": a.layers,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None, "num_experts_per_tok": a.top_k,
         "tie_word_embeddings": False, "vocab_size": a.vocab, "max_position_embeddings": a.max_pos,
         "torch_dtype": "float32"}
    if mix:
        j.update({"num_local_experts": a.experts, "intermediate_size": a.moe_ffn})
    elif olmoe:  # OlmoeConfig's keys: intermediate_size is the experts' width, head_dim is hidden_size / heads
        del j["head_dim"]
        j.update({"num_experts": a.experts, "intermediate_size": a.moe_ffn, "norm_topk_prob": bool(a.norm_topk),
                  "attention_bias": False, "clip_qkv": None})
    else:
        j.update({"num_experts": a.experts, "moe_intermediate_size": a.moe_ffn, "intermediate_size": a.moe_ffn,
                  "norm_topk_prob": bool(a.norm_topk), "shared_expert_intermediate_size": a.shared_ffn,
                  "decoder_sparse_step": 1, "mlp_only_layers": []})
    cfg = Cfg(j)
    gen = torch.Generator().manual_seed(a.seed)
    tensors = []
    for ours, hf, shape in specs(cfg):
        r = torch.randn(shape, generator=gen, dtype=torch.float32)
        # a wider router spreads the routing over the experts
        # a wide shared-expert gate spreads its sigmoid over (0, 1)
        t = 1.0 + 0.1 * r if ours.endswith("norm.weight") else (
            0.5 * r if ours.endswith(("mlp.gate.weight", "shared_expert_gate.weight")) else 0.02 * r)
        tensors.append((hf, t))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(j, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)


def cmd_train(a):
    model = load(a.model)
    model.aux_coef, model.z_coef, model.capacity = a.aux_coef, a.z_coef, a.capacity_factor
    tokens = read_shard(a.data)
    params = model.params()
    decay = [p for p in params if p.dim() == 2]
    nodecay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    B, T = a.batch, a.seq_len
    nb = (len(tokens) - 1) // (B * T)
    losses, norms, auxes, drops = [], [], [], []
    for step in range(a.steps):
        start = (step % nb) * B * T
        buf = torch.tensor(tokens[start:start + B * T + 1])
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        if step == 0 and a.out_grads:
            parts = []
            for (n, _, _), p in zip(model.names, params):
                gr = p.grad if p.grad is not None else torch.zeros_like(p)
                if n in ("model.embed_tokens.weight", "lm_head.weight") and a.grad_vocab_rows > gr.shape[0]:
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
        auxes.append(model.aux)
        drops.append(model.dropped)
    with open(a.out_json, "w") as f:
        json.dump({"losses": losses, "grad_norms": norms, "aux": auxes, "dropped": drops}, f)


@torch.no_grad()
def cmd_generate(a):
    """Greedy decoding recomputing the full forward per token (no cache); prints the new ids."""
    model = load(a.model)
    seq = [int(t) for t in a.prompt_ids.split(",")]
    out = []
    for _ in range(a.tokens):
        idx = torch.tensor([seq])
        model(idx, idx)  # the logits are kept by the hook below
        t = int(model.last_logits[0, -1].argmax())
        seq.append(t)
        out.append(t)
    print(",".join(map(str, out)))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("init")
    p.add_argument("--out", required=True)
    p.add_argument("--type", default="mixtral", choices=["mixtral", "qwen2_moe", "olmoe"])
    for k, d in [("layers", 2), ("dim", 64), ("heads", 4), ("kv_heads", 0), ("experts", 4), ("top_k", 2),
                 ("moe_ffn", 32), ("vocab", 256), ("max_pos", 64), ("norm_topk", 0), ("shared_ffn", 0), ("seed", 1337)]:
        p.add_argument("--" + k.replace("_", "-"), type=int, default=d)
    p = sub.add_parser("train")
    for k in ["model", "data", "out_json"]:
        p.add_argument("--" + k.replace("_", "-"), required=True)
    p.add_argument("--out-grads", default=None)
    for k, t, d in [("seq_len", int, 32), ("batch", int, 4), ("steps", int, 10), ("lr", float, 1e-3),
                    ("warmup", int, 0), ("min_lr", float, 0.0), ("weight_decay", float, 0.1),
                    ("beta1", float, 0.9), ("beta2", float, 0.95), ("eps", float, 1e-8),
                    ("grad_clip", float, 1.0), ("grad_vocab_rows", int, 0), ("aux_coef", float, 0.0),
                    ("z_coef", float, 0.0), ("capacity_factor", float, 0.0)]:
        p.add_argument("--" + k.replace("_", "-"), type=t, default=d)
    p.add_argument("--lr-schedule", default="constant", choices=["constant", "cosine"])
    p = sub.add_parser("generate")
    p.add_argument("--model", required=True)
    p.add_argument("--prompt-ids", required=True)
    p.add_argument("--tokens", type=int, default=16)
    a = ap.parse_args()
    torch.set_num_threads(1)
    {"init": cmd_init, "train": cmd_train, "generate": cmd_generate}[a.cmd](a)


if __name__ == "__main__":
    main()
