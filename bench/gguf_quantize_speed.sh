#!/usr/bin/env bash
# Issue 64 item 4: how long qeval takes to quantise a Llama-3-8B-shaped checkpoint to each of
# llama-quantize's file types, beside llama.cpp's own quantiser (llama_model_quantize, what
# llama-quantize runs, from llama-cpp-python 0.3.36) on the same F16 GGUF, in one run, alternately.
#
#   bench/gguf_quantize_speed.sh [LAYERS (2)] [THREADS (all cores)] [TYPES (all eight)]
#
# The input is the first LAYERS blocks of bench/make_llama_checkpoint.py's llama-3-8b shape
# (every tensor at its 8B shape: the 128,256 × 4,096 embedding and head, 4,096-wide attention,
# 14,336-wide MLP), written as an F16 GGUF (bench/hf_to_gguf_f16.py). Both sides read that file.
# - llama.cpp: the wall time of llama_model_quantize with nthread = THREADS (it reads the F16
#   file, converts, quantises and writes the quantised GGUF).
# - qeval: `qeval eval --schemes full,gguf-TYPE` on one window of 128 tokens; its record's
#   quantize phase for that scheme (every tensor llama-quantize quantises: each block's linears,
#   the head and the embedding, quantised and dequantised to float32), and the run's read +
#   convert phases (the same file read once for every scheme), and the process's wall time.
# Needs /usr/bin/time, python3 with gguf and numpy, and llama-cpp-python 0.3.36 in
# $QEVAL_LLAMACPP_PYTHON (default /work/cache/llamacpp-venv/bin/python; `python3 -m venv DIR &&
# DIR/bin/pip install llama-cpp-python==0.3.36`). About 3 GB of disk for 2 layers (in $TMPDIR).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
layers="${1:-2}"
threads="${2:-$(nproc)}"
types="${3:-Q8_0 Q6_K Q5_K_M Q4_K_M Q4_K_S Q4_0 IQ4_NL MXFP4_MOE}"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
llamacpp_python="${QEVAL_LLAMACPP_PYTHON:-/work/cache/llamacpp-venv/bin/python}"
bench="${QEVAL_BENCH_DIR:-$HOME/.cache/qeval/bench}"
"$llamacpp_python" -c "import llama_cpp" || { echo "llama-cpp-python is not importable by $llamacpp_python" >&2; exit 2; }
[[ -f "$bench/llama-3-8b/config.json" ]] ||
  python3 "$root/bench/make_llama_checkpoint.py" --shape llama-3-8b --fast --out "$bench/llama-3-8b" >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 "$root/bench/hf_to_gguf_f16.py" "$bench/llama-3-8b" "$work/in.gguf" "$layers"

echo "# Quantising a Llama-3-8B-shaped checkpoint: qeval vs llama.cpp's llama_model_quantize"
echo
echo "$(date -u +%F), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $threads threads; CPU SIMD flags:" \
  "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|fma|avx512f|avx512bw|avx512_vnni' | tr '\n' ' ')"
echo "input: the first $layers of 32 blocks of the llama-3-8b shape, F16 GGUF, $(du -m "$work/in.gguf" | cut -f1) MB; qeval $(git -C "$root" rev-parse --short HEAD)"
echo
echo "| type | preset | llama.cpp s | qeval quantize s | qeval ÷ llama.cpp | qeval read + convert s | qeval process s | load before |"
echo "|---|---|---:|---:|---:|---:|---:|---|"
for type in $types; do
  preset="gguf-$(tr '[:upper:]' '[:lower:]' <<< "$type")"
  preset="${preset/mxfp4_moe/mxfp4-moe}"  # the one preset whose name is not the type's
  load="$(cut -d' ' -f1-3 /proc/loadavg)"
  llama_s=$("$llamacpp_python" - "$work/in.gguf" "$work/out.gguf" "$type" "$threads" 2>/dev/null <<'PY'
import sys, time
import llama_cpp
src, out, ftype, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + ftype)
params.nthread = threads
start = time.perf_counter()
rc = llama_cpp.llama_model_quantize(src.encode(), out.encode(), params)
if rc != 0:
    sys.exit(f"llama_model_quantize {ftype} failed: {rc}")
print(f"{time.perf_counter() - start:.2f}")
PY
)
  rm -f "$work/out.gguf"
  /usr/bin/time -f "%e" -o "$work/qeval.wall" "$qeval" eval -q --model "$work/in.gguf" --data "$bench/llama-3-8b.tokens.bin" \
    --token-dtype uint32 --seq-len 128 --max-windows 1 --schemes "full,$preset" --stats-for none --threads "$threads" \
    --out "$work/qeval.json" > /dev/null 2> "$work/qeval.err" || { cat "$work/qeval.err" >&2; exit 1; }
  "$qeval" compare --timings --format json "$work/qeval.json" > "$work/timings.json"
  python3 - "$work/timings.json" "$preset" "$type" "$llama_s" "$(cat "$work/qeval.wall")" "$load" <<'PY'
import json, sys
timings, preset, ftype, llama_s, wall, load = sys.argv[1:]
t = json.load(open(timings))["timings"][0]["timings"]
q = t["schemes"][preset]["quantize"]
rc = t["phases"]["read"] + t["phases"]["convert"]
print(f"| {ftype} | {preset} | {float(llama_s):.2f} | {q:.2f} | {q / float(llama_s):.2f} | {rc:.2f} | {float(wall):.2f} | {load} |")
PY
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
