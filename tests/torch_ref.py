#!/usr/bin/python3
"""PyTorch reference GPT-2 for the parity test (test-only; never a runtime
dependency). Reads initial weights from a Hugging Face-layout safetensors
file written by `meshtrain export`, the token shard, and runs the same
batches (sequential data order) with the same optimizer, clipping and LR
schedule as `meshtrain train`. Writes a JSON with the per-step losses and a
raw fp32 file with the first step's gradients in meshtrain's layout order
(units: wte (padded), wpe, per block ln_1.w/b, c_attn.w/b, c_proj.w/b,
ln_2.w/b, c_fc.w/b, mlp.c_proj.w/b, then ln_f.w/b; linear weights [out,in]).
With --lora DIR (a peft adapter directory: adapter_model.safetensors and
adapter_config.json) the base is frozen and each target linear becomes
W x + b + s B A x (plain PyTorch, no peft): only the adapters are trained
and their gradients dumped, per block in meshtrain's order (targets in
c_attn, attn.c_proj, c_fc, mlp.c_proj order, A then B). With --ia3 DIR
likewise IA3: a target's output (W x + b) * l, or for a feedforward module
W (x * l) + b."""
import argparse, json, math, struct
import numpy as np
import torch
import torch.nn.functional as F

def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[base + a:base + b], dtype=np.float32).reshape(info["shape"])
        out[name] = torch.tensor(arr.copy(), dtype=torch.float32)
    return out

def read_shard(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(256 * 4), dtype=np.int32)
        assert header[0] == 20240520 and header[1] == 1
        return np.frombuffer(f.read(), dtype=np.uint16)[: header[2]].astype(np.int64)

def read_shard_mask(path, docs=False):
    """A token shard's ids and, for meshtrain's extended shards (versions
    101 / 107, data/shard.h), whether each token is a counted target (None
    for a plain shard); with docs also whether each token starts a
    document (None for a plain shard)."""
    with open(path, "rb") as f:
        h = np.frombuffer(f.read(256 * 4), dtype=np.int32)
        n, wide, ext = int(h[2]), h[1] in (7, 107), h[1] in (101, 107)
        assert h[1] in (1, 7, 101, 107), f"{path}: shard version {h[1]}"
        toks = np.frombuffer(f.read((4 if wide else 2) * n), dtype=np.uint32 if wide else np.uint16).astype(np.int64)
        flags = np.frombuffer(f.read(n), dtype=np.uint8) if ext else None
    counted = (flags & 1).astype(bool) if ext else None
    if docs:
        return toks, counted, (flags & 2).astype(bool) if ext else None
    return toks, counted


def doc_layout(starts, B, T):
    """Packed samples: per row of a [B, T] batch (windows of T) the index
    where its document begins, and its position in the document."""
    ds = np.zeros((B, T), dtype=np.int64)
    for b in range(B):
        cur = 0
        for t in range(T):
            if starts[b * T + t]:
                cur = t
            ds[b, t] = cur
    ds = torch.tensor(ds)
    return ds, torch.arange(T)[None, :] - ds


def doc_mask(ds):
    """The block-diagonal causal mask [B, 1, T, T]: query i sees keys
    ds[i] <= j <= i."""
    T = ds.shape[1]
    j = torch.arange(T)[None, None, :]
    i = torch.arange(T)[None, :, None]
    return ((j <= i) & (j >= ds[:, :, None])).unsqueeze(1)


class GPT(torch.nn.Module):
    def __init__(self, w, L, H, V, Vp):
        super().__init__()
        self.L, self.H, self.V, self.Vp = L, H, V, Vp
        C = w["wte.weight"].shape[1]
        wte = torch.zeros(Vp, C)
        wte[:V] = w["wte.weight"]
        P = torch.nn.Parameter
        self.p = torch.nn.ParameterDict()
        self.p["wte"] = P(wte)
        self.p["wpe"] = P(w["wpe.weight"].clone())
        for l in range(L):
            for k in ["ln_1.weight", "ln_1.bias", "attn.c_attn.bias", "attn.c_proj.bias", "ln_2.weight",
                      "ln_2.bias", "mlp.c_fc.bias", "mlp.c_proj.bias"]:
                self.p[f"h{l}_{k}".replace(".", "_")] = P(w[f"h.{l}.{k}"].clone())
            for k in ["attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"]:
                # HF Conv1D stores [in, out]; we keep [out, in] like meshtrain
                self.p[f"h{l}_{k}".replace(".", "_")] = P(w[f"h.{l}.{k}"].t().contiguous())
        self.p["ln_f_weight"] = P(w["ln_f.weight"].clone())
        self.p["ln_f_bias"] = P(w["ln_f.bias"].clone())

    def order(self):
        names = ["wte", "wpe"]
        for l in range(self.L):
            for k in ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                      "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                      "mlp.c_proj.weight", "mlp.c_proj.bias"]:
                names.append(f"h{l}_{k}".replace(".", "_"))
        return names + ["ln_f_weight", "ln_f_bias"]

    lora = {}      # "h{l}_attn_c_attn" -> (A, B) parameters
    lora_scale = 0.0

    def add_lora(self, adapter, cfg):
        r, alpha = cfg["r"], cfg["lora_alpha"]
        self.lora_scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
        for q in self.p.values():
            q.requires_grad_(False)
        self.lora = {}
        self.lora_order = []
        for l in range(self.L):
            for mod in ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"]:
                key = f"base_model.model.transformer.h.{l}.{mod}"
                if key + ".lora_A.weight" not in adapter:
                    continue
                A = torch.nn.Parameter(adapter[key + ".lora_A.weight"].clone())
                B = torch.nn.Parameter(adapter[key + ".lora_B.weight"].clone())
                self.lora[f"h{l}_{mod}".replace(".", "_")] = (A, B)
                self.lora_order += [A, B]

    ia3 = {}       # "h{l}_mlp_c_proj" -> (vector, feedforward)

    def add_ia3(self, adapter, cfg):
        for q in self.p.values():
            q.requires_grad_(False)
        self.ia3, self.lora_order = {}, []
        for l in range(self.L):
            for mod in ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"]:
                key = f"base_model.model.transformer.h.{l}.{mod}.ia3_l"
                if key not in adapter:
                    continue
                v = torch.nn.Parameter(adapter[key].reshape(-1).clone())
                ff = adapter[key].shape[0] == 1
                self.ia3[f"h{l}_{mod}".replace(".", "_")] = (v, ff)
                self.lora_order.append(v)

    def linear(self, x, l, mod):
        v = self.ia3.get(f"h{l}_{mod}")
        if v is not None and v[1]:
            x = x * v[0]
        y = F.linear(x, self.p[f"h{l}_{mod}_weight"], self.p[f"h{l}_{mod}_bias"])
        if v is not None and not v[1]:
            y = y * v[0]
        ab = self.lora.get(f"h{l}_{mod}")
        if ab is not None:
            y = y + self.lora_scale * F.linear(F.linear(x, ab[0]), ab[1])
        return y

    def forward(self, idx, targets, docs=None):
        p = self.p
        B, T = idx.shape
        C = p["wpe"].shape[1]
        H = self.H
        if docs is None:
            x = p["wte"][idx] + p["wpe"][:T]
            mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        else:  # packed: positions restart at each document, attention stays inside it
            x = p["wte"][idx] + p["wpe"][docs[1]]
            mask = doc_mask(docs[0])
        for l in range(self.L):
            g = lambda k: p[f"h{l}_{k}"]
            h = F.layer_norm(x, (C,), g("ln_1_weight"), g("ln_1_bias"), 1e-5)
            qkv = self.linear(h, l, "attn_c_attn")
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, H, C // H).transpose(1, 2)
            k = k.view(B, T, H, C // H).transpose(1, 2)
            v = v.view(B, T, H, C // H).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.linear(y, l, "attn_c_proj")
            h = F.layer_norm(x, (C,), g("ln_2_weight"), g("ln_2_bias"), 1e-5)
            h = F.gelu(self.linear(h, l, "mlp_c_fc"), approximate="tanh")
            x = x + self.linear(h, l, "mlp_c_proj")
        x = F.layer_norm(x, (C,), p["ln_f_weight"], p["ln_f_bias"], 1e-5)
        logits = x @ p["wte"][: self.V].t()
        return F.cross_entropy(logits.view(-1, self.V), targets.view(-1), ignore_index=-1)

def lr_at(a, step):
    if a.warmup > 0 and step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    if a.lr_schedule == "constant":
        return a.lr
    span = a.steps - a.warmup
    if span <= 0 or step >= a.steps:
        return a.min_lr
    ratio = (step - a.warmup) / span
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)

def main():
    ap = argparse.ArgumentParser()
    for k in ["weights", "data", "out_json", "out_grads"]:
        ap.add_argument("--" + k.replace("_", "-"), required=True)
    for k, t, d in [("layers", int, 2), ("heads", int, 4), ("vocab", int, 256), ("seq_len", int, 32),
                    ("batch", int, 4), ("steps", int, 10), ("lr", float, 1e-3), ("warmup", int, 0),
                    ("min_lr", float, 0.0), ("weight_decay", float, 0.1), ("beta1", float, 0.9),
                    ("beta2", float, 0.95), ("eps", float, 1e-8), ("grad_clip", float, 1.0)]:
        ap.add_argument("--" + k.replace("_", "-"), type=t, default=d)
    ap.add_argument("--lr-schedule", default="constant")
    ap.add_argument("--optimizer", default="adamw", choices=["adamw", "adagrad"])
    ap.add_argument("--lr-decay", type=float, default=0.0)  # adagrad
    ap.add_argument("--initial-accumulator", type=float, default=0.0)  # adagrad
    ap.add_argument("--lora", default=None)
    ap.add_argument("--ia3", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    Vp = (a.vocab + 127) // 128 * 128
    model = GPT(read_safetensors(a.weights), a.layers, a.heads, a.vocab, Vp)
    tokens, counted, starts = read_shard_mask(a.data, docs=True)
    names = model.order()
    decay = [model.p[n] for n in names if model.p[n].dim() == 2]
    nodecay = [model.p[n] for n in names if model.p[n].dim() < 2]
    trained = [model.p[n] for n in names]
    if a.lora:
        model.add_lora(read_safetensors(a.lora + "/adapter_model.safetensors"),
                       json.load(open(a.lora + "/adapter_config.json")))
        trained = decay = model.lora_order  # adapters only, all 2-D: decayed as meshtrain decays 2-D tensors
        nodecay = []
    if a.ia3:
        model.add_ia3(read_safetensors(a.ia3 + "/adapter_model.safetensors"), json.load(open(a.ia3 + "/adapter_config.json")))
        trained = nodecay = model.lora_order  # vectors: not decayed, as meshtrain decays only 2-D tensors
        decay = []
    groups = ([{"params": decay, "weight_decay": a.weight_decay}] if decay else []) + ([{"params": nodecay, "weight_decay": 0.0}] if nodecay else [])
    if a.optimizer == "adagrad":
        opt = torch.optim.Adagrad(groups, lr=a.lr, lr_decay=a.lr_decay, eps=a.eps,
                                  initial_accumulator_value=a.initial_accumulator, foreach=False)
    else:
        opt = torch.optim.AdamW(groups,
                                lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    B, T = a.batch, a.seq_len
    nb = (len(tokens) - 1) // (B * T)
    losses, norms = [], []
    for step in range(a.steps):
        start = (step % nb) * B * T
        buf = torch.tensor(tokens[start:start + B * T + 1])
        x = buf[:-1].view(B, T)
        y = buf[1:].view(B, T).clone()
        if counted is not None:  # the loss mask: ignored targets, the mean over the counted ones
            y[~torch.tensor(counted[start + 1:start + B * T + 1]).view(B, T)] = -1
        opt.zero_grad(set_to_none=True)
        docs = doc_layout(starts[start:start + B * T], B, T) if starts is not None else None
        loss = model(x, y, docs)
        loss.backward()
        if step == 0:
            assert not (a.lora or a.ia3) or all(q.grad is None for q in model.p.values()), "a frozen base got gradients"
            flat = torch.cat([q.grad.reshape(-1) for q in trained]).numpy().astype(np.float32)
            flat.tofile(a.out_grads)
        if a.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(trained, a.grad_clip)
        else:
            norm = torch.sqrt(sum((q.grad ** 2).sum() for q in trained))
        for g in opt.param_groups:
            g["lr"] = lr_at(a, step)
        opt.step()
        losses.append(loss.item())
        norms.append(float(norm))
    with open(a.out_json, "w") as f:
        json.dump({"losses": losses, "grad_norms": norms}, f)

if __name__ == "__main__":
    main()
