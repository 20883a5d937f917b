#!/usr/bin/env bash
# Builds the CUDA kernels, their GoogleTest suites and cuda_gemm_bench with nvcc alone (no CMake,
# no other qeval library), then runs the tests, optionally compute-sanitizer, and the benchmark.
# Meant for a GPU machine that has nvcc and PyTorch but not the project's other C++ dependencies
# (docs/gpu.md).
#
# Needs: nvcc with cuBLASLt; g++; python3 with torch (only for the c10 Half/BFloat16 headers the
# tests use); GoogleTest headers and static libraries, and the header-only fmt and CLI11, found on
# the system or under $QEVAL_GPU_BUNDLE (default .gpu-bundle/) as include/ and lib/. CUTLASS headers for the
# fused sm90 int8 GEMM (kernels/cuda/sm90/), from $QEVAL_CUTLASS_DIR or $QEVAL_GPU_BUNDLE/cutlass
# (include/ and tools/util/include/ below it) or python3's nvidia-cutlass wheel; without them the
# int8 linear builds with its cuBLASLt fallback only, and the script says so.
#
#   kernels/cuda/gpu_check.sh [out_dir]     # out_dir defaults to ${OUT:-/tmp/qeval-gpu-check}
# Environment: QEVAL_CUDA_ARCH (default 90), QEVAL_BENCH=quick|full|none (default quick),
#              QEVAL_SANITIZE=1 (compute-sanitizer memcheck + racecheck on the kernel tests),
#              QEVAL_JOBS (default nproc), QEVAL_TORCH_INCLUDE / QEVAL_TORCH_LIB (default: python3's
#              torch), QEVAL_CUTLASS_DIR, QEVAL_NO_CUTLASS=1 (build without the sm90 kernels).
set -euo pipefail
shopt -s nullglob
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-${OUT:-/tmp/qeval-gpu-check}}"
bundle="${QEVAL_GPU_BUNDLE:-$root/.gpu-bundle}"
arch="${QEVAL_CUDA_ARCH:-90}"
jobs="${QEVAL_JOBS:-$(nproc)}"
build="$(mktemp -d /tmp/qeval-gpu-build.XXXXXX)"
mkdir -p "$out"
: >"$out/gpu_check_build.txt"
started=$SECONDS

nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
torch_dir="${QEVAL_TORCH_DIR:-}"
if [[ -z $torch_dir && (-z ${QEVAL_TORCH_INCLUDE:-} || -z ${QEVAL_TORCH_LIB:-}) ]]; then
  torch_dir="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
fi
torch_include="${QEVAL_TORCH_INCLUDE:-$torch_dir/include}"
torch_lib="${QEVAL_TORCH_LIB:-$torch_dir/lib}"

# CUTLASS: explicit folder, then the copy in .gpu-bundle/, then the pip wheel (located without importing it).
cutlass_usable() { [[ -n $1 && -f $1/include/cutlass/cutlass.h && -f $1/tools/util/include/cutlass/util/packed_stride.hpp ]]; }
cutlass="${QEVAL_CUTLASS_DIR:-}"
if [[ ${QEVAL_NO_CUTLASS:-0} == 1 ]]; then
  cutlass=""
else
  cutlass_usable "$cutlass" || cutlass="$bundle/cutlass"
  cutlass_usable "$cutlass" || cutlass="$(python3 -c "import importlib.util, os; s = importlib.util.find_spec('cutlass_library'); print(os.path.join(os.path.dirname(s.origin), 'source') if s else '')" 2>/dev/null || true)"
  cutlass_usable "$cutlass" || cutlass=""
fi

includes=(-I"$root" -I"$bundle/include" -isystem "$torch_include")
flags=(-O3 -std=c++17 "--generate-code=arch=compute_$arch,code=[compute_$arch,sm_$arch]" -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter
       -DFMT_HEADER_ONLY)
# The sm90 files: wgmma needs the sm_90a target (and only it: sm_90a code runs on 9.0 only, the
# dispatcher checks); NDEBUG because CUTLASS's device asserts are calls that serialise wgmma.
sm90_flags=(-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -DNDEBUG
            -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter -Xptxas -v)
sources=("$root"/kernels/cuda/*.cu "$root"/kernels/cuda/limits.cpp "$root"/tests/kernels/cuda_*_test.cpp
         "$root"/bench/cuda_gemm_bench.cpp)
if [[ -n $cutlass ]]; then
  flags+=(-DQEVAL_WITH_CUTLASS=1)
  sources=("$root"/kernels/cuda/sm90/*.cu "${sources[@]}")  # the slow ones first
fi

{
  echo "## gpu_check $(date -u +%FT%TZ) commit $(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
  "$nvcc" --version | tail -2
  echo "CUTLASS: ${cutlass:-none (int8 linear: cuBLASLt + epilogue only)}"
  [[ -n $cutlass && -f $cutlass/include/cutlass/version.h ]] &&
    grep -E '#define CUTLASS_(MAJOR|MINOR|PATCH) ' "$cutlass/include/cutlass/version.h" | awk '{printf "%s=%s ", $2, $3} END {print ""}'
  echo "QEVAL_INT8_LINEAR=${QEVAL_INT8_LINEAR:-auto} QEVAL_INT8_LINEAR_TUNE=${QEVAL_INT8_LINEAR_TUNE:-1}" \
       "QEVAL_INT8_PDL=${QEVAL_INT8_PDL:-1} QEVAL_W4_LINEAR=${QEVAL_W4_LINEAR:-auto}"
} | tee "$out/gpu_check_env.txt"

# One object per source, in parallel; each file's wall time and ptxas report (registers, spills)
# go to the build log. set -e stops at the first failure.
compile() {
  local f="$1" lang=c++ t0=$SECONDS name
  name="${f#"$root"/}"
  [[ $f == *.cu ]] && lang=cu
  local log="$build/$(basename "$f").log"
  if [[ $f == */sm90/* ]]; then
    "$nvcc" "${sm90_flags[@]}" -I"$root" -isystem "$cutlass/include" -isystem "$cutlass/tools/util/include" \
      -c "$f" -o "$build/$(basename "$f").o" >"$log" 2>&1 || { cat "$log"; return 1; }
  else
    "$nvcc" "${flags[@]}" "${includes[@]}" -Xptxas -v -x "$lang" -c "$f" -o "$build/$(basename "$f").o" >"$log" 2>&1 ||
      { cat "$log"; return 1; }
  fi
  echo "compiled $name in $((SECONDS - t0)) s"
}
for f in "${sources[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
  compile "$f" 2>&1 | tee -a "$out/gpu_check_build.txt" &
done
while (($(jobs -rp | wc -l) > 0)); do wait -n; done
wait
# Warnings, registers and spills of every kernel (ptxas -v), per source file.
for log in "$build"/*.log; do
  echo "### $(basename "$log" .log)"
  grep -E "warning|error|Compiling entry|registers|spill" "$log" | sed -E 's/_Z[A-Za-z0-9_]{160,}/<long CUTLASS name>/' || true
done >"$out/gpu_check_ptxas.txt"

kernel_objs=("$build"/*.cu.o "$build"/limits.cpp.o)
test_objs=("$build"/cuda_*_test.cpp.o)
libs=(-L"$bundle/lib" -L"$torch_lib" -lc10 -Xlinker -rpath,"$torch_lib" -lcublasLt -lpthread -ldl -lrt)
"$nvcc" "${flags[@]}" "${kernel_objs[@]}" "${test_objs[@]}" "${libs[@]}" -lgtest_main -lgtest -o "$build/cuda_tests"
"$nvcc" "${flags[@]}" "${kernel_objs[@]}" "$build/cuda_gemm_bench.cpp.o" "${libs[@]}" -o "$build/cuda_gemm_bench"
echo "build: $((SECONDS - started)) s" | tee -a "$out/gpu_check_build.txt"

status=0
t0=$SECONDS
"$build/cuda_tests" --gtest_color=no 2>&1 | tee "$out/gpu_check_tests.txt" || status=$?
echo "tests: $((SECONDS - t0)) s" | tee -a "$out/gpu_check_build.txt"

# compute-sanitizer on the kernels' tests (the new and the changed ones; the shapes are small).
if [[ ${QEVAL_SANITIZE:-0} == 1 ]]; then
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  # racecheck looks at shared memory, which only our own kernels (and CUTLASS's) manage, and is
  # the slow one: it gets the small int8 linear cases (every implementation still runs). memcheck
  # also covers the cuBLASLt paths. Both run at once (the sanitizers are bound by host CPU, not
  # by the GPU), each within QEVAL_SANITIZE_TIMEOUT seconds (default 100) so the script keeps
  # its time budget; a timeout shows as exit 124 in the file's last line.
  own='CudaAbsmax*:CudaInt8Epilogue*:CudaW4Dequantize*:CudaW4A16*:CudaFusedAttention.SmallForSanitizers:CudaFusedAttention.Ties*:CudaHiddenStats*'
  sanitize() {
    local tool=$1 filter=$2 rc=0
    timeout "${QEVAL_SANITIZE_TIMEOUT:-100}" "$sanitizer" --tool "$tool" --error-exitcode 99 "$build/cuda_tests" \
      --gtest_color=no --gtest_filter="${QEVAL_SANITIZE_FILTER:-$filter}" >"$out/sanitizer_$tool.txt" 2>&1 || rc=$?
    echo "sanitizer $tool: exit $rc" >>"$out/sanitizer_$tool.txt"
    return "$rc"
  }
  t0=$SECONDS
  sanitize memcheck "$own:CudaInt8Linear*:CudaHalfGemm*:CudaInt8Gemm*" & memcheck_pid=$!
  sanitize racecheck "$own:CudaInt8Linear.CoarseOutput*:CudaInt8Linear.PlanIs*" & racecheck_pid=$!
  wait "$memcheck_pid" || status=$?
  wait "$racecheck_pid" || status=$?
  for tool in memcheck racecheck; do tail -3 "$out/sanitizer_$tool.txt"; done
  echo "sanitizers: $((SECONDS - t0)) s" | tee -a "$out/gpu_check_build.txt"
fi

t0=$SECONDS
case "${QEVAL_BENCH:-quick}" in
  quick) "$build/cuda_gemm_bench" --quick 2>&1 | tee "$out/gpu_check_bench.txt" || status=$? ;;
  full) "$build/cuda_gemm_bench" 2>&1 | tee "$out/gpu_check_bench.txt" || status=$? ;;
  none) ;;
esac
echo "bench: $((SECONDS - t0)) s; total $((SECONDS - started)) s" | tee -a "$out/gpu_check_build.txt"
rm -rf "$build"
exit "$status"
