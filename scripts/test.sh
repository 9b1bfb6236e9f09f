#!/usr/bin/env bash
# The test command: set up (scripts/setup.sh) and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
make test
