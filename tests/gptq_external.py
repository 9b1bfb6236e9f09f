#!/usr/bin/python3
"""A GPTQ directory as other tools write it, from a template meshtrain wrote: the same model's
names, shapes and fp32 tensors, but every quantized layer with random codes and zero points
(numpy, seeded), fp16 scales in [0.005, 0.03), one group over all inputs (group_size -1, as
AutoGPTQ's per-channel quantization: g_idx all zeros), an asymmetric grid, and config.json's
quantization_config in
optimum's form (no checkpoint_format key: the gptq format by default; desc_act true, sym false,
extra keys meshtrain ignores). usage: gptq_external.py TEMPLATE_DIR OUT_DIR"""
import json
import os
import struct
import sys
import numpy as np

DT = {"F32": np.float32, "F16": np.float16, "I32": np.int32}


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    hdr.pop("__metadata__", None)
    return {k: (v["dtype"], np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                                          dtype=DT[v["dtype"]]).reshape(v["shape"])) for k, v in hdr.items()}


def write_st(path, tensors):
    hdr, off, blobs = {}, 0, []
    for k, (dt, a) in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        hdr[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main(tdir, odir):
    cfg = json.load(open(f"{tdir}/config.json"))
    bits = cfg["quantization_config"]["bits"]
    pack, rng = 32 // bits, np.random.default_rng(7)
    t = read_st(f"{tdir}/model.safetensors")
    out = {}
    for k, (dt, a) in t.items():
        if k.endswith(".qweight"):
            m, (inp, o) = k[:-len(".qweight")], (a.shape[0] * pack, a.shape[1])
            out[m + ".qweight"] = ("I32", rng.integers(-2**31, 2**31, size=a.shape, dtype=np.int64).astype(np.int32))
            zc = rng.integers(1, (1 << bits) - 1, size=(1, o), dtype=np.int64)  # zero points, stored minus one
            z = np.zeros((1, o // pack), dtype=np.uint32)
            for j in range(pack):
                z |= ((zc[:, j::pack] - 1).astype(np.uint32)) << np.uint32(bits * j)
            out[m + ".qzeros"] = ("I32", z.view(np.int32))
            out[m + ".scales"] = ("F16", rng.uniform(0.005, 0.03, size=(1, o)).astype(np.float16))
            out[m + ".g_idx"] = ("I32", np.zeros(inp, dtype=np.int32))
        elif not k.endswith((".qzeros", ".scales", ".g_idx")):
            out[k] = (dt, a)
    os.makedirs(odir, exist_ok=True)
    write_st(f"{odir}/model.safetensors", out)
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": bits, "group_size": -1, "desc_act": True,
                                  "sym": False, "damp_percent": 0.1, "true_sequential": True,
                                  "use_exllama": False, "tokenizer": None, "dataset": None}
    json.dump(cfg, open(f"{odir}/config.json", "w"), indent=2)
    print(f"wrote {odir}: {sum(k.endswith('.qweight') for k in out)} GPTQ layers at {bits} bits, one group each")


if __name__ == "__main__":
    main(*sys.argv[1:3])
