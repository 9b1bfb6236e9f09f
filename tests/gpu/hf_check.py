"""Issue 31, point 5, on the GPU machine (transformers and peft there): every case of
hf_prepare.sh's folder loads with transformers' AutoModelForCausalLM (an adapter case: its base,
then the adapter with peft's PeftModel), runs the token sequences of ids.txt (one per line, each
from position 0) in float32 with eager attention, and its logits must equal meshtrain's
(CASE/mt.bin) within 1e-4 of the largest logit; an adapter case must also move the logits away
from its base's (so the adapter was applied). Usage: python3 hf_check.py DIR [cuda|cpu]."""
import os
import sys
import traceback

import numpy as np
import torch

d = sys.argv[1]
dev = sys.argv[2] if len(sys.argv) > 2 else ("cuda" if torch.cuda.is_available() else "cpu")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
import transformers  # noqa: E402
import peft  # noqa: E402

print(f"hf: transformers {transformers.__version__}, peft {peft.__version__}, torch {torch.__version__}, on {dev}")
seqs = [[int(t) for t in line.split()] for line in open(os.path.join(d, "ids.txt")) if line.strip()]
ntok = sum(len(s) for s in seqs)


def logits_of(model):
    out = []
    with torch.no_grad():
        for s in seqs:
            x = torch.tensor([s], dtype=torch.long, device=dev)
            out.append(model(input_ids=x).logits[0].float().cpu().numpy())
    return np.concatenate(out)


def load(path):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").to(dev).eval()


def ours(path, vocab):
    return np.fromfile(path, dtype=np.float32).reshape(ntok, vocab)


fails = 0
for case in sorted(os.listdir(d)):
    cd = os.path.join(d, case)
    if not os.path.isdir(cd):
        continue
    try:
        if os.path.isdir(os.path.join(cd, "adapter")):
            from peft import PeftModel
            base = load(os.path.join(cd, "base"))
            lb = logits_of(base)
            model = PeftModel.from_pretrained(base, os.path.join(cd, "adapter")).to(dev).eval()
            kind = f"AutoModelForCausalLM({type(base).__name__}) + PeftModel({model.peft_config['default'].peft_type})"
        else:
            model = load(os.path.join(cd, "model"))
            lb = None
            kind = f"AutoModelForCausalLM -> {type(model).__name__}"
        got = logits_of(model)
        ref = ours(os.path.join(cd, "mt.bin"), got.shape[1])
        scale = float(np.abs(ref).max())
        diff = float(np.abs(got - ref).max())
        ok = diff <= 1e-4 * max(1.0, scale)
        msg = f"{case}: {kind}: max |logit diff| {diff:.3g} (largest logit {scale:.3g}) over {ntok} positions x {got.shape[1]}"
        if lb is not None:
            base_ref = ours(os.path.join(cd, "base_mt.bin"), got.shape[1])
            bdiff = float(np.abs(lb - base_ref).max())
            moved = float(np.abs(got - lb).max())
            msg += f"; base alone {bdiff:.3g}; the adapter moves the logits by {moved:.3g}"
            ok = ok and bdiff <= 1e-4 * max(1.0, scale) and moved > 100 * max(diff, 1e-6)
        print(("hf ok " if ok else "hf FAIL ") + msg, flush=True)
        fails += not ok
    except Exception as e:  # one case's failure must not hide the others'
        print(f"hf FAIL {case}: {type(e).__name__}: {e}", flush=True)
        traceback.print_exc()
        fails += 1
print(f"hf: {fails} failed")
sys.exit(1 if fails else 0)
