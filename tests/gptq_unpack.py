#!/usr/bin/python3
"""Reference unpacker of a Hugging Face GPTQ directory (AutoGPTQ's "gptq"
checkpoint format), written from the format's description, numpy only:
  <m>.qweight I32 [in/pack, out]: word [i, o] holds the codes of inputs
      i*pack .. i*pack+pack-1 of output o, the first in the lowest bits;
  <m>.qzeros I32 [groups, out/pack]: the zero points minus one, packed along
      the outputs the same way;
  <m>.scales F16 [groups, out]; <m>.g_idx I32 [in]: the group of each input;
  W[o, i] = scales[g_idx[i], o] * (q[i, o] - (qzeros[g_idx[i], o] + 1)).
usage: gptq_unpack.py GPTQ_DIR FP32_DIR
FP32_DIR: the same model as a plain HF directory (meshtrain's import of
GPTQ_DIR, exported again). Checks config.json's quantization_config, every
GPTQ tensor's dtype and shape, that every other tensor is byte for byte the
one in FP32_DIR, and that each unpacked layer equals FP32_DIR's weight (GPT-2
Conv1D weights transposed) bit for bit. Prints the layers and codes checked."""
import json
import struct
import sys
import numpy as np

DT = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "U8": np.uint8, "I8": np.int8}


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    hdr.pop("__metadata__", None)
    out = {}
    for k, v in hdr.items():
        s, e = v["data_offsets"]
        out[k] = (v["dtype"], np.frombuffer(b[8 + n + s:8 + n + e], dtype=DT[v["dtype"]]).reshape(v["shape"]))
    return out


def main(gdir, fdir):
    cfg = json.load(open(f"{gdir}/config.json"))
    qc = cfg["quantization_config"]
    assert qc["quant_method"] == "gptq" and qc["checkpoint_format"] == "gptq", qc
    bits, gs, sym = qc["bits"], qc["group_size"], qc["sym"]
    assert bits in (4, 8) and isinstance(qc["desc_act"], bool) and isinstance(sym, bool), qc
    pack, mask = 32 // bits, (1 << bits) - 1
    g = read_st(f"{gdir}/model.safetensors")
    f = read_st(f"{fdir}/model.safetensors")
    conv1d = cfg["model_type"] == "gpt2"
    layers = sorted(k[:-len(".qweight")] for k in g if k.endswith(".qweight"))
    assert layers, "no GPTQ layers"
    ncodes = 0
    for m in layers:
        (dq, qw), (dz, qz), (ds, sc), (dg, gi) = (g[m + s] for s in (".qweight", ".qzeros", ".scales", ".g_idx"))
        assert (dq, dz, ds, dg) == ("I32", "I32", "F16", "I32"), (m, dq, dz, ds, dg)
        inp, out = qw.shape[0] * pack, qw.shape[1]
        groups = sc.shape[0]
        assert qz.shape == (groups, out // pack) and sc.shape == (groups, out) and gi.shape == (inp,), m
        assert groups == inp // gs and gi.min() >= 0 and gi.max() < groups, m
        assert np.bincount(gi, minlength=groups).tolist() == [gs] * groups, f"{m}: g_idx groups not of {gs}"
        u = qw.view(np.uint32)
        q = np.stack([(u >> (bits * j)) & mask for j in range(pack)], axis=1).reshape(inp, out)  # [in, out]
        uz = qz.view(np.uint32)
        z = np.stack([(uz >> (bits * j)) & mask for j in range(pack)], axis=2).reshape(groups, out) + 1
        if sym:
            assert (z == (mask + 1) // 2).all(), f"{m}: a symmetric grid's zero points are {(mask + 1) // 2}"
        W = sc.astype(np.float32)[gi] * (q.astype(np.float32) - z[gi].astype(np.float32))  # [in, out]
        ref = f[m + ".weight"][1]
        got = W if conv1d else W.T  # Conv1D stores [in, out], nn.Linear [out, in]
        assert ref.shape == got.shape and np.array_equal(ref.view(np.uint32), got.astype(np.float32).view(np.uint32)), \
            f"{m}: unpacked weights differ from meshtrain's import (max |d| {np.abs(ref - got).max():.3g})"
        ncodes += q.size
    others = [k for k in g if not any(k.startswith(m + ".") and k[len(m):] in (".qweight", ".qzeros", ".scales", ".g_idx") for m in layers)]
    for k in others:
        assert g[k][0] == f[k][0] and g[k][1].tobytes() == f[k][1].tobytes(), f"{k} differs"
    print(f"GPTQ layout: {len(layers)} layers ({ncodes} {bits}-bit codes, groups of {gs}, desc_act {qc['desc_act']}) "
          f"unpacked equal meshtrain's import bit for bit; {len(others)} other tensors byte for byte")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
