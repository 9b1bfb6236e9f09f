#!/usr/bin/env bash
# meshtrain quantize writes a Hugging Face directory in bitsandbytes' layout.
# For a GPT-2 and a Llama model, every quantized matrix's stored bytes --
# NF4 packed codes, absmax codes, nested absmax, quant_map, nested_quant_map,
# the quant_state JSON (shape, offset), and int8 codes with SCB -- equal the
# PyTorch re-implementation of bitsandbytes' quantizer (tests/quant_ref.py)
# applied to the fp32 weights of a plain export, byte for byte; the other
# tensors equal the plain export; config.json carries the quantization_config.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus text
$M train --train $W/text_train.bin --layers 2 --dim 128 --heads 4 --seq-len 32 --steps 0 --ckpt-dir $W/gpt2 --log-every 0 >/dev/null
$M train --train $W/text_train.bin --family llama --layers 2 --dim 128 --heads 4 --kv-heads 2 --seq-len 32 --steps 0 \
    --ckpt-dir $W/llama --log-every 0 >/dev/null
for m in gpt2 llama; do
    $M export --ckpt $W/$m --format hf --out $W/${m}_hf >/dev/null
    $M quantize --ckpt $W/$m --format nf4 --double-quant --out $W/${m}_nf4dq >/dev/null
    $M quantize --ckpt $W/$m --format nf4 --out $W/${m}_nf4 >/dev/null
    $M quantize --ckpt $W/$m --format int8 --out $W/${m}_int8 >/dev/null
done
/usr/bin/python3 - $W <<'PY'
import json, struct, sys
import numpy as np
import torch
sys.path.insert(0, "tests")
import quant_ref as Q

def load(path):
    d = open(path, "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        dt = {"F32": np.float32, "U8": np.uint8, "I8": np.int8}[v["dtype"]]
        out[k] = np.frombuffer(d[8 + n + a:8 + n + b], dtype=dt).reshape(v["shape"])
    return out

w = sys.argv[1]
for m in ["gpt2", "llama"]:
    ref = load(f"{w}/{m}_hf/model.safetensors")
    conv1d = m == "gpt2"
    for q in ["nf4dq", "nf4", "int8"]:
        got = load(f"{w}/{m}_{q}/model.safetensors")
        cfg = json.load(open(f"{w}/{m}_{q}/config.json"))["quantization_config"]
        assert cfg["quant_method"] == "bitsandbytes" and cfg["load_in_4bit" if q != "int8" else "load_in_8bit"], cfg
        nq = nplain = 0
        for k, x in ref.items():
            quantized = (".h." in "." + k or ".layers." in k) and x.ndim == 2
            if not quantized:
                assert np.array_equal(got[k], x), k
                nplain += 1
                continue
            mod = k[:-len(".weight")]
            wt = torch.tensor(x.T.copy() if conv1d else x.copy())  # [out, in], as transformers' bnb layers hold it
            flat = wt.reshape(-1)
            if q == "int8":
                codes, scb = Q.quantize_int8(wt)
                assert np.array_equal(got[k], codes.numpy()), k
                assert np.array_equal(got[mod + ".SCB"], scb.numpy()), k
                assert got[mod + ".weight_format"].tolist() == 0
            else:
                packed, absmax = Q.quantize_nf4(flat)
                assert np.array_equal(got[k].reshape(-1), packed.numpy()), k
                assert got[k].shape == ((flat.numel() + 1) // 2, 1)
                assert np.array_equal(got[k + ".quant_map"], Q.NF4.numpy())
                state = json.loads(bytes(got[k + ".quant_state.bitsandbytes__nf4"]).decode())
                assert state["quant_type"] == "nf4" and state["blocksize"] == 64 and state["shape"] == list(wt.shape), state
                if q == "nf4dq":
                    acode, nested, offset = Q.double_quant(absmax)
                    assert np.array_equal(got[k + ".absmax"], acode.numpy()), k
                    assert np.array_equal(got[k + ".nested_absmax"], nested.numpy()), k
                    assert np.array_equal(got[k + ".nested_quant_map"], Q.DYN.numpy())
                    assert np.float32(state["nested_offset"]) == offset.numpy() and state["nested_blocksize"] == 256, state
                else:
                    assert np.array_equal(got[k + ".absmax"], absmax.numpy()), k
                    assert "nested_offset" not in state
            nq += 1
        print(f"{m} {q:5s}: {nq} matrices byte-identical to the bitsandbytes reference quantizer, {nplain} fp32 tensors as exported")
PY
