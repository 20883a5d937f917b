#!/usr/bin/env bash
# Builds the CUDA kernels, their GoogleTest suites and cuda_gemm_bench with nvcc alone (no CMake,
# no other qeval library), then runs the tests and the benchmark. Meant for a GPU machine that
# has nvcc and PyTorch but not the project's other C++ dependencies (docs/gpu.md).
#
# Needs: nvcc with cuBLASLt; g++; python3 with torch (only for the c10::Half header the tests
# use); GoogleTest headers and static libraries, and the header-only fmt and CLI11, found on the
# system or under $QEVAL_CARRY (default .carry/) as include/ and lib/.
#
#   kernels/cuda/gpu_check.sh [out_dir]     # out_dir defaults to ${OUT:-/tmp/qeval-gpu-check}
# Environment: QEVAL_CUDA_ARCH (default 90), QEVAL_BENCH=quick|full|none (default quick),
#              QEVAL_JOBS (default nproc), QEVAL_TORCH_INCLUDE / QEVAL_TORCH_LIB (default: python3's torch).
set -euo pipefail
shopt -s nullglob
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-${OUT:-/tmp/qeval-gpu-check}}"
carry="${QEVAL_CARRY:-$root/.carry}"
arch="${QEVAL_CUDA_ARCH:-90}"
jobs="${QEVAL_JOBS:-$(nproc)}"
build="$(mktemp -d /tmp/qeval-gpu-build.XXXXXX)"
mkdir -p "$out"

nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
torch_dir="${QEVAL_TORCH_DIR:-}"
if [[ -z $torch_dir && (-z ${QEVAL_TORCH_INCLUDE:-} || -z ${QEVAL_TORCH_LIB:-}) ]]; then
  torch_dir="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
fi
torch_include="${QEVAL_TORCH_INCLUDE:-$torch_dir/include}"
torch_lib="${QEVAL_TORCH_LIB:-$torch_dir/lib}"
includes=(-I"$root" -I"$carry/include" -isystem "$torch_include")
flags=(-O3 -std=c++17 "--generate-code=arch=compute_$arch,code=[compute_$arch,sm_$arch]" -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter
       -DFMT_HEADER_ONLY)

{
  echo "## gpu_check $(date -u +%FT%TZ) commit $(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
  "$nvcc" --version | tail -2
} | tee "$out/gpu_check_env.txt"

# One object per source, in parallel (ptxas is the slow part); set -e stops at the first failure.
compile() {
  local f="$1" lang=c++
  [[ $f == *.cu ]] && lang=cu
  "$nvcc" "${flags[@]}" "${includes[@]}" -x "$lang" -c "$f" -o "$build/$(basename "$f").o"
}
sources=("$root"/kernels/cuda/*.cu "$root"/kernels/cuda/limits.cpp "$root"/tests/kernels/cuda_*_test.cpp
         "$root"/bench/cuda_gemm_bench.cpp)
for f in "${sources[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
  compile "$f" 2>&1 | tee -a "$out/gpu_check_build.txt" &
done
while (($(jobs -rp | wc -l) > 0)); do wait -n; done
wait

kernel_objs=("$build"/*.cu.o "$build"/limits.cpp.o)
test_objs=("$build"/cuda_*_test.cpp.o)
libs=(-L"$carry/lib" -L"$torch_lib" -lc10 -Xlinker -rpath,"$torch_lib" -lcublasLt -lpthread -ldl -lrt)
"$nvcc" "${flags[@]}" "${kernel_objs[@]}" "${test_objs[@]}" "${libs[@]}" -lgtest_main -lgtest -o "$build/cuda_tests"
"$nvcc" "${flags[@]}" "${kernel_objs[@]}" "$build/cuda_gemm_bench.cpp.o" "${libs[@]}" -o "$build/cuda_gemm_bench"

status=0
"$build/cuda_tests" --gtest_color=no 2>&1 | tee "$out/gpu_check_tests.txt" || status=$?
case "${QEVAL_BENCH:-quick}" in
  quick) "$build/cuda_gemm_bench" --quick 2>&1 | tee "$out/gpu_check_bench.txt" || status=$? ;;
  full) "$build/cuda_gemm_bench" 2>&1 | tee "$out/gpu_check_bench.txt" || status=$? ;;
  none) ;;
esac
rm -rf "$build"
exit "$status"
