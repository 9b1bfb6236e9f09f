# Helpers for the training-equivalence scripts (sourced, not run): they use
# the caller's $M (meshtrain), $PY (python with numpy) and $W (work dir).

# losses_within REF.jsonl GOT.jsonl NAME: the per-step losses of GOT equal
# REF's (same count) within 1e-5 relative; prints "NAME: n losses within x; ".
losses_within() {
    $PY - "$1" "$2" "$3" <<'PY'
import json, sys
ref = [json.loads(l)["loss"] for l in open(sys.argv[1])]
got = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(got) == len(ref), f"{sys.argv[3]}: {len(got)} steps, expected {len(ref)}"
worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
assert worst <= 1e-5, f"{sys.argv[3]}: loss differs by {worst:.3g} relative"
print(f"{sys.argv[3]}: {len(got)} losses within {worst:.2g} relative", end="; ")
PY
}

# check_run NAME REF [TOL]: $W/NAME.jsonl against $W/REF.jsonl (losses_within),
# and NAME's final checkpoint (exported) against $W/REF.safetensors with
# compare_tensors.py at TOL (default 1e-5); removes NAME's checkpoint.
check_run() {
    local name=$1 ref=$2 tol=${3:-1e-5}
    losses_within "$W/$ref.jsonl" "$W/$name.jsonl" "$name"
    $M export --ckpt $W/$name --format safetensors --out $W/$name.safetensors >/dev/null
    $PY tests/compare_tensors.py $W/$name.safetensors $W/$ref.safetensors --tol $tol
    rm -rf $W/$name $W/$name.safetensors
}

# expect_failure WANT COMMAND...: COMMAND must fail with exactly one
# "error:" line on stderr, containing WANT (a grep pattern).
expect_failure() {
    local want=$1; shift
    if "$@" >$W/out.txt 2>$W/err.txt; then echo "accepted: $*"; exit 1; fi
    grep -q "$want" $W/err.txt || { echo "expected '$want' for: $*"; cat $W/err.txt; exit 1; }
    [ "$(grep -c 'error:' $W/err.txt)" = 1 ] || { echo "expected one error line: $*"; cat $W/err.txt; exit 1; }
    echo "ok: $want"
}
