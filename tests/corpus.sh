#!/usr/bin/env bash
# Writes a byte-level training corpus for the tests to $1 (a file): Debian's
# fortunes (installed by scripts/setup.sh), every plain fortune file in name
# order. Tests need nothing beside the checkout.
set -euo pipefail
out=$1
dir=/usr/share/games/fortunes
[ -d $dir ] || { echo "tests/corpus.sh: $dir is missing: run scripts/setup.sh (Debian package fortunes)" >&2; exit 1; }
find $dir -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort | xargs cat > "$out"
