#!/usr/bin/python3
"""PyTorch reference Llama for the Llama parity tests (test-only; never a
runtime dependency). Plain torch (Debian's python3-torch, CPU, fp32), no
transformers: the model follows transformers' LlamaForCausalLM /
Qwen2ForCausalLM semantics:
  RMSNorm in fp32, x * rsqrt(mean(x^2) + eps) * w;
  rotary embeddings in the half-split ("rotate_half") convention with
  inv_freq = 1 / theta^(arange(0, hd, 2) / hd) in fp32, optionally rescaled
  as transformers' llama3, linear, dynamic or yarn rope types
  (modeling_rope_utils), and cos/sin of fp32 position * inv_freq, times
  yarn's attention factor;
  grouped-query attention (query head h reads kv head h // (H / KV)),
  causal softmax with scale 1/sqrt(hd); SwiGLU MLP down(silu(gate(x)) * up(x));
  final norm; lm_head, or the embedding when tied; mean cross-entropy over
  all B*T targets.

Subcommands:
  init --out DIR --layers L --dim C --heads H --kv-heads KV --ffn F --vocab V
       --max-pos T --rope-theta TH --norm-eps E --tie 0|1 [--qkv-bias 0|1]
       [--head-dim HD] [--rope-scaling llama3 --rope-factor 8 --rope-low 1
       --rope-high 4 --rope-orig 32] [--rope-json '{"rope_type": "yarn", ...}'] --seed S
      writes DIR/config.json and DIR/model.safetensors (fp32) with random
      weights: matrices N(0, 0.02), norm weights 1 + 0.1 N(0, 1), q/k/v
      biases N(0, 0.02), drawn from torch.Generator().manual_seed(S) in the
      gradient-dump order below. --qkv-bias 1 writes the Qwen2 form
      (Qwen2ForCausalLM, model_type qwen2: q/k/v biases, none on o_proj).
  train --model DIR --data SHARD --steps N --batch B --seq-len T --lr LR
        [--warmup W] [--lr-schedule constant|cosine] [--min-lr M]
        [--grad-clip G] [--weight-decay WD] [--beta1 B1] [--beta2 B2]
        [--eps EPS] --out-json F --out-grads G [--grad-vocab-rows R]
        [--grad-order layout|hf]
      trains as `meshtrain train --data-order sequential` does (the batches,
      AdamW, clipping and LR schedule of tests/torch_ref.py, whose shard
      reader and lr_at are used here): weight decay on the 2-D tensors only
      (embedding, projections, lm_head), none on norms and biases. Writes
      {"losses": [...], "grad_norms": [...]} (norm before clipping) to F and
      the first step's gradients, before clipping, as raw fp32 to G.
  logits --model DIR --tokens t1,t2,...
      prints the full forward's argmax at every position, comma-separated.
  generate --model DIR --prompt-ids 1,2,3 [--tokens 64]
      greedy decoding, recomputing the full forward for every new token (no
      cache); prints the generated ids (without the prompt), comma-separated.
      Ties go to the lowest id (torch.argmax).

Gradient dump order (every tensor of the HF directory once, row-major,
HF shapes [out, in]); the default --grad-order layout is meshtrain's layout
and --dump-grads order (models/llama/layout.c):
  model.embed_tokens.weight [V, C]
  per layer i: model.layers.i.input_layernorm.weight [C],
    self_attn.q_proj.weight [H*hd, C], self_attn.k_proj.weight [KV*hd, C],
    self_attn.v_proj.weight [KV*hd, C],
    (with q/k/v biases: self_attn.q_proj.bias [H*hd], k_proj.bias [KV*hd],
    v_proj.bias [KV*hd]),
    self_attn.o_proj.weight [C, H*hd], (self_attn.o_proj.bias [C], only if
    the file has it: a llama config with attention_bias true),
    post_attention_layernorm.weight [C], mlp.gate_proj.weight [F, C],
    mlp.up_proj.weight [F, C], mlp.down_proj.weight [C, F]
  model.norm.weight [C]
  lm_head.weight [V, C] (untied only; tied, its gradient is in the embedding's)
--grad-order hf puts each bias right after its weight (q.w, q.b, k.w, k.b,
v.w, v.b, o.w); the two orders differ only with biases. The safetensors file
of `init` and its random draws follow the layout order.
--grad-vocab-rows R (>= V) writes the embedding's and lm_head's gradients
with R rows, zero past V (meshtrain's padded vocabulary rows).
"""
import argparse, json, math, os, struct, sys
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ref import doc_layout, doc_mask, lr_at, read_shard_mask  # noqa: E402  (the GPT-2 parity test's data order and schedule)

BIAS_OF = {"q_proj": True, "k_proj": True, "v_proj": True, "o_proj": False}


# ---------------------------------------------------------------- config ---

class Cfg:
    """The model hyperparameters as transformers reads them from config.json."""

    def __init__(self, j):
        self.model_type = j.get("model_type", "llama")
        self.C = j["hidden_size"]
        self.F = j["intermediate_size"]
        self.H = j["num_attention_heads"]
        self.KV = j.get("num_key_value_heads") or self.H
        self.L = j["num_hidden_layers"]
        self.V = j["vocab_size"]
        self.hd = j.get("head_dim") or self.C // self.H
        self.eps = float(j.get("rms_norm_eps", 1e-6))
        self.theta = float(j.get("rope_theta", 10000.0))
        self.tie = bool(j.get("tie_word_embeddings", False))
        self.max_pos = j.get("max_position_embeddings", 2048)
        rs = j.get("rope_scaling")
        self.rope = None
        if rs:
            rt = rs.get("rope_type", rs.get("type"))
            if rt not in ("llama3", "linear", "dynamic", "yarn", "default"):
                raise SystemExit(f"rope_scaling type {rt!r} is not supported (llama3, linear, dynamic, yarn)")
            if rt == "llama3":
                self.rope = dict(type=rt, factor=float(rs["factor"]), low=float(rs["low_freq_factor"]),
                                 high=float(rs["high_freq_factor"]),
                                 orig=int(rs["original_max_position_embeddings"]))
            elif rt != "default":
                self.rope = dict(rs, type=rt, max_pos=self.max_pos)
        if j.get("hidden_act", "silu") != "silu":
            raise SystemExit("hidden_act must be silu")
        if j.get("mlp_bias", False):
            raise SystemExit("mlp_bias is not supported")
        assert self.H % self.KV == 0, "num_key_value_heads must divide num_attention_heads"
        assert self.hd % 2 == 0, "head_dim must be even"


def tensor_specs(cfg, qkv_bias, o_bias=False, order="layout"):
    """(name, shape) of every tensor of the HF directory in the dump order:
    "layout" (meshtrain's: q/k/v weights, then q/k/v biases) or "hf" (each
    projection's weight then its bias)."""
    C, F_, hd, V = cfg.C, cfg.F, cfg.hd, cfg.V
    QW, KW = cfg.H * hd, cfg.KV * hd
    out = [("model.embed_tokens.weight", [V, C])]
    for i in range(cfg.L):
        p = f"model.layers.{i}."
        out.append((p + "input_layernorm.weight", [C]))
        projs = [("q_proj", QW, C), ("k_proj", KW, C), ("v_proj", KW, C), ("o_proj", C, QW)]
        biases = [(p + f"self_attn.{proj}.bias", [rows]) for proj, rows, _ in projs
                  if (qkv_bias and BIAS_OF[proj]) or (o_bias and proj == "o_proj")]
        for proj, rows, cols in projs:
            out.append((p + f"self_attn.{proj}.weight", [rows, cols]))
            if order == "hf" or proj == "o_proj":
                out += [bt for bt in biases if f".{proj}." in bt[0]]
            elif proj == "v_proj":
                out += [bt for bt in biases if ".o_proj." not in bt[0]]
        out.append((p + "post_attention_layernorm.weight", [C]))
        out += [(p + "mlp.gate_proj.weight", [F_, C]), (p + "mlp.up_proj.weight", [F_, C]),
                (p + "mlp.down_proj.weight", [C, F_])]
    out.append(("model.norm.weight", [C]))
    if not cfg.tie:
        out.append(("lm_head.weight", [V, C]))
    return out


# ----------------------------------------------------------- safetensors ---

def write_safetensors(path, tensors):
    """tensors: list of (name, float32 tensor), stored in that order."""
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, t in tensors:
        b = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: {name} is {info['dtype']}; only F32 is read")
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[8 + n + a:8 + n + b], dtype="<f4").reshape(info["shape"])
        out[name] = torch.tensor(arr.copy(), dtype=torch.float32)
    return out


# ----------------------------------------------------------------- model ---

def rope_inv_freq(hd, theta, rope=None, seq_len=None):
    """transformers' _compute_default_rope_parameters, then (rope) its
    _compute_llama3_parameters, _compute_linear_scaling_rope_parameters,
    _compute_dynamic_ntk_parameters (as its dynamic_rope_update calls it in
    the forward: seq_len = max(position_ids) + 1 as a tensor, so the new base
    is tensor arithmetic in fp32) or _compute_yarn_parameters, in fp32.
    Returns (inv_freq, attention_factor)."""
    default = lambda base: 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    kind = rope["type"] if rope else None
    if kind == "dynamic":
        mp, factor = rope["max_pos"], float(rope["factor"])
        if seq_len is None or seq_len <= mp:  # up to the original context: the plain frequencies
            return default(theta), 1.0
        sl = torch.tensor(seq_len, dtype=torch.int64)  # torch.max(position_ids) + 1
        base = theta * ((factor * sl / mp) - (factor - 1)) ** (hd / (hd - 2))
        return default(base), 1.0
    if kind == "yarn":
        factor = float(rope["factor"])
        orig = rope.get("original_max_position_embeddings") or rope["max_pos"]
        attention_factor = rope.get("attention_factor")
        mscale, mscale_all_dim = rope.get("mscale"), rope.get("mscale_all_dim")

        def get_mscale(scale, m=1):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if attention_factor is None:
            if mscale and mscale_all_dim:
                attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
            else:
                attention_factor = get_mscale(factor)
        beta_fast = rope.get("beta_fast") or 32
        beta_slow = rope.get("beta_slow") or 1

        def correction_dim(rot):
            return (hd * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(theta))

        low, high = correction_dim(beta_fast), correction_dim(beta_slow)
        if rope.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, hd - 1)
        if low == high:
            high += 0.001
        pos_freqs = theta ** (torch.arange(0, hd, 2).float() / hd)
        extrapolation = 1.0 / pos_freqs
        interpolation = 1.0 / (factor * pos_freqs)
        ramp = torch.clamp((torch.arange(hd // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        keep = 1 - ramp
        return interpolation * (1 - keep) + extrapolation * keep, attention_factor
    inv_freq = default(theta)
    if kind == "linear":
        return inv_freq / float(rope["factor"]), 1.0
    if kind is None:
        return inv_freq, 1.0
    factor, low, high, old = rope["factor"], rope["low"], rope["high"], rope["orig"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    inv = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv / factor + smooth * inv
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, inv), 1.0


def rope_cos_sin(T, hd, theta, rope=None):
    inv, attention_factor = rope_inv_freq(hd, theta, rope, seq_len=T)
    freqs = torch.arange(T, dtype=torch.int64).float()[:, None] * inv[None, :]  # [T, hd/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * attention_factor, emb.sin() * attention_factor


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rms_norm(x, w, eps):
    # transformers upcasts 16-bit inputs to fp32; this model runs in fp32 (fp64 in the self-check)
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def attention_gqa(q, k, v, mask=None):
    """q [B,H,T,hd], k/v [B,KV,T,hd]: query head h attends with kv head
    h // (H/KV) (grouped views, no copies); causal (or mask [B,1,T,T]: the
    block-diagonal one of packed documents); scale 1/sqrt(hd)."""
    B, H, T, hd = q.shape
    KV = k.shape[1]
    qg = q.view(B, KV, H // KV, T, hd)
    att = (qg @ k.unsqueeze(2).transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    mask = torch.ones(T, T, dtype=torch.bool).tril() if mask is None else mask.unsqueeze(1)
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return (att @ v.unsqueeze(2)).view(B, H, T, hd)


class Llama(torch.nn.Module):
    def __init__(self, cfg, weights):
        super().__init__()
        self.cfg = cfg
        self.qkv_bias = "model.layers.0.self_attn.q_proj.bias" in weights
        self.o_bias = "model.layers.0.self_attn.o_proj.bias" in weights
        if cfg.model_type == "qwen2" and not self.qkv_bias:
            raise SystemExit("qwen2 model without q/k/v biases")
        self.names = [n for n, _ in tensor_specs(cfg, self.qkv_bias, self.o_bias)]
        extra = set(weights) - set(self.names)
        if cfg.tie:
            extra.discard("lm_head.weight")  # transformers ignores a stored copy when tied
        missing = set(self.names) - set(weights)
        if missing or extra:
            raise SystemExit(f"tensors missing {sorted(missing)} / unexpected {sorted(extra)}")
        self.p = torch.nn.ParameterDict()
        for n, shape in tensor_specs(cfg, self.qkv_bias, self.o_bias):
            assert list(weights[n].shape) == shape, (n, weights[n].shape, shape)
            self.p[n.replace(".", "/")] = torch.nn.Parameter(weights[n].clone())

    def w(self, n):
        return self.p[n.replace(".", "/")]

    def params(self):
        return [self.w(n) for n in self.names]

    lora = {}
    lora_scale = 0.0
    LORA_ORDER = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                  "mlp.up_proj", "mlp.down_proj"]  # meshtrain's declaration order (models/llama/layout.c)

    def add_lora(self, adapter, cfg):
        """Freezes the base; each module with a peft LoRA pair computes W x + b + s B A x."""
        r, alpha = cfg["r"], cfg["lora_alpha"]
        self.lora_scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
        for p in self.p.values():
            p.requires_grad_(False)
        self.lora, self.lora_params = {}, []
        for i in range(self.cfg.L):
            for mod in self.LORA_ORDER:
                key = f"base_model.model.model.layers.{i}.{mod}"
                if key + ".lora_A.weight" in adapter:
                    A = torch.nn.Parameter(adapter[key + ".lora_A.weight"].clone())
                    B = torch.nn.Parameter(adapter[key + ".lora_B.weight"].clone())
                    self.lora[f"{i}.{mod}"] = (A, B)
                    self.lora_params += [A, B]

    def lin(self, x, i, mod, bias=None):
        y = F.linear(x, self.w(f"model.layers.{i}.{mod}.weight"), bias)
        ab = self.lora.get(f"{i}.{mod}")
        if ab is not None:
            y = y + self.lora_scale * F.linear(F.linear(x, ab[0]), ab[1])
        return y

    def logits(self, idx, attention=attention_gqa, docs=None):
        c = self.cfg
        B, T = idx.shape
        cos, sin = rope_cos_sin(T, c.hd, c.theta, c.rope)
        mask = None
        if docs is not None:  # packed: positions restart at each document, attention stays inside it
            cos, sin = cos[docs[1]].unsqueeze(1), sin[docs[1]].unsqueeze(1)
            mask = doc_mask(docs[0])
        x = F.embedding(idx, self.w("model.embed_tokens.weight"))
        for i in range(c.L):
            g = lambda s: self.w(f"model.layers.{i}.{s}")
            b = lambda proj: (g(f"self_attn.{proj}.bias")
                              if (self.qkv_bias and BIAS_OF[proj]) or (self.o_bias and proj == "o_proj") else None)
            h = rms_norm(x, g("input_layernorm.weight"), c.eps)
            q = self.lin(h, i, "self_attn.q_proj", b("q_proj")).view(B, T, c.H, c.hd).transpose(1, 2)
            k = self.lin(h, i, "self_attn.k_proj", b("k_proj")).view(B, T, c.KV, c.hd).transpose(1, 2)
            v = self.lin(h, i, "self_attn.v_proj", b("v_proj")).view(B, T, c.KV, c.hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            y = (attention(q, k, v) if mask is None else attention(q, k, v, mask)).transpose(1, 2).reshape(B, T, c.H * c.hd)
            x = x + self.lin(y, i, "self_attn.o_proj", b("o_proj"))
            h = rms_norm(x, g("post_attention_layernorm.weight"), c.eps)
            x = x + self.lin(F.silu(self.lin(h, i, "mlp.gate_proj")) * self.lin(h, i, "mlp.up_proj"), i, "mlp.down_proj")
        x = rms_norm(x, self.w("model.norm.weight"), c.eps)
        head = self.w("model.embed_tokens.weight" if c.tie else "lm_head.weight")
        return F.linear(x, head)

    def forward(self, idx, targets, docs=None):
        lg = self.logits(idx, docs=docs)
        return F.cross_entropy(lg.reshape(-1, self.cfg.V), targets.reshape(-1))


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = Cfg(json.load(f))
    return Llama(cfg, read_safetensors(os.path.join(model_dir, "model.safetensors")))


# ------------------------------------------------------------ subcommands ---

def cmd_init(a):
    j = {"architectures": ["Qwen2ForCausalLM" if a.qkv_bias else "LlamaForCausalLM"],
         "model_type": "qwen2" if a.qkv_bias else "llama",
         "hidden_act": "silu", "hidden_size": a.dim, "intermediate_size": a.ffn,
         "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads or a.heads,
         "head_dim": a.head_dim or a.dim // a.heads, "num_hidden_layers": a.layers,
         "rms_norm_eps": a.norm_eps, "rope_theta": a.rope_theta, "rope_scaling": None}
    if a.rope_json:
        j["rope_scaling"] = json.loads(a.rope_json)
    elif a.rope_scaling == "llama3":
        j["rope_scaling"] = {"rope_type": "llama3", "factor": a.rope_factor, "low_freq_factor": a.rope_low,
                             "high_freq_factor": a.rope_high, "original_max_position_embeddings": a.rope_orig}
    elif a.rope_scaling != "none":
        raise SystemExit("--rope-scaling must be none or llama3")
    if a.qkv_bias:
        j["use_sliding_window"] = False  # Qwen2: q/k/v biases always, none on o_proj
    else:
        j["attention_bias"] = False
        j["mlp_bias"] = False
    j.update({"attention_dropout": 0.0, "tie_word_embeddings": bool(a.tie), "vocab_size": a.vocab,
              "max_position_embeddings": a.max_pos, "torch_dtype": "float32"})
    cfg = Cfg(j)
    g = torch.Generator().manual_seed(a.seed)
    tensors = []
    for name, shape in tensor_specs(cfg, bool(a.qkv_bias)):
        r = torch.randn(shape, generator=g, dtype=torch.float32)
        if name.endswith("norm.weight"):
            t = 1.0 + 0.1 * r
        else:  # matrices and biases
            t = 0.02 * r
        tensors.append((name, t))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(j, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)


def flat_grads(model, vocab_rows, order):
    parts = []
    for n, _ in tensor_specs(model.cfg, model.qkv_bias, model.o_bias, order):
        p = model.w(n)
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        if n in ("model.embed_tokens.weight", "lm_head.weight") and vocab_rows > g.shape[0]:
            g = torch.cat([g, torch.zeros(vocab_rows - g.shape[0], g.shape[1])])
        parts.append(g.reshape(-1))
    return torch.cat(parts).detach().numpy().astype("<f4")


def cmd_train(a):
    model = load(a.model)
    V = model.cfg.V
    tokens, counted, starts = read_shard_mask(a.data, docs=True)
    if tokens.size and tokens.max() >= V:
        raise SystemExit(f"token {tokens.max()} is outside the vocabulary of {V}")
    params = model.params()
    if a.lora:
        model.add_lora(read_safetensors(os.path.join(a.lora, "adapter_model.safetensors")),
                       json.load(open(os.path.join(a.lora, "adapter_config.json"))))
        params = model.lora_params
    decay = [p for p in params if p.dim() == 2]
    nodecay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": a.weight_decay}] + ([{"params": nodecay, "weight_decay": 0.0}] if nodecay else [])
    opt = torch.optim.AdamW(groups,
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    B, T = a.batch, a.seq_len
    nb = (len(tokens) - 1) // (B * T)
    if nb < 1:
        raise SystemExit("the shard has fewer than one batch of tokens")
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
        if step == 0 and a.out_grads and a.lora:
            assert all(p.grad is None for p in model.p.values()), "a frozen base got gradients"
            torch.cat([p.grad.reshape(-1) for p in params]).detach().numpy().astype("<f4").tofile(a.out_grads)
        elif step == 0 and a.out_grads:
            flat_grads(model, a.grad_vocab_rows, a.grad_order).tofile(a.out_grads)
        if a.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, a.grad_clip)
        else:
            norm = torch.sqrt(sum((p.grad ** 2).sum() for p in params))
        for grp in opt.param_groups:
            grp["lr"] = lr_at(a, step)
        opt.step()
        losses.append(loss.item())
        norms.append(float(norm))
    with open(a.out_json, "w") as f:
        json.dump({"losses": losses, "grad_norms": norms}, f)


def ids(s):
    return [int(t) for t in s.split(",") if t.strip()]


@torch.no_grad()
def cmd_logits(a):
    model = load(a.model)
    lg = model.logits(torch.tensor([ids(a.tokens)]))
    print(",".join(str(int(t)) for t in lg[0].argmax(dim=-1)))


@torch.no_grad()
def cmd_generate(a):
    model = load(a.model)
    seq = ids(a.prompt_ids)
    if not seq:
        raise SystemExit("--prompt-ids needs at least one id")
    out = []
    for _ in range(a.tokens):
        lg = model.logits(torch.tensor([seq]))
        t = int(lg[0, -1].argmax())
        seq.append(t)
        out.append(t)
    print(",".join(map(str, out)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("init")
    p.add_argument("--out", required=True)
    for k, t, d in [("layers", int, 2), ("dim", int, 64), ("heads", int, 4), ("kv_heads", int, 0),
                    ("head_dim", int, 0), ("ffn", int, 176), ("vocab", int, 256), ("max_pos", int, 64),
                    ("rope_theta", float, 10000.0), ("norm_eps", float, 1e-5), ("tie", int, 0),
                    ("qkv_bias", int, 0), ("rope_factor", float, 8.0), ("rope_low", float, 1.0),
                    ("rope_high", float, 4.0), ("rope_orig", int, 8192), ("seed", int, 1337)]:
        p.add_argument("--" + k.replace("_", "-"), type=t, default=d)
    p.add_argument("--rope-scaling", default="none")
    p.add_argument("--rope-json", default=None, help="config.json's rope_scaling object as given (any type)")
    p = sub.add_parser("train")
    for k in ["model", "data", "out_json"]:
        p.add_argument("--" + k.replace("_", "-"), required=True)
    p.add_argument("--out-grads", default=None)
    p.add_argument("--lora", default=None, help="a peft LoRA directory: train only its adapters on the frozen model")
    for k, t, d in [("seq_len", int, 32), ("batch", int, 4), ("steps", int, 10), ("lr", float, 1e-3),
                    ("warmup", int, 0), ("min_lr", float, 0.0), ("weight_decay", float, 0.1),
                    ("beta1", float, 0.9), ("beta2", float, 0.95), ("eps", float, 1e-8),
                    ("grad_clip", float, 1.0), ("grad_vocab_rows", int, 0)]:
        p.add_argument("--" + k.replace("_", "-"), type=t, default=d)
    p.add_argument("--lr-schedule", default="constant", choices=["constant", "cosine"])
    p.add_argument("--grad-order", default="layout", choices=["layout", "hf"])
    p = sub.add_parser("logits")
    p.add_argument("--model", required=True)
    p.add_argument("--tokens", required=True)
    p = sub.add_parser("generate")
    p.add_argument("--model", required=True)
    p.add_argument("--prompt-ids", required=True)
    p.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    {"init": cmd_init, "train": cmd_train, "logits": cmd_logits, "generate": cmd_generate}[a.cmd](a)


if __name__ == "__main__":
    main()
