#!/usr/bin/env bash
# comm/trace_merge across processes: every rank's trace lands in ONE valid
# Chrome trace file written by rank 0 (rank 0 dropped 2 events and says so;
# rank 1's 20000 spans cross several 1 MiB pieces), and a file that cannot be
# created is one clear error on every rank, with a non-zero exit and no hang.
set -u
. "$(dirname "$0")/lib.sh"
make -s build/tests/test_trace >/dev/null || { echo "FAIL: make build/tests/test_trace"; exit 1; }

for np in 1 2 3; do
    if ! timeout 60 mpirun -np $np build/tests/test_trace --merge "$W/t$np.json" >"$W/out" 2>&1; then
        fail "merge on $np ranks"; cat "$W/out"; continue
    fi
    if /usr/bin/python3 - "$W/t$np.json" "$np" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1])); np_ = int(sys.argv[2])
ev = doc["traceEvents"]
assert doc["otherData"]["dropped_events"] == 2, doc["otherData"]
names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
want = {r: "rank %d" % r for r in range(np_)}
want[0] = "rank 0 (2 events dropped: trace buffer full)"
assert names == want, names
spans = [e for e in ev if e["ph"] == "X"]
per = {r: sum(1 for e in spans if e["pid"] == r) for r in range(np_)}
expect = {r: 3 if r == 0 else 20000 if r == 1 else 4 for r in range(np_)}
assert per == expect, per
for e in spans:
    assert e["args"]["rank"] == e["pid"] and e["dur"] == 1.0 and e["ts"] >= 0, e
    assert e["name"] == ("backward" if e["args"]["i"] % 2 else "forward"), e
print("ok: %d ranks, %d spans, %d bytes" % (np_, len(spans), len(open(sys.argv[1]).read())))
PY
    then :; else fail "merged trace on $np ranks"; fi
done

# rank 0 cannot create the file: both ranks report it and exit non-zero
if timeout 60 mpirun -np 2 build/tests/test_trace --merge "$W/no/such/dir/t.json" >"$W/out" 2>&1; then
    fail "unwritable trace path exited 0"
else
    n=$(grep -c "cannot create trace file $W/no/such/dir/t.json: No such file or directory" "$W/out")
    if [ "$n" = 2 ]; then echo "ok: unwritable path reported on both ranks"; else fail "unwritable path: $n reports"; cat "$W/out"; fi
fi
[ $fails -eq 0 ] && echo "all trace merge checks passed"
exit $fails
