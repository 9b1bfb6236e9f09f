#!/usr/bin/env bash
# Hugging Face directories of mixture-of-experts models: a random Mixtral
# (block_sparse_moe.gate, experts.E.w1/w3/w2) and a random Qwen2-MoE
# (mlp.gate, experts.E.gate_proj/up_proj/down_proj, q/k/v biases, no shared
# expert) and a random OLMoE (mlp.gate, experts.E.gate_proj/up_proj/down_proj,
# self_attn.q_norm/k_norm, no biases, no head_dim key) written by the
# PyTorch reference (tests/torch_moe.py) import, and
# export again to the same tensors bit for bit under the same names, with the
# config.json fields the reference reads equal; export -> import -> export is
# byte-identical; a config.json naming a shared expert whose tensors the
# directory lacks is refused with one line (shared experts themselves:
# check_moe_shared.sh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
same_dir() { # A B: the same files with the same bytes
    diff <(cd $1 && ls) <(cd $2 && ls) >/dev/null || { echo "file lists differ: $(ls $1) vs $(ls $2)"; exit 1; }
    for f in $(cd $1 && ls); do cmp -s $1/$f $2/$f || { echo "$1/$f and $2/$f differ"; exit 1; }; done
}
for t in mixtral qwen2_moe olmoe; do
    $PY tests/torch_moe.py init --out $W/$t --type $t --layers 2 --dim 64 --heads 4 --kv-heads 2 --experts 4 --top-k 2 \
        --moe-ffn 32 --vocab 300 --max-pos 32 --norm-topk 1 --seed 3
    $M import --format hf --in $W/$t --out $W/${t}_ck >/dev/null
    $M export --ckpt $W/${t}_ck --format hf --out $W/${t}_hf1 >/dev/null
    $M import --format hf --in $W/${t}_hf1 --out $W/${t}_ck2 >/dev/null
    $M export --ckpt $W/${t}_ck2 --format hf --out $W/${t}_hf2 >/dev/null
    same_dir $W/${t}_hf1 $W/${t}_hf2
    $PY - $W/$t $W/${t}_hf1 $t <<'PY'
import json, sys
sys.path.insert(0, "tests")
import torch
from torch_llama import read_safetensors
from torch_moe import Cfg
a, b = read_safetensors(sys.argv[1] + "/model.safetensors"), read_safetensors(sys.argv[2] + "/model.safetensors")
assert set(a) == set(b), f"tensor names differ: {sorted(set(a) ^ set(b))[:6]}"
for n in a:
    assert a[n].shape == b[n].shape and torch.equal(a[n], b[n]), f"{n} differs after import -> export"
ca, cb = (vars(Cfg(json.load(open(d + "/config.json")))) for d in sys.argv[1:3])
assert ca == cb, f"config differs: {ca} vs {cb}"
print(f"{sys.argv[3]}: import -> export gives the reference's {len(a)} tensors bit for bit; config fields equal; "
      "export -> import -> export byte-identical")
PY
done
$PY - $W/qwen2_moe/config.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["shared_expert_intermediate_size"] = 64
json.dump(j, open(sys.argv[1], "w"))
PY
expect_failure "mlp.shared_expert.gate_proj.weight' is missing" $M import --format hf --in $W/qwen2_moe --out $W/bad_ck
# OLMoE: a clip_qkv we do not model, a head width other than hidden_size / heads, a missing k_norm
$PY - $W/olmoe $W/bad_clip $W/bad_hd <<'PY'
import json, os, shutil, sys
j = json.load(open(sys.argv[1] + "/config.json"))
for d, k, v in ((sys.argv[2], "clip_qkv", 8.0), (sys.argv[3], "head_dim", 8)):
    shutil.copytree(sys.argv[1], d)
    json.dump(dict(j, **{k: v}), open(d + "/config.json", "w"))
PY
expect_failure "clip_qkv is not supported" $M import --format hf --in $W/bad_clip --out $W/bad_ck
expect_failure "head_dim 8 x num_attention_heads 4 must equal hidden_size 64" $M import --format hf --in $W/bad_hd --out $W/bad_ck
$PY - $W/olmoe <<'PY'
import sys
sys.path.insert(0, "tests")
from torch_llama import read_safetensors, write_safetensors
t = read_safetensors(sys.argv[1] + "/model.safetensors")
del t["model.layers.1.self_attn.k_norm.weight"]
write_safetensors(sys.argv[1] + "/model.safetensors", list(t.items()))
PY
expect_failure "model.layers.1.self_attn.k_norm.weight' is missing" $M import --format hf --in $W/olmoe --out $W/bad_ck
echo "moe hf OK"
