# shellcheck shell=bash disable=SC2034  # sourced: its variables are the callers'
# Sourced by llamacpp_kl.sh and llamacpp_hellaswag.sh: the set-up both share. Sets root, qeval, bin
# (llama.cpp's tools), smollm2 (the Q4_1 GGUF from scripts/models), work (kept when $QEVAL_WORK_DIR
# names it, else a temporary folder removed on exit) and work/f32.gguf (the Q4_1 file dequantised by
# llama-quantize --allow-requantize ... F32, so both tools read the same float32 weights);
# llamacpp_header TITLE THREADS prints the machine lines every result file starts with.
#
# llama-perplexity and llama-quantize come from the source llama-cpp-python 0.3.36 vendors
# (`pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36`; then
#  cmake -B BUILD -S llama_cpp_python-0.3.36/vendor/llama.cpp -DGGML_NATIVE=OFF -DGGML_AVX2=ON
#  -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_INT8=OFF -DLLAMA_CURL=OFF
#  -DCMAKE_BUILD_TYPE=Release && cmake --build BUILD --target llama-perplexity llama-quantize),
# found in $QEVAL_LLAMACPP_BUILD/bin (default /work/cache/llama-build/bin).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
bin="${QEVAL_LLAMACPP_BUILD:-/work/cache/llama-build}/bin"
for tool in llama-perplexity llama-quantize; do
  [[ -x "$bin/$tool" ]] || { echo "$(basename "$0"): $bin/$tool is missing; build it as llamacpp_env.sh says" >&2; exit 2; }
done
"$root/scripts/models" --model smollm2-135m >/dev/null
smollm2="$("$root/scripts/models" --path smollm2-135m)"
work="${QEVAL_WORK_DIR:-$(mktemp -d)}"
mkdir -p "$work"
[[ -n "${QEVAL_WORK_DIR:-}" ]] || trap 'rm -rf "$work"' EXIT
[[ -s "$work/f32.gguf" ]] || "$bin/llama-quantize" --allow-requantize "$smollm2" "$work/f32.gguf" F32 >"$work/quantize-f32.log" 2>&1

llamacpp_header() {
  echo "# $1: $(date -u +%F), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $2 threads"
  echo
  echo "CPU SIMD flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|fma|f16c|avx512f|avx512bw|avx512_vnni|avx512_bf16|amx_int8' | tr '\n' ' ')"
  echo
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
}
