#!/usr/bin/env bash
# Builds, on a development machine (no GPU needed), what scripts/gpu-check.sh runs on a lent GPU
# machine, and packs it into gpu-bundle/ (gitignored):
#
#   gpu-bundle/ampctl-gpu-bundle.tar.xz   the bundle, compressed (about 26 MiB instead of 165:
#                                         OpenBLAS alone is 35 MiB, and what is carried to the
#                                         GPU machine, working tree included, must stay under
#                                         64 MiB)
#   gpu-bundle/MANIFEST                   what is inside, from which build, the sizes
#
# Inside the archive (also left unpacked in $BUILD_DIR/gpu-bundle/ for a look here):
#   ampctl                 the app (no CUDA linked; it loads the CUDA plugin
#                          lib/libampctl_cuda.so, which links cudart statically)
#   ampctl_bench           the op-level benchmark
#   ampctl_test_*          every test binary (GoogleTest linked statically)
#   lib/                   the shared libraries they load that the GPU machine's image may lack:
#                          OpenBLAS, gfortran, quadmath, yaml-cpp, and whatever else ldd lists
#   lib/fallback/          libstdc++ and libgcc_s, used by gpu-check.sh only when the GPU
#                          machine's own are older than this machine's
#
# Left out on purpose: the C library and loader (libc, libm, libdl, libpthread, librt,
# ld-linux), which must come from the machine that runs the binaries; the driver (libcuda), which
# only the GPU machine has; cuBLAS (libcublas + libcublasLt are about 570 MiB) and NCCL (libnccl is
# about 210 MiB and does not compress): gpu-check.sh finds the GPU machine's own CUDA 13 cuBLAS and
# NCCL (the CUDA toolkit's, or those of PyTorch's cu13 wheels). The binaries carry RUNPATH $ORIGIN:$ORIGIN/lib, and
# gpu-check.sh also puts lib/ on LD_LIBRARY_PATH so that the bundled libraries' own dependencies
# (libopenblas -> libgfortran) resolve there too.
#
# Usage: bash scripts/gpu-bundle.sh            (from anywhere; BUILD_DIR defaults to build-gpu)
# Then carry gpu-bundle/ to the GPU machine and run there: bash scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build-gpu}
OUT_DIR=gpu-bundle
STAGE=$BUILD_DIR/gpu-bundle
ARCHIVE=$OUT_DIR/ampctl-gpu-bundle.tar.xz
MAX_ARCHIVE_MIB=32  # leaves most of the 64 MiB carried to the GPU machine for everything else

# CMAKE_CUDA_STANDARD=17: the CUDA sources are C++17 (nvcc's default); without it CMake 3.25
# takes the C++ standard (20) for CUDA too and stops with "CUDA20 ... not supported".
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DAMPCTL_CUDA=ON \
  -DCMAKE_CUDA_STANDARD=17
cmake --build "$BUILD_DIR" -j "$(nproc)"

binaries=("$BUILD_DIR/ampctl")
[[ -x $BUILD_DIR/ampctl_bench ]] && binaries+=("$BUILD_DIR/ampctl_bench")
for t in "$BUILD_DIR"/tests/ampctl_test_*; do
  [[ -f $t && -x $t ]] && binaries+=("$t")
done

rm -rf "$STAGE" "$OUT_DIR"
mkdir -p "$STAGE/lib/fallback" "$OUT_DIR"
for b in "${binaries[@]}"; do
  cp "$b" "$STAGE/"
done
# The CUDA plugin, which ampctl loads (dlopen) rather than links: it finds it in lib/ below itself
# (lib/include/ampctl/backend/cuda_plugin.h). ldd of the plugin brings its own libraries below.
cp "$BUILD_DIR/libampctl_cuda.so" "$STAGE/lib/"
binaries+=("$BUILD_DIR/libampctl_cuda.so")

# Shared libraries to leave out (see the header): the C runtime, the driver, cuBLAS/cudart.
skip_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libdl\.so|libpthread\.so|librt\.so|libresolv|libcuda\.so|libnvidia|libcublas|libcublasLt|libcudart|libnccl)'
fallback_re='^(libstdc\+\+\.so|libgcc_s\.so)'

missing=0
declare -A seen=()
for b in "${binaries[@]}"; do
  while read -r soname arrow path _; do
    [[ $arrow == "=>" ]] || continue
    if [[ $path == "not" ]]; then
      echo "gpu-bundle: $b needs $soname, which is not found here" >&2
      missing=1
      continue
    fi
    [[ -n ${seen[$soname]:-} ]] && continue
    seen[$soname]=1
    if [[ $soname =~ $skip_re ]]; then
      continue
    elif [[ $soname =~ $fallback_re ]]; then
      cp -L "$path" "$STAGE/lib/fallback/$soname"
    else
      cp -L "$path" "$STAGE/lib/$soname"
    fi
  done < <(ldd "$b")
done
if ((missing)); then
  exit 1
fi

{
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "max GLIBC symbol version needed: $(objdump -T "$STAGE"/ampctl* "$STAGE"/lib/*.so* 2>/dev/null |
    grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
  echo "max GLIBCXX symbol version needed: $(objdump -T "$STAGE"/ampctl* "$STAGE"/lib/*.so* 2>/dev/null |
    grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)"
  echo
  (cd "$STAGE" && find . -type f ! -name MANIFEST -printf '%s\t%p\n' | sort -k2 |
    awk -F'\t' '{printf "%10.1f KiB  %s\n", $1 / 1024, $2}')
  echo "unpacked: $(du -sk "$STAGE" | cut -f1) KiB"
} >"$STAGE/MANIFEST"
tar -C "$STAGE" -cf - . | xz -6 -T0 >"$ARCHIVE"
cp "$STAGE/MANIFEST" "$OUT_DIR/MANIFEST"

size_kib=$(du -sk "$OUT_DIR" | cut -f1)
cat "$OUT_DIR/MANIFEST"
echo "gpu-bundle: $OUT_DIR/ is $size_kib KiB ($(du -sk "$STAGE" | cut -f1) KiB unpacked in $STAGE)"
if ((size_kib > MAX_ARCHIVE_MIB * 1024)); then
  echo "gpu-bundle: over the $MAX_ARCHIVE_MIB MiB budget for the carried bundle" >&2
  exit 1
fi
