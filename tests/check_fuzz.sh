#!/usr/bin/env bash
# Every libFuzzer target of tests/fuzz/ (JSON, token shards, safetensors
# header and import, llm.c model files, HF config.json, GPT-2 vocabulary
# files, tokenizer.json, checkpoint manifests, train's YAML run config and
# its round trip through both writers, plot's metrics files, tokenize's chat
# JSONL) runs a few
# seconds from its kept corpus without a crash, leak, UB or out-of-memory
# (tests/fuzz/run.sh; `make fuzz FUZZ_S=600` for the long runs). Needs
# clang (scripts/setup.sh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
FUZZ_S=${FUZZ_S:-3} bash tests/fuzz/run.sh
