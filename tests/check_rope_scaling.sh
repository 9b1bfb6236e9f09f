#!/usr/bin/env bash
# RoPE scaling as Hugging Face configs state it (rope_scaling: linear,
# dynamic NTK, YaRN with its attention factor, llama3, the legacy "type"
# key), against tests/torch_llama.py's PyTorch forms of transformers'
# modeling_rope_utils formulas (no transformers). Per case, a random model
# written by the reference as a HF directory (GQA 4/2 heads, head dim 16):
#  - rotated q/k: build/tests/test_rope_scaling reads config.json as import
#    does and rotates random q|k rows of every position; within 1e-6 of the
#    reference's q cos + rotate_half(q) sin;
#  - import, then 3 training steps (`train --init-from`): step-0 loss within
#    1e-6 relative, all within 1e-5; dynamic trains at 2x its config's
#    context (--seq-len with --init-from), where the NTK base grows;
#  - export --format hf keeps rope_scaling (each key's value) and
#    max_position_embeddings, the export rotates bit for bit as the
#    original, and import + export again gives the same config.json;
# and bad rope_scaling objects, and GGUF exports llama.cpp cannot represent (dynamic NTK,
# YaRN with other betas): one error line each, no file left.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
corpus d
L=2; C=64; H=4; KV=2; F=96; V=300; B=2; STEPS=3
OPT="--batch $B --steps $STEPS --lr 1e-3 --grad-clip 1 --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8"
# name | max_position_embeddings | trained T | rope_scaling
CASES=(
    'linear|32|32|{"rope_type": "linear", "factor": 4.0}'
    'linear_legacy_type|32|32|{"type": "linear", "factor": 2.0}'
    'dynamic|16|32|{"rope_type": "dynamic", "factor": 2.0}'
    'yarn|32|32|{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}'
    'yarn_mscale|32|32|{"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8, "beta_fast": 8.0, "beta_slow": 2.0, "mscale": 1.0, "mscale_all_dim": 0.5, "truncate": false}'
    'yarn_attention_factor|32|32|{"rope_type": "yarn", "factor": 2.0, "attention_factor": 0.875}'
    'llama3|32|32|{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}'
)
for case in "${CASES[@]}"; do
    IFS='|' read -r c P T RS <<<"$case"
    $PY tests/torch_llama.py init --out $W/hf_$c --layers $L --dim $C --heads $H --kv-heads $KV --ffn $F --vocab $V \
        --max-pos $P --seed 11 --tie 0 --rope-json "$RS"
    # rotated q/k
    $PY - $W/x_$c.bin $T $(( (H + KV) * C / H )) <<'PY'
import sys, numpy as np
np.random.default_rng(5).uniform(-1, 1, size=int(sys.argv[2]) * int(sys.argv[3])).astype("<f4").tofile(sys.argv[1])
PY
    $BUILD/tests/test_rope_scaling $W/hf_$c $T $W/x_$c.bin $W/r_$c.bin >/dev/null
    $PY - $W/hf_$c $T $W/x_$c.bin $W/r_$c.bin $c <<'PY'
import sys, json, torch, numpy as np
sys.path.insert(0, "tests")
import torch_llama as tl
d, T, c = sys.argv[1], int(sys.argv[2]), sys.argv[5]
cfg = tl.Cfg(json.load(open(d + "/config.json")))
x = torch.from_numpy(np.fromfile(sys.argv[3], dtype="<f4")).view(T, cfg.H + cfg.KV, cfg.hd)
got = torch.from_numpy(np.fromfile(sys.argv[4], dtype="<f4")).view(T, cfg.H + cfg.KV, cfg.hd)
cos, sin = tl.rope_cos_sin(T, cfg.hd, cfg.theta, cfg.rope)
want = x * cos[:, None, :] + tl.rotate_half(x) * sin[:, None, :]
err = float((got - want).abs().max())
print(f"{c}: rotated q/k of {T} positions within {err:.2g} of the reference", end="; ")
assert err <= 1e-6, f"{c}: rotated q/k differ by {err:.3g}"
PY
    # import, train, step-0 loss
    $M import --format hf --in $W/hf_$c --out $W/ck_$c >/dev/null
    $M train --train $W/d_train.bin --init-from $W/ck_$c --seq-len $T $OPT --data-order sequential \
        --metrics $W/mt_$c.jsonl --log-every 0 >/dev/null
    $PY tests/torch_llama.py train --model $W/hf_$c --data $W/d_train.bin --seq-len $T $OPT --out-json $W/ref_$c.json
    $PY -c "import sys; sys.path.insert(0, 'tests'); import parity; parity.compare_losses('$W/mt_$c.jsonl', '$W/ref_$c.json', $STEPS, 1e-5, step0_tol=1e-6, label='$c losses')"
    # export keeps rope_scaling; the export rotates bit for bit; a second round trip is byte-identical
    $M export --ckpt $W/ck_$c --format hf --out $W/ex_$c >/dev/null
    $PY - $W/hf_$c/config.json $W/ex_$c/config.json $c <<'PY'
import sys, json
a, b, c = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
ra, rb = a["rope_scaling"], b["rope_scaling"]
assert rb["rope_type"] == ra.get("rope_type", ra.get("type")), (c, ra, rb)
for k, v in ra.items():
    if k in ("rope_type", "type"):
        continue
    assert k in rb and (rb[k] == v or abs(rb[k] - v) <= 1e-7 * abs(v)), f"{c}: rope_scaling.{k} {v} exported as {rb.get(k)}"
assert b["max_position_embeddings"] == a["max_position_embeddings"], (c, a["max_position_embeddings"], b["max_position_embeddings"])
print(f"{c}: export keeps rope_scaling {rb}", end="; ")
PY
    $BUILD/tests/test_rope_scaling $W/ex_$c $T $W/x_$c.bin $W/r2_$c.bin >/dev/null
    cmp $W/r_$c.bin $W/r2_$c.bin
    $M import --format hf --in $W/ex_$c --out $W/ck2_$c >/dev/null
    $M export --ckpt $W/ck2_$c --format hf --out $W/ex2_$c >/dev/null
    cmp $W/ex_$c/config.json $W/ex2_$c/config.json
    echo "round trip OK"
    rm -rf $W/ck_$c $W/ck2_$c $W/ex2_$c
done

# bad rope_scaling objects: one line naming the file and the key
bad() {
    $PY - $W/hf_linear $W/bad "$1" <<'PY'
import sys, json, shutil
shutil.copytree(sys.argv[1], sys.argv[2])
j = json.load(open(sys.argv[2] + "/config.json"))
j["rope_scaling"] = json.loads(sys.argv[3])
json.dump(j, open(sys.argv[2] + "/config.json", "w"))
PY
    expect_failure "$2" $M import --format hf --in $W/bad --out $W/bad_ck
    rm -rf $W/bad $W/bad_ck
}
bad '{"rope_type": "su", "factor": 2.0}' "rope_scaling type 'su' is not supported"
bad '{"rope_type": "yarn"}' "rope_scaling (yarn) has no factor"
bad '{"rope_type": "linear", "factor": -1.0}' "linear rope scaling needs a finite factor > 0"
bad '{"rope_type": "llama3", "factor": 8.0}' "rope_scaling (llama3) has no original_max_position_embeddings"
# GGUF writes llama3, linear and YaRN (check_gguf_rope compares llama.cpp's logits); what llama.cpp
# cannot represent is refused, not written wrong: dynamic NTK, YaRN with other betas or fractional ramp ends
for c in dynamic yarn_mscale; do
    $M import --format hf --in $W/hf_$c --out $W/ck_$c >/dev/null
done
expect_failure "dynamic NTK.*has no counterpart in llama.cpp" $M export --ckpt $W/ck_dynamic --format gguf --tokenizer byte --out $W/dyn.gguf
expect_failure "YaRN scaling has beta_fast 8, beta_slow 2" $M export --ckpt $W/ck_yarn_mscale --format gguf --tokenizer byte --out $W/yarn.gguf
for f in dyn yarn; do [ ! -e $W/$f.gguf ] || { echo "a refused GGUF export left $W/$f.gguf"; exit 1; }; done
echo "rope scaling OK"
