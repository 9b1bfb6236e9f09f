"""Helpers of tests/check_gguf.sh (numpy only):

  close A B V TOL NAME [REL]  float32 logit files [n, V]: max |A - B| <= TOL
                              (REL: TOL * max(1, max |A|))
  nll LOGITS IDS V            mean negative log-likelihood of each next id (a line of IDS: a sequence)
  nll_within REF GOT TOL NAME two "nll" outputs: |GOT - REF| / REF <= TOL
  window SHARD START N        N ids of an llm.c token shard from START, one line
  ids DROP SHARD...           every id of the shards, concatenated, but the first DROP; one line
  tensors A.gguf B.gguf       every tensor of A has the bytes and type of B's
"""
import struct
import sys

import numpy as np


def logits(path, v):
    x = np.fromfile(path, dtype=np.float32)
    assert x.size % v == 0, f"{path}: {x.size} floats is not a multiple of {v}"
    return x.reshape(-1, v)


def shard(path):
    head = np.fromfile(path, dtype=np.int32, count=256)
    dt = np.uint16 if head[0] == 20240520 else np.uint32
    return np.fromfile(path, dtype=dt, offset=1024)[: head[2]].astype(np.int64)


def gguf_tensors(path):
    """name -> (type, bytes) of a GGUF v3 file."""
    with open(path, "rb") as f:
        buf = f.read()
    assert buf[:4] == b"GGUF", f"{path}: not GGUF"
    off = 8
    nt, nk = struct.unpack_from("<QQ", buf, off)
    off += 16
    fixed = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    align = 32

    def string(o):
        (n,) = struct.unpack_from("<Q", buf, o)
        return buf[o + 8 : o + 8 + n].decode(), o + 8 + n

    def skip(o, t):
        if t == 8:
            return string(o)[1]
        if t == 9:
            et, n = struct.unpack_from("<IQ", buf, o)
            o += 12
            if et in fixed:
                return o + n * fixed[et]
            for _ in range(n):
                o = skip(o, et)
            return o
        return o + fixed[t]

    for _ in range(nk):
        key, off = string(off)
        (t,) = struct.unpack_from("<I", buf, off)
        if key == "general.alignment":
            (align,) = struct.unpack_from("<I", buf, off + 4)
        off = skip(off + 4, t)
    info = []
    for _ in range(nt):
        name, off = string(off)
        (nd,) = struct.unpack_from("<I", buf, off)
        ne = struct.unpack_from("<" + "Q" * nd, buf, off + 4)
        t, o = struct.unpack_from("<IQ", buf, off + 4 + 8 * nd)
        off += 4 + 8 * nd + 12
        info.append((name, ne, t, o))
    base = (off + align - 1) // align * align
    per_block = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 12: (256, 144), 14: (256, 210)}
    out = {}
    for name, ne, t, o in info:
        n = int(np.prod(ne))
        bs, bb = per_block[t]
        out[name] = (t, ne, buf[base + o : base + o + n // bs * bb])
    return out


def main():
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "close":
        x, y = logits(a[0], int(a[2])), logits(a[1], int(a[2]))
        assert x.shape == y.shape, f"{a[4]}: shapes {x.shape} and {y.shape}"
        d, scale = float(np.abs(x - y).max()), float(np.abs(x).max())
        tol = float(a[3]) * (max(1.0, scale) if len(a) > 5 else 1.0)
        print(f"{a[4]}: max |logit diff| {d:.3g} over {x.shape[0]} positions x {x.shape[1]} (max |logit| "
              f"{scale:.3g}; bound {tol:.3g})")
        assert d <= tol, f"{a[4]}: {d:.3g} > {tol:.3g}"
    elif cmd == "nll":
        x = logits(a[0], int(a[2])).astype(np.float64)
        lines = [np.array([int(t) for t in l.split()]) for l in open(a[1]) if l.strip()]
        assert sum(map(len, lines)) == len(x), f"{a[0]}: {len(x)} positions for {sum(map(len, lines))} ids"
        nll, at = [], 0
        for ids in lines:  # each line a sequence: position i predicts id i + 1
            y = x[at : at + len(ids) - 1]
            lse = np.log(np.exp(y - y.max(1, keepdims=True)).sum(1)) + y.max(1)
            nll.extend(lse - y[np.arange(len(y)), ids[1:]])
            at += len(ids)
        print(f"{float(np.mean(nll)):.6f}")
    elif cmd == "nll_within":
        ref, got = float(a[0]), float(a[1])
        rel = abs(got - ref) / ref
        print(f"{a[3]}: mean NLL {got:.5f} vs f32 {ref:.5f} ({100 * rel:.3f}%; bound {100 * float(a[2]):.3g}%)")
        assert rel <= float(a[2]), f"{a[3]}: {rel:.3g} > {a[2]}"
    elif cmd == "window":
        t = shard(a[0])
        print(" ".join(str(i) for i in t[int(a[1]) : int(a[1]) + int(a[2])]))
    elif cmd == "ids":
        t = np.concatenate([shard(f) for f in a[1:]])
        print(" ".join(str(i) for i in t[int(a[0]) :]))
    elif cmd == "tensors":
        x, y = gguf_tensors(a[0]), gguf_tensors(a[1])
        assert sorted(x) == sorted(y), f"tensor names differ: {sorted(set(x) ^ set(y))}"
        for k in x:
            assert x[k][:2] == y[k][:2], f"{k}: type/shape {x[k][:2]} vs {y[k][:2]}"
            assert x[k][2] == y[k][2], f"{k}: the bytes differ"
        print(f"{len(x)} tensors byte-identical")
    else:
        raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
