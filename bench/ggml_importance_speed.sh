#!/usr/bin/env bash
# Issue 77 item 4: what llama.cpp's importance matrix costs qeval's ggml row quantisers, and that
# the plain path (importance = nullptr, the 3-argument quantize_row_<type>) kept its speed.
#
#   bench/ggml_importance_speed.sh [BASE (d700ab6)] [RUNS (5)]
#
# One process, one thread, alternating: BASE's plain row quantisers (its quant/formats/ggml
# sources, compiled here with the namespace renamed to qeval_old), this tree's plain ones and this
# tree's with importance (build/'s libqeval_formats.a: run scripts/build first), each over 64 rows
# of 4096 values (the llama.cpp fixtures' "gauss" rows, scale 2^-5; importance kind "spread",
# tests/quant/ggml_fixture_util.h), median of 7 repetitions; the whole table RUNS times. It
# measures, it never passes or fails. Beside it, when llama-cpp-python 0.3.36 is importable by
# $QEVAL_LLAMACPP_PYTHON (default /work/cache/llamacpp-venv/bin/python), llama.cpp's own
# ggml_quantize_chunk on the same rows and weights, without and with the imatrix (one call of 64
# rows, single-threaded, median of 7), in the same run. Needs g++, GoogleTest (the fixture generator reports through it) and the build's libraries (not a CMake target,
# since it links two versions of the same functions).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
base="${1:-d700ab6}"
runs="${2:-5}"
build="${QEVAL_BUILD_DIR:-$root/build}"
[[ -f "$build/libqeval_formats.a" ]] || { echo "no $build/libqeval_formats.a: run scripts/build first" >&2; exit 2; }
llamacpp_python="${QEVAL_LLAMACPP_PYTHON:-/work/cache/llamacpp-venv/bin/python}"
have_llamacpp=0
"$llamacpp_python" -c "import llama_cpp" 2>/dev/null && have_llamacpp=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/old"
git -C "$root" archive "$base" quant/formats/ggml common | tar -x -C "$work/old"

# BASE's fp32_to_fp16 lives in quants.cpp with ATen code; the row quantisers need only it.
{
  printf '#include <cmath>\n#include <cstring>\n#include "quant/formats/ggml/types.h"\nnamespace qeval {\n'
  sed -n '/^ggml_half fp32_to_fp16(float f) {/,/^}/p' "$work/old/quant/formats/ggml/quants.cpp"
  printf '}\n'
} >"$work/shim_old.cpp"

cat >"$work/bench.cpp" <<'EOF'
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "quant/formats/ggml/quants.h"
#include "tests/quant/ggml_fixture_util.h"

namespace qeval_old {
#define OLD(t) void quantize_row_##t(const float*, void*, std::int64_t);
OLD(q4_0) OLD(q4_1) OLD(q5_0) OLD(q5_1) OLD(q8_0) OLD(q2_K) OLD(q3_K) OLD(q4_K) OLD(q5_K) OLD(q6_K) OLD(iq4_nl) OLD(mxfp4)
#undef OLD
}  // namespace qeval_old

using Plain = void (*)(const float*, void*, std::int64_t);
using Weighted = void (*)(const float*, void*, std::int64_t, const float*);
struct Type {
  const char* name;
  Plain base;
  Plain plain;
  Weighted weighted;
};
#define TYPE(t, n) \
  {n, qeval_old::quantize_row_##t, static_cast<Plain>(qeval::quantize_row_##t), static_cast<Weighted>(qeval::quantize_row_##t)}

int main() {
  const std::int64_t rows = 64, k = 4096;
  const std::vector<float> x = qeval::test::fixture_rows("gauss", 1, rows * k, -5);
  const std::vector<float> w = qeval::test::fixture_importance("spread", 2, k);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * k * 2));
  const Type types[] = {TYPE(q4_0, "Q4_0"), TYPE(q4_1, "Q4_1"), TYPE(q5_0, "Q5_0"), TYPE(q5_1, "Q5_1"),
                        TYPE(q8_0, "Q8_0"), TYPE(q2_K, "Q2_K"), TYPE(q3_K, "Q3_K"), TYPE(q4_K, "Q4_K"),
                        TYPE(q5_K, "Q5_K"), TYPE(q6_K, "Q6_K"), TYPE(iq4_nl, "IQ4_NL"), TYPE(mxfp4, "MXFP4")};
  std::printf("| type | base plain ms | plain ms | plain / base | with importance ms | importance / plain |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const Type& t : types) {
    const qeval::GgmlQuantType& q = qeval::ggml_quant_type(qeval::ggml_quant_type_from_name(t.name));
    const std::int64_t row_bytes = k / q.block_elements * q.block_bytes;
    auto time = [&](auto f) {
      const auto t0 = std::chrono::steady_clock::now();
      for (std::int64_t r = 0; r < rows; ++r) f(x.data() + r * k, out.data() + r * row_bytes);
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    };
    std::vector<double> a, b, c;
    for (int rep = 0; rep < 7; ++rep) {
      a.push_back(time([&](const float* xr, void* o) { t.base(xr, o, k); }));
      b.push_back(time([&](const float* xr, void* o) { t.plain(xr, o, k); }));
      c.push_back(time([&](const float* xr, void* o) { t.weighted(xr, o, k, w.data()); }));
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.1f |\n", t.name, median(a), median(b), median(b) / median(a),
                median(c), median(c) / median(b));
  }
}
EOF

common=(-O3 -DNDEBUG -std=gnu++17 -D_GLIBCXX_USE_CXX11_ABI=1 -DFMT_SHARED -isystem /usr/include/torch/csrc/api/include)
old_objs=()
for f in k_quants legacy_quants iq4_nl mxfp4 dequantize blocks; do
  g++ "${common[@]}" -Dqeval=qeval_old -I"$work/old" -I"$root" -c "$work/old/quant/formats/ggml/$f.cpp" -o "$work/old_$f.o"
  old_objs+=("$work/old_$f.o")
done
g++ "${common[@]}" -Dqeval=qeval_old -I"$work/old" -I"$root" -c "$work/shim_old.cpp" -o "$work/old_shim.o"
g++ "${common[@]}" -I"$root" -c "$work/bench.cpp" -o "$work/bench.o"
g++ -o "$work/bench" "$work/bench.o" "${old_objs[@]}" "$work/old_shim.o" "$build/libqeval_formats.a" \
  "$build/libqeval_kernels.a" "$build/libqeval_cuda_kernels.a" "$build/libqeval_common.a" \
  /usr/lib/x86_64-linux-gnu/libdnnl.so.2.6 -ldl -ltorch -ltorch_cpu -lc10 -lfmt -lgtest -lpthread -lgomp 2> >(grep -v warning >&2)

echo "# ggml row quantisers: plain path against $base's, and with importance"
echo
echo "$(date -u +%F), $(lscpu | sed -n 's/^Model name: *//p'), 1 thread, load average $(cut -d' ' -f1-3 /proc/loadavg);" \
  "qeval $(git -C "$root" rev-parse --short HEAD) against $base; 64 rows x 4096, median of 7"
for ((i = 1; i <= runs; ++i)); do
  echo
  echo "run $i of $runs (load average $(cut -d' ' -f1-3 /proc/loadavg)):"
  echo
  "$work/bench"
  if ((have_llamacpp)); then
    echo
    (cd "$root" && "$llamacpp_python" - <<'PY'
import ctypes, statistics, sys, time
sys.path.insert(0, "tests/oracle")
import make_ggml_quant_fixtures as m
import numpy as np
lib = ctypes.CDLL(m.find_libggml_base())
q = lib.ggml_quantize_chunk
q.restype = ctypes.c_size_t
q.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
rows, k = 64, 4096
x = m.rows_of("gauss", 1, rows * k, -5)
w = m.importance_of("spread", 2, k)
dst = np.zeros(rows * k * 2, dtype=np.uint8)
print("| type | llama.cpp plain ms | llama.cpp with importance ms | importance / plain |")
print("| --- | --- | --- | --- |")
for name, t in m.GGML_TYPES.items():
    def median_ms(imp):
        ts = []
        for _ in range(7):
            t0 = time.perf_counter()
            q(t, x.ctypes.data, dst.ctypes.data, 0, rows, k, imp)
            ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)
    a, b = median_ms(None), median_ms(w.ctypes.data)
    print(f"| {name} | {a:.2f} | {b:.2f} | {b / a:.1f} |")
PY
    )
  fi
done
