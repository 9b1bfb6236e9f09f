#!/usr/bin/env bash
# `make fuzz-pack`: the clang-built fuzz targets of build-fuzz/fuzz/, their kept corpora and
# dictionaries, the leak suppressions and tests/fuzz/run.sh in one folder, with every shared
# library the targets load except libc's, so another machine (the GPU machine's 16 cores) runs
# them without clang: `LD_LIBRARY_PATH=DIR/lib FUZZ_JOBS=14 FUZZ_S=120 bash DIR/run.sh`
# (run.sh sets LD_LIBRARY_PATH itself when it finds DIR/lib).
# Usage: bash tests/fuzz/pack.sh DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: pack.sh DIR}
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
for c in tests/fuzz/fuzz_*.c; do
    t=$(basename "$c" .c)
    [ -x "build-fuzz/fuzz/$t" ] || { echo "fuzz-pack: build-fuzz/fuzz/$t is missing (FUZZ_S=0 bash tests/fuzz/run.sh builds it)"; exit 1; }
    cp "build-fuzz/fuzz/$t" "$out/bin/"
done
cp -r tests/fuzz/corpus "$out/corpus"
cp tests/fuzz/run.sh tests/fuzz/*.dict "$out/"
cp tests/asan/lsan.supp "$out/"
for b in "$out"/bin/*; do
    ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) continue ;;
    esac
    cp -L "$lib" "$out/lib/"
done
strip --strip-debug "$out"/bin/* # keeps the symbols a sanitizer report names
echo "fuzz-pack: $out, $(du -sm "$out" | cut -f1) MiB"
