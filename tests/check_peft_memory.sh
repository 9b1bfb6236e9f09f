#!/usr/bin/env bash
# The memory a LoRA run holds equals the formula, read from --report-json:
# trainable parameters, gradients and AdamW's two moments for the adapters
# only (16 r C per GPT-2 block with all-linear targets), the whole base in the
# frozen category at its storage precision -- fp32 (4 bytes), int8 (a byte
# per weight and an fp32 scale per row), NF4 (half a byte, an fp32 absmax per
# block of 64) and NF4 with double quantization (half a byte, a byte per
# block, an fp32 scale per 256 blocks and one offset per matrix: <= 4.13 bits
# per quantized weight) -- for one process and per rank of dp2 ZeRO-3.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus text
L=2; C=256; T=32; R=8
$M train --train $W/text_train.bin --layers $L --dim $C --heads 4 --seq-len $T --steps 0 --ckpt-dir $W/base --log-every 0 >/dev/null
RUN="--train $W/text_train.bin --init-from $W/base --batch 4 --steps 2 --log-every 0 --peft lora --lora-r $R --lora-targets all-linear"
for q in none int8 nf4 nf4dq; do
    case $q in none) f="";; int8) f="--quantize-base int8";; nf4) f="--quantize-base nf4";; nf4dq) f="--quantize-base nf4 --double-quant";; esac
    $M train $RUN $f --report-json $W/$q.json >/dev/null
done
mpirun -n 2 $M train $RUN --quantize-base nf4 --double-quant --dp 2 --zero 3 --report-json $W/z3.json >/dev/null
/usr/bin/python3 - $W $L $C $T $R <<'PY'
import json, math, sys
w, L, C, T, r = sys.argv[1], *map(int, sys.argv[2:])
V = 256
trainable = L * 16 * r * C                       # A and B of c_attn, attn.c_proj, c_fc, mlp.c_proj
mats = [(3 * C, C), (C, C), (4 * C, C), (C, 4 * C)] * L   # the quantized base matrices [out, in]
other = V * C + T * C + L * (4 * C + 3 * C + C + 4 * C + C) + 2 * C   # embeddings, norms, biases (fp32)
qparams = sum(o * i for o, i in mats)
def nf4(n, dq):
    nb = (n + 63) // 64
    return (n + 1) // 2 + (nb + 4 * ((nb + 255) // 256) + 4 if dq else 4 * nb)
store = {"none": 4 * qparams, "int8": sum(o * i + 4 * o for o, i in mats),
         "nf4": sum(nf4(o * i, 0) for o, i in mats), "nf4dq": sum(nf4(o * i, 1) for o, i in mats)}
for q, qb in store.items():
    mem = json.load(open(f"{w}/{q}.json"))["memory"]
    want = {"params": 4 * trainable, "grads": 4 * trainable, "optimizer": 8 * trainable, "frozen": 4 * other + qb}
    got = {k: mem[k] for k in want}
    assert got == want, (q, got, want)
    bits = 8 * qb / qparams
    print(f"{q:6s}: trainable {trainable} params -> params/grads/optimizer {got['params']}/{got['grads']}/{got['optimizer']} B; "
          f"frozen {got['frozen']} B = {4 * other} fp32 + {qb} for {qparams} quantized weights ({bits:.4f} bits each)")
    if q == "nf4dq":
        assert bits <= 4.13, bits
# dp2 ZeRO-3: the adapters' parameters, gradients and moments sharded, the quantized base replicated
rep = json.load(open(f"{w}/z3.json"))
mem = rep["memory"]
assert mem["frozen"] == 4 * other + store["nf4dq"], (mem["frozen"], 4 * other + store["nf4dq"])
shard = mem["optimizer"] / 8
assert trainable / 2 <= shard <= trainable / 2 + 64 * 2 * (L + 2), (shard, trainable / 2)  # half, up to alignment padding
print(f"dp2 ZeRO-3 per rank: frozen {mem['frozen']} B (replicated), AdamW state for {shard:.0f} of {trainable} adapter parameters")
PY
