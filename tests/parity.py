"""Test-only helpers of the PyTorch parity checks (check_torch_parity,
check_llama_parity, check_lora_parity, check_ia3): a peft adapter directory
writer and the loss and per-tensor gradient comparisons, each printing what
it compared and asserting its bound. numpy only."""
import json
import os
import struct

import numpy as np


def write_safetensors(path, tensors):
    """tensors: name -> array, stored as F32 in this order; the JSON header is
    padded with spaces to 8 bytes, as safetensors writes it."""
    header, off = {}, 0
    arrays = [np.ascontiguousarray(v, dtype=np.float32) for v in tensors.values()]
    for k, v in zip(tensors, arrays):
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + v.nbytes]}
        off += v.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(v.tobytes() for v in arrays))


def write_peft_adapter(directory, tensors, config):
    """A peft adapter directory: adapter_model.safetensors + adapter_config.json."""
    os.makedirs(directory)
    write_safetensors(os.path.join(directory, "adapter_model.safetensors"), tensors)
    with open(os.path.join(directory, "adapter_config.json"), "w") as f:
        json.dump(config, f)


def read_peft_adapter(directory):
    """A peft adapter directory's fp32 tensors (name -> tuple of floats) and its adapter_config.json."""
    b = open(os.path.join(directory, "adapter_model.safetensors"), "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    out = {}
    for k, v in h.items():
        assert v["dtype"] == "F32", (k, v["dtype"])
        s, e = v["data_offsets"]
        out[k] = struct.unpack(f"<{(e - s) // 4}f", b[8 + n + s:8 + n + e])
    return out, json.load(open(os.path.join(directory, "adapter_config.json")))


def compare_losses(mt_metrics, ref_json, steps, tol, step0_tol=None, label="losses"):
    """meshtrain's --metrics losses against the reference's "losses": the
    step-0 loss within step0_tol and every step within tol (relative)."""
    mt = [json.loads(line)["loss"] for line in open(mt_metrics) if '"loss"' in line]
    with open(ref_json) as f:
        ref = json.load(f)["losses"]
    assert len(mt) == len(ref) == steps, (label, len(mt), len(ref), steps)
    r0 = abs(mt[0] - ref[0]) / abs(ref[0])
    worst = max(abs(a - b) / abs(b) for a, b in zip(mt, ref))
    print(f"{label}: step-0 {mt[0]:.8f} vs torch {ref[0]:.8f} (rel {r0:.2e}); meshtrain {mt[0]:.7f} .. {mt[-1]:.7f}; "
          f"worst relative difference over {steps} steps {worst:.2e}")
    if step0_tol is not None:
        assert r0 <= step0_tol, f"{label}: step-0 loss differs by {r0:.2e} > {step0_tol}"
    assert worst <= tol, f"{label}: losses differ by {worst:.2e} > {tol}"
    return worst


def compare_grads(mt_bin, ref_bin, sizes, tol, label="gradients"):
    """Two fp32 gradient dumps cut into tensors by sizes [(name, elements)]:
    every tensor's max|diff| / max|ref| within tol. Both dumps must hold
    exactly these tensors (meshtrain dumps the trainable ones only)."""
    g1 = np.fromfile(mt_bin, dtype=np.float32).astype(np.float64)
    g2 = np.fromfile(ref_bin, dtype=np.float32).astype(np.float64)
    total = sum(n for _, n in sizes)
    assert g1.size == g2.size == total, (label, g1.size, g2.size, total)
    off, worst = 0, (0.0, "")
    for name, n in sizes:
        a, b = g1[off:off + n], g2[off:off + n]
        off += n
        worst = max(worst, (np.abs(a - b).max() / max(np.abs(b).max(), 1e-30), name))
    print(f"{label}: {len(sizes)} tensors, worst {worst[1]}: max|diff|/max|ref| = {worst[0]:.2e}")
    assert worst[0] <= tol, f"{label}: {worst[1]} differs by {worst[0]:.2e} > {tol}"
    return worst[0]
