#!/usr/bin/env bash
# `make gpu-pack`: a folder to carry to a bare GPU machine (CUDA 13 and PyTorch there; no Open
# MPI, oneDNN, OpenBLAS): the GPU test binaries of build-gpu/tests and the one-process CLI
# build-gpu/meshtrain, tests/gpu/run.sh, torch_bench.py and compare_losses.py, every shared
# library the binaries need that is neither CUDA's nor libc's (found with ldd), xz-compressed into
# lib.tar.xz (run.sh unpacks it into a temporary folder), and the whole-step parity's inputs: the
# byte-level corpus tokens (data/d_train.bin) and the CPU build's losses of every run of
# tests/gpu/parity_runs.txt (golden/NAME.jsonl, trained here by build/meshtrain).
# Usage: bash tests/gpu/pack.sh DIR   (fails if DIR would exceed 48 MiB)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: pack.sh DIR}
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib.d"
cp build-gpu/tests/* build-gpu/meshtrain "$out/bin/"
cp tests/gpu/run.sh tests/gpu/torch_bench.py tests/gpu/compare_losses.py tests/gpu/parity_runs.txt "$out/"
bash tests/gpu/golden.sh build/meshtrain "$out"
for b in "$out"/bin/*; do
    ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) continue ;; # libc's
    libcuda.so.* | libcudart.so.* | libcublas*.so.* | libnvidia*) continue ;;                     # CUDA's
    esac
    case "$lib" in /usr/local/cuda*) continue ;; esac
    cp -L "$lib" "$out/lib.d/"
done
tar -C "$out/lib.d" -cJf "$out/lib.tar.xz" .
libs=$(ls "$out/lib.d" | tr '\n' ' ')
rm -rf "$out/lib.d"
bytes=$(du -sb "$out" | cut -f1)
echo "gpu-pack: $out, $((bytes / 1048576)) MiB ($bytes bytes); libraries: $libs"
[ "$bytes" -lt $((48 * 1048576)) ] || { echo "gpu-pack: $out is over 48 MiB"; exit 1; }
