"""moe_compare.py REF.jsonl RUN.jsonl NAME [--bound B] [--train FACTOR|moves]: a mixture-of-experts run's
metrics against a reference run's (the layout-invariance tests check_moe_ep, check_moe_ep_lora's kin,
check_moe_shared, check_qk_norm): the same number of steps (10 or more), every loss and validation loss
within B relative (default 1e-5), the aux loss within B (10 B above 1e-5: bf16's small router sums drift
faster), and at B <= 1e-5 the same expert loads and dropped counts step for step; the run must train (its
last loss below FACTOR x its first, default 0.9) or, with `moves`, its loss must take more than 5 values.
Prints one line."""
import argparse
import json

p = argparse.ArgumentParser()
p.add_argument("ref")
p.add_argument("run")
p.add_argument("name")
p.add_argument("--bound", type=float, default=1e-5)
p.add_argument("--train", default="0.9")
o = p.parse_args()
a = [json.loads(l) for l in open(o.ref) if '"loss"' in l]
b = [json.loads(l) for l in open(o.run) if '"loss"' in l]
name, bound = o.name, o.bound
assert len(a) == len(b) >= 10, (name, len(a), len(b))
worst = max(abs(x["loss"] - y["loss"]) / y["loss"] for x, y in zip(a, b))
waux = max(abs(x["moe_aux"] - y["moe_aux"]) / y["moe_aux"] for x, y in zip(a, b))
assert worst <= bound, f"{name}: losses {worst:.3g} relative apart (bound {bound})"
abound = bound if bound <= 1e-5 else 10 * bound
assert waux <= abound, f"{name}: aux losses {waux:.3g} relative apart (bound {abound})"
if bound <= 1e-5:
    assert [x.get("moe_dropped") for x in a] == [y.get("moe_dropped") for y in b], f"{name}: dropped counts differ"
    assert [x["moe_load"] for x in a] == [y["moe_load"] for y in b], f"{name}: expert loads differ"
va = [x["val_loss"] for x in a if "val_loss" in x]
vb = [y["val_loss"] for y in b if "val_loss" in y]
assert len(va) == len(vb) and all(abs(x - y) <= bound * y for x, y in zip(va, vb)), (name, va, vb)
if o.train == "moves":
    assert len({round(y["loss"], 6) for y in b}) > 5, f"{name}: the steps do not move the loss"
else:
    assert b[-1]["loss"] < float(o.train) * b[0]["loss"], f"{name}: not training"
ref = o.ref.rsplit("/", 1)[-1][:-6]
print(f"{name}: {b[0]['loss']:.4f} -> {b[-1]['loss']:.4f}, within {worst:.2g} of {ref} (aux {waux:.2g})")
