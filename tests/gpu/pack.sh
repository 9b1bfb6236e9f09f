#!/usr/bin/env bash
# `make gpu-pack`: a folder to carry to a bare GPU machine (CUDA 13 and PyTorch there; no Open
# MPI, oneDNN, OpenBLAS): the GPU test binaries of build-gpu/tests and the one-process CLI
# build-gpu/meshtrain (xz-compressed into bin.tar.xz), tests/gpu/run.sh, torch_bench.py and compare_losses.py, every shared
# library the binaries need that is neither CUDA's nor libc's (found with ldd), xz-compressed into
# lib.tar.xz (run.sh unpacks it into a temporary folder), and the whole-step parity's inputs: the
# byte-level corpus tokens (data/d_train.bin) and the CPU build's losses of every run of
# tests/gpu/parity_runs.txt (golden/NAME.jsonl, trained here by build/meshtrain). For several
# ranks on the GPU (issue 29): build-gpu/meshtrain-mpi and Open MPI as Debian ships it -- the
# packages of mpirun, orted, libmpi and their components' libraries, fetched with `apt-get
# download` (cached in build-gpu-debs/) and extracted with `dpkg -x` into ompi.tar.xz, which
# run.sh unpacks and relocates with OPAL_PREFIX.
# Usage: bash tests/gpu/pack.sh DIR   (fails if DIR would exceed 60 MiB; the session carries 64 MiB in all)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: pack.sh DIR}
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib.d"
cp build-gpu/tests/* build-gpu/meshtrain build-gpu/meshtrain-mpi "$out/bin/"
cp tests/gpu/run.sh tests/gpu/hf_check.py tests/gpu/compare_grads.py tests/gpu/torch_bench.py tests/gpu/compare_losses.py tests/gpu/parity_runs.txt "$out/"
bash tests/gpu/golden.sh build/meshtrain "$out"
strip --strip-unneeded "$out"/bin/* # symbols only: the CUDA fatbins stay
bash tests/gpu/hf_prepare.sh build/meshtrain "$out/hf"
for b in "$out"/bin/*; do
    ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) continue ;; # libc's
    libcuda.so.* | libcudart.so.* | libcublas*.so.* | libnvidia*) continue ;;                     # CUDA's
    libmpi* | libopen-rte* | libopen-pal* | libhwloc* | libevent* | libpmix* | libfabric* | libuc[pmst]* | \
        libibverbs* | librdmacm* | libnl-* | libpsm* | libmunge* | libnuma* | libudev* | libatomic*) continue ;; # ompi.tar.xz's
    esac
    case "$lib" in /usr/local/cuda*) continue ;; esac
    cp -L "$lib" "$out/lib.d/"
done
tar -C "$out/lib.d" -cJf "$out/lib.tar.xz" .
# the binaries xz-compressed too (their CUDA fatbins shrink ~10x: 34 MiB -> 3 MiB); run.sh unpacks bin.tar.xz
# where the folder has no bin/ (a bin/ copied in by hand, for a quick kernel iteration, is used as it is)
tar -C "$out/bin" -cJf "$out/bin.tar.xz" . && rm -rf "$out/bin"
# Open MPI: the packages owning every library its launcher, daemon, library and components load
debs=build-gpu-debs
mkdir -p "$debs"
pkgs=$(for f in /usr/bin/orterun /usr/bin/orted /usr/lib/x86_64-linux-gnu/libmpi.so.40 \
    /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so; do
    ldd "$(readlink -f "$f")" 2>/dev/null | awk '$3 ~ /^\// {print $3}'
done | sort -u | xargs -n1 readlink -f | { xargs dpkg -S 2>/dev/null || true; } | cut -d: -f1 | sort -u |
    grep -v '^libc6$\|^libgcc-s1$\|^libstdc++6$\|^zlib1g$')
pkgs="$pkgs openmpi-bin openmpi-common libnl-3-200"
(cd "$debs" && for p in $pkgs; do ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download "$p" >/dev/null 2>&1 ||
    { echo "gpu-pack: apt-get download $p failed"; exit 1; }; done)
mkdir -p "$out/ompi.d"
for p in $pkgs; do dpkg -x "$(ls "$debs/${p}"_*.deb | head -n 1)" "$out/ompi.d"; done
rm -rf "$out/ompi.d/usr/share/doc" "$out/ompi.d/usr/share/man" "$out/ompi.d/usr/share/lintian"
tar -C "$out/ompi.d" -cJf "$out/ompi.tar.xz" .
# issue 35: the fuzz targets of `make fuzz-pack` (build-fuzz-pack/), when built, with only the
# libraries neither lib.tar.xz nor ompi.tar.xz has (run.sh's part fuzz runs them on the idle cores)
if [ -d build-fuzz-pack/bin ]; then
    fz=$out/fuzz.d && mkdir -p "$fz/lib"
    cp -r build-fuzz-pack/bin build-fuzz-pack/corpus build-fuzz-pack/run.sh build-fuzz-pack/lsan.supp build-fuzz-pack/*.dict "$fz/"
    for lib in build-fuzz-pack/lib/*; do
        n=$(basename "$lib")
        [ -e "$out/lib.d/$n" ] || [ -n "$(find "$out/ompi.d" -name "$n" -print -quit)" ] || cp "$lib" "$fz/lib/"
    done
    tar -C "$fz" -cJf "$out/fuzz.tar.xz" . && rm -rf "$fz"
fi
rm -rf "$out/ompi.d"
libs=$(ls "$out/lib.d" | tr '\n' ' ')
rm -rf "$out/lib.d"
bytes=$(du -sb "$out" | cut -f1)
echo "gpu-pack: $out, $((bytes / 1048576)) MiB ($bytes bytes); libraries: $libs"
[ "$bytes" -lt $((60 * 1048576)) ] || { echo "gpu-pack: $out is over 60 MiB"; exit 1; }
