#!/usr/bin/env bash
# The dependency rule of docs/design.md: no include points up (or sideways)
# the Layers table's levels, and no circle of includes joins files of
# different folders (tests/layers.py). Then the checker itself: a planted
# upward include, a sideways one and a cross-folder circle must each fail.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
python3 tests/layers.py src docs/design.md || exit 1
plant() { # plant NAME FILE LINE: the tree with LINE appended to FILE must be refused
    rm -rf "$W/src" && cp -r src "$W/src" && echo "$3" >> "$W/src/$2"
    if python3 tests/layers.py "$W/src" docs/design.md > "$W/out"; then
        echo "FAIL: the planted $1 ($2: $3) passed"; exit 1
    fi
    echo "refused the planted $1: $(grep -v -e ' problems; ' -e '(allowed)' "$W/out" | head -n 1)"
}
plant "upward include" core/error.c '#include "train/trainer.h"'
plant "same-level include" ops/matmul.c '#include "comm/comm.h"'
plant "cross-folder circle" models/family.h '#include "models/gpt2/gpt2.h"'
echo "check_layers: ok"
