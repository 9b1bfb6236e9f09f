"""Edits a meshtrain checkpoint manifest the way an attacker who knows the
format would (tests/check_ckpt_integrity.sh): changes a field, then
recomputes the manifest's own checksum so that only the structural checks
can catch the edit. Also writes hostile llm.c and safetensors headers.

  ckpt_tamper.py reseal MANIFEST
  ckpt_tamper.py piece MANIFEST TENSOR INDEX FIELD VALUE   (then reseals)
  ckpt_tamper.py shape MANIFEST TENSOR D0,D1               (then reseals)
  ckpt_tamper.py config MANIFEST KEY VALUE                 the state's model config (then reseals)
  ckpt_tamper.py drop MANIFEST KEY                         removes a top-level key (then reseals): e.g.
                                                           run_config, as a checkpoint saved before it existed
  ckpt_tamper.py llmc OUT        a 1 KB llm.c file whose header claims ~51 G parameters
  ckpt_tamper.py safetensors OUT a 512 KB safetensors header naming 4000 layers
"""
import json, struct, sys

M64 = (1 << 64) - 1
PRIME, BASIS = 0x100000001b3, 0xcbf29ce484222325


def mix64(x):
    x ^= x >> 30; x = (x * 0xbf58476d1ce4e5b9) & M64
    x ^= x >> 27; x = (x * 0x94d049bb133111eb) & M64
    return x ^ (x >> 31)


def fnv1a64x4(b):
    """The checksum of src/ckpt/checkpoint.h, written from its description."""
    h = [BASIS ^ i for i in range(4)]
    n32 = len(b) // 32 * 32
    for o in range(0, n32, 32):
        w = struct.unpack_from("<4Q", b, o)
        for i in range(4):
            h[i] = ((h[i] ^ w[i]) * PRIME) & M64
    for c in b[n32:]:
        h[0] = ((h[0] ^ c) * PRIME) & M64
    r = mix64(len(b))
    for i in range(4):
        r = mix64(r ^ h[i])
    return r


KEY = ',"manifest_checksum":"'


def write_sealed(path, obj):
    obj.pop("manifest_checksum", None)
    body = json.dumps(obj, separators=(",", ":"))[:-1]  # without the closing brace
    text = body + KEY + "fnv1a64x4:%016x" % fnv1a64x4(body.encode()) + '"}\n'
    open(path, "w").write(text)


def tensor(m, name):
    return next(t for t in m["tensors"] if t["name"] == name)


def main():
    cmd = sys.argv[1]
    if cmd == "reseal":
        write_sealed(sys.argv[2], json.load(open(sys.argv[2])))
    elif cmd == "piece":
        path, name, idx, field, value = sys.argv[2:7]
        m = json.load(open(path))
        p = tensor(m, name)["pieces"][int(idx)]
        p[field] = int(value) if not value.startswith("+") else p[field] + int(value[1:])
        write_sealed(path, m)
    elif cmd == "shape":
        path, name, dims = sys.argv[2:5]
        m = json.load(open(path))
        tensor(m, name)["shape"] = [int(d) for d in dims.split(",")]
        write_sealed(path, m)
    elif cmd == "config":
        path, key, value = sys.argv[2:5]
        m = json.load(open(path))
        m["state"]["config"][key] = int(value)
        write_sealed(path, m)
    elif cmd == "drop":
        path, key = sys.argv[2:4]
        m = json.load(open(path))
        del m[key]
        write_sealed(path, m)
    elif cmd == "llmc":
        # maxT 1024, V 50257, L 48, heads 16, C 9216, Vp 50304: ~49 G parameters
        hdr = [20240326, 3, 1024, 50257, 48, 16, 9216, 50304] + [0] * 248
        open(sys.argv[2], "wb").write(struct.pack("<256i", *hdr))  # the 1 KB header and no data
    elif cmd == "safetensors":
        C = 8192
        hdr = {"wte.weight": {"dtype": "F32", "shape": [2, C], "data_offsets": [0, 8 * C]},
               "wpe.weight": {"dtype": "F32", "shape": [1, C], "data_offsets": [8 * C, 12 * C]}}
        for l in range(4000):  # empty tensors: names that claim 4000 layers
            hdr[f"h.{l}.ln_1.weight"] = {"dtype": "F32", "shape": [0], "data_offsets": [12 * C, 12 * C]}
        h = json.dumps(hdr).encode()
        h += b" " * ((512 << 10) - len(h))
        open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + bytes(12 * C))
    else:
        sys.exit(f"unknown command {cmd}")


main()
